/*-------------------------------------------------------------------------
 *
 * src/wait_any.c
 *	  Waiting of dlock_acquire_any: an any-slot that publishes the hashes
 *	  of its names, with a changed bit per hash, in the DSA area
 *	  (wait_shmem.c), and attempts only the names whose bits a waker set,
 *	  or whose expiry came, or that a waker handed it in its ring
 *	  (design.md §15).
 *
 * Concurrency: the set is allocated before the dlock LWLock is taken and
 * freed after it is released; the slot's ring is emptied under its
 * spinlock; the latch is reset before the bits and the ring are collected,
 * so a wake between the collection and the sleep ends the sleep at once.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "compat.h"
#include "dlock.h"
#include "wait_int.h"

/*
 * What a dlock_acquire_any waiter keeps of its names, in its own memory:
 * which to attempt next, and when to retry each unwoken.
 */
typedef struct AnyWait
{
	int			n;				/* names, in array order */
	const uint64 *hashes;		/* DlockNameHash of each */
	DlockAttemptOneFn attempt;
	void	   *arg;
	DlockWaitInfo *info;
	/* the set as published: m sorted distinct hashes */
	int			m;
	uint64	   *uhash;
	int		   *group;			/* names of uhash[j]: byhash[group[j] ..
								 * group[j + 1] - 1] */
	int		   *byhash;			/* name indices, by hash, ascending within */
	/* what to do */
	TimestampTz *retry;			/* per name: when to attempt it unwoken (the
								 * expiry it saw, or a poll) */
	bool	   *want;			/* per name: to attempt in the next round */
	int		   *todo;			/* the names wanted, as they came */
	int			ntodo;
	TimestampTz next_timed;		/* no retry[] is earlier; 0: none set */
	TimestampTz held_until;		/* the last round: as DlockAttemptFn */
	long		backoff_ms;
} AnyWait;

/* A name's hash and its index in the array, for sorting. */
typedef struct HashIndex
{
	uint64		hash;
	int			index;
} HashIndex;

/*
 * cmp_hash_index orders HashIndex by hash, then index; a qsort comparator.
 */
static int
cmp_hash_index(const void *a, const void *b)
{
	const HashIndex *x = (const HashIndex *) a;
	const HashIndex *y = (const HashIndex *) b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

/*
 * any_init sets aw up for the n names of hashes, attempted through attempt
 * (with arg) for the call info.
 */
static void
any_init(AnyWait *aw, const uint64 *hashes, int n, DlockAttemptOneFn attempt,
		 void *arg, DlockWaitInfo *info)
{
	memset(aw, 0, sizeof(*aw));
	aw->n = n;
	aw->hashes = hashes;
	aw->attempt = attempt;
	aw->arg = arg;
	aw->info = info;
	aw->retry = palloc0(sizeof(TimestampTz) * n);
	aw->want = palloc0(sizeof(bool) * n);
	aw->todo = palloc(sizeof(int) * n);
	aw->backoff_ms = DLOCK_BACKOFF_MIN_MS;
}

/*
 * any_index builds the set that aw publishes (sorted distinct hashes) and
 * the map from its positions back to the names.
 */
static void
any_index(AnyWait *aw)
{
	HashIndex  *hi = palloc(sizeof(HashIndex) * aw->n);
	int			i;

	for (i = 0; i < aw->n; i++)
	{
		hi[i].hash = aw->hashes[i];
		hi[i].index = i;
	}
	qsort(hi, aw->n, sizeof(HashIndex), cmp_hash_index);
	aw->uhash = palloc(sizeof(uint64) * aw->n);
	aw->group = palloc(sizeof(int) * (aw->n + 1));
	aw->byhash = palloc(sizeof(int) * aw->n);
	aw->m = 0;
	for (i = 0; i < aw->n; i++)
	{
		if (i == 0 || hi[i].hash != hi[i - 1].hash)
		{
			aw->uhash[aw->m] = hi[i].hash;
			aw->group[aw->m] = i;
			aw->m++;
		}
		aw->byhash[i] = hi[i].index;
	}
	aw->group[aw->m] = aw->n;
	pfree(hi);
}

/*
 * any_want marks name i to be attempted in the next round.
 */
static inline void
any_want(AnyWait *aw, int i)
{
	Assert(i >= 0 && i < aw->n);
	if (aw->want[i])
		return;
	aw->want[i] = true;
	aw->todo[aw->ntodo++] = i;
}

/*
 * any_want_all marks every name.
 */
static void
any_want_all(AnyWait *aw)
{
	int			i;

	for (i = 0; i < aw->n; i++)
		any_want(aw, i);
}

/*
 * any_want_pos marks the names of position j of the published set.
 */
static void
any_want_pos(AnyWait *aw, int j)
{
	int			k;

	Assert(j >= 0 && j < aw->m);
	for (k = aw->group[j]; k < aw->group[j + 1]; k++)
		any_want(aw, aw->byhash[k]);
}

/*
 * any_round attempts the names marked, in array order, stopping at the
 * first granted (returns true).  Each failed name gets its retry time: the
 * expiry of the lease that held it, or the next backoff step when an open
 * transaction was changing it.  Sets held_until as a DlockAttemptFn would
 * for the names of the round.
 */
static bool
any_round(AnyWait *aw)
{
	TimestampTz earliest = 0;
	TimestampTz poll_at = 0;
	bool		whole = aw->ntodo * 4 >= aw->n;
	int			k;

	/* in array order: a mostly full round walks the flags, else sorts */
	if (!whole)
		qsort(aw->todo, aw->ntodo, sizeof(int), DlockWaitCmpInt);
	for (k = 0; k < (whole ? aw->n : aw->ntodo); k++)
	{
		int			i = whole ? k : aw->todo[k];
		TimestampTz held;

		if (!aw->want[i])
			continue;
		aw->want[i] = false;
		CHECK_FOR_INTERRUPTS();
		DlockWaitCountAttempt(aw->info);
		if (aw->attempt(aw->arg, i, &held))
		{
			aw->ntodo = 0;
			return true;
		}
		if (held == 0)
		{
			/* an open transaction is changing it: poll it */
			if (poll_at == 0)
				poll_at = DlockWaitNextPoll(GetCurrentTimestamp(), 0, &aw->backoff_ms);
			held = poll_at;
		}
		aw->retry[i] = held;
		if (aw->next_timed == 0 || held < aw->next_timed)
			aw->next_timed = held;
		if (earliest == 0 || held < earliest)
			earliest = held;
	}
	aw->ntodo = 0;
	if (poll_at == 0)
		aw->backoff_ms = DLOCK_BACKOFF_MIN_MS;
	aw->held_until = poll_at != 0 ? 0 : earliest;
	return false;
}

/*
 * any_due marks the names whose retry time has come (by now), and sets
 * next_timed to the earliest retry time of the others.  Scans the names
 * only when next_timed has come.
 */
static void
any_due(AnyWait *aw, TimestampTz now)
{
	int			i;

	if (aw->next_timed == 0 || now < aw->next_timed)
		return;
	aw->next_timed = 0;
	for (i = 0; i < aw->n; i++)
	{
		if (aw->retry[i] == 0)
			continue;
		if (aw->retry[i] <= now)
		{
			aw->retry[i] = 0;
			any_want(aw, i);
		}
		else if (aw->next_timed == 0 || aw->retry[i] < aw->next_timed)
			aw->next_timed = aw->retry[i];
	}
}

/*
 * any_collect marks the names wakers changed: the set bits of changed (m
 * bits) and the hashes of the slot me's ring that are among its names (or
 * all names when the ring overflowed), emptying both.
 */
static void
any_collect(AnyWait *aw, DlockWaiter *me, pg_atomic_uint32 *changed)
{
	uint64		ring[DLOCK_ANY_RING];
	int			nring;
	bool		rescan;
	int			w;
	int			r;

	SpinLockAcquire(&me->any_mutex);
	nring = me->any_nring;
	rescan = me->any_rescan;
	memcpy(ring, me->any_ring, sizeof(uint64) * nring);
	me->any_nring = 0;
	me->any_rescan = false;
	SpinLockRelease(&me->any_mutex);

	if (rescan)
		any_want_all(aw);
	for (r = 0; r < nring && !rescan; r++)
	{
		int			j = DlockWaitFindU64(aw->uhash, aw->m, ring[r]);

		if (j >= 0)
			any_want_pos(aw, j);
	}
	for (w = 0; w < (aw->m + 31) / 32; w++)
	{
		uint32		bits;

		if (pg_atomic_read_u32(&changed[w]) == 0)
			continue;
		bits = pg_atomic_exchange_u32(&changed[w], 0);
		while (bits != 0)
		{
			int			b = pg_rightmost_one_pos32(bits);

			bits &= bits - 1;
			any_want_pos(aw, w * 32 + b);
		}
	}
}

/*
 * any_polling retries every name of aw until one is granted or deadline
 * has passed, without preload (design.md §15).
 */
static bool
any_polling(AnyWait *aw, TimestampTz deadline)
{
	long		backoff_ms = DLOCK_BACKOFF_MIN_MS;

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();

		DlockWaitBegins(aw->info);
		DlockWaitSleepUntil(Min(DlockWaitNextPoll(now, aw->held_until, &backoff_ms), deadline));
		any_want_all(aw);
		if (any_round(aw))
			return true;
		if (GetCurrentTimestamp() >= deadline)
			return false;
	}
}

/*
 * DlockWaitAcquireAny takes one of the n leases that attempt takes (names
 * in array order, with the DlockNameHash values hashes), waiting until
 * deadline in an any-slot (design.md §15), and returns whether one
 * was granted.  Attempts every name first, and returns after that when
 * deadline has passed (wait = 0).  Raises as DlockWaitAcquire, and when
 * the DSA area cannot hold the names' set (out of memory).
 */
bool
DlockWaitAcquireAny(const uint64 *hashes, int n, TimestampTz deadline,
					DlockAttemptOneFn attempt, void *arg, DlockWaitInfo *info)
{
	volatile bool granted = false;
	AnyWait		aw;
	dsa_area   *area;
	dsa_pointer set;
	uint64	   *shared_hashes;
	pg_atomic_uint32 *changed;
	DlockWaiter *me;
	int			nwords;
	int			i;

	Assert(IsTransactionState());
	Assert(!DlockWaitSlotTaken && n > 0);
	info->waited = false;
	info->attempts = 0;
	any_init(&aw, hashes, n, attempt, arg, info);
	any_want_all(&aw);
	if (any_round(&aw))
		return true;
	if (GetCurrentTimestamp() >= deadline)
		return false;
	if (DlockWaitShmem == NULL)
		return any_polling(&aw, deadline);

	DlockWaitRegisterExitCallback();
	DlockWaitBegins(info);

	/*
	 * Publish the set: sorted distinct hashes, then the changed bits. Nothing
	 * between the allocation and the join below can raise (the allocation
	 * maps what it allocates), so the set cannot leak.
	 */
	any_index(&aw);
	nwords = (aw.m + 31) / 32;
	area = DlockAnyArea();
	set = dsa_allocate(area, sizeof(uint64) * aw.m +
					   sizeof(pg_atomic_uint32) * nwords);
	shared_hashes = (uint64 *) dsa_get_address(area, set);
	memcpy(shared_hashes, aw.uhash, sizeof(uint64) * aw.m);
	changed = (pg_atomic_uint32 *) (shared_hashes + aw.m);
	for (i = 0; i < nwords; i++)
		pg_atomic_init_u32(&changed[i], 0);

	/* join: the slot, its buckets, its set (design.md §15) */
	me = MY_SLOT();
	LWLockAcquire(DlockWaitShmem->lock, LW_EXCLUSIVE);
	Assert(!me->in_use && !DlockWaitSlotTaken);
	DlockWaitSlotDescribe(me, info, deadline);
	memset(me->any_buckets, 0, sizeof(me->any_buckets));
	for (i = 0; i < aw.m; i++)
	{
		int			b = BUCKET_NO(aw.uhash[i]);

		if (ANY_MARKS(me, b))
			continue;
		me->any_buckets[b / 64] |= UINT64CONST(1) << (b % 64);
		pg_atomic_fetch_add_u32(&DlockWaitShmem->bucket_waiters[b], 1);
	}
	/* no waker touches a slot not in use, and none has the lock now */
	me->any_nring = 0;
	me->any_rescan = false;
	me->any_set = set;
	me->any_nhashes = aw.m;
	me->hash = 0;
	me->any = true;
	me->ticket = DlockWaitShmem->next_ticket++;
	me->in_use = true;
	pg_atomic_fetch_add_u32(DB_WAITERS(), 1);
	DlockWaitSlotTaken = true;
	LWLockRelease(DlockWaitShmem->lock);

	PG_TRY();
	{
		/* every name once more: one may have been freed before the join */
		any_want_all(&aw);
		for (;;)
		{
			ResetLatch(MyLatch);
			any_collect(&aw, me, changed);
			any_due(&aw, GetCurrentTimestamp());
			if (aw.ntodo > 0 && any_round(&aw))
			{
				granted = true;
				break;
			}
			if (GetCurrentTimestamp() >= deadline)
				break;
			DlockWaitSleepUntil(aw.next_timed != 0 ? Min(aw.next_timed, deadline) :
								deadline);
		}
	}
	PG_FINALLY();
	{
		DlockWaitQueueLeave(false);
	}
	PG_END_TRY();

	Assert(!DlockWaitSlotTaken);
	return granted;
}
