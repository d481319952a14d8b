/*-------------------------------------------------------------------------
 *
 * src/store.c
 *	  All access to the lease table (dlock_lease) and the token sequence
 *	  (dlock_token_seq); token.c, called from here, owns the token jumps.
 *
 * The hot paths (taking over an ended lease, renew, release, break, and the
 * 'latest' fence's read) access the table directly: a lookup in the
 * primary key index with a fresh snapshot (GetLatestSnapshot), then
 * table_tuple_lock / table_tuple_update on the version read, with the
 * index entry added when an update is not HOT ("Direct access" below).
 * The rest (creating a name's first row, the 'live' fence's lock, purge)
 * are SQL statements prepared once per backend through SPI, kept with
 * SPI_keepplan and run with a fresh snapshot (store_exec).  Both follow
 * READ COMMITTED rules, so a call sees and changes the leases as they are
 * now even inside a REPEATABLE READ transaction (in a SERIALIZABLE one, a
 * statement that meets a concurrent change raises 40001: store_exec).  All of it runs as the
 * owner of the lease table (the extension's owner) under
 * SECURITY_LOCAL_USERID_CHANGE: the table and the sequences stay private,
 * and callers reach them only through these functions.  All SQL is
 * schema-qualified, operators included, so the caller's search_path cannot
 * redirect it; the direct paths name nothing at all.
 *
 * The extension's schema is that of the calling SQL function (fn_oid), so
 * nothing is looked up by name in pg_extension.  The schema, the table OID,
 * its owner and the plans are cached per backend; a relcache invalidation
 * of the lease table (DROP EXTENSION, ALTER ... OWNER, a cache reset) marks
 * the cache stale and the next call rebuilds it.
 *
 * Concurrency (the locking protocol):
 *
 * - Acquire never waits for another transaction.  A row that is locked by
 *   an open transaction (an uncommitted acquire, renew, release or break,
 *   or a 'live' fenced writer) counts as held: the takeover reads the row
 *   and, when its lease ended, locks that version FOR UPDATE without
 *   waiting (LockWaitSkip); a lock it cannot have means "held" (a live
 *   lease it read reports its expiry, which a waiter can sleep until).
 *   FOR UPDATE (not NO KEY UPDATE) conflicts with every row lock,
 *   including FOR KEY SHARE.  Only the version that was checked is ever
 *   locked; if it changed since the read, the takeover reads again.
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
 * - Renew, release and break read the row and, when it qualifies, update
 *   that version in place of an UPDATE statement: they may wait for a
 *   concurrent transaction that changed or locked the same row (its
 *   outcome decides theirs: if it committed a change, they read the newest
 *   version and decide again, as READ COMMITTED rules would), and take FOR
 *   NO KEY UPDATE, which does not conflict with the FOR KEY SHARE lock a
 *   fenced writer holds.
 *
 * - A call that changes nothing keeps no lock: the takeover locks a row
 *   version only once it has checked that its lease ended, and then always
 *   takes it; renew, release and break lock only by updating.  So a failed
 *   attempt of a waiting acquire, or a refused call inside a transaction
 *   block, leaves nothing that could block the lease's holder until the
 *   caller's transaction ends, and needs no subtransaction.  (An acquire
 *   that finds the name has no row yet may keep dlock's name lock, see
 *   above, only when it inserted the row.)
 *
 * - The fence trigger reads the lease of a name with a fresh snapshot and
 *   no row lock ('latest' mode), or locks it FOR KEY SHARE ('live' mode),
 *   waiting for an uncommitted acquire, takeover or break of that row (the
 *   FOR UPDATE of a takeover conflicts) and then reading the newest
 *   version.  The lock is held until the writer's transaction ends, so no
 *   acquirer can take the lease over before then; renew and release still
 *   can run.  fence.c's header gives the ordering argument.
 *
 * - Tokens come from nextval() on the sequence, taken when a lease is
 *   granted (and by an INSERT that then meets a concurrent row), so they
 *   are unique and increasing across all names; a rolled back grant simply
 *   skips its number.
 *
 * - A token must never be handed out twice, also across a crash, a
 *   failover or a restore.  Before its first grant a backend has token.c
 *   check the token identity (and jump the sequence forward when needed; see
 *   token.c).  nextval() WAL-logs the sequence only every SEQ_LOG_VALS
 *   calls, logging ahead, and that record reaches disk only when some later
 *   flush covers it: if the granting transaction never commits, or commits
 *   with synchronous_commit off, a crash would restart the sequence below
 *   tokens already returned.  With preload, the boot jump after every start
 *   makes that harmless; without it (DlockTokenNeedsFlush), acquire flushes
 *   WAL up to the sequence page's LSN (the record that covers the token)
 *   before returning a token: one flush per SEQ_LOG_VALS grants at most, and
 *   nothing when a commit already flushed.  Reading the LSN takes a share
 *   lock on the sequence's buffer, briefly.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/relcache.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "compat.h"
#include "dlock.h"

/* Rows dlock_purge deletes per statement. */
#define DLOCK_PURGE_BATCH		1000

/* field4 of dlock's advisory lock tags; the SQL advisory functions use 1 and 2 */
#define DLOCK_LOCKTAG_CLASS		0xD10C

/* The statements, by id.  Keep stmt_defs[] in the same order. */
typedef enum DlockStmt
{
	STMT_INSERT,				/* create the first lease of a name */
	STMT_FENCE_LIVE,			/* the lease behind a live-mode fenced write */
	STMT_PURGE,					/* delete a batch of long-ended leases */
	NUM_STMTS
} DlockStmt;

typedef struct DlockStmtDef
{
	const char *sql;			/* with %1$s for the quoted schema name */
	int			nargs;
	Oid			argtypes[6];
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
		5, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, REGROLEOID}
	},
	/* STMT_FENCE_LIVE */
	{
		"SELECT l.token, l.released, l.expires_at FROM %1$s.dlock_lease l"
		" WHERE l.lock_name OPERATOR(pg_catalog.=) $1"
		" FOR KEY SHARE",
		1, {TEXTOID}
	},

	/*
	 * STMT_PURGE: $1 cutoff, $2 the last name of the previous batch.  Takes
	 * the next DLOCK_PURGE_BATCH rows in name order whose lease ended
	 * before the cutoff, skipping rows an open transaction has locked, and
	 * deletes them; returns how many it deleted and the batch's last name
	 * (NULL when there was nothing left).
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
		" RETURNING 1)"
		" SELECT (SELECT pg_catalog.count(*) FROM gone),"
		" (SELECT pg_catalog.max(v.lock_name) FROM victims v)",
		2, {TIMESTAMPTZOID, TEXTOID}
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
	Oid			leaserelid;		/* dlock_lease */
	Oid			seqrelid;		/* dlock_token_seq */
	Oid			originrelid;	/* dlock_token_origin (InvalidOid before 1.1) */
	Oid			owner;			/* owner of dlock_lease */
	Oid			fns[DLOCK_KNOWN_FNS];	/* functions known to be in nspid */
	SPIPlanPtr	plans[NUM_STMTS];
} DlockStoreCache;

static DlockStoreCache store_cache;

static void lease_check_desc(Relation rel);
static bool callback_registered = false;

/* The identity to restore after running as the table owner. */
typedef struct DlockStoreSession
{
	Oid			save_userid;
	int			save_sec_context;
} DlockStoreSession;

/* Whether the current code runs as the lease table's owner (store_begin). */
#define STORE_AS_OWNER() \
	(InLocalUserIdChange() && GetUserId() == store_cache.owner)

/*
 * store_relcache_callback marks the cache stale when the lease table's
 * relcache entry is invalidated (or all entries are).  It only flips a
 * flag: freeing plans here could pull them from under a running call.
 */
static void
store_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == store_cache.leaserelid)
	{
		store_cache.valid = false;
		store_cache.inval_count++;
	}
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

	if (store_cache_current(fn_oid))
		return;
	nspid = get_func_namespace(fn_oid);
	store_cache.valid = false;
	memset(store_cache.fns, 0, sizeof(store_cache.fns));
	inval_start = store_cache.inval_count;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(store_relcache_callback, (Datum) 0);
		callback_registered = true;
	}

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
	DlockTokenForget();

	{
		Relation	rel = table_open(relid, AccessShareLock);

		lease_check_desc(rel);
		table_close(rel, AccessShareLock);
	}

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	store_cache.owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);

	store_cache.nspid = nspid;
	store_cache.leaserelid = relid;

	qnsp = quote_identifier(nspname);
	for (i = 0; i < NUM_STMTS; i++)
	{
		const DlockStmtDef *def = &stmt_defs[i];
		char	   *sql = psprintf(def->sql, qnsp);
		SPIPlanPtr	plan;

		plan = SPI_prepare(sql, def->nargs, (Oid *) def->argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for dlock statement %d: %s",
				 i, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed for dlock statement %d", i);
		store_cache.plans[i] = plan;
		pfree(sql);
	}

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
	Assert(OidIsValid(store_cache.owner) && OidIsValid(store_cache.leaserelid));
	GetUserIdAndSecContext(&session->save_userid, &session->save_sec_context);
	SetUserIdAndSecContext(store_cache.owner,
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
 * store_exec runs statement id with the given arguments on a fresh snapshot
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
 * store_exec_rules runs the statement with those rules and returns SPI's
 * result code; store_exec checks the result.
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

/* store_exec: see above. */
static uint64
store_exec(DlockStmt id, Datum *values, int expected)
{
	int			rc;

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
	rc = store_exec_rules(id, values);
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
 * store_result_datum returns column col (1-based) of the first result row,
 * setting *isnull.
 */
static Datum
store_result_datum(int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col,
						 isnull);
}

/*
 * name_locktag fills tag with dlock's advisory lock for lock_name in the
 * current database.
 */
static void
name_locktag(LOCKTAG *tag, text *lock_name)
{
	uint64		h = DlockNameHash(lock_name);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 DLOCK_LOCKTAG_CLASS);
}

/*
 * flush_token_wal makes the WAL record that covers every token handed out
 * so far durable: it flushes WAL up to the LSN of the token sequence's page
 * (see the protocol above).  Takes AccessShareLock on the sequence (already
 * held by nextval in this transaction) and a brief share lock on its buffer.
 */
static void
flush_token_wal(void)
{
	Relation	seqrel = relation_open(store_cache.seqrelid, AccessShareLock);
	Buffer		buf = ReadBuffer(seqrel, 0);
	XLogRecPtr	lsn;

	Assert(seqrel->rd_rel->relkind == RELKIND_SEQUENCE);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, AccessShareLock);

	XLogFlush(lsn);
}

/*
 * token_granted is called when a grant drew a token: it makes the token
 * safe to hand out (see the protocol above).
 */
static void
token_granted(void)
{
	if (DlockTokenNeedsFlush())
		flush_token_wal();
}

/* Arguments and results of one acquire attempt. */
typedef struct AcquireOp
{
	text	   *lock_name;
	Datum		values[5];		/* the statements' parameters */
	TimestampTz now;
	int64		token;			/* out: the new token */
	TimestampTz held_until;		/* out: see DlockStoreTryAcquire */
} AcquireOp;

/* What a ChangeOp does. */
typedef enum ChangeKind
{
	CHANGE_RENEW,
	CHANGE_RELEASE,
	CHANGE_BREAK
} ChangeKind;

/* Arguments and results of a renew, release or break. */
typedef struct ChangeOp
{
	ChangeKind	kind;
	text	   *lock_name;
	int64		token;			/* unused by break */
	Datum		now;			/* timestamptz */
	Datum		expires;		/* timestamptz: renew's new expiry */
	DlockStoreOutcome outcome;	/* out */
	Oid			holder;			/* out: the row's holder role */
} ChangeOp;

/*
 * Direct access to the lease table: the hot paths of acquire (taking over
 * an ended lease), renew, release and break read the row through the
 * primary key index and change it with table_tuple_lock and
 * table_tuple_update, without SPI's per-statement executor setup.  They
 * keep the SQL statements' semantics exactly: a fresh snapshot for every
 * read, FOR UPDATE SKIP LOCKED for a takeover, NO KEY UPDATE (waiting) for
 * renew, release and break, and READ COMMITTED rules when the row was
 * changed concurrently (read its newest version again and recheck).  The
 * primary key comes from the relcache at each operation (REINDEX
 * CONCURRENTLY replaces it); an update that is not HOT gets its entries in
 * every index through the executor's own routine, unique checks included.
 * What direct access would bypass (triggers, CHECK constraints, forced
 * row security: none of dlock's making) makes the operations refuse.
 */

/* The lease table's columns (checked against the catalog: lease_check_desc) */
#define LEASE_NATTS			8
#define ATT_LOCK_NAME		1
#define ATT_TOKEN			2
#define ATT_OWNER			3
#define ATT_HOLDER_ROLE		4
#define ATT_ACQUIRED_AT		5
#define ATT_RENEWED_AT		6
#define ATT_EXPIRES_AT		7
#define ATT_RELEASED		8

/* An open lease table, its index and slots, for one direct operation. */
typedef struct LeaseAccess
{
	Relation	rel;
	Relation	idx;
	TupleTableSlot *slot;		/* the row as read (and locked) */
	TupleTableSlot *newslot;	/* the new version */
} LeaseAccess;

/* A row's values as read, by attribute number - 1. */
typedef struct LeaseRow
{
	ItemPointerData tid;
	Datum		values[LEASE_NATTS];
	bool		isnull[LEASE_NATTS];
} LeaseRow;

/*
 * lease_check_desc raises unless rel has the columns this file's direct
 * access expects (a damaged or hand-altered install).
 */
static void
lease_check_desc(Relation rel)
{
	static const Oid types[LEASE_NATTS] = {
		TEXTOID, INT8OID, TEXTOID, REGROLEOID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID
	};
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	if (desc->natts != LEASE_NATTS)
		goto bad;
	for (i = 0; i < LEASE_NATTS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->atttypid != types[i] || !att->attnotnull)
			goto bad;
	}
	return;
bad:
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lease table of extension \"dlock\" has unexpected columns"),
			 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));
}

/*
 * lease_pkey_open opens the primary key of the lease table rel with
 * lockmode, as the relcache knows it now (REINDEX CONCURRENTLY replaces
 * it).  Raises if there is none (a damaged install).
 */
static Relation
lease_pkey_open(Relation rel, LOCKMODE lockmode)
{
	Oid			pkey = DlockPrimaryKeyIndex(rel);

	if (!OidIsValid(pkey))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table index of extension \"dlock\" is missing"),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));
	return index_open(pkey, lockmode);
}

/*
 * lease_lookup looks lock_name up in the lease table rel through its
 * primary key idx with snapshot, stores the visible version (if any) in
 * slot and returns whether there was one.
 */
static bool
lease_lookup(Relation rel, Relation idx, Snapshot snapshot, text *lock_name,
			 TupleTableSlot *slot)
{
	IndexScanDesc scan;
	ScanKeyData key;
	bool		found;

	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(lock_name));
	scan = DlockIndexBeginScan(rel, idx, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

/*
 * lease_open opens the lease table and its primary key (as the relcache
 * knows it now: REINDEX CONCURRENTLY replaces it) for a direct operation,
 * with RowExclusiveLock (kept until the transaction ends, as a statement's
 * would be).  Raises if the table has what direct access would bypass: a
 * trigger, a CHECK constraint or forced row security (none of dlock's own
 * making; only a superuser could add them).
 */
static void
lease_open(LeaseAccess *la)
{
	/* direct access changes leases as the owner */
	Assert(STORE_AS_OWNER());
	la->rel = table_open(store_cache.leaserelid, RowExclusiveLock);
	if (la->rel->trigdesc != NULL ||
		(la->rel->rd_att->constr != NULL && la->rel->rd_att->constr->num_check > 0) ||
		la->rel->rd_rel->relforcerowsecurity)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table of extension \"dlock\" has triggers, check constraints or forced row security"),
				 errdetail("dlock changes its lease table directly, without firing triggers or checking such rules."),
				 errhint("Remove what was added to the table dlock_lease.")));
	la->idx = lease_pkey_open(la->rel, RowExclusiveLock);
	la->slot = table_slot_create(la->rel, NULL);
	la->newslot = MakeSingleTupleTableSlot(RelationGetDescr(la->rel),
										   &TTSOpsVirtual);
}

/*
 * lease_close undoes lease_open (on an error, transaction or
 * subtransaction abort releases what lease_open took).
 */
static void
lease_close(LeaseAccess *la)
{
	ExecDropSingleTupleTableSlot(la->newslot);
	ExecDropSingleTupleTableSlot(la->slot);
	index_close(la->idx, NoLock);
	table_close(la->rel, NoLock);
}

/*
 * lease_row_from_slot copies the TID and the values of the version in
 * la->slot into *row.  The values point into the slot's buffer, which the
 * slot keeps pinned.
 */
static void
lease_row_from_slot(LeaseAccess *la, LeaseRow *row)
{
	int			i;

	slot_getallattrs(la->slot);
	Assert(ItemPointerIsValid(&la->slot->tts_tid));
	row->tid = la->slot->tts_tid;
	for (i = 0; i < LEASE_NATTS; i++)
	{
		row->values[i] = la->slot->tts_values[i];
		row->isnull[i] = la->slot->tts_isnull[i];
		/* every column is NOT NULL (lease_check_desc) */
		Assert(!row->isnull[i]);
	}
}

/*
 * lease_read looks lock_name up with snapshot and, when a version is
 * visible, stores its TID and values in *row (the slot keeps the version)
 * and returns true.
 */
static bool
lease_read(LeaseAccess *la, Snapshot snapshot, text *lock_name, LeaseRow *row)
{
	if (!lease_lookup(la->rel, la->idx, snapshot, lock_name, la->slot))
		return false;
	lease_row_from_slot(la, row);
	return true;
}

/*
 * lease_row_live reports whether the lease in row is live at now.
 */
static inline bool
lease_row_live(LeaseRow *row, TimestampTz now)
{
	return !DatumGetBool(row->values[ATT_RELEASED - 1]) &&
		DatumGetTimestampTz(row->values[ATT_EXPIRES_AT - 1]) > now;
}

/*
 * lease_insert_index_entries adds the entries of the new version in
 * la->newslot to every index of the lease table that takes inserts (an
 * update that was not HOT needs them): the primary key, and any index a
 * DBA added or REINDEX CONCURRENTLY is building.  Uses the executor's own
 * routine, with its unique checks, so expression and partial indexes are
 * handled as an UPDATE statement would.  Rare: HOT updates need none.
 */
static void
lease_insert_index_entries(LeaseAccess *la, DlockUpdateIndexes update_indexes)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext oldcontext;
	ResultRelInfo *rri;

	/* everything below lives in the executor state's memory, freed with it */
	oldcontext = MemoryContextSwitchTo(estate->es_query_cxt);
	rri = makeNode(ResultRelInfo);
	/* no range table entry: the executor then assumes no updated columns */
	InitResultRelInfo(rri, la->rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);
	DlockInsertIndexTuples(rri, la->newslot, estate, update_indexes);
	ExecCloseIndices(rri);
	MemoryContextSwitchTo(oldcontext);
	FreeExecutorState(estate);
}

/*
 * lease_write replaces the version at row->tid with row's values (already
 * changed by the caller), waiting for a concurrent transaction that holds
 * a conflicting lock or changed it.  Returns TM_Ok when it wrote, or
 * TM_Updated / TM_Deleted when a concurrent transaction committed a change
 * first (nothing written: read the row again).  Adds the index entry when
 * the update is not HOT, and makes the change visible to the rest of the
 * transaction (CommandCounterIncrement).
 */
static TM_Result
lease_write(LeaseAccess *la, Snapshot snapshot, LeaseRow *row)
{
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	DlockUpdateIndexes update_indexes;
	TM_Result	res;
	int			i;

	Assert(ItemPointerIsValid(&row->tid));
	Assert(snapshot != NULL && IsMVCCSnapshot(snapshot));
	ExecClearTuple(la->newslot);
	for (i = 0; i < LEASE_NATTS; i++)
	{
		la->newslot->tts_values[i] = row->values[i];
		la->newslot->tts_isnull[i] = row->isnull[i];
	}
	ExecStoreVirtualTuple(la->newslot);

	res = table_tuple_update(la->rel, &row->tid, la->newslot,
							 GetCurrentCommandId(true), snapshot,
							 InvalidSnapshot, true, &tmfd, &lockmode,
							 &update_indexes);
	switch (res)
	{
		case TM_Ok:
			break;
		case TM_Updated:
		case TM_Deleted:
			return res;
		default:
			elog(ERROR, "unexpected result %d updating a dlock lease row", (int) res);
	}

	if (DlockNeedsIndexInsert(update_indexes))
		lease_insert_index_entries(la, update_indexes);
	CommandCounterIncrement();
	return TM_Ok;
}

/* What take_direct found. */
typedef enum TakeResult
{
	TAKE_GRANTED,
	TAKE_HELD,					/* a live lease, or a row an open transaction locks */
	TAKE_NO_ROW
} TakeResult;

/* Takeover attempts that meet a concurrent committed change before giving up. */
#define TAKE_TRIES	3

/*
 * take_direct takes over the ended lease of a->lock_name, if it has one:
 * locks the version it read FOR UPDATE without waiting (an open
 * transaction's lock means held), draws a token and writes the new lease.
 * Sets a->token, or a->held_until when a live lease holds the name.
 */
static TakeResult
take_direct(AcquireOp *a)
{
	LeaseAccess la;
	TakeResult	result = TAKE_HELD;
	int			try;

	lease_open(&la);
	for (try = 0; try < TAKE_TRIES; try++)
	{
		Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
		LeaseRow	row;
		TM_FailureData tmfd;
		TM_Result	res;

		if (!lease_read(&la, snapshot, a->lock_name, &row))
		{
			UnregisterSnapshot(snapshot);
			result = TAKE_NO_ROW;
			break;
		}
		if (lease_row_live(&row, a->now))
		{
			UnregisterSnapshot(snapshot);
			a->held_until = DatumGetTimestampTz(row.values[ATT_EXPIRES_AT - 1]);
			result = TAKE_HELD;
			break;
		}

		/* FOR UPDATE: conflicts with every row lock, FOR KEY SHARE included */
		res = table_tuple_lock(la.rel, &row.tid, snapshot, la.slot,
							   GetCurrentCommandId(true), LockTupleExclusive,
							   LockWaitSkip, 0, &tmfd);
		if (res == TM_WouldBlock)
		{
			UnregisterSnapshot(snapshot);
			result = TAKE_HELD; /* an open transaction is changing it */
			break;
		}
		if (res == TM_Updated || res == TM_Deleted)
		{
			UnregisterSnapshot(snapshot);
			continue;			/* changed since the read: read again */
		}
		if (res != TM_Ok)
			elog(ERROR, "unexpected result %d locking a dlock lease row", (int) res);

		/*
		 * Locked the version that was read (TM_Ok: not changed since), so
		 * it is still ended.  Take it.
		 */
		lease_row_from_slot(&la, &row);
		Assert(!lease_row_live(&row, a->now));
		a->token = nextval_internal(store_cache.seqrelid, true);

		/*
		 * Tokens of a name only grow: they come from one sequence, drawn
		 * after the last grant.  A sequence found behind the row was set
		 * back or left behind by a copy: it jumps past the row, and the
		 * token is drawn again (DlockTokenJumpPast).
		 */
		if (a->token <= DatumGetInt64(row.values[ATT_TOKEN - 1]))
		{
			(void) DlockTokenJumpPast(store_cache.seqrelid,
									  DatumGetInt64(row.values[ATT_TOKEN - 1]));
			a->token = nextval_internal(store_cache.seqrelid, true);
		}
		Assert(a->token > DatumGetInt64(row.values[ATT_TOKEN - 1]));
		row.values[ATT_TOKEN - 1] = Int64GetDatum(a->token);
		row.values[ATT_OWNER - 1] = a->values[3];
		row.values[ATT_HOLDER_ROLE - 1] = a->values[4];
		row.values[ATT_ACQUIRED_AT - 1] = a->values[1];
		row.values[ATT_RENEWED_AT - 1] = a->values[1];
		row.values[ATT_EXPIRES_AT - 1] = a->values[2];
		row.values[ATT_RELEASED - 1] = BoolGetDatum(false);
		if (lease_write(&la, snapshot, &row) != TM_Ok)
			elog(ERROR, "dlock lease row changed while locked");
		UnregisterSnapshot(snapshot);
		result = TAKE_GRANTED;
		break;
	}
	lease_close(&la);
	return result;
}

/*
 * change_direct is the body of renew, release and break (c->kind says
 * which): it reads the row, and when its lease qualifies (live, and held
 * by c's token unless breaking) writes the change, waiting for a
 * concurrent transaction that changes the same row and then deciding
 * again on the row's newest version.  Sets c->outcome and c->holder (the
 * row's holder role); returns whether it changed the lease.
 */
static bool
change_direct(ChangeOp *c)
{
	LeaseAccess la;
	bool		changed = false;

	c->holder = InvalidOid;
	lease_open(&la);
	for (;;)
	{
		Snapshot	snapshot;
		LeaseRow	row;
		TimestampTz now = DatumGetTimestampTz(c->now);
		TM_Result	res;

		CHECK_FOR_INTERRUPTS();
		snapshot = RegisterSnapshot(GetLatestSnapshot());
		if (!lease_read(&la, snapshot, c->lock_name, &row))
		{
			UnregisterSnapshot(snapshot);
			c->outcome = DLOCK_STORE_NO_LEASE;
			break;
		}
		if (c->kind != CHANGE_BREAK)
			c->holder = DatumGetObjectId(row.values[ATT_HOLDER_ROLE - 1]);
		if (!lease_row_live(&row, now) ||
			(c->kind != CHANGE_BREAK &&
			 DatumGetInt64(row.values[ATT_TOKEN - 1]) != c->token))
		{
			UnregisterSnapshot(snapshot);
			c->outcome = DLOCK_STORE_NOT_HELD;
			break;
		}

		Assert(lease_row_live(&row, now));
		Assert(c->kind == CHANGE_BREAK ||
			   DatumGetInt64(row.values[ATT_TOKEN - 1]) == c->token);
		if (c->kind == CHANGE_RENEW)
		{
			row.values[ATT_RENEWED_AT - 1] = c->now;
			row.values[ATT_EXPIRES_AT - 1] = c->expires;
		}
		else
		{
			row.values[ATT_RELEASED - 1] = BoolGetDatum(true);
			row.values[ATT_EXPIRES_AT - 1] = c->now;
		}
		res = lease_write(&la, snapshot, &row);
		UnregisterSnapshot(snapshot);
		if (res == TM_Ok)
		{
			c->outcome = DLOCK_STORE_DONE;
			changed = true;
			break;
		}
		/* a concurrent change committed first: decide on the newest version */
	}
	lease_close(&la);
	return changed;
}

/*
 * A store operation that may change a lease: it runs between store_begin
 * and store_end, and returns whether it changed one (whether to keep it).
 */
typedef bool (*StoreOp) (void *arg);

/*
 * store_op_session runs op between store_begin and store_end and returns
 * its result.  op's direct accesses follow READ COMMITTED rules by
 * themselves (they re-read a row that changed concurrently, whatever the
 * isolation level); its SQL statements get them from store_exec.  An error
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
 * store_run runs op between store_begin and store_end and returns its
 * result.  With isolate it does so in a subtransaction of its own, kept
 * when op returns true and rolled back otherwise: for an op made of SQL
 * statements whose READ COMMITTED rules can leave a row lock behind when
 * they change nothing (FOR UPDATE follows a concurrently updated row to
 * its newest version, locks it, and only then finds that it no longer
 * qualifies), which would otherwise last until the caller's transaction
 * ends.  Only purge needs it; the direct lease operations lock nothing
 * they do not change.  An error rolls the subtransaction back and is
 * re-thrown.
 */
static bool
store_run(Oid fn_oid, StoreOp op, void *arg, bool isolate)
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
 * acquire_op is the body of DlockStoreTryAcquire; a StoreOp.
 */
static bool
acquire_op(void *arg)
{
	AcquireOp  *a = (AcquireOp *) arg;
	int			round;

	DlockTokenPrepare(store_cache.seqrelid, store_cache.originrelid);

	/*
	 * A row can appear between the probe and the insert (another session
	 * created and committed it); the second round then decides on the row.
	 */
	for (round = 0; round < 2; round++)
	{
		bool		isnull;
		LOCKTAG		tag;

		switch (take_direct(a))
		{
			case TAKE_GRANTED:
				token_granted();
				return true;
			case TAKE_HELD:
				return false;
			case TAKE_NO_ROW:
				break;
		}

		name_locktag(&tag, a->lock_name);
		if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
			return false;		/* another session is creating the name */

		Assert(DlockLockHeldByMe(&tag, ExclusiveLock));
		if (store_exec(STMT_INSERT, a->values, SPI_OK_INSERT_RETURNING) == 1)
		{
			a->token = DatumGetInt64(store_result_datum(1, &isnull));
			Assert(!isnull && a->token > 0);
			token_granted();
			return true;
		}
		LockRelease(&tag, ExclusiveLock, false);
	}
	return false;
}

/*
 * DlockStoreTryAcquire makes one attempt to grant the lease on lock_name to
 * holder, from now until expires.  On success it stores the new token in
 * *token and returns true.  Otherwise it returns false, keeping no lock,
 * and sets *held_until to the expiry of the live lease that holds the
 * name, or to 0 when an open transaction is changing the name's lease (its
 * row is locked, or its first row is being inserted).  Never waits for
 * another transaction (see the protocol above); a grant keeps dlock's name
 * lock when it inserted the name's first row.  A granted token is safe to
 * hand out when this returns (token.c: a boot jump, or a WAL flush).
 */
bool
DlockStoreTryAcquire(Oid fn_oid, text *lock_name, text *owner, Oid holder,
					 TimestampTz now, TimestampTz expires,
					 int64 *token, TimestampTz *held_until)
{
	AcquireOp	a;
	bool		granted;

	a.lock_name = lock_name;
	a.values[0] = PointerGetDatum(lock_name);
	a.values[1] = TimestampTzGetDatum(now);
	a.values[2] = TimestampTzGetDatum(expires);
	a.values[3] = PointerGetDatum(owner);
	a.values[4] = ObjectIdGetDatum(holder);
	a.now = now;
	a.token = 0;
	a.held_until = 0;

	granted = store_run(fn_oid, acquire_op, &a, false);
	*token = a.token;
	*held_until = a.held_until;
	return granted;
}


/*
 * change_op is change_direct as a StoreOp.
 */
static bool
change_op(void *arg)
{
	return change_direct((ChangeOp *) arg);
}

/*
 * DlockStoreRenew moves the expiry of the live lease (lock_name, token) to
 * expires and its renewed_at to now.  Returns DLOCK_STORE_DONE when it did,
 * otherwise whether a row exists; *holder is the row's holder role.  The
 * caller checks the role and raises if it must: the error undoes the
 * update.
 */
DlockStoreOutcome
DlockStoreRenew(Oid fn_oid, text *lock_name, int64 token, TimestampTz now,
				TimestampTz expires, Oid *holder)
{
	ChangeOp	c;

	c.kind = CHANGE_RENEW;
	c.lock_name = lock_name;
	c.token = token;
	c.now = TimestampTzGetDatum(now);
	c.expires = TimestampTzGetDatum(expires);
	(void) store_run(fn_oid, change_op, &c, false);
	*holder = c.holder;
	return c.outcome;
}

/*
 * DlockStoreRelease ends the live lease (lock_name, token) at now; the row
 * keeps the token.  Results as for DlockStoreRenew.
 */
DlockStoreOutcome
DlockStoreRelease(Oid fn_oid, text *lock_name, int64 token, TimestampTz now,
				  Oid *holder)
{
	ChangeOp	c;

	c.kind = CHANGE_RELEASE;
	c.lock_name = lock_name;
	c.token = token;
	c.now = TimestampTzGetDatum(now);
	c.expires = (Datum) 0;
	(void) store_run(fn_oid, change_op, &c, false);
	*holder = c.holder;
	return c.outcome;
}

/*
 * DlockStoreBreak ends whatever live lease holds lock_name, at now.
 * Returns true when there was one.  May wait for a concurrent transaction
 * that is changing the row.
 */
bool
DlockStoreBreak(Oid fn_oid, text *lock_name, TimestampTz now)
{
	ChangeOp	c;

	c.kind = CHANGE_BREAK;
	c.lock_name = lock_name;
	c.token = 0;
	c.now = TimestampTzGetDatum(now);
	c.expires = (Datum) 0;
	return store_run(fn_oid, change_op, &c, false);
}

/* Arguments and result of a purge. */
typedef struct PurgeOp
{
	TimestampTz cutoff;
	int64		deleted;		/* out */
} PurgeOp;

/*
 * purge_op deletes, batch by batch in name order, the rows whose lease
 * ended before the cutoff; a StoreOp.  Skips rows an open transaction has
 * locked (an acquire taking the name over, say), so it never waits.
 */
static bool
purge_op(void *arg)
{
	PurgeOp    *p = (PurgeOp *) arg;
	Datum		values[2];
	text	   *last = cstring_to_text("");

	p->deleted = 0;
	values[0] = TimestampTzGetDatum(p->cutoff);
	for (;;)
	{
		bool		isnull;
		Datum		d;

		CHECK_FOR_INTERRUPTS();
		values[1] = PointerGetDatum(last);
		store_exec(STMT_PURGE, values, SPI_OK_SELECT);
		p->deleted += DatumGetInt64(store_result_datum(1, &isnull));
		d = store_result_datum(2, &isnull);
		if (isnull)
			break;
		/* copy out of SPI's result memory before the next statement */
		last = DatumGetTextPCopy(d);
	}
	return p->deleted > 0;
}

/*
 * DlockStorePurge deletes the rows whose lease ended (expired, released or
 * broken) before cutoff and returns how many.  Their names then count as
 * never acquired.  Deletes in batches of DLOCK_PURGE_BATCH rows, skipping
 * rows locked by an open transaction.  Runs in a subtransaction.
 */
int64
DlockStorePurge(Oid fn_oid, TimestampTz cutoff)
{
	PurgeOp		p;

	p.cutoff = cutoff;
	(void) store_run(fn_oid, purge_op, &p, true);
	return p.deleted;
}

/* A StoreOp: DlockTokenInit on the cached sequences. */
static bool
token_init_op(void *arg)
{
	DlockTokenInit(store_cache.seqrelid, store_cache.originrelid);
	return true;
}

/*
 * DlockStoreTokenInit records, as the extension's owner, that this server
 * issues the tokens of the extension whose SQL function fn_oid is (see
 * DlockTokenInit).
 */
void
DlockStoreTokenInit(Oid fn_oid)
{
	(void) store_run(fn_oid, token_init_op, NULL, false);
}

/*
 * fence_read_direct reads the lease of lock_name into *lease straight from
 * the primary key index and the heap, with a fresh snapshot and no row
 * lock: the 'latest' fence's hot path, without SPI's per-statement
 * executor setup.  The same MVCC read as lease_read.  Takes AccessShareLock
 * on the table and the index, kept until the transaction ends.
 */
static void
fence_read_direct(text *lock_name, DlockFenceLease *lease)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	TupleTableSlot *slot;

	Assert(OidIsValid(store_cache.leaserelid));
	rel = table_open(store_cache.leaserelid, AccessShareLock);
	idx = lease_pkey_open(rel, AccessShareLock);
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);

	lease->found = lease_lookup(rel, idx, snap, lock_name, slot);
	if (lease->found)
	{
		bool		isnull;

		lease->token = DatumGetInt64(slot_getattr(slot, ATT_TOKEN, &isnull));
		lease->expires_at = DatumGetTimestampTz(slot_getattr(slot, ATT_EXPIRES_AT, &isnull));
		lease->released = DatumGetBool(slot_getattr(slot, ATT_RELEASED, &isnull));
		Assert(!isnull);
	}
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
}

/*
 * DlockStoreFenceLookup reads the lease of lock_name for the fence trigger
 * into *lease (lease->found is false when the name has no row).  With
 * lock_row it also locks the row FOR KEY SHARE until the transaction ends,
 * waiting for a concurrent transaction that holds a conflicting lock on it
 * (through SPI, whose executor follows the row to its newest version);
 * without, it reads the row directly (fence_read_direct).
 */
void
DlockStoreFenceLookup(Oid fn_oid, text *lock_name, bool lock_row,
					  DlockFenceLease *lease)
{
	DlockStoreSession session;
	Datum		values[1];

	if (!lock_row)
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
		fence_read_direct(lock_name, lease);
		return;
	}

	values[0] = PointerGetDatum(lock_name);
	store_begin(fn_oid, &session);
	lease->found = (store_exec(STMT_FENCE_LIVE, values, SPI_OK_SELECT) == 1);
	if (lease->found)
	{
		bool		isnull;

		lease->token = DatumGetInt64(store_result_datum(1, &isnull));
		lease->released = DatumGetBool(store_result_datum(2, &isnull));
		lease->expires_at = DatumGetTimestampTz(store_result_datum(3, &isnull));
	}
	store_end(&session);
}
