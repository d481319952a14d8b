/*-------------------------------------------------------------------------
 *
 * src/notifier_worker.c
 *	  The notifier itself: the background worker of one database that
 *	  sends its queue's records as NOTIFY, once their transactions have
 *	  committed, in queue order, and exits when idle with its
 *	  notifier_exit event (design.md §16).
 *
 * Concurrency: it alone reads its slot's records (without the "dlock
 * notify" LWLock) and moves the tail (under it); it resolves transactions
 * under a snapshot it holds; it commits with synchronous_commit = off.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <signal.h>
#include "access/htup_details.h"
#include "access/transam.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/tablespace.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "compat.h"
#include "dlock.h"
#include "notifier_int.h"

PGDLLEXPORT void dlock_notifier_main(Datum main_arg);

static int	notifier_slotno = -1;
static bool notifier_connected = false;
static TimestampTz queue_checked_at = 0;
static double queue_usage = 0;
static int	queue_checked_events = 0;
static int64 unsent_overflow = 0;
static TransactionId unresolved_xid = InvalidTransactionId;

/*
 * notifier_attach makes this process the notifier of its slot (start, from
 * bgw_extra), unless the slot was given to another database or to a later
 * start, or a stop mark names its database; returns whether it did, and
 * takes over the count of changes dropped and not told of.  Takes the
 * lock.
 */
static bool
notifier_attach(const NotifierStart *start)
{
	NotifierSlot *slot;
	bool		attached = false;

	if (start->slotno < 0 || start->slotno >= DlockNotifierShmem->nslots)
		return false;
	slot = &DlockNotifierShmem->slots[start->slotno];
	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	if (slot->dboid == start->dboid && slot->generation == start->generation &&
		slot->state == NOTIFIER_STARTING)
	{
		if (DlockNotifierDatabaseStopped(slot->dboid))
			slot->state = NOTIFIER_NONE;
		else
		{
			slot->state = NOTIFIER_RUNNING;
			slot->pid = MyProcPid;
			slot->procno = DlockMyProcNumber();
			slot->started_at = GetCurrentTimestamp();
			unsent_overflow = slot->unsent;
			attached = true;
		}
	}
	LWLockRelease(DlockNotifierShmem->lock);
	return attached;
}

/*
 * DlockNotifierAtExit gives the slot up when the notifier exits, also when it
 * did not say its last word (terminated, or a FATAL error); when it never
 * connected to its database (which may be gone), it drops the records
 * queued there, which no notifier could send.  The slot keeps the count
 * of changes dropped and not told of as of the last pass.  Takes the
 * lock.
 */
void
DlockNotifierAtExit(int code, Datum arg)
{
	NotifierSlot *slot = &DlockNotifierShmem->slots[DatumGetInt32(arg)];

	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	if (DlockNotifierSlotHasNotifier(slot) && slot->pid == MyProcPid)
	{
		slot->state = NOTIFIER_NONE;
		slot->pid = 0;
		slot->procno = 0;
		if (!notifier_connected)
			DlockNotifierSlotDropQueued(slot);
	}
	LWLockRelease(DlockNotifierShmem->lock);
}

/*
 * notify_queue_full reports whether PostgreSQL's notification queue is
 * more than half full, reading its use at most once a second or every
 * DLOCK_NOTIFY_QUEUE_CHECK_EVENTS events (reading it advances the queue's
 * tail, which takes its locks).  In a transaction.
 */
static bool
notify_queue_full(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (++queue_checked_events >= DLOCK_NOTIFY_QUEUE_CHECK_EVENTS ||
		TimestampDifferenceExceeds(queue_checked_at, now,
								   DLOCK_NOTIFY_QUEUE_CHECK_MS))
	{
		double		was = queue_usage;

		queue_usage = DatumGetFloat8(DirectFunctionCall1(pg_notification_queue_usage,
														 (Datum) 0));
		queue_checked_at = now;
		queue_checked_events = 0;
		if (queue_usage > DLOCK_NOTIFY_QUEUE_LIMIT &&
			was <= DLOCK_NOTIFY_QUEUE_LIMIT)
			ereport(WARNING,
					(errmsg("dlock: lease events of database %u are dropped: the notification queue is %.0f%% full",
							MyDatabaseId, queue_usage * 100),
					 errhint("A session that LISTENs has stopped reading its notifications.")));
	}
	return queue_usage > DLOCK_NOTIFY_QUEUE_LIMIT;
}

/* What one look at the queue found. */
typedef enum NotifierPass
{
	PASS_IDLE,					/* nothing queued */
	PASS_DONE,					/* took every record queued when it looked */
	PASS_MORE,					/* sent a batch, and more is queued */
	PASS_WAIT					/* the next record's transaction is running */
} NotifierPass;

/* What became of a queued record's transaction. */
typedef enum NotifierXactOutcome
{
	XACT_ABORTED,				/* aborted (or crashed): drop its records */
	XACT_COMMITTED,				/* committed and visible: send them */
	XACT_UNKNOWN				/* its outcome could not be looked up: drop
								 * and count them */
} NotifierXactOutcome;

/*
 * notifier_pass sends (or drops) the queued records of transactions that
 * have ended, in queue order, in one transaction of its own of at most
 * NOTIFIER_BATCH notifications, and then moves the queue's tail past
 * them.  It looks transactions up under a snapshot it holds (file
 * header).  An error while sending is reported; the notifications it
 * undid are dropped and counted (and told of by a later "overflow"
 * event), and so is the record being looked up or sent when it was
 * raised; after an error in a look-up, the rest of that transaction's
 * records are dropped and counted without another.  Takes the lock
 * briefly, before and after.
 */
static NotifierPass
notifier_pass(void)
{
	NotifierSlot *slot = &DlockNotifierShmem->slots[notifier_slotno];
	char	   *ring = DlockNotifierSlotRing(notifier_slotno);
	Size		ring_size = DlockNotifierShmem->ring_size;
	uint64		head;
	uint64		start_pos;
	TransactionId decided = InvalidTransactionId;
	NotifierXactOutcome outcome = XACT_ABORTED;
	bool		batch_overflow = false;

	/* changed in PG_TRY and read after it */
	volatile uint64 pos;
	volatile bool in_record = false;
	volatile bool looking_up = false;
	volatile int64 nrecords = 0;
	volatile int64 nsent = 0;
	volatile int64 ndropped = 0;
	volatile NotifierPass result = PASS_DONE;

	LWLockAcquire(DlockNotifierShmem->lock, LW_SHARED);
	head = slot->head;
	start_pos = slot->tail;
	LWLockRelease(DlockNotifierShmem->lock);
	pos = start_pos;
	if (pos == head)
		return PASS_IDLE;

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		/* sets RecentXmin and TransactionXmin, held until it is popped */
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "sending lease events");
		while (pos < head)
		{
			Size		off = (Size) (pos % ring_size);
			NotifyRecord *rec = (NotifyRecord *) (ring + off);

			if (rec->size == 0)
			{
				pos += ring_size - off;
				continue;
			}
			/* from here on, an error skips this record (PG_CATCH) */
			in_record = true;
			if (rec->xid != decided)
			{
				looking_up = true;
				if (TransactionIdEquals(rec->xid, unresolved_xid))
					outcome = XACT_UNKNOWN;
				else
				{
					/* a transaction's records are contiguous: it is past */
					unresolved_xid = InvalidTransactionId;
					/* until it is visible, a committed xid is in progress */
					if (TransactionIdIsInProgress(rec->xid))
					{
						result = PASS_WAIT;
						break;
					}
					outcome = TransactionIdDidCommit(rec->xid) ?
						XACT_COMMITTED : XACT_ABORTED;
				}
				looking_up = false;
				decided = rec->xid;
			}
			if (outcome == XACT_UNKNOWN ||
				(outcome == XACT_COMMITTED && notify_queue_full()))
			{
				/* told of by an overflow event once there is room */
				if (!rec->counted)
					ndropped += Max(rec->overflow, 1);
				unsent_overflow += Max(rec->overflow, 1);
			}
			else if (outcome == XACT_COMMITTED)
			{
				/* PostgreSQL merges equal notifications of a transaction */
				if ((unsent_overflow > 0 || rec->overflow > 0) && batch_overflow)
				{
					result = PASS_MORE;
					break;
				}
				if (unsent_overflow > 0)
				{
					Async_Notify(DLOCK_NOTIFY_CHANNEL,
								 DlockNotifierOverflowPayload(unsent_overflow));
					unsent_overflow = 0;
					nsent++;
					batch_overflow = true;
					if (rec->overflow > 0)
					{
						result = PASS_MORE;
						break;
					}
				}
				Async_Notify(DLOCK_NOTIFY_CHANNEL, rec->payload);
				nsent++;
				batch_overflow = batch_overflow || rec->overflow > 0;
			}
			in_record = false;
			nrecords++;
			pos += rec->size;
			if (nsent >= NOTIFIER_BATCH)
			{
				result = PASS_MORE;
				break;
			}
		}
		in_record = false;
		looking_up = false;
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		NotifyRecord *rec = (NotifyRecord *) (ring + (Size) (pos % ring_size));

		/* report and undo; what was undone is told of by an overflow event */
		MemoryContextSwitchTo(TopMemoryContext);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		ndropped += nsent;
		unsent_overflow += nsent;
		nsent = 0;
		if (in_record)
		{
			/* the record looked up or sent: skip it, or it raises again */
			if (looking_up)
				unresolved_xid = rec->xid;
			if (!rec->counted)
				ndropped += Max(rec->overflow, 1);
			unsent_overflow += Max(rec->overflow, 1);
			pos += rec->size;
			nrecords++;
		}
		result = PASS_MORE;
	}
	PG_END_TRY();
	pgstat_report_activity(STATE_IDLE, NULL);

	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	Assert(slot->pid == MyProcPid && slot->tail == start_pos);
	slot->tail = pos;
	Assert(slot->queued >= (uint64) nrecords);
	slot->queued -= nrecords;
	slot->sent += nsent;
	slot->dropped += ndropped;
	slot->unsent = unsent_overflow;
	if (result == PASS_DONE && pos != slot->head)
		result = PASS_MORE;
	LWLockRelease(DlockNotifierShmem->lock);
	return result;
}

/*
 * notifier_leave says this notifier's last word and exits (design.md §16):
 * in a transaction of its own, the "overflow" event for changes dropped
 * and not told of (when PostgreSQL's notification queue has room) and the
 * "notifier_exit" event, the slot marked EXITING before the commit.
 * stopping says a stop mark names its database: it exits also when the
 * event could not be sent.  An idle notifier (stopping false) returns
 * instead, RUNNING again, when records were queued before it could leave
 * or the event could not be sent (reported).  Takes the lock.
 */
static void
notifier_leave(bool stopping)
{
	NotifierSlot *slot = &DlockNotifierShmem->slots[notifier_slotno];
	Oid			dboid = slot->dboid;
	bool		leave;

	/* changed in PG_TRY and read after it */
	volatile bool committed = false;
	volatile int64 told = 0;

	PG_TRY();
	{
		bool		stay = false;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		pgstat_report_activity(STATE_RUNNING, "sending its exit event");
		if (unsent_overflow > 0 && !notify_queue_full())
		{
			told = unsent_overflow;
			Async_Notify(DLOCK_NOTIFY_CHANNEL, DlockNotifierOverflowPayload(told));
		}
		Async_Notify(DLOCK_NOTIFY_CHANNEL, DlockNotifierExitPayload());

		/* the view stops showing this pid before a listener can read it */
		LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
		Assert(slot->state == NOTIFIER_RUNNING && slot->pid == MyProcPid);
		if (!stopping && slot->head != slot->tail &&
			!DlockNotifierDatabaseStopped(dboid))
			stay = true;
		else
			slot->state = NOTIFIER_EXITING;
		LWLockRelease(DlockNotifierShmem->lock);

		if (stay)
			AbortCurrentTransaction();
		else
		{
			CommitTransactionCommand();
			committed = true;
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(TopMemoryContext);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	pgstat_report_activity(STATE_IDLE, NULL);

	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	Assert(DlockNotifierSlotHasNotifier(slot) && slot->pid == MyProcPid);
	if (committed)
	{
		unsent_overflow -= told;
		slot->unsent = unsent_overflow;
		if (told > 0)
			slot->sent++;
	}
	stopping = stopping || DlockNotifierDatabaseStopped(dboid);
	leave = stopping || (committed && slot->head == slot->tail);
	if (leave)
	{
		slot->state = NOTIFIER_NONE;
		slot->pid = 0;
		slot->procno = 0;
	}
	else
		slot->state = NOTIFIER_RUNNING;
	LWLockRelease(DlockNotifierShmem->lock);
	if (!leave)
		return;
	if (stopping)
		ereport(LOG,
				(errmsg("dlock: notifier of database %u exits for a database command%s",
						dboid, committed ? "" : ", without its exit event")));
	else
		ereport(LOG,
				(errmsg("dlock: notifier of database %u exits after %d ms with nothing to send",
						dboid, DlockNotifierIdleTimeout)));
	proc_exit(0);
}

/*
 * notifier_stop_wanted reports whether a stop mark names this notifier's
 * database.  Takes the lock shared.
 */
static bool
notifier_stop_wanted(void)
{
	NotifierSlot *slot = &DlockNotifierShmem->slots[notifier_slotno];
	bool		mine;
	bool		stop;

	LWLockAcquire(DlockNotifierShmem->lock, LW_SHARED);
	/* nobody takes or resets a slot that has a notifier */
	mine = slot->state == NOTIFIER_RUNNING && slot->pid == MyProcPid;
	stop = DlockNotifierDatabaseStopped(slot->dboid);
	LWLockRelease(DlockNotifierShmem->lock);
	Assert(mine);
	if (!mine)
		proc_exit(0);
	return stop;
}

/*
 * dlock_notifier_main is the notifier's main function (a background
 * worker; bgw_extra holds its NotifierStart): attach to the slot, connect
 * to the database, then send what committers queue until it has had
 * nothing to do for dlock.notifier_idle_timeout or a database command
 * stops it (it leaves with its exit event: notifier_leave).  SIGTERM ends
 * it at once (die), SIGHUP rereads the configuration; it exits with the
 * postmaster (WL_EXIT_ON_PM_DEATH).
 */
void
dlock_notifier_main(Datum main_arg)
{
	NotifierStart start;
	TimestampTz busy_at;

	memcpy(&start, MyBgworkerEntry->bgw_extra, sizeof(start));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (DlockNotifierShmem == NULL || !notifier_attach(&start))
		proc_exit(0);
	notifier_slotno = start.slotno;
	before_shmem_exit(DlockNotifierAtExit, Int32GetDatum(start.slotno));

	BackgroundWorkerInitializeConnectionByOid(start.dboid, InvalidOid, 0);
	notifier_connected = true;

	/*
	 * Its commits carry only notifications: no flush or standby to wait for.
	 * Nothing a database or role setting says may stop it.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET,
					PGC_S_OVERRIDE);
	if (DLOCK_HAS_TRANSACTION_TIMEOUT)
		SetConfigOption("transaction_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("dlock notifier");
	ereport(LOG,
			(errmsg("dlock: notifier of database %u started", start.dboid)));

	busy_at = GetCurrentTimestamp();
	for (;;)
	{
		NotifierPass pass;
		long		timeout = NOTIFIER_XACT_POLL_MS;

		/* reset before looking at the queue: no wake-up is lost */
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (notifier_stop_wanted())
			notifier_leave(true);	/* does not return */

		pass = notifier_pass();
		if (pass != PASS_IDLE)
			busy_at = GetCurrentTimestamp();
		if (pass == PASS_MORE)
			continue;
		if (pass != PASS_WAIT)
		{
			/* idle: leave once dlock.notifier_idle_timeout has passed */
			TimestampTz now = GetCurrentTimestamp();
			TimestampTz idle_end =
				TimestampTzPlusMilliseconds(busy_at, DlockNotifierIdleTimeout);

			if (now >= idle_end)
			{
				notifier_leave(false);
				/* it stays: records came, or its exit event failed */
				busy_at = GetCurrentTimestamp();
				continue;
			}
			timeout = TimestampDifferenceMilliseconds(now, idle_end);
		}
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, DlockNotifierWaitEvent());
	}
}
