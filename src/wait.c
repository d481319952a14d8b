/*-------------------------------------------------------------------------
 *
 * src/wait.c
 *	  Waiting for a lease: per-name FIFO queues woken at release and at
 *	  expiry when dlock is preloaded, bounded polling when it is not.
 *
 * With shared_preload_libraries = 'dlock' (shmem.c), an acquire that must
 * wait takes its backend's waiter slot, which puts it at the end of the
 * queue of its name.  Only the head of a queue attempts to take the lease;
 * the others sleep until they become the head.  The head sleeps until the
 * lease it saw expires, or until it is woken, or until its deadline.  Wake
 * the head of a queue:
 *
 *   - at the end (commit or abort) of every transaction that changed the
 *     name's lease: acquire, renew, release, break.  So a release wakes a
 *     waiter only once it has committed, and a rolled-back release wakes
 *     one that then finds the lease still held and sleeps again;
 *   - when the head leaves the queue without the lease (timed out,
 *     cancelled or terminated), so the next waiter takes its turn.  A head
 *     that got the lease leaves the next one asleep: the end of its own
 *     transaction, which changed the lease, wakes it.
 *
 * A new waiter queues behind existing waiters of its name without trying
 * first, so waiters are served in arrival order; an acquire that does not
 * wait (wait = 0) is not queued and can take a free lease before them.
 * When the lease row is held by an open transaction that changes nothing
 * a waiter is woken for (a 'live' fenced write locks it), the head cannot
 * know when to retry, so it polls with the backoff below while that lasts.
 *
 * dlock_acquire_all waits in the queue of the first name of its set that it
 * could not get (lease.c's set acquire), and moves to the end of another
 * name's queue when a later attempt is refused by that name instead
 * (leaving the first queue wakes its next waiter, as any waiter that
 * leaves without the lease does).  dlock_acquire_any waits for whichever
 * of its names frees first, so it is in no single queue: its slot is an
 * any-slot that marks the hash buckets of all its names, and every wake of
 * a queue in one of those buckets also wakes every any-slot marking it.
 * Any-slots are never a queue's head; a woken any-slot attempts all its
 * names and sleeps again when none is free.  A bucket shared with another
 * name only wakes it needlessly.  So any-waiters are not served in FIFO
 * order among themselves: they race at each release.
 *
 * A queue is a name in one database: the key of a queue (QUEUE_KEY) is the
 * name's hash with the database's OID mixed in, and the head of a queue is
 * sought among the slots of the current database only, so waiters of the
 * same name in another database (another lease table) never stand in the
 * way.  A slot also describes its call for the dlock_waiters view (pid,
 * database, role, the name, kind, deadline), written when it is taken.
 * A call counts as a wait for dlock_stats (stats.c) when it first queues
 * or, polling, first sleeps (wait_begins).
 *
 * Without preload, every waiter polls: it retries with a backoff from
 * DLOCK_BACKOFF_MIN_MS doubling to DLOCK_BACKOFF_MAX_MS, or at the expiry
 * of the lease it saw if that comes first, never past its deadline.
 *
 * All sleeps are WaitLatch on the process latch (no CPU, no busy loop)
 * with dlock's wait event (DlockWaitEvent: DlockLeaseWait from PostgreSQL
 * 17 on, the generic Extension before).  Query cancel, statement_timeout
 * and termination set the latch and are served by CHECK_FOR_INTERRUPTS();
 * postmaster death ends the process (WL_EXIT_ON_PM_DEATH).  A waiter gives
 * up its slot on every way out: normally, on ERROR (PG_FINALLY), and on
 * FATAL or exit (before_shmem_exit callback).
 *
 * Concurrency: slots are taken and given up under the dlock LWLock in
 * exclusive mode, and queues are scanned in shared mode (shmem.c).  No
 * row lock, name lock or LWLock is held while sleeping; each attempt
 * (store_ops.c) keeps no lock when it fails.  Lost wake-ups cannot happen:
 *   - the latch is reset before each attempt, so a wake between the
 *     attempt and the sleep ends the sleep at once;
 *   - a waiter counts itself in bucket_waiters (a full-barrier atomic),
 *     in every bucket it marks, before its first attempt in that queue,
 *     and the waker reads that count after its
 *     transaction is visible to new snapshots (XACT_EVENT_COMMIT comes after
 *     ProcArrayEndTransaction) and after a memory barrier.  So either the
 *     waker sees the waiter and wakes the head, or the waiter's attempt
 *     sees the committed change.
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

/* Names whose waiters to wake when this transaction ends. */
#define DLOCK_MAX_PENDING_WAKES 64
static uint64 pending_wakes[DLOCK_MAX_PENDING_WAKES];
static int	npending_wakes = 0;
static bool pending_wake_all = false;
static bool xact_callback_registered = false;

/* Whether this backend's slot is in use, for the exit callback. */
static bool slot_taken = false;
static bool exit_callback_registered = false;

/*
 * A queue's key: the name's hash with the database mixed in, so that the
 * same name in two databases (two lease tables) makes two queues.  Every
 * hash wait.c is given passes through QUEUE_KEY exactly once.
 */
#define QUEUE_KEY(hash) hash_combine64((hash), (uint64) MyDatabaseId)
#define BUCKET_NO(hash) ((int) ((hash) % DLOCK_WAIT_BUCKETS))
#define BUCKET_OF(hash) (&DlockShmem->bucket_waiters[BUCKET_NO(hash)])
#define ANY_MARKS(w, b) (((w)->any_buckets[(b) / 64] >> ((b) % 64)) & 1)

/* Latches to set after a wake-up's scan, sized nslots at first use. */
static int *wake_list = NULL;

/*
 * queue_head_locked returns the pgprocno of the head of the queue of hash
 * (the slot in use with the lowest ticket), or -1 when nobody waits.
 * Caller holds the dlock LWLock (either mode).
 */
static int
queue_head_locked(uint64 hash)
{
	int			head = -1;
	uint64		best = PG_UINT64_MAX;
	int			i;

	Assert(LWLockHeldByMe(DlockShmem->lock));
	for (i = 0; i < DlockShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockShmem->slots[i];

		if (w->in_use && !w->any && w->hash == hash &&
			w->dboid == MyDatabaseId && w->ticket < best)
		{
			best = w->ticket;
			head = i;
		}
	}
	return head;
}

/*
 * wake_queue_head sets the latch of the head of hash's queue, if any, and
 * of every any-slot that marks hash's bucket.  Takes the dlock LWLock in
 * shared mode unless nobody waits in the bucket; sets the latches after
 * releasing it.
 */
static void
wake_queue_head(uint64 hash)
{
	int			bucket = BUCKET_NO(hash);
	int			nwake = 0;
	int			head;
	int			i;

	pg_memory_barrier();
	if (pg_atomic_read_u32(BUCKET_OF(hash)) == 0)
		return;
	Assert(wake_list != NULL);
	LWLockAcquire(DlockShmem->lock, LW_SHARED);
	head = queue_head_locked(hash);
	if (head >= 0)
		wake_list[nwake++] = head;
	for (i = 0; i < DlockShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockShmem->slots[i];

		if (w->in_use && w->any && ANY_MARKS(w, bucket))
			wake_list[nwake++] = i;
	}
	LWLockRelease(DlockShmem->lock);
	Assert(nwake <= DlockShmem->nslots);
	for (i = 0; i < nwake; i++)
		SetLatch(DlockProcLatch(wake_list[i]));
}

/*
 * wake_all_waiters sets the latch of every waiter (used when a transaction
 * changed more names than pending_wakes can remember), after releasing the
 * LWLock.
 */
static void
wake_all_waiters(void)
{
	int			nwake = 0;
	int			i;

	Assert(wake_list != NULL);
	LWLockAcquire(DlockShmem->lock, LW_SHARED);
	for (i = 0; i < DlockShmem->nslots; i++)
		if (DlockShmem->slots[i].in_use)
			wake_list[nwake++] = i;
	LWLockRelease(DlockShmem->lock);
	for (i = 0; i < nwake; i++)
		SetLatch(DlockProcLatch(wake_list[i]));
}

/*
 * slot_describe fills in what dlock_waiters shows of this backend's slot me,
 * from info, for a wait until deadline.  Caller holds the dlock LWLock
 * exclusively.
 */
static void
slot_describe(DlockWaiter *me, const DlockWaitInfo *info, TimestampTz deadline)
{
	Assert(LWLockHeldByMeInMode(DlockShmem->lock, LW_EXCLUSIVE));
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
}

/*
 * queue_join takes this backend's slot for the queue key, at the end of
 * that queue, described by info (waiting until deadline).  Takes the dlock
 * LWLock exclusively.
 */
static void
queue_join(uint64 key, const DlockWaitInfo *info, TimestampTz deadline)
{
	DlockWaiter *me;

	Assert(!slot_taken);
	Assert(DlockMyProcNumber() >= 0 && DlockMyProcNumber() < DlockShmem->nslots);
	me = &DlockShmem->slots[DlockMyProcNumber()];
	LWLockAcquire(DlockShmem->lock, LW_EXCLUSIVE);
	/* only this backend takes its own slot, and it gave it up last time */
	Assert(!me->in_use);
	slot_describe(me, info, deadline);
	me->hash = key;
	me->any = false;
	me->ticket = DlockShmem->next_ticket++;
	me->in_use = true;
	pg_atomic_fetch_add_u32(BUCKET_OF(key), 1);
	slot_taken = true;
	LWLockRelease(DlockShmem->lock);
}

/*
 * queue_join_any takes this backend's slot as an any-slot marking the
 * buckets of the n queue keys (see the file header), counting it once in
 * each bucket, described by info (waiting until deadline).  Takes the
 * dlock LWLock exclusively.
 */
static void
queue_join_any(const uint64 *keys, int n, const DlockWaitInfo *info,
			   TimestampTz deadline)
{
	DlockWaiter *me;
	int			i;

	Assert(!slot_taken && n > 0);
	me = &DlockShmem->slots[DlockMyProcNumber()];
	LWLockAcquire(DlockShmem->lock, LW_EXCLUSIVE);
	Assert(!me->in_use);
	slot_describe(me, info, deadline);
	memset(me->any_buckets, 0, sizeof(me->any_buckets));
	for (i = 0; i < n; i++)
	{
		int			b = BUCKET_NO(keys[i]);

		if (ANY_MARKS(me, b))
			continue;
		me->any_buckets[b / 64] |= UINT64CONST(1) << (b % 64);
		pg_atomic_fetch_add_u32(&DlockShmem->bucket_waiters[b], 1);
	}
	me->hash = 0;
	me->any = true;
	me->ticket = DlockShmem->next_ticket++;
	me->in_use = true;
	slot_taken = true;
	LWLockRelease(DlockShmem->lock);
}

/*
 * queue_leave gives up this backend's slot, if it holds one, and with
 * wake_next wakes the new head of its queue (an any-slot heads no queue).
 * Takes the dlock LWLock exclusively.  Safe to call from error and exit
 * paths.
 */
static void
queue_leave(bool wake_next)
{
	DlockWaiter *me;
	int			head = -1;

	if (!slot_taken)
		return;
	me = &DlockShmem->slots[DlockMyProcNumber()];
	LWLockAcquire(DlockShmem->lock, LW_EXCLUSIVE);
	Assert(me->in_use);
	me->in_use = false;
	slot_taken = false;
	if (me->any)
	{
		int			b;

		for (b = 0; b < DLOCK_WAIT_BUCKETS; b++)
			if (ANY_MARKS(me, b))
			{
				/* counted in the bucket since queue_join_any */
				Assert(pg_atomic_read_u32(&DlockShmem->bucket_waiters[b]) > 0);
				pg_atomic_fetch_sub_u32(&DlockShmem->bucket_waiters[b], 1);
			}
	}
	else
	{
		/* the slot is counted in its bucket from queue_join until now */
		Assert(pg_atomic_read_u32(BUCKET_OF(me->hash)) > 0);
		pg_atomic_fetch_sub_u32(BUCKET_OF(me->hash), 1);
		if (wake_next)
			head = queue_head_locked(me->hash);
	}
	LWLockRelease(DlockShmem->lock);
	if (head >= 0)
		SetLatch(DlockProcLatch(head));
}

/*
 * queue_is_head reports whether this backend's slot heads its queue.
 * Takes the dlock LWLock in shared mode.
 */
static bool
queue_is_head(uint64 hash)
{
	int			head;

	Assert(slot_taken && !DlockShmem->slots[DlockMyProcNumber()].any &&
		   DlockShmem->slots[DlockMyProcNumber()].hash == hash);
	LWLockAcquire(DlockShmem->lock, LW_SHARED);
	head = queue_head_locked(hash);
	LWLockRelease(DlockShmem->lock);
	return head == DlockMyProcNumber();
}

/*
 * wait_exit_callback gives up the slot when the backend exits while
 * waiting (FATAL, such as pg_terminate_backend).
 */
static void
wait_exit_callback(int code, Datum arg)
{
	if (slot_taken && DlockShmem != NULL)
		queue_leave(true);
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
	Assert(DlockShmem == NULL || !LWLockHeldByMe(DlockShmem->lock));
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
		uint64		blocked = 0;

		if (attempt(arg, &held_until, &blocked))
			return true;
		now = GetCurrentTimestamp();
		if (now >= deadline)
			return false;
		wait_begins(info);
		sleep_until(Min(next_poll(now, held_until, &backoff_ms), deadline));
	}
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
 * wait_queued waits in the queue of key until attempt grants the lease or
 * deadline has passed (see the file header), moving to the queue of the
 * name an attempt reports as refusing it.  Returns whether it was
 * granted.  The slot is given up on every way out.
 */
static bool
wait_queued(uint64 key, TimestampTz deadline, DlockAttemptFn attempt,
			void *arg, DlockWaitInfo *info)
{
	volatile bool granted = false;
	volatile uint64 queued = key;

	register_exit_callback();
	wait_begins(info);
	queue_join(key, info, deadline);
	PG_TRY();
	{
		long		backoff_ms = DLOCK_BACKOFF_MIN_MS;
		bool		moved = false;

		for (;;)
		{
			TimestampTz wake_at = deadline;
			TimestampTz now;

			ResetLatch(MyLatch);
			if (queue_is_head(queued))
			{
				TimestampTz held_until;
				uint64		blocked = 0;

				if (attempt(arg, &held_until, &blocked))
				{
					granted = true;
					break;
				}
				wake_at = retry_at(held_until, &backoff_ms);
				if (blocked != 0 && QUEUE_KEY(blocked) != queued)
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
					queued = QUEUE_KEY(blocked);
					queue_join(queued, info, deadline);
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
 * waiting until deadline for it in the queue of hash (the DlockNameHash of
 * the name, or of the set's first name), and returns whether it was
 * granted.  info describes the call (for dlock_waiters) and says whether
 * it waited.  Sleeps on the process latch; raises what
 * CHECK_FOR_INTERRUPTS raises (cancel, statement_timeout, termination).
 */
bool
DlockWaitAcquire(uint64 hash, TimestampTz deadline, DlockAttemptFn attempt,
				 void *arg, DlockWaitInfo *info)
{
	uint64		key;

	Assert(IsTransactionState());
	Assert(!slot_taken);
	info->waited = false;
	if (DlockShmem == NULL)
		return wait_polling(deadline, attempt, arg, info);

	/* Nobody queued for this name (or its bucket): try before queueing. */
	key = QUEUE_KEY(hash);
	pg_memory_barrier();
	if (pg_atomic_read_u32(BUCKET_OF(key)) == 0)
	{
		TimestampTz held_until;
		uint64		blocked = 0;

		if (attempt(arg, &held_until, &blocked))
			return true;
		if (GetCurrentTimestamp() >= deadline)
			return false;
		if (blocked != 0)
			key = QUEUE_KEY(blocked);
	}
	return wait_queued(key, deadline, attempt, arg, info);
}

/*
 * DlockWaitAcquireAny takes one of n leases through attempt, waiting until
 * deadline in an any-slot for the names whose DlockNameHash values are
 * hashes (see the file header), and returns whether it was granted.  The
 * caller has made one attempt already.  Raises as DlockWaitAcquire.
 */
bool
DlockWaitAcquireAny(const uint64 *hashes, int n, TimestampTz deadline,
					DlockAttemptFn attempt, void *arg, DlockWaitInfo *info)
{
	volatile bool granted = false;
	uint64	   *keys;
	int			i;

	Assert(IsTransactionState());
	Assert(!slot_taken && n > 0);
	info->waited = false;
	if (DlockShmem == NULL)
		return wait_polling(deadline, attempt, arg, info);

	keys = palloc(sizeof(uint64) * n);
	for (i = 0; i < n; i++)
		keys[i] = QUEUE_KEY(hashes[i]);
	register_exit_callback();
	wait_begins(info);
	queue_join_any(keys, n, info, deadline);
	pfree(keys);
	PG_TRY();
	{
		long		backoff_ms = DLOCK_BACKOFF_MIN_MS;

		for (;;)
		{
			TimestampTz held_until;
			TimestampTz wake_at;
			uint64		blocked = 0;

			ResetLatch(MyLatch);
			if (attempt(arg, &held_until, &blocked))
			{
				granted = true;
				break;
			}
			wake_at = retry_at(held_until, &backoff_ms);
			if (GetCurrentTimestamp() >= deadline)
				break;
			sleep_until(Min(wake_at, deadline));
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
 * wake_xact_callback wakes, when the transaction ends either way, the
 * queue heads of the names it changed.
 */
static void
wake_xact_callback(XactEvent event, void *arg)
{
	int			i;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			break;
		default:
			return;
	}
	if (DlockShmem != NULL)
	{
		if (pending_wake_all)
			wake_all_waiters();
		else
			for (i = 0; i < npending_wakes; i++)
				wake_queue_head(pending_wakes[i]);
	}
	npending_wakes = 0;
	pending_wake_all = false;
}

/*
 * DlockWakeAtXactEnd arranges for the waiters of lock_name to be woken when
 * the current transaction ends (it changed the name's lease).  Does nothing
 * without preload.
 */
void
DlockWakeAtXactEnd(text *lock_name)
{
	uint64		hash;
	int			i;

	Assert(IsTransactionState());
	if (DlockShmem == NULL || pending_wake_all)
		return;
	if (!xact_callback_registered)
	{
		wake_list = MemoryContextAlloc(TopMemoryContext,
									   sizeof(int) * DlockShmem->nslots);
		RegisterXactCallback(wake_xact_callback, NULL);
		xact_callback_registered = true;
	}
	hash = QUEUE_KEY(DlockNameHash(lock_name));
	for (i = 0; i < npending_wakes; i++)
		if (pending_wakes[i] == hash)
			return;
	if (npending_wakes < DLOCK_MAX_PENDING_WAKES)
		pending_wakes[npending_wakes++] = hash;
	else
		pending_wake_all = true;
}

/* dlock_waiters_read's columns */
#define WAITERS_COLS	9

static const char *const wait_kind_names[] = {"acquire", "all", "any"};

PG_FUNCTION_INFO_V1(dlock_waiters_read);

/*
 * dlock_waiters_read() returns setof record: the waiting calls of the
 * current database (pid int4, datid oid, roleid oid, lock_name text, kind
 * text, names int4, waiting_since timestamptz, wait_until timestamptz,
 * position int4), for the dlock_waiters view.  position is 1 for the head
 * of lock_name's queue, NULL for an any-slot.  No rows without preload.
 * Copies the slots under the dlock LWLock in shared mode, then builds the
 * rows without it.
 */
Datum
dlock_waiters_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DlockWaiter *copy;
	int			ncopy = 0;
	int			i;
	int			j;

	InitMaterializedSRF(fcinfo, 0);
	if (DlockShmem == NULL)
		return (Datum) 0;

	copy = palloc(sizeof(DlockWaiter) * DlockShmem->nslots);
	LWLockAcquire(DlockShmem->lock, LW_SHARED);
	for (i = 0; i < DlockShmem->nslots; i++)
		if (DlockShmem->slots[i].in_use &&
			DlockShmem->slots[i].dboid == MyDatabaseId)
			copy[ncopy++] = DlockShmem->slots[i];
	LWLockRelease(DlockShmem->lock);

	for (i = 0; i < ncopy; i++)
	{
		DlockWaiter *w = &copy[i];
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
			for (j = 0; j < ncopy; j++)
				if (!copy[j].any && copy[j].hash == w->hash &&
					copy[j].ticket < w->ticket)
					position++;
			values[8] = Int32GetDatum(position);
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
