/*-------------------------------------------------------------------------
 *
 * src/store_int.h
 *	  What store.c shares with store_ops.c: the SQL statements by id, the
 *	  store session runner and the cached relations.  Private to the
 *	  lease store.
 *
 * Concurrency: store.c's header gives the locking protocol.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_STORE_INT_H
#define DLOCK_STORE_INT_H

#include "lease_table.h"

/* Rows dlock_purge deletes per statement. */
#define DLOCK_PURGE_BATCH		1000

/* The statements, by id.  Keep store.c's stmt_defs[] in the same order. */
typedef enum DlockStmt
{
	STMT_INSERT,				/* create the first lease of a name */
	STMT_PURGE,					/* delete a batch of long-ended leases */
	/* the marks of fencing mode 'seen' (dlock_fence_mark, from 1.2; mark.c) */
	STMT_MARK_LOCK,				/* read and lock a name's mark */
	STMT_MARK_RAISE,			/* raise a locked mark */
	STMT_MARK_INSERT,			/* create a name's first mark */
	STMT_MARK_PURGE,			/* delete marks not raised since a cutoff */
	NUM_STMTS
} DlockStmt;

/*
 * A store operation that may change a lease: it runs between store_begin
 * and store_end, and returns whether it changed one (whether to keep it).
 */
typedef bool (*StoreOp) (void *arg);

/* store.c: the session runner and the statements */
extern bool DlockStoreRun(Oid fn_oid, StoreOp op, void *arg, bool isolate);
extern uint64 DlockStoreExec(DlockStmt id, Datum *values, int expected);
extern Datum DlockStoreResultDatum(int col, bool *isnull);

/* store_cache.c: where the extension lives */
extern void DlockStoreCacheMakeCurrent(Oid fn_oid);
extern Oid	DlockStoreCacheSchema(void);
extern uint64 DlockStoreCacheGeneration(void);
extern DlockLeaseTable *DlockStoreTable(void);
extern Oid	DlockStoreTokenSeq(void);
extern Oid	DlockStoreTokenOrigin(void);
extern void DlockStoreRequireMarks(void);
extern uint64 DlockStoreRelcacheInvals(void);
extern uint64 DlockStoreTableInvals(void);
extern uint64 DlockStoreMarkInvals(void);
extern Oid	DlockStoreMarkTable(AttrNumber *att_owner, AttrNumber *att_name,
								AttrNumber *att_token);

#endif							/* DLOCK_STORE_INT_H */
