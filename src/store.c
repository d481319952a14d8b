/*-------------------------------------------------------------------------
 *
 * src/store.c
 *	  The lease store: every access to the lease table (dlock_lease) and
 *	  the token sequence (dlock_token_seq) starts here.  This file owns the
 *	  switch to the table's owner, the SQL statements and their plans, and
 *	  the session runner (DlockStoreRun); store_cache.c owns the cache of
 *	  where the extension lives, store_ops.c the operations run in a
 *	  session (acquire, renew, release, break, purge, token init),
 *	  lease_table.c and its siblings the direct access to the table,
 *	  token.c the token jumps.
 *
 * The hot paths (taking over an ended lease, renew, release, break, and the
 * fence's read and lock) access the table directly (lease_table.c); the
 * 'latest' and 'live' fences are mostly answered by the fence cache in
 * shared memory (fence_cache.c, with preload).  The rest (creating a name's first row,
 * purge) are SQL statements prepared when first run through SPI, kept
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
 * search_path, as during REINDEX (DlockRestrictedBegin, store_restricted.c).
 *
 * The extension's schema is that of the calling SQL function (fn_oid), so
 * nothing is looked up by name in pg_extension.  The relations are cached
 * per backend by store_cache.c; a statement is prepared when this backend
 * first runs it, and the plans are dropped when that cache was rebuilt.
 *
 * Concurrency: acquire never waits for another transaction; renew,
 * release and break may wait for one that changed or locked the same row;
 * a call that changes nothing keeps no row lock.  Every grant (a takeover,
 * a name's first row) takes dlock's name lock (name_lock.c: a
 * transaction-scoped advisory lock in its own class) in ExclusiveLock
 * without waiting, which a 'live' fence holds in ShareLock until its
 * transaction ends; a first row's index insertion comes after it.  Every
 * change of a lease row opens the name's fence cache bucket first.  A
 * fence read that the cache answers takes no lock on the table while no
 * invalidation of it has come since its relfilenode was read under one
 * (lease_fence.c; design.md §12, "A hit without the table's lock").  The
 * whole protocol: design.md §14, "The store's locking protocol".
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
	bool		marks;			/* on dlock_fence_mark: prepared when it
								 * exists */
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
	 * the next DLOCK_PURGE_BATCH rows in name order whose lease ended before
	 * the cutoff, skipping rows an open transaction has locked, and deletes
	 * them; returns how many it deleted, the batch's last name (NULL when
	 * there was nothing left), and the names and tokens of the rows it
	 * deleted (NULL when none; for lease events).
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

	/*
	 * STMT_MARK_RAISE: $3 the new token, $4 now; the row is locked.  Returns
	 * the new version's ctid (mark_find.c's hint).
	 */
	{
		"UPDATE %1$s.dlock_fence_mark m SET token = $3, raised_at = $4"
		" WHERE m.table_owner OPERATOR(pg_catalog.=) $1"
		" AND m.lock_name OPERATOR(pg_catalog.=) $2"
		" AND m.token OPERATOR(pg_catalog.<) $3"
		" RETURNING m.ctid",
		4, {REGROLEOID, TEXTOID, INT8OID, TIMESTAMPTZOID}, true
	},
	/* STMT_MARK_INSERT: $3 the token, $4 now; returns the row's ctid */
	{
		"INSERT INTO %1$s.dlock_fence_mark AS m"
		" (table_owner, lock_name, token, raised_at)"
		" VALUES ($1, $2, $3, $4)"
		" ON CONFLICT (table_owner, lock_name) DO NOTHING"
		" RETURNING m.ctid",
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

/* The identity to restore after running as the table owner. */
typedef struct DlockStoreSession
{
	Oid			save_userid;
	int			save_sec_context;
} DlockStoreSession;

/* Whether the current code runs as the lease table's owner (store_begin). */
#define STORE_AS_OWNER() \
	(InLocalUserIdChange() && GetUserId() == DlockStoreTable()->owner)

/*
 * The statements' plans, prepared when first run (store_plan) and kept
 * with SPI_keepplan; freed when the cache of the extension's relations
 * was rebuilt since (plans_generation: its DlockStoreCacheGeneration).
 */
static SPIPlanPtr plans[NUM_STMTS];
static uint64 plans_generation = 0;

/*
 * store_forget_plans frees the plans when store_cache.c rebuilt its cache
 * since they were prepared.  Called at the start of a store session, never
 * while a plan runs.
 */
static void
store_forget_plans(void)
{
	int			i;

	if (plans_generation == DlockStoreCacheGeneration())
		return;
	for (i = 0; i < NUM_STMTS; i++)
	{
		if (plans[i] != NULL)
		{
			SPI_freeplan(plans[i]);
			plans[i] = NULL;
		}
	}
	plans_generation = DlockStoreCacheGeneration();
}

/*
 * store_plan returns the plan of statement id, preparing it first when
 * this backend has not yet (within SPI, run restricted by the caller:
 * planned with the search_path it runs with, DlockStoreExec).  Raises
 * 0A000 for a statement on the mark table when the extension has none.
 */
static SPIPlanPtr
store_plan(DlockStmt id)
{
	const DlockStmtDef *def = &stmt_defs[id];
	char	   *nspname;
	char	   *sql;
	SPIPlanPtr	plan;

	Assert(plans_generation == DlockStoreCacheGeneration());
	if (plans[id] != NULL)
		return plans[id];
	if (def->marks)
		DlockStoreRequireMarks();
	nspname = get_namespace_name(DlockStoreCacheSchema());
	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for namespace %u",
			 DlockStoreCacheSchema());
	sql = psprintf(def->sql, quote_identifier(nspname));
	plan = SPI_prepare(sql, def->nargs, (Oid *) def->argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for dlock statement %d: %s",
			 (int) id, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed for dlock statement %d", (int) id);
	plans[id] = plan;
	pfree(sql);
	return plan;
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
	DlockStoreCacheMakeCurrent(fn_oid);
	store_forget_plans();

	Assert(OidIsValid(DlockStoreTable()->owner) && OidIsValid(DlockStoreTable()->relid));
	GetUserIdAndSecContext(&session->save_userid, &session->save_sec_context);
	SetUserIdAndSecContext(DlockStoreTable()->owner,
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
		rc = SPI_execute_snapshot(plans[id], values, NULL,
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

	Assert(id >= 0 && id < NUM_STMTS);
	Assert(STORE_AS_OWNER());
	store_spi();
	/* index expressions of an INSERT run restricted, as in lease_table.c */
	DlockRestrictedBegin(&restricted);
	(void) store_plan(id);
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
 * lock_row (the 'live' fence, for a write carrying token) it also keeps
 * the name from being granted until the transaction ends when the write
 * will pass: the name lock, or the row FOR KEY SHARE (DlockLeaseFenceLock),
 * waiting for a grant in progress, unless token is current and the caller
 * may not act for the lease's holder role (then it keeps nothing and sets
 * lease->denied); without, it reads the row without a
 * lock (DlockLeaseFenceRead).  Both answer from the fence cache when it
 * can, without even the table's lock, and run as the caller, without SPI
 * once the store's cache is current.
 */
void
DlockStoreFenceLookup(Oid fn_oid, text *lock_name, int64 token, bool lock_row,
					  DlockFenceLease *lease)
{
	const DlockLeaseTable *table;

	/* the relations only: the fence runs no statement, so prepares none */
	DlockStoreCacheMakeCurrent(fn_oid);
	table = DlockStoreTable();
	lease->denied = false;
	lease->holder = InvalidOid;
	if (lock_row)
	{
		DlockLeaseFenceLock(table, lock_name, token, lease);
		return;
	}
	DlockLeaseFenceRead(table, lock_name, lease);
}
