/*-------------------------------------------------------------------------
 *
 * src/wait.c
 *	  Waiting for a lease: per-name FIFO queues woken at release and at
 *	  expiry, and any-of waiters woken by a change of one of their own
 *	  names, when dlock is preloaded; bounded polling when it is not.
 *
 * Owns the queues (a database and an exact name: database, DlockNameHash
 * and the name's bytes decide), the any-slots of dlock_acquire_any and
 * their sets in the DSA area (wait_shmem.c), the wake-ups a transaction's
 * end makes (DlockWakeAtXactEnd records the names, DlockWaitXactEnd,
 * called by xact.c, wakes), the backoff of polling, and what the
 * dlock_waiters view shows.  The protocol, and why no wake-up is lost and
 * the work of a transaction's end is bounded, is design.md §15 (§6 for the
 * rules).
 *
 * Concurrency: slots are taken and given up under the dlock LWLock held
 * exclusively, and scanned under it held shared (wait_shmem.c).  An
 * any-slot's set is allocated before the LWLock is taken and freed after
 * it is released; a waker reads it and sets its bits (atomic OR) only
 * under the LWLock held shared while the slot holds it (same ticket).
 * The ring is written by wakers and emptied by its waiter under the slot's
 * spinlock.  Latches are set after the LWLock is released.  No row lock,
 * name lock or LWLock is held while sleeping.  A wake-up is never lost:
 * the latch is reset before each attempt, a waiter counts itself in
 * db_waiters and bucket_waiters before its first attempt in a queue, and
 * the waker reads those counts after its commit is visible.
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
static PendingWake *pending = NULL;
static int	npending = 0;
static int	pending_cap = 0;
static bool pending_sorted = true;
static AnyMatch *matches = NULL;
static int	nmatches = 0;
static int	matches_cap = 0;
static int *match_pos = NULL;
static int	nmatch_pos = 0;
static int	match_pos_cap = 0;
static uint64 matched_below = 0;	/* slots the pass saw had lower tickets */
static bool wake_active = false;	/* DlockWaitXactEnd has work: set at first use */

/* Latches to set after a wake-up's scan, sized nslots at first use. */
static int *wake_list = NULL;

/* Whether this backend's slot is in use, for the exit callback. */
static bool slot_taken = false;
static bool exit_callback_registered = false;

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

/*
 * same_bytes reports whether the name of len bytes at a equals the one at b.
 */
static inline bool
same_bytes(const char *a, int alen, const char *b, int blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

/*
 * same_name reports whether the texts a and b hold the same name.
 */
static bool
same_name(text *a, text *b)
{
	return same_bytes(VARDATA_ANY(a), VARSIZE_ANY_EXHDR(a),
					  VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
}

/*
 * find_u64 returns the index of key in the n sorted values of arr, or -1.
 */
static int
find_u64(const uint64 *arr, int n, uint64 key)
{
	int			lo = 0;
	int			hi = n;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (arr[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < n && arr[lo] == key) ? lo : -1;
}

/*
 * cmp_int orders int values; a qsort comparator.
 */
static int
cmp_int(const void *a, const void *b)
{
	int			x = *(const int *) a;
	int			y = *(const int *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * queue_head_locked returns the pgprocno of the head of the queue of the
 * name (hash, its namelen bytes at name) in the current database (the
 * queue slot in use with the lowest ticket), or -1 when nobody waits.
 * Caller holds the dlock LWLock (either mode).
 */
static int
queue_head_locked(uint64 hash, const char *name, int namelen)
{
	int			head = -1;
	uint64		best = PG_UINT64_MAX;
	int			i;

	Assert(LWLockHeldByMe(DlockWaitShmem->lock));
	for (i = 0; i < DlockWaitShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockWaitShmem->slots[i];

		if (w->in_use && !w->any && w->dboid == MyDatabaseId &&
			w->hash == hash && w->ticket < best &&
			same_bytes(w->name, w->namelen, name, namelen))
		{
			best = w->ticket;
			head = i;
		}
	}
	return head;
}

/*
 * slot_describe fills in what dlock_waiters shows of this backend's slot me,
 * from info, for a wait until deadline, and its attempts so far.  Caller
 * holds the dlock LWLock exclusively.
 */
static void
slot_describe(DlockWaiter *me, const DlockWaitInfo *info, TimestampTz deadline)
{
	Assert(LWLockHeldByMeInMode(DlockWaitShmem->lock, LW_EXCLUSIVE));
	Assert(VARSIZE_ANY_EXHDR(info->lock_name) <= DLOCK_MAX_NAME_BYTES);
	me->pid = MyProcPid;
	me->dboid = MyDatabaseId;
	me->roleid = GetUserId();
	me->kind = info->kind;
	me->nnames = info->nnames;
	me->since = info->since;
	me->until = deadline;
	/* DlockCheckLockName bounds the length; never write past the slot */
	me->namelen = Min(VARSIZE_ANY_EXHDR(info->lock_name), DLOCK_MAX_NAME_BYTES);
	memcpy(me->name, VARDATA_ANY(info->lock_name), me->namelen);
	pg_atomic_write_u64(&me->attempts, (uint64) info->attempts);
}

/*
 * queue_join takes this backend's slot for the queue of info->lock_name in
 * the current database, at the end of that queue, described by info
 * (waiting until deadline).  Takes the dlock LWLock exclusively.
 */
static void
queue_join(const DlockWaitInfo *info, TimestampTz deadline)
{
	DlockWaiter *me;
	uint64		hash = DlockNameHash(info->lock_name);

	Assert(!slot_taken);
	Assert(DlockMyProcNumber() >= 0 && DlockMyProcNumber() < DlockWaitShmem->nslots);
	me = MY_SLOT();
	LWLockAcquire(DlockWaitShmem->lock, LW_EXCLUSIVE);
	/* only this backend takes its own slot, and it gave it up last time */
	Assert(!me->in_use);
	slot_describe(me, info, deadline);
	me->hash = hash;
	me->any = false;
	me->ticket = DlockWaitShmem->next_ticket++;
	me->in_use = true;
	pg_atomic_fetch_add_u32(DB_WAITERS(), 1);
	pg_atomic_fetch_add_u32(BUCKET_OF(hash), 1);
	slot_taken = true;
	LWLockRelease(DlockWaitShmem->lock);
}

/*
 * queue_leave gives up this backend's slot, if it holds one, and with
 * wake_next wakes the new head of its queue (an any-slot heads no queue).
 * Frees an any-slot's set after releasing the LWLock, which it takes
 * exclusively.  Safe to call from error and exit paths.
 */
static void
queue_leave(bool wake_next)
{
	DlockWaiter *me;
	dsa_pointer set = InvalidDsaPointer;
	int			head = -1;

	if (!slot_taken)
		return;
	me = MY_SLOT();
	LWLockAcquire(DlockWaitShmem->lock, LW_EXCLUSIVE);
	Assert(me->in_use);
	me->in_use = false;
	slot_taken = false;
	Assert(pg_atomic_read_u32(DB_WAITERS()) > 0);
	pg_atomic_fetch_sub_u32(DB_WAITERS(), 1);
	if (me->any)
	{
		int			b;

		for (b = 0; b < DLOCK_WAIT_BUCKETS; b++)
			if (ANY_MARKS(me, b))
			{
				/* counted in the bucket since queue_join_any */
				Assert(pg_atomic_read_u32(&DlockWaitShmem->bucket_waiters[b]) > 0);
				pg_atomic_fetch_sub_u32(&DlockWaitShmem->bucket_waiters[b], 1);
			}
		set = me->any_set;
		me->any_set = InvalidDsaPointer;
		me->any_nhashes = 0;
	}
	else
	{
		/* the slot is counted in its bucket from queue_join until now */
		Assert(pg_atomic_read_u32(BUCKET_OF(me->hash)) > 0);
		pg_atomic_fetch_sub_u32(BUCKET_OF(me->hash), 1);
		if (wake_next)
			head = queue_head_locked(me->hash, me->name, me->namelen);
	}
	LWLockRelease(DlockWaitShmem->lock);
	/* no waker reads the set now: they do only under the LWLock, in use */
	if (DsaPointerIsValid(set))
		dsa_free(DlockAnyArea(), set);
	if (head >= 0)
		SetLatch(DlockProcLatch(head));
}

/*
 * queue_is_head reports whether this backend's queue slot heads its queue.
 * Takes the dlock LWLock in shared mode.
 */
static bool
queue_is_head(void)
{
	DlockWaiter *me = MY_SLOT();
	int			head;

	Assert(slot_taken && !me->any);
	LWLockAcquire(DlockWaitShmem->lock, LW_SHARED);
	head = queue_head_locked(me->hash, me->name, me->namelen);
	LWLockRelease(DlockWaitShmem->lock);
	return head == DlockMyProcNumber();
}

/*
 * wait_exit_callback gives up the slot when the backend exits while
 * waiting (FATAL, such as pg_terminate_backend).
 */
static void
wait_exit_callback(int code, Datum arg)
{
	if (slot_taken && DlockWaitShmem != NULL)
		queue_leave(true);
}

/*
 * register_exit_callback arranges, once per backend, for the slot to be
 * given up at exit.
 */
static void
register_exit_callback(void)
{
	if (exit_callback_registered)
		return;
	before_shmem_exit(wait_exit_callback, (Datum) 0);
	exit_callback_registered = true;
}

/*
 * sleep_until sleeps on the process latch until wake_at (or until the latch
 * is set), then serves interrupts.  Returns at once if wake_at has passed
 * or the latch is already set.  One sleep lasts at most INT_MAX ms (24.8
 * days, WaitLatch's limit; PostgreSQL 15 does not clamp the difference):
 * a waiter woken early just checks again and sleeps on.
 */
static void
sleep_until(TimestampTz wake_at)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), wake_at);

	/* nothing that could block another backend is held while sleeping */
	Assert(DlockWaitShmem == NULL || !LWLockHeldByMe(DlockWaitShmem->lock));
	ms = Min(ms, (long) PG_INT32_MAX);
	if (ms > 0)
	{
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 ms, DlockWaitEvent());
		ResetLatch(MyLatch);
	}
	CHECK_FOR_INTERRUPTS();
}

/*
 * next_poll returns when a poller retries: after the current backoff step
 * (which it then doubles), or at held_until when that is known and sooner.
 */
static TimestampTz
next_poll(TimestampTz now, TimestampTz held_until, long *backoff_ms)
{
	TimestampTz at = TimestampTzPlusMilliseconds(now, *backoff_ms);

	*backoff_ms = Min(*backoff_ms * 2, DLOCK_BACKOFF_MAX_MS);
	if (held_until != 0 && held_until < at)
		at = held_until;
	return at;
}

/*
 * retry_at returns when a queued waiter whose attempt failed tries again:
 * at the expiry of the lease that held the name (resetting the backoff),
 * or after the next backoff step when that is unknown (an open
 * transaction holds the row, and its end may wake nobody).
 */
static TimestampTz
retry_at(TimestampTz held_until, long *backoff_ms)
{
	if (held_until != 0)
	{
		*backoff_ms = DLOCK_BACKOFF_MIN_MS;
		return held_until;
	}
	return next_poll(GetCurrentTimestamp(), 0, backoff_ms);
}

/*
 * wait_begins records, once per call, that the call described by info
 * starts to wait: dlock_stats counts it, dlock_waiters shows it since now.
 */
static void
wait_begins(DlockWaitInfo *info)
{
	if (info->waited)
		return;
	info->waited = true;
	info->since = GetCurrentTimestamp();
	DlockStatsCount(DLOCK_STAT_WAITS, 1);
}

/*
 * count_attempt counts one attempt of the call info describes, in info and,
 * while it holds its slot, in the slot (for dlock_waiters).
 */
static void
count_attempt(DlockWaitInfo *info)
{
	info->attempts++;
	if (slot_taken)
		pg_atomic_write_u64(&MY_SLOT()->attempts, (uint64) info->attempts);
}

/*
 * wait_polling retries attempt until it grants the lease or deadline has
 * passed (see the file header).  Returns whether it was granted.
 */
static bool
wait_polling(TimestampTz deadline, DlockAttemptFn attempt, void *arg,
			 DlockWaitInfo *info)
{
	long		backoff_ms = DLOCK_BACKOFF_MIN_MS;

	for (;;)
	{
		TimestampTz held_until;
		TimestampTz now;

		count_attempt(info);
		if (attempt(arg, &held_until))
			return true;
		now = GetCurrentTimestamp();
		if (now >= deadline)
			return false;
		wait_begins(info);
		sleep_until(Min(next_poll(now, held_until, &backoff_ms), deadline));
	}
}

/*
 * wait_queued waits in the queue of info->lock_name until attempt grants
 * the lease or deadline has passed (see the file header), moving to the
 * queue of the name an attempt reports as refusing it.  Returns whether it
 * was granted.  The slot is given up on every way out.
 */
static bool
wait_queued(TimestampTz deadline, DlockAttemptFn attempt, void *arg,
			DlockWaitInfo *info)
{
	volatile bool granted = false;

	register_exit_callback();
	wait_begins(info);
	queue_join(info, deadline);
	PG_TRY();
	{
		long		backoff_ms = DLOCK_BACKOFF_MIN_MS;
		bool		moved = false;

		for (;;)
		{
			TimestampTz wake_at = deadline;
			TimestampTz now;

			ResetLatch(MyLatch);
			if (queue_is_head())
			{
				text	   *queued = info->lock_name;
				TimestampTz held_until;

				count_attempt(info);
				if (attempt(arg, &held_until))
				{
					granted = true;
					break;
				}
				wake_at = retry_at(held_until, &backoff_ms);
				if (!same_name(info->lock_name, queued))
				{
					/*
					 * Another name of the set refused it: wait in that
					 * name's queue, letting this one's next waiter go.  The
					 * name may have been released since the attempt, before
					 * this slot counted in its bucket, so attempt again
					 * (when at the head) before sleeping; a second move in
					 * a row polls instead, so that names changing hands
					 * quickly cannot keep it busy.
					 */
					queue_leave(true);
					queue_join(info, deadline);
					if (!moved)
					{
						moved = true;
						continue;
					}
					wake_at = Min(wake_at, next_poll(GetCurrentTimestamp(), 0,
													 &backoff_ms));
				}
				else
					moved = false;
			}
			now = GetCurrentTimestamp();
			if (now >= deadline)
				break;
			sleep_until(Min(wake_at, deadline));
		}
	}
	PG_FINALLY();
	{
		/*
		 * A waiter that got the lease leaves the next one asleep: its own
		 * transaction's end wakes it (DlockWakeAtXactEnd), when the new
		 * lease is visible.  Waking it now would only make it find the
		 * grant uncommitted and poll.
		 */
		queue_leave(!granted);
	}
	PG_END_TRY();

	Assert(!slot_taken);
	return granted;
}

/*
 * DlockWaitAcquire takes a lease (or a set of leases) through attempt,
 * waiting until deadline for it in the queue of info->lock_name (the name,
 * or the set's first name; a set's attempt updates it), and returns
 * whether it was granted.  info describes the call (for dlock_waiters) and
 * says whether it waited and how many attempts it made.  Sleeps on the
 * process latch; raises what CHECK_FOR_INTERRUPTS raises (cancel,
 * statement_timeout, termination).
 */
bool
DlockWaitAcquire(TimestampTz deadline, DlockAttemptFn attempt, void *arg,
				 DlockWaitInfo *info)
{
	Assert(IsTransactionState());
	Assert(!slot_taken);
	info->waited = false;
	info->attempts = 0;
	if (DlockWaitShmem == NULL)
		return wait_polling(deadline, attempt, arg, info);

	/* Nobody queued for this name (or its bucket): try before queueing. */
	pg_memory_barrier();
	if (pg_atomic_read_u32(BUCKET_OF(DlockNameHash(info->lock_name))) == 0)
	{
		TimestampTz held_until;

		count_attempt(info);
		if (attempt(arg, &held_until))
			return true;
		if (GetCurrentTimestamp() >= deadline)
			return false;
	}
	return wait_queued(deadline, attempt, arg, info);
}

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
		qsort(aw->todo, aw->ntodo, sizeof(int), cmp_int);
	for (k = 0; k < (whole ? aw->n : aw->ntodo); k++)
	{
		int			i = whole ? k : aw->todo[k];
		TimestampTz held;

		if (!aw->want[i])
			continue;
		aw->want[i] = false;
		CHECK_FOR_INTERRUPTS();
		count_attempt(aw->info);
		if (aw->attempt(aw->arg, i, &held))
		{
			aw->ntodo = 0;
			return true;
		}
		if (held == 0)
		{
			/* an open transaction is changing it: poll it */
			if (poll_at == 0)
				poll_at = next_poll(GetCurrentTimestamp(), 0, &aw->backoff_ms);
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
		int			j = find_u64(aw->uhash, aw->m, ring[r]);

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
 * has passed, without preload (see the file header).
 */
static bool
any_polling(AnyWait *aw, TimestampTz deadline)
{
	long		backoff_ms = DLOCK_BACKOFF_MIN_MS;

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();

		wait_begins(aw->info);
		sleep_until(Min(next_poll(now, aw->held_until, &backoff_ms), deadline));
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
 * deadline in an any-slot (see the file header), and returns whether one
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
	Assert(!slot_taken && n > 0);
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

	register_exit_callback();
	wait_begins(info);

	/*
	 * Publish the set: sorted distinct hashes, then the changed bits.
	 * Nothing between the allocation and the join below can raise (the
	 * allocation maps what it allocates), so the set cannot leak.
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

	/* join: the slot, its buckets, its set (see the file header) */
	me = MY_SLOT();
	LWLockAcquire(DlockWaitShmem->lock, LW_EXCLUSIVE);
	Assert(!me->in_use && !slot_taken);
	slot_describe(me, info, deadline);
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
	slot_taken = true;
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
			sleep_until(aw.next_timed != 0 ? Min(aw.next_timed, deadline) :
						deadline);
		}
	}
	PG_FINALLY();
	{
		queue_leave(false);
	}
	PG_END_TRY();

	Assert(!slot_taken);
	return granted;
}

/*
 * cmp_pending orders PendingWake by hash, then name (length, then bytes);
 * a qsort comparator.
 */
static int
cmp_pending(const void *a, const void *b)
{
	const PendingWake *x = (const PendingWake *) a;
	const PendingWake *y = (const PendingWake *) b;
	int			lx;
	int			ly;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	lx = VARSIZE_ANY_EXHDR(x->name);
	ly = VARSIZE_ANY_EXHDR(y->name);
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return memcmp(VARDATA_ANY(x->name), VARDATA_ANY(y->name), lx);
}

/*
 * pending_sort sorts the pending names and drops duplicates.  Allocates
 * nothing and cannot raise (the end-of-transaction callback calls it).
 */
static void
pending_sort(void)
{
	int			i;
	int			k = 0;

	if (pending_sorted)
		return;
	qsort(pending, npending, sizeof(PendingWake), cmp_pending);
	for (i = 0; i < npending; i++)
		if (k == 0 || cmp_pending(&pending[k - 1], &pending[i]) != 0)
			pending[k++] = pending[i];
	npending = k;
	pending_sorted = true;
}

/*
 * pending_first returns the index of the first pending name whose hash is
 * not below hash (npending when there is none).  The pending names are
 * sorted.
 */
static int
pending_first(uint64 hash)
{
	int			lo = 0;
	int			hi = npending;

	Assert(pending_sorted);
	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (pending[mid].hash < hash)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * pending_find returns the index of the pending name (hash, its namelen
 * bytes at name), or -1.  The pending names are sorted.
 */
static int
pending_find(uint64 hash, const char *name, int namelen)
{
	int			lo;

	for (lo = pending_first(hash); lo < npending && pending[lo].hash == hash; lo++)
		if (same_bytes(VARDATA_ANY(pending[lo].name),
					   VARSIZE_ANY_EXHDR(pending[lo].name), name, namelen))
			return lo;
	return -1;
}

/*
 * pending_has_hash reports whether a pending name has the hash.  The
 * pending names are sorted.
 */
static bool
pending_has_hash(uint64 hash)
{
	int			lo = pending_first(hash);

	return lo < npending && pending[lo].hash == hash;
}

/*
 * pending_busy reports whether the current database (or another of its
 * class) and some bucket of the pending names count a waiter, after a
 * memory barrier (see the file header).
 */
static bool
pending_busy(void)
{
	int			i;

	pg_memory_barrier();
	if (pg_atomic_read_u32(DB_WAITERS()) == 0)
		return false;
	for (i = 0; i < npending; i++)
		if (pg_atomic_read_u32(BUCKET_OF(pending[i].hash)) != 0)
			return true;
	return false;
}

/*
 * match_add_pos records position j of the any-slot being matched.
 */
static void
match_add_pos(int j)
{
	if (nmatch_pos == match_pos_cap)
	{
		match_pos_cap = Max(64, match_pos_cap * 2);
		match_pos = match_pos == NULL ?
			MemoryContextAlloc(TopTransactionContext, sizeof(int) * match_pos_cap) :
			repalloc(match_pos, sizeof(int) * match_pos_cap);
	}
	match_pos[nmatch_pos++] = j;
}

/*
 * wake_match_any is the pre-commit pass (see the file header): records
 * the any-slots of this database waiting for some of the pending names,
 * and where their changed bits are.  May raise (it runs where an error
 * still aborts the transaction).
 */
static void
wake_match_any(void)
{
	dsa_area   *area;
	int			i;

	matched_below = 0;
	nmatches = 0;
	nmatch_pos = 0;
	if (npending == 0)
		return;
	pending_sort();
	if (!pending_busy())
		return;					/* slots that join now are late */
	area = DlockAnyArea();
	LWLockAcquire(DlockWaitShmem->lock, LW_SHARED);
	matched_below = DlockWaitShmem->next_ticket;
	for (i = 0; i < DlockWaitShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockWaitShmem->slots[i];
		uint64	   *hashes;
		int			first = nmatch_pos;
		int			j;

		if (!w->in_use || !w->any || w->dboid != MyDatabaseId)
			continue;
		Assert(DsaPointerIsValid(w->any_set) && w->any_nhashes > 0);
		hashes = (uint64 *) dsa_get_address(area, w->any_set);
		/* a binary search of each of the shorter list in the longer */
		if (npending <= w->any_nhashes)
		{
			for (j = 0; j < npending; j++)
			{
				int			pos = find_u64(hashes, w->any_nhashes,
										   pending[j].hash);

				if (pos >= 0 && (nmatch_pos == first ||
								 match_pos[nmatch_pos - 1] != pos))
					match_add_pos(pos);
			}
		}
		else
		{
			for (j = 0; j < w->any_nhashes; j++)
				if (pending_has_hash(hashes[j]))
					match_add_pos(j);
		}
		if (nmatch_pos == first)
			continue;
		if (nmatches == matches_cap)
		{
			matches_cap = Max(16, matches_cap * 2);
			matches = matches == NULL ?
				MemoryContextAlloc(TopTransactionContext,
								   sizeof(AnyMatch) * matches_cap) :
				repalloc(matches, sizeof(AnyMatch) * matches_cap);
		}
		matches[nmatches].procno = i;
		matches[nmatches].ticket = w->ticket;
		matches[nmatches].changed = (pg_atomic_uint32 *) (hashes + w->any_nhashes);
		matches[nmatches].first = first;
		matches[nmatches].count = nmatch_pos - first;
		nmatches++;
	}
	LWLockRelease(DlockWaitShmem->lock);
}

/*
 * hand_late hands the any-slot w (which joined after the pre-commit pass,
 * or any any-slot at an abort) the pending hashes of the buckets it marks,
 * in its ring; with rescan, a rescan when they do not fit, else what
 * fits.  Returns whether it handed anything (then wake it).  Caller holds
 * the dlock LWLock shared.  Cannot raise.
 */
static bool
hand_late(DlockWaiter *w, bool rescan)
{
	uint64		hand[DLOCK_ANY_RING];
	int			nhand = 0;
	bool		overflow = false;
	int			i;

	for (i = 0; i < npending; i++)
	{
		if (!ANY_MARKS(w, BUCKET_NO(pending[i].hash)))
			continue;
		if (nhand == DLOCK_ANY_RING)
		{
			overflow = true;
			break;
		}
		hand[nhand++] = pending[i].hash;
	}
	if (nhand == 0)
		return false;
	SpinLockAcquire(&w->any_mutex);
	if (rescan && (overflow || w->any_nring + nhand > DLOCK_ANY_RING))
		w->any_rescan = true;
	else
	{
		nhand = Min(nhand, DLOCK_ANY_RING - w->any_nring);
		memcpy(&w->any_ring[w->any_nring], hand, sizeof(uint64) * nhand);
		w->any_nring += nhand;
	}
	SpinLockRelease(&w->any_mutex);
	return nhand > 0;
}

/* How a transaction ended, for wake_pending. */
typedef enum WakeEnd
{
	WAKE_COMMIT,
	WAKE_ABORT,
	WAKE_PREPARE
} WakeEnd;

/*
 * wake_pending wakes, at the end of the transaction, the heads of the
 * pending names' queues and the any-slots waiting for them (see the file
 * header: at a commit, through the pre-commit pass's matches and the rings
 * of late slots; at an abort, through the rings only, without a rescan; at
 * PREPARE, none).  Allocates nothing and cannot raise.
 */
static void
wake_pending(WakeEnd end)
{
	int			nwake = 0;
	int			i;

	if (npending == 0)
		return;
	Assert(wake_list != NULL);
	pending_sort();
	if (!pending_busy())
		return;
	for (i = 0; i < npending; i++)
		pending[i].head = -1;

	LWLockAcquire(DlockWaitShmem->lock, LW_SHARED);
	for (i = 0; i < DlockWaitShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockWaitShmem->slots[i];

		if (!w->in_use || w->dboid != MyDatabaseId)
			continue;
		if (!w->any)
		{
			int			p = pending_find(w->hash, w->name, w->namelen);

			if (p >= 0 && (pending[p].head < 0 ||
						   w->ticket < pending[p].head_ticket))
			{
				pending[p].head = i;
				pending[p].head_ticket = w->ticket;
			}
		}
		else if (end == WAKE_COMMIT && w->ticket >= matched_below)
		{
			if (hand_late(w, true))
				wake_list[nwake++] = i;
		}
		else if (end == WAKE_ABORT && hand_late(w, false))
			wake_list[nwake++] = i;
	}
	if (end == WAKE_COMMIT)
	{
		for (i = 0; i < nmatches; i++)
		{
			AnyMatch   *m = &matches[i];
			DlockWaiter *w = &DlockWaitShmem->slots[m->procno];
			int			k;

			/* the same wait as at pre-commit: its set is still allocated */
			if (!w->in_use || w->ticket != m->ticket)
				continue;
			for (k = m->first; k < m->first + m->count; k++)
				pg_atomic_fetch_or_u32(&m->changed[match_pos[k] / 32],
									   (uint32) 1 << (match_pos[k] % 32));
			wake_list[nwake++] = m->procno;
		}
	}
	LWLockRelease(DlockWaitShmem->lock);

	for (i = 0; i < npending; i++)
		if (pending[i].head >= 0)
			wake_list[nwake++] = pending[i].head;
	/* each slot is one queue's head, a matched or a late any-slot, or none */
	Assert(nwake <= DlockWaitShmem->nslots);
	for (i = 0; i < nwake; i++)
		SetLatch(DlockProcLatch(wake_list[i]));
}

/*
 * wake_forget forgets what the ended transaction was to wake (its memory
 * went with TopTransactionContext).
 */
static void
wake_forget(void)
{
	pending = NULL;
	npending = 0;
	pending_cap = 0;
	pending_sorted = true;
	matches = NULL;
	nmatches = 0;
	matches_cap = 0;
	match_pos = NULL;
	nmatch_pos = 0;
	match_pos_cap = 0;
	matched_below = 0;
}

/*
 * DlockWaitXactEnd runs the pre-commit pass, and wakes when the
 * transaction ends either way (see the file header); xact.c calls it.
 * Does nothing until this backend first changed a lease with preload.
 */
void
DlockWaitXactEnd(XactEvent event)
{
	if (!wake_active)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			wake_match_any();
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			wake_pending(WAKE_COMMIT);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wake_pending(WAKE_ABORT);
			break;
		case XACT_EVENT_PREPARE:
			wake_pending(WAKE_PREPARE);
			break;
		default:
			return;
	}
	wake_forget();
}

/*
 * DlockWakeAtXactEnd arranges for the waiters of lock_name in the current
 * database to be woken when the current transaction ends (it changed the
 * name's lease).  Does nothing without preload.
 */
void
DlockWakeAtXactEnd(text *lock_name)
{
	uint64		hash;
	MemoryContext oldcontext;

	Assert(IsTransactionState());
	if (DlockWaitShmem == NULL)
		return;
	if (!wake_active)
	{
		wake_list = MemoryContextAlloc(TopMemoryContext,
									   sizeof(int) * DlockWaitShmem->nslots);
		wake_active = true;
	}
	hash = DlockNameHash(lock_name);
	if (npending > 0 && pending[npending - 1].hash == hash &&
		same_name(pending[npending - 1].name, lock_name))
		return;					/* the same name again */
	if (npending == pending_cap)
	{
		/* full: drop duplicates first, and grow only if that is not enough */
		if (pending != NULL)
			pending_sort();
		if (pending == NULL || npending * 2 > pending_cap)
		{
			pending_cap = Max(16, pending_cap * 2);
			pending = pending == NULL ?
				MemoryContextAlloc(TopTransactionContext,
								   sizeof(PendingWake) * pending_cap) :
				repalloc(pending, sizeof(PendingWake) * pending_cap);
		}
	}
	oldcontext = MemoryContextSwitchTo(TopTransactionContext);
	pending[npending].hash = hash;
	pending[npending].name = DatumGetTextPCopy(PointerGetDatum(lock_name));
	pending[npending].head = -1;
	pending[npending].head_ticket = 0;
	MemoryContextSwitchTo(oldcontext);
	npending++;
	pending_sorted = false;
}

/* dlock_waiters_read's columns */
#define WAITERS_COLS	10

static const char *const wait_kind_names[] = {"acquire", "all", "any"};

/* What dlock_waiters_read copies of a slot. */
typedef struct WaiterRow
{
	bool		any;
	uint64		hash;
	uint64		ticket;
	int64		attempts;
	int			pid;
	Oid			dboid;
	Oid			roleid;
	DlockWaitKind kind;
	int			nnames;
	TimestampTz since;
	TimestampTz until;
	int			namelen;
	char		name[DLOCK_MAX_NAME_BYTES];
} WaiterRow;

PG_FUNCTION_INFO_V1(dlock_waiters_read);

/*
 * dlock_waiters_read() returns setof record: the waiting calls of the
 * current database (pid int4, datid oid, roleid oid, lock_name text, kind
 * text, names int4, waiting_since timestamptz, wait_until timestamptz,
 * position int4, attempts int8), for the dlock_waiters view.  position is
 * 1 for the head of lock_name's queue, NULL for an any-slot; attempts
 * counts the call's attempts so far.  No rows without preload.  Copies the
 * slots under the dlock LWLock in shared mode, then builds the rows
 * without it.
 */
Datum
dlock_waiters_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	WaiterRow  *copy;
	int			ncopy = 0;
	int			i;
	int			j;

	InitMaterializedSRF(fcinfo, 0);
	if (DlockWaitShmem == NULL)
		return (Datum) 0;

	copy = palloc(sizeof(WaiterRow) * DlockWaitShmem->nslots);
	LWLockAcquire(DlockWaitShmem->lock, LW_SHARED);
	for (i = 0; i < DlockWaitShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockWaitShmem->slots[i];
		WaiterRow  *r = &copy[ncopy];

		if (!w->in_use || w->dboid != MyDatabaseId)
			continue;
		r->any = w->any;
		r->hash = w->hash;
		r->ticket = w->ticket;
		r->attempts = (int64) pg_atomic_read_u64(&w->attempts);
		r->pid = w->pid;
		r->dboid = w->dboid;
		r->roleid = w->roleid;
		r->kind = w->kind;
		r->nnames = w->nnames;
		r->since = w->since;
		r->until = w->until;
		r->namelen = w->namelen;
		memcpy(r->name, w->name, w->namelen);
		ncopy++;
	}
	LWLockRelease(DlockWaitShmem->lock);

	for (i = 0; i < ncopy; i++)
	{
		WaiterRow  *w = &copy[i];
		Datum		values[WAITERS_COLS];
		bool		nulls[WAITERS_COLS] = {0};
		int			position = 1;

		Assert(w->namelen >= 0 && w->namelen <= DLOCK_MAX_NAME_BYTES);
		values[0] = Int32GetDatum(w->pid);
		values[1] = ObjectIdGetDatum(w->dboid);
		values[2] = ObjectIdGetDatum(w->roleid);
		values[3] = PointerGetDatum(cstring_to_text_with_len(w->name, w->namelen));
		values[4] = CStringGetTextDatum(wait_kind_names[w->kind]);
		values[5] = Int32GetDatum(w->nnames);
		values[6] = TimestampTzGetDatum(w->since);
		values[7] = TimestampTzGetDatum(w->until);
		if (w->any)
			nulls[8] = true;
		else
		{
			/* the same queue: this database (all rows), hash and name */
			for (j = 0; j < ncopy; j++)
				if (!copy[j].any && copy[j].hash == w->hash &&
					copy[j].ticket < w->ticket &&
					same_bytes(copy[j].name, copy[j].namelen,
							   w->name, w->namelen))
					position++;
			values[8] = Int32GetDatum(position);
		}
		values[9] = Int64GetDatum(w->attempts);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
