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
#include "wait_int.h"

bool		DlockWaitSlotTaken = false;
static bool exit_callback_registered = false;

/*
 * DlockWaitSameBytes reports whether the name of len bytes at a equals the one at b.
 */
bool
DlockWaitSameBytes(const char *a, int alen, const char *b, int blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

/*
 * DlockWaitSameName reports whether the texts a and b hold the same name.
 */
bool
DlockWaitSameName(text *a, text *b)
{
	return DlockWaitSameBytes(VARDATA_ANY(a), VARSIZE_ANY_EXHDR(a),
							  VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
}

/*
 * DlockWaitFindU64 returns the index of key in the n sorted values of arr, or -1.
 */
int
DlockWaitFindU64(const uint64 *arr, int n, uint64 key)
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
 * DlockWaitCmpInt orders int values; a qsort comparator.
 */
int
DlockWaitCmpInt(const void *a, const void *b)
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
			DlockWaitSameBytes(w->name, w->namelen, name, namelen))
		{
			best = w->ticket;
			head = i;
		}
	}
	return head;
}

/*
 * DlockWaitSlotDescribe fills in what dlock_waiters shows of this backend's slot me,
 * from info, for a wait until deadline, and its attempts so far.  Caller
 * holds the dlock LWLock exclusively.
 */
void
DlockWaitSlotDescribe(DlockWaiter *me, const DlockWaitInfo *info, TimestampTz deadline)
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

	Assert(!DlockWaitSlotTaken);
	Assert(DlockMyProcNumber() >= 0 && DlockMyProcNumber() < DlockWaitShmem->nslots);
	me = MY_SLOT();
	LWLockAcquire(DlockWaitShmem->lock, LW_EXCLUSIVE);
	/* only this backend takes its own slot, and it gave it up last time */
	Assert(!me->in_use);
	DlockWaitSlotDescribe(me, info, deadline);
	me->hash = hash;
	me->any = false;
	me->ticket = DlockWaitShmem->next_ticket++;
	me->in_use = true;
	pg_atomic_fetch_add_u32(DB_WAITERS(), 1);
	pg_atomic_fetch_add_u32(BUCKET_OF(hash), 1);
	DlockWaitSlotTaken = true;
	LWLockRelease(DlockWaitShmem->lock);
}

/*
 * DlockWaitQueueLeave gives up this backend's slot, if it holds one, and with
 * wake_next wakes the new head of its queue (an any-slot heads no queue).
 * Frees an any-slot's set after releasing the LWLock, which it takes
 * exclusively.  Safe to call from error and exit paths.
 */
void
DlockWaitQueueLeave(bool wake_next)
{
	DlockWaiter *me;
	dsa_pointer set = InvalidDsaPointer;
	int			head = -1;

	if (!DlockWaitSlotTaken)
		return;
	me = MY_SLOT();
	LWLockAcquire(DlockWaitShmem->lock, LW_EXCLUSIVE);
	Assert(me->in_use);
	me->in_use = false;
	DlockWaitSlotTaken = false;
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

	Assert(DlockWaitSlotTaken && !me->any);
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
	if (DlockWaitSlotTaken && DlockWaitShmem != NULL)
		DlockWaitQueueLeave(true);
}

/*
 * DlockWaitRegisterExitCallback arranges, once per backend, for the slot to be
 * given up at exit.
 */
void
DlockWaitRegisterExitCallback(void)
{
	if (exit_callback_registered)
		return;
	before_shmem_exit(wait_exit_callback, (Datum) 0);
	exit_callback_registered = true;
}

/*
 * DlockWaitSleepUntil sleeps on the process latch until wake_at (or until the latch
 * is set), then serves interrupts.  Returns at once if wake_at has passed
 * or the latch is already set.  One sleep lasts at most INT_MAX ms (24.8
 * days, WaitLatch's limit; PostgreSQL 15 does not clamp the difference):
 * a waiter woken early just checks again and sleeps on.
 */
void
DlockWaitSleepUntil(TimestampTz wake_at)
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
 * DlockWaitNextPoll returns when a poller retries: after the current backoff step
 * (which it then doubles), or at held_until when that is known and sooner.
 */
TimestampTz
DlockWaitNextPoll(TimestampTz now, TimestampTz held_until, long *backoff_ms)
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
	return DlockWaitNextPoll(GetCurrentTimestamp(), 0, backoff_ms);
}

/*
 * DlockWaitBegins records, once per call, that the call described by info
 * starts to wait: dlock_stats counts it, dlock_waiters shows it since now.
 */
void
DlockWaitBegins(DlockWaitInfo *info)
{
	if (info->waited)
		return;
	info->waited = true;
	info->since = GetCurrentTimestamp();
	DlockStatsCount(DLOCK_STAT_WAITS, 1);
}

/*
 * DlockWaitCountAttempt counts one attempt of the call info describes, in info and,
 * while it holds its slot, in the slot (for dlock_waiters).
 */
void
DlockWaitCountAttempt(DlockWaitInfo *info)
{
	info->attempts++;
	if (DlockWaitSlotTaken)
		pg_atomic_write_u64(&MY_SLOT()->attempts, (uint64) info->attempts);
}

/*
 * wait_polling retries attempt until it grants the lease or deadline has
 * passed (design.md §15).  Returns whether it was granted.
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

		DlockWaitCountAttempt(info);
		if (attempt(arg, &held_until))
			return true;
		now = GetCurrentTimestamp();
		if (now >= deadline)
			return false;
		DlockWaitBegins(info);
		DlockWaitSleepUntil(Min(DlockWaitNextPoll(now, held_until, &backoff_ms), deadline));
	}
}

/*
 * wait_queued waits in the queue of info->lock_name until attempt grants
 * the lease or deadline has passed (design.md §15), moving to the
 * queue of the name an attempt reports as refusing it.  Returns whether it
 * was granted.  The slot is given up on every way out.
 */
static bool
wait_queued(TimestampTz deadline, DlockAttemptFn attempt, void *arg,
			DlockWaitInfo *info)
{
	volatile bool granted = false;

	DlockWaitRegisterExitCallback();
	DlockWaitBegins(info);
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

				DlockWaitCountAttempt(info);
				if (attempt(arg, &held_until))
				{
					granted = true;
					break;
				}
				wake_at = retry_at(held_until, &backoff_ms);
				if (!DlockWaitSameName(info->lock_name, queued))
				{
					/*
					 * Another name of the set refused it: wait in that name's
					 * queue, letting this one's next waiter go.  The name may
					 * have been released since the attempt, before this slot
					 * counted in its bucket, so attempt again (when at the
					 * head) before sleeping; a second move in a row polls
					 * instead, so that names changing hands quickly cannot
					 * keep it busy.
					 */
					DlockWaitQueueLeave(true);
					queue_join(info, deadline);
					if (!moved)
					{
						moved = true;
						continue;
					}
					wake_at = Min(wake_at, DlockWaitNextPoll(GetCurrentTimestamp(), 0,
															 &backoff_ms));
				}
				else
					moved = false;
			}
			now = GetCurrentTimestamp();
			if (now >= deadline)
				break;
			DlockWaitSleepUntil(Min(wake_at, deadline));
		}
	}
	PG_FINALLY();
	{
		/*
		 * A waiter that got the lease leaves the next one asleep: its own
		 * transaction's end wakes it (DlockWakeAtXactEnd), when the new lease
		 * is visible.  Waking it now would only make it find the grant
		 * uncommitted and poll.
		 */
		DlockWaitQueueLeave(!granted);
	}
	PG_END_TRY();

	Assert(!DlockWaitSlotTaken);
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
	Assert(!DlockWaitSlotTaken);
	info->waited = false;
	info->attempts = 0;
	if (DlockWaitShmem == NULL)
		return wait_polling(deadline, attempt, arg, info);

	/* Nobody queued for this name (or its bucket): try before queueing. */
	pg_memory_barrier();
	if (pg_atomic_read_u32(BUCKET_OF(DlockNameHash(info->lock_name))) == 0)
	{
		TimestampTz held_until;

		DlockWaitCountAttempt(info);
		if (attempt(arg, &held_until))
			return true;
		if (GetCurrentTimestamp() >= deadline)
			return false;
	}
	return wait_queued(deadline, attempt, arg, info);
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
					DlockWaitSameBytes(copy[j].name, copy[j].namelen,
									   w->name, w->namelen))
					position++;
			values[8] = Int32GetDatum(position);
		}
		values[9] = Int64GetDatum(w->attempts);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
