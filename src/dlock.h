/*-------------------------------------------------------------------------
 *
 * src/dlock.h
 *	  Declarations shared between the dlock modules.
 *
 * Module map: dlock.c (module magic, GUCs), lease.c (SQL entry points and
 * argument checks), store.c (all access to the lease table and the token
 * sequence), fence.c (the dlock_fence trigger), wait.c (sleeping between
 * acquire attempts).
 *
 * Concurrency: the locking protocol lives in store.c's header; nothing
 * declared here takes a lock by itself.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_H
#define DLOCK_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/timestamp.h"

/* The SQLSTATE of every fencing rejection: class 55, dlock subclass T01. */
#define ERRCODE_DLOCK_STALE_TOKEN	MAKE_SQLSTATE('5','5','T','0','1')

/* Input limits (CONTRACT §5); the README documents them. */
#define DLOCK_MAX_NAME_BYTES	512
#define DLOCK_MAX_OWNER_BYTES	1024

/* dlock.c: settings */
extern int	dlock_max_ttl;		/* dlock.max_ttl, in seconds */

/* store.c: the lease table and the token sequence */

/* What a renew or release found. */
typedef enum DlockStoreOutcome
{
	DLOCK_STORE_DONE,			/* the live lease (name, token) was changed */
	DLOCK_STORE_NOT_HELD,		/* a row exists, but the token holds no live lease */
	DLOCK_STORE_NO_LEASE		/* no row for the name */
} DlockStoreOutcome;

extern bool DlockStoreTryAcquire(Oid fn_oid, text *lock_name, text *owner,
								 Oid holder, TimestampTz now,
								 TimestampTz expires, int64 *token);
extern DlockStoreOutcome DlockStoreRenew(Oid fn_oid, text *lock_name,
										 int64 token, TimestampTz now,
										 TimestampTz expires, Oid *holder);
extern DlockStoreOutcome DlockStoreRelease(Oid fn_oid, text *lock_name,
										   int64 token, TimestampTz now,
										   Oid *holder);
extern bool DlockStoreBreak(Oid fn_oid, text *lock_name, TimestampTz now);

/* The lease behind a fenced write, as the fence trigger sees it. */
typedef struct DlockFenceLease
{
	bool		found;			/* false: the name has no row */
	int64		token;
	bool		released;
	TimestampTz expires_at;
} DlockFenceLease;

extern void DlockStoreFenceLookup(Oid fn_oid, text *lock_name, bool lock_row,
								  DlockFenceLease *lease);

/* wait.c: sleeping between attempts */
typedef struct DlockBackoff
{
	long		next_ms;		/* the next sleep, before clamping */
} DlockBackoff;

extern void DlockBackoffInit(DlockBackoff *backoff);
extern void DlockWaitUntilRetry(DlockBackoff *backoff, TimestampTz deadline);

#endif							/* DLOCK_H */
