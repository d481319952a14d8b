/*-------------------------------------------------------------------------
 *
 * src/lease_table.h
 *	  The direct access to the lease table (lease_table.c), as store.c
 *	  calls it.
 *
 * Concurrency: lease_table.c's header gives the locking protocol of each
 * function; every one of them runs as the lease table's owner, between
 * store.c's store_begin and store_end (or, for DlockLeaseFenceRead and
 * DlockLeaseFenceLock, which run as the caller, after store.c made its
 * cache current).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_LEASE_TABLE_H
#define DLOCK_LEASE_TABLE_H

#include "access/attnum.h"
#include "datatype/timestamp.h"
#include "executor/tuptable.h"
#include "utils/relcache.h"

#include "dlock.h"

/*
 * Where the lease table is and where its columns are: the one description
 * of the table that direct access uses.  The column numbers are looked up
 * by name when store.c builds its cache (DlockLeaseTableDescribe); columns
 * a later version adds are carried over unchanged by every update.
 */
typedef struct DlockLeaseTable
{
	Oid			relid;			/* dlock_lease */
	Oid			owner;			/* its owner, whom direct access runs as */
	AttrNumber	att_lock_name;
	AttrNumber	att_token;
	AttrNumber	att_owner;
	AttrNumber	att_holder_role;
	AttrNumber	att_acquired_at;
	AttrNumber	att_renewed_at;
	AttrNumber	att_expires_at;
	AttrNumber	att_released;
} DlockLeaseTable;

/* A lease row's fields, by name (the lock name is never changed). */
typedef struct DlockLeaseFields
{
	int64		token;
	text	   *owner;			/* the owner label */
	Oid			holder_role;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	bool		released;
} DlockLeaseFields;

/* What DlockLeaseTake found. */
typedef enum DlockTakeResult
{
	DLOCK_TAKE_GRANTED,
	DLOCK_TAKE_HELD,			/* a live lease, or a row an open transaction
								 * locks */
	DLOCK_TAKE_NO_ROW
} DlockTakeResult;

/* What a DlockLeaseChangeOp does. */
typedef enum DlockLeaseChangeKind
{
	DLOCK_CHANGE_RENEW,
	DLOCK_CHANGE_RELEASE,
	DLOCK_CHANGE_BREAK
} DlockLeaseChangeKind;

/* Arguments and results of a renew, release or break. */
typedef struct DlockLeaseChangeOp
{
	DlockLeaseChangeKind kind;
	text	   *lock_name;
	int64		token;			/* unused by break */
	TimestampTz now;
	TimestampTz expires;		/* renew's new expiry */
	Oid			caller;			/* the role that must be able to act for the
								 * lease's holder role (renew, release);
								 * InvalidOid for break */
	DlockStoreOutcome outcome;	/* out */
	Oid			holder;			/* out: the row's holder role, when the token
								 * was current (renew, release) */
	/* out, for a break that ended a lease: what the lease was */
	int64		found_token;
	TimestampTz found_expires;
	text	   *found_owner;	/* only when a lease event wants it */
} DlockLeaseChangeOp;

extern void DlockLeaseTableDescribe(DlockLeaseTable *table, Relation rel);
extern bool DlockSlotHasName(TupleTableSlot *slot, AttrNumber att_name,
							 text *lock_name);
extern DlockTakeResult DlockLeaseTake(const DlockLeaseTable *table,
									  Oid seqrelid, text *lock_name,
									  text *owner, Oid holder,
									  TimestampTz now, TimestampTz expires,
									  int64 *token, TimestampTz *held_until,
									  DlockPrevLease *prev);
extern void DlockLeaseInserted(const DlockLeaseTable *table,
							   text *lock_name, const DlockLeaseFields *f);
extern int	DlockLeaseFindHeld(const DlockLeaseTable *table, text **names,
							   int n, TimestampTz now,
							   TimestampTz *held_until);
extern bool DlockLeaseChange(const DlockLeaseTable *table,
							 DlockLeaseChangeOp *c);
extern void DlockLeaseFenceRead(const DlockLeaseTable *table,
								text *lock_name, DlockFenceLease *lease);
extern void DlockLeaseFenceLock(const DlockLeaseTable *table,
								text *lock_name, int64 token,
								DlockFenceLease *lease);

#endif							/* DLOCK_LEASE_TABLE_H */
