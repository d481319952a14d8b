/*-------------------------------------------------------------------------
 *
 * src/store.c
 *	  The lease store: every access to the lease table (dlock_lease) and
 *	  the token sequence (dlock_token_seq) starts here.  This file owns the
 *	  per-backend cache, the switch to the table's owner, the SQL
 *	  statements and the session runner (DlockStoreRun); store_ops.c owns
 *	  the operations run in a session (acquire, renew, release, break,
 *	  purge, token init), lease_table.c the direct access to the table,
 *	  token.c the token jumps.
 *
 * The hot paths (taking over an ended lease, renew, release, break, and the
 * fence's read and lock) access the table directly (lease_table.c); the
 * 'latest' fence is mostly answered by the fence cache in shared memory
 * (fence_cache.c, with preload).  The rest (creating a name's first row,
 * purge) are SQL statements prepared once per backend through SPI, kept
 * with SPI_keepplan and run with a fresh snapshot (DlockStoreExec).  Both
 * follow READ COMMITTED rules, so a call sees and changes the leases as
 * they are now even inside a REPEATABLE READ transaction (in a
 * SERIALIZABLE one, a statement or a 'live' fence that meets a concurrent
 * change raises 40001: DlockStoreExec, DlockLeaseFenceLock).
 * All of it runs as the owner of the lease table (the extension's owner)
 * under SECURITY_LOCAL_USERID_CHANGE: the table and the sequences stay
 * private, and callers reach them only through these functions.  All SQL
 * is schema-qualified, operators included, so the caller's search_path
 * cannot redirect it; the direct paths name nothing at all.  Functions of
 * an index a DBA added, which an insertion of index entries evaluates as
 * the owner, run as a security-restricted operation with a pinned
 * search_path, as during REINDEX (DlockRestrictedBegin in lease_table.c).
 *
 * The extension's schema is that of the calling SQL function (fn_oid), so
 * nothing is looked up by name in pg_extension.  The schema, the table OID,
 * its owner and the plans are cached per backend; a relcache invalidation
 * of the lease table (DROP EXTENSION, ALTER ... OWNER, a cache reset) marks
 * the cache stale and the next call rebuilds it.
 *
 * Concurrency (the locking protocol):
 *
 * - Acquire never waits for another transaction; renew, release and break
 *   may wait for one that changed or locked the same row.  A call that
 *   changes nothing keeps no row lock.  lease_table.c's header gives the
 *   row locks of the direct operations (takeover, renew, release, break,
 *   the 'latest' fence's read).
 *
 * - A name with no row yet is created by INSERT ... ON CONFLICT DO NOTHING.
 *   Two sessions inserting the same new name would make the second wait
 *   for the first's transaction, so an inserter first takes the name lock:
 *   a transaction-scoped advisory lock in dlock's own class
 *   (DLOCK_LOCKTAG_CLASS, so it never collides with the application's
 *   pg_advisory_lock keys) on a 64-bit hash of the name, without waiting.
 *   If it cannot be had, another session is creating the name: held.  If
 *   the INSERT then finds a row after all, the name lock is released at
 *   once; if it inserted, the lock stays until the transaction ends, so
 *   no later inserter can block on the uncommitted row.  Order: name lock,
 *   then the index insertion.  Nobody waits on the name lock, so it cannot
 *   take part in a deadlock.
 *
 * - The 'live' fence locks the lease row FOR KEY SHARE
 *   (DlockLeaseFenceLock), waiting for an uncommitted acquire, takeover or
 *   break of that row (the FOR UPDATE of a takeover conflicts) and then
 *   reading the newest version.  The lock is held until the writer's
 *   transaction ends, so no acquirer can take the lease over before then;
 *   renew and release still can run.  fence.c's header gives the ordering
 *   argument.
 *
 * - Every change of a lease's token or existence (the first INSERT of a
 *   name, a takeover, a purge) opens the name's bucket of the fence cache
 *   before it modifies the row, and the bucket stays open until the
 *   transaction has ended (fence_cache.c's header: why the 'latest' fence
 *   then never reads a stale token from it).
 *
 * - Tokens come from nextval() on the sequence, taken when a lease is
 *   granted (and by an INSERT that then meets a concurrent row), so they
 *   are unique and increasing across all names; a rolled back grant simply
 *   skips its number.
 *
 * - A token must never be handed out twice, also across a crash, a
 *   failover or a restore.  Before its first grant a backend has token.c
 *   check the token identity (and jump the sequence forward when needed),
 *   and after each grant has token.c make the token durable
 *   (DlockTokenMakeDurable; token.c's header says how).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "compat.h"
#include "dlock.h"
#include "lease_table.h"
#include "store_int.h"

typedef struct DlockStmtDef
{
	const char *sql;			/* with %1$s for the quoted schema name */
	int			nargs;
	Oid			argtypes[6];
	bool		marks;			/* on dlock_fence_mark: prepared when it exists */
} DlockStmtDef;

/*
 * The SQL.  Parameters: $1 lock_name, then as listed.  Every name is
 * qualified; "S" is the extension's schema.
 */
static const DlockStmtDef stmt_defs[NUM_STMTS] = {
	/* STMT_INSERT: $2 now, $3 expires, $4 owner, $5 holder role */
	{
		"INSERT INTO %1$s.dlock_lease AS l (lock_name, token, owner, holder_role,"
		" acquired_at, renewed_at, expires_at, released)"
		" VALUES ($1, pg_catalog.nextval('%1$s.dlock_token_seq'::pg_catalog.regclass),"
		" $4, $5, $2, $2, $3, false)"
		" ON CONFLICT (lock_name) DO NOTHING"
		" RETURNING l.token",
		5, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, REGROLEOID}, false
	},

	/*
	 * STMT_PURGE: $1 cutoff, $2 the last name of the previous batch.  Takes
	 * the next DLOCK_PURGE_BATCH rows in name order whose lease ended
	 * before the cutoff, skipping rows an open transaction has locked, and
	 * deletes them; returns how many it deleted, the batch's last name
	 * (NULL when there was nothing left), and the names and tokens of the
	 * rows it deleted (NULL when none; for lease events).
	 */
	{
		"WITH victims AS ("
		" SELECT c.lock_name FROM %1$s.dlock_lease c"
		" WHERE c.lock_name OPERATOR(pg_catalog.>) $2"
		" AND c.expires_at OPERATOR(pg_catalog.<) $1"
		" ORDER BY c.lock_name LIMIT " CppAsString2(DLOCK_PURGE_BATCH)
		" FOR UPDATE SKIP LOCKED),"
		" gone AS ("
		" DELETE FROM %1$s.dlock_lease l USING victims v"
		" WHERE l.lock_name OPERATOR(pg_catalog.=) v.lock_name"
		" RETURNING l.lock_name, l.token)"
		" SELECT pg_catalog.count(*),"
		" (SELECT pg_catalog.max(v.lock_name) FROM victims v),"
		" pg_catalog.array_agg(g.lock_name), pg_catalog.array_agg(g.token)"
		" FROM gone g",
		2, {TIMESTAMPTZOID, TEXTOID}, false
	},
	/*
	 * STMT_MARK_LOCK: $1 the fenced tables' owner, $2 the name: its mark,
	 * locked FOR NO KEY UPDATE until the transaction ends (mark.c gives the
	 * ordering argument).
	 */
	{
		"SELECT m.token FROM %1$s.dlock_fence_mark m"
		" WHERE m.table_owner OPERATOR(pg_catalog.=) $1"
		" AND m.lock_name OPERATOR(pg_catalog.=) $2"
		" FOR NO KEY UPDATE",
		2, {REGROLEOID, TEXTOID}, true
	},
	/* STMT_MARK_RAISE: $3 the new token, $4 now; the row is locked */
	{
		"UPDATE %1$s.dlock_fence_mark m SET token = $3, raised_at = $4"
		" WHERE m.table_owner OPERATOR(pg_catalog.=) $1"
		" AND m.lock_name OPERATOR(pg_catalog.=) $2"
		" AND m.token OPERATOR(pg_catalog.<) $3",
		4, {REGROLEOID, TEXTOID, INT8OID, TIMESTAMPTZOID}, true
	},
	/* STMT_MARK_INSERT: $3 the token, $4 now */
	{
		"INSERT INTO %1$s.dlock_fence_mark AS m"
		" (table_owner, lock_name, token, raised_at)"
		" VALUES ($1, $2, $3, $4)"
		" ON CONFLICT (table_owner, lock_name) DO NOTHING"
		" RETURNING m.token",
		4, {REGROLEOID, TEXTOID, INT8OID, TIMESTAMPTZOID}, true
	},
	/*
	 * STMT_MARK_PURGE: $1 the cutoff.  Deletes the marks last raised before
	 * it, skipping those a writer has locked; returns how many.
	 */
	{
		"WITH victims AS ("
		" SELECT c.table_owner, c.lock_name FROM %1$s.dlock_fence_mark c"
		" WHERE c.raised_at OPERATOR(pg_catalog.<) $1"
		" FOR UPDATE SKIP LOCKED),"
		" gone AS ("
		" DELETE FROM %1$s.dlock_fence_mark m USING victims v"
		" WHERE m.table_owner OPERATOR(pg_catalog.=) v.table_owner"
		" AND m.lock_name OPERATOR(pg_catalog.=) v.lock_name"
		" RETURNING 1)"
		" SELECT pg_catalog.count(*) FROM gone",
		1, {TIMESTAMPTZOID}, true
	},
};

/* How many calling functions the cache remembers as being in its schema. */
#define DLOCK_KNOWN_FNS		8

/* Per-backend cache of where the extension lives, and the saved plans. */
typedef struct DlockStoreCache
{
	bool		valid;			/* false: rebuild before use */
	uint64		inval_count;	/* relcache invalidations seen so far */
	Oid			nspid;			/* the extension's schema */
	DlockLeaseTable table;		/* dlock_lease: where it is, its columns */
	Oid			seqrelid;		/* dlock_token_seq */
	Oid			originrelid;	/* dlock_token_origin (InvalidOid before 1.1) */
	Oid			markrelid;		/* dlock_fence_mark (InvalidOid before 1.2) */
	AttrNumber	mark_att_owner; /* its table_owner, lock_name and token */
	AttrNumber	mark_att_name;
	AttrNumber	mark_att_token;
	Oid			fns[DLOCK_KNOWN_FNS];	/* functions known to be in nspid */
	SPIPlanPtr	plans[NUM_STMTS];
} DlockStoreCache;

static DlockStoreCache store_cache;

static bool callback_registered = false;

/* Every relcache invalidation this backend has seen (DlockStoreRelcacheInvals). */
static uint64 relcache_invals = 0;

/* The identity to restore after running as the table owner. */
typedef struct DlockStoreSession
{
	Oid			save_userid;
	int			save_sec_context;
} DlockStoreSession;

/* Whether the current code runs as the lease table's owner (store_begin). */
#define STORE_AS_OWNER() \
	(InLocalUserIdChange() && GetUserId() == store_cache.table.owner)

/*
 * store_relcache_callback counts every relcache invalidation
 * (DlockStoreRelcacheInvals) and marks the cache stale when the lease
 * table's entry is invalidated (or all entries are).  It only counts and
 * flips a flag: freeing plans here could pull them from under a running
 * call.
 */
static void
store_relcache_callback(Datum arg, Oid relid)
{
	relcache_invals++;
	if (!OidIsValid(relid) || relid == store_cache.table.relid)
	{
		store_cache.valid = false;
		store_cache.inval_count++;
	}
}

/*
 * store_register_callback registers store_relcache_callback, once per
 * backend (PostgreSQL allows an extension few relcache callbacks: dlock
 * registers this one only).
 */
static void
store_register_callback(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(store_relcache_callback, (Datum) 0);
		callback_registered = true;
	}
}

/*
 * DlockStoreRelcacheInvals returns how many relcache invalidations (of any
 * relation) this backend has processed since it registered dlock's
 * callback, which it does now if it has not: a cache of catalog contents
 * that any relation's change may change (mark.c's list of 'seen' fences)
 * is current while this number has not moved since it was read.
 */
uint64
DlockStoreRelcacheInvals(void)
{
	store_register_callback();
	return relcache_invals;
}

/*
 * store_cache_current reports whether store_cache is valid for the schema
 * of the SQL function fn_oid.
 */
static bool
store_cache_current(Oid fn_oid)
{
	int			i;

	if (!store_cache.valid)
		return false;
	for (i = 0; i < DLOCK_KNOWN_FNS && OidIsValid(store_cache.fns[i]); i++)
	{
		if (store_cache.fns[i] == fn_oid)
			return true;
	}
	if (store_cache.nspid != get_func_namespace(fn_oid))
		return false;
	/* remember it (a function's schema changes only with an invalidation) */
	if (i == DLOCK_KNOWN_FNS)
		i = 0;
	store_cache.fns[i] = fn_oid;
	return true;
}

/*
 * store_prepare_cache makes store_cache valid for the schema of the SQL
 * function fn_oid: finds dlock_lease and its owner and prepares every
 * statement.  Must run inside SPI_connect.  Raises if the extension's
 * table is missing (a broken install).
 */
static void
store_prepare_cache(Oid fn_oid)
{
	Oid			nspid;
	char	   *nspname;
	const char *qnsp;
	Oid			relid;
	HeapTuple	tup;
	uint64		inval_start;
	int			i;
	DlockRestricted restricted;

	if (store_cache_current(fn_oid))
		return;
	nspid = get_func_namespace(fn_oid);
	store_cache.valid = false;
	memset(store_cache.fns, 0, sizeof(store_cache.fns));
	inval_start = store_cache.inval_count;

	store_register_callback();

	for (i = 0; i < NUM_STMTS; i++)
	{
		if (store_cache.plans[i] != NULL)
		{
			SPI_freeplan(store_cache.plans[i]);
			store_cache.plans[i] = NULL;
		}
	}

	nspname = get_namespace_name(nspid);
	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for namespace %u", nspid);
	relid = get_relname_relid("dlock_lease", nspid);
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table of extension \"dlock\" is missing"),
				 errdetail("Relation \"%s.dlock_lease\" does not exist.", nspname),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));

	store_cache.seqrelid = get_relname_relid("dlock_token_seq", nspid);
	if (!OidIsValid(store_cache.seqrelid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("token sequence of extension \"dlock\" is missing"),
				 errdetail("Sequence \"%s.dlock_token_seq\" does not exist.", nspname),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));

	/* absent when the extension's SQL is 1.0: then no token jumps */
	store_cache.originrelid = get_relname_relid("dlock_token_origin", nspid);
	/* absent when the extension's SQL is older than 1.2: then no 'seen' */
	store_cache.markrelid = get_relname_relid("dlock_fence_mark", nspid);
	if (OidIsValid(store_cache.markrelid))
	{
		store_cache.mark_att_owner = get_attnum(store_cache.markrelid, "table_owner");
		store_cache.mark_att_name = get_attnum(store_cache.markrelid, "lock_name");
		store_cache.mark_att_token = get_attnum(store_cache.markrelid, "token");
		if (store_cache.mark_att_owner <= 0 || store_cache.mark_att_name <= 0 ||
			store_cache.mark_att_token <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("mark table of extension \"dlock\" has unexpected columns"),
					 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));
	}
	DlockTokenForget();

	{
		Relation	rel = table_open(relid, AccessShareLock);

		DlockLeaseTableDescribe(&store_cache.table, rel);
		table_close(rel, AccessShareLock);
	}

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	store_cache.table.owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);

	store_cache.nspid = nspid;
	store_cache.table.relid = relid;

	/* planned with the search_path they run with (DlockStoreExec) */
	qnsp = quote_identifier(nspname);
	DlockRestrictedBegin(&restricted);
	for (i = 0; i < NUM_STMTS; i++)
	{
		const DlockStmtDef *def = &stmt_defs[i];
		char	   *sql;
		SPIPlanPtr	plan;

		if (def->marks && !OidIsValid(store_cache.markrelid))
			continue;
		sql = psprintf(def->sql, qnsp);
		plan = SPI_prepare(sql, def->nargs, (Oid *) def->argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for dlock statement %d: %s",
				 i, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed for dlock statement %d", i);
		store_cache.plans[i] = plan;
		pfree(sql);
	}
	DlockRestrictedEnd(&restricted);

	/*
	 * Preparing locks the table and so may have processed an invalidation
	 * of it (say, a concurrent owner change): then what was read above may
	 * be stale, so serve this call but rebuild on the next.
	 */
	store_cache.valid = (store_cache.inval_count == inval_start);
}

/*
 * Whether the current store session (store_begin .. store_end) connected
 * to SPI.  Sessions never nest: nothing a store operation does runs
 * another one.
 */
static bool store_spi_connected = false;

/*
 * store_spi connects the current store session to SPI, once: only the
 * operations that run statements need it.
 */
static void
store_spi(void)
{
	if (store_spi_connected)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	store_spi_connected = true;
}

/*
 * store_begin makes the cache valid (connecting to SPI to prepare the
 * statements when it must) and switches to the lease table's owner.  Pair
 * with store_end.  An error in between is cleaned up by transaction abort
 * (SPI and the user id alike; the next store_begin forgets the SPI
 * connection).
 */
static void
store_begin(Oid fn_oid, DlockStoreSession *session)
{
	Assert(IsTransactionState());
	store_spi_connected = false;
	if (!store_cache_current(fn_oid))
	{
		store_spi();
		store_prepare_cache(fn_oid);
	}

	Assert(store_cache.valid || store_spi_connected);
	Assert(OidIsValid(store_cache.table.owner) && OidIsValid(store_cache.table.relid));
	GetUserIdAndSecContext(&session->save_userid, &session->save_sec_context);
	SetUserIdAndSecContext(store_cache.table.owner,
						   session->save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

/*
 * store_end restores the caller's identity and disconnects from SPI if
 * the session connected.
 */
static void
store_end(DlockStoreSession *session)
{
	Assert(STORE_AS_OWNER());
	SetUserIdAndSecContext(session->save_userid, session->save_sec_context);
	if (store_spi_connected)
	{
		store_spi_connected = false;
		if (SPI_finish() != SPI_OK_FINISH)
			elog(ERROR, "SPI_finish failed");
	}
}

/*
 * DlockStoreExec runs statement id with the given arguments on a fresh snapshot
 * and returns the number of rows it produced (at most one).  The result, if
 * any, is in SPI_tuptable.
 *
 * In a READ COMMITTED or REPEATABLE READ transaction the statement runs
 * with READ COMMITTED rules: a lease decision is about the latest committed
 * state, so when a row it must lock was changed concurrently (a live-mode
 * fence that waited for a takeover), the executor follows the row to its
 * newest version and rechecks it, where under REPEATABLE READ it would
 * raise 40001 instead.  XactIsoLevel is switched only around the statement
 * and restored on every exit.  Nothing the statement runs asks for the
 * transaction snapshot (SPI runs it on the snapshot given), which the
 * switch would otherwise replace with a new one (GetTransactionSnapshot
 * under READ COMMITTED); the assertion below checks that.
 *
 * A SERIALIZABLE transaction keeps its level: SSI's conflict checks call
 * GetTransactionSnapshot, and under a switched level that would replace
 * the transaction's snapshot.  So there a statement that meets a
 * concurrently changed row raises 40001 (could not serialize access),
 * which a SERIALIZABLE caller retries anyway.
 *
 * The statement runs as a security-restricted operation with search_path
 * pinned (DlockRestrictedBegin): an INSERT evaluates, as the table's
 * owner, the functions of any expression or partial index a DBA added, and
 * the caller's search_path must not choose them.
 *
 * store_exec_rules runs the statement with those rules and returns SPI's
 * result code; DlockStoreExec checks the result.
 */
static int
store_exec_rules(DlockStmt id, Datum *values)
{
	int			rc = 0;
	int			save_iso = XactIsoLevel;

	if (XactIsoLevel == XACT_REPEATABLE_READ)
		XactIsoLevel = XACT_READ_COMMITTED;
	PG_TRY();
	{
		rc = SPI_execute_snapshot(store_cache.plans[id], values, NULL,
								  GetLatestSnapshot(), InvalidSnapshot,
								  false, true, 1);
	}
	PG_FINALLY();
	{
		XactIsoLevel = save_iso;
	}
	PG_END_TRY();
	return rc;
}

/* DlockStoreExec: see above. */
uint64
DlockStoreExec(DlockStmt id, Datum *values, int expected)
{
	int			rc;
	DlockRestricted restricted;

#ifdef USE_ASSERT_CHECKING
	TransactionId xact_xmin = InvalidTransactionId;
	TransactionId xact_xmax = InvalidTransactionId;

	if (FirstSnapshotSet && IsolationUsesXactSnapshot())
	{
		xact_xmin = GetTransactionSnapshot()->xmin;
		xact_xmax = GetTransactionSnapshot()->xmax;
	}
#endif

	Assert(id >= 0 && id < NUM_STMTS && store_cache.plans[id] != NULL);
	Assert(STORE_AS_OWNER());
	store_spi();
	/* index expressions of an INSERT run restricted, as in lease_table.c */
	DlockRestrictedBegin(&restricted);
	rc = store_exec_rules(id, values);
	DlockRestrictedEnd(&restricted);
	/* the caller's transaction snapshot is the one it had */
	Assert(!TransactionIdIsValid(xact_xmin) ||
		   (GetTransactionSnapshot()->xmin == xact_xmin &&
			GetTransactionSnapshot()->xmax == xact_xmax));
	if (rc != expected)
		elog(ERROR, "dlock statement %d returned %s", (int) id,
			 SPI_result_code_string(rc));
	return SPI_processed;
}

/*
 * DlockStoreResultDatum returns column col (1-based) of the first result row,
 * setting *isnull.
 */
Datum
DlockStoreResultDatum(int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col,
						 isnull);
}

/*
 * DlockStoreTable, DlockStoreTokenSeq and DlockStoreTokenOrigin return the
 * lease table's description and the token sequences of the current store
 * session (valid between store_begin and store_end).
 */
DlockLeaseTable *
DlockStoreTable(void)
{
	Assert(OidIsValid(store_cache.table.relid));
	return &store_cache.table;
}

Oid
DlockStoreTokenSeq(void)
{
	Assert(OidIsValid(store_cache.seqrelid));
	return store_cache.seqrelid;
}

Oid
DlockStoreTokenOrigin(void)
{
	return store_cache.originrelid;
}

/*
 * DlockStoreRequireMarks raises 0A000 when the extension's SQL has no mark
 * table (dlock_fence_mark, created by version 1.2): fencing mode 'seen'
 * needs it.  Valid in a store session.
 */
void
DlockStoreRequireMarks(void)
{
	if (!OidIsValid(store_cache.markrelid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("fencing mode \"seen\" needs version 1.2 of extension \"dlock\""),
				 errdetail("Relation \"dlock_fence_mark\" does not exist in the extension's schema."),
				 errhint("Update the extension with ALTER EXTENSION dlock UPDATE.")));
}

/*
 * DlockStoreMarkTable returns where the mark table and its table_owner,
 * lock_name and token columns are, in the current store session (after
 * DlockStoreRequireMarks).
 */
Oid
DlockStoreMarkTable(AttrNumber *att_owner, AttrNumber *att_name,
					AttrNumber *att_token)
{
	Assert(OidIsValid(store_cache.markrelid));
	*att_owner = store_cache.mark_att_owner;
	*att_name = store_cache.mark_att_name;
	*att_token = store_cache.mark_att_token;
	return store_cache.markrelid;
}

/*
 * store_op_session runs op between store_begin and store_end and returns
 * its result.  op's direct accesses follow READ COMMITTED rules by
 * themselves (they re-read a row that changed concurrently, whatever the
 * isolation level); its SQL statements get them from DlockStoreExec.  An error
 * is cleaned up by the transaction's abort (see store_begin).
 */
static bool
store_op_session(Oid fn_oid, StoreOp op, void *arg)
{
	DlockStoreSession session;
	bool		keep;

	store_begin(fn_oid, &session);
	keep = op(arg);
	store_end(&session);
	return keep;
}

/*
 * DlockStoreRun runs op between store_begin and store_end and returns its
 * result.  With isolate it does so in a subtransaction of its own, kept
 * when op returns true and rolled back otherwise: for an op made of SQL
 * statements whose READ COMMITTED rules can leave a row lock behind when
 * they change nothing (FOR UPDATE follows a concurrently updated row to
 * its newest version, locks it, and only then finds that it no longer
 * qualifies), which would otherwise last until the caller's transaction
 * ends (purge, and the purge of marks), and for a set acquire that must
 * undo the names it took when a later one refuses (store_ops.c).  The
 * direct lease operations lock nothing they do not change.  An error rolls the subtransaction back and is
 * re-thrown.
 */
bool
DlockStoreRun(Oid fn_oid, StoreOp op, void *arg, bool isolate)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool keep = false;

	if (!isolate)
		return store_op_session(fn_oid, op, arg);

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		keep = store_op_session(fn_oid, op, arg);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		ReThrowError(edata);
	}
	PG_END_TRY();

	if (keep)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(oldcontext);
	CurrentResourceOwner = oldowner;
	return keep;
}

/*
 * DlockStoreFenceLookup reads the lease of lock_name for the fence trigger
 * into *lease (lease->found is false when the name has no row).  With
 * lock_row (the 'live' fence, for a write carrying token) it also locks
 * the row FOR KEY SHARE until the transaction ends, waiting for a
 * concurrent transaction that holds a conflicting lock on it and following
 * the row to its newest version, unless token is current and the caller
 * may not act for the lease's holder role (then it locks nothing and sets
 * lease->denied: DlockLeaseFenceLock); without, it reads the row without a
 * lock, from the fence cache when it can (DlockLeaseFenceRead; then only
 * found and token are set).  Both run as the caller, without SPI once the
 * cache is current.
 */
void
DlockStoreFenceLookup(Oid fn_oid, text *lock_name, int64 token, bool lock_row,
					  DlockFenceLease *lease)
{
	if (!store_cache_current(fn_oid))
	{
		/* (re)building the cache prepares the statements: needs SPI */
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		store_prepare_cache(fn_oid);
		if (SPI_finish() != SPI_OK_FINISH)
			elog(ERROR, "SPI_finish failed");
	}
	lease->denied = false;
	lease->holder = InvalidOid;
	if (lock_row)
		DlockLeaseFenceLock(&store_cache.table, lock_name, token, lease);
	else
		DlockLeaseFenceRead(&store_cache.table, lock_name, lease);
}
