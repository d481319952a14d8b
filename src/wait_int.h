/*-------------------------------------------------------------------------
 *
 * src/wait_int.h
 *	  What the waiting files share (wait.c, wait_any.c, wait_wake.c): the
 *	  buckets, the slot helpers, the backoff and the queue functions.
 *	  Private to waiting.
 *
 * Concurrency: wait.c's header (the dlock LWLock of wait_shmem.c).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_WAIT_INT_H
#define DLOCK_WAIT_INT_H

#include "common/hashfn.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"

#include "dlock.h"

#define DLOCK_BACKOFF_MIN_MS	1
#define DLOCK_BACKOFF_MAX_MS	50

/* A name whose waiters to wake when this transaction ends. */
typedef struct PendingWake
{
	uint64		hash;			/* DlockNameHash of name */
	text	   *name;			/* in TopTransactionContext */
	int			head;			/* at the end: its queue's head, or -1 */
	uint64		head_ticket;
} PendingWake;

/*
 * An any-slot the pre-commit pass found waiting for some of the names, and
 * where the changed bits of those names are.
 */
typedef struct AnyMatch
{
	int			procno;			/* the slot */
	uint64		ticket;			/* the slot's ticket then */
	pg_atomic_uint32 *changed;	/* its changed bits (mapped here) */
	int			first;			/* its positions: match_pos[first ..] */
	int			count;
} AnyMatch;

/*
 * What this transaction wakes at its end, all in TopTransactionContext
 * (NULL outside a transaction that changed names): the names, sorted by
 * (hash, name) and without duplicates when pending_sorted, and what the
 * pre-commit pass found.
 */

/* Latches to set after a wake-up's scan, sized nslots at first use. */

/* Whether this backend's slot is in use, for the exit callback. */

/*
 * A name's bucket in the current database (a slot's buckets are those of
 * its own database, which is its backend's).
 */
#define BUCKET_NO(hash) \
	((int) (hash_combine64((hash), (uint64) MyDatabaseId) % DLOCK_WAIT_BUCKETS))
#define BUCKET_OF(hash) (&DlockWaitShmem->bucket_waiters[BUCKET_NO(hash)])
/* The current database's count of slots in use (and of other databases') */
#define DB_WAITERS() \
	(&DlockWaitShmem->db_waiters[MyDatabaseId % DLOCK_WAIT_DBS])
#define ANY_MARKS(w, b) (((w)->any_buckets[(b) / 64] >> ((b) % 64)) & 1)

/* This backend's slot. */
#define MY_SLOT()	(&DlockWaitShmem->slots[DlockMyProcNumber()])

extern bool DlockWaitSlotTaken;

extern bool DlockWaitSameBytes(const char *a, int alen, const char *b,
							   int blen);
extern bool DlockWaitSameName(text *a, text *b);
extern int	DlockWaitFindU64(const uint64 *arr, int n, uint64 key);
extern int	DlockWaitCmpInt(const void *a, const void *b);
extern void DlockWaitSlotDescribe(DlockWaiter *me, const DlockWaitInfo *info,
								  TimestampTz deadline);
extern void DlockWaitQueueLeave(bool wake_next);
extern void DlockWaitRegisterExitCallback(void);
extern void DlockWaitSleepUntil(TimestampTz wake_at);
extern TimestampTz DlockWaitNextPoll(TimestampTz now, TimestampTz held_until,
									 long *backoff_ms);
extern void DlockWaitBegins(DlockWaitInfo *info);
extern void DlockWaitCountAttempt(DlockWaitInfo *info);

#endif							/* DLOCK_WAIT_INT_H */
