/*-------------------------------------------------------------------------
 *
 * src/notifier.c
 *	  The notifier: one background worker per database that sends the lease
 *	  events (events.c) as NOTIFY on channel dlock, and the databases'
 *	  queues of events in shared memory.
 *
 * This file is the committers' side: appending a transaction's records
 * to its database's queue at pre-commit (DlockNotifierQueue), starting
 * the database's notifier on demand and waking it (DlockNotifierWake).
 * The shared memory (slots, queues, stop marks), the settings and the
 * dlock_notifier view are notifier_shmem.c's, the background worker
 * (sending, the idle exit with its notifier_exit event) is
 * notifier_worker.c's, the ProcessUtility_hook that stops it before DROP
 * DATABASE and the other commands that need a database without
 * connections is notifier_command.c's; notifier_int.h is what they share.  Why listeners hear only of committed
 * changes, and of one name's in commit order, why no committer waits for
 * the notifier, and the notifier's life are design.md §16.
 *
 * Concurrency: the "dlock notify" LWLock (its own tranche).  Exclusive to
 * take, reassign or free a slot, to append records (move head), to move
 * tail, to change a slot's state, pid or counters, and to set or clear a
 * stop mark; shared to read them.  The bytes from tail to head are written
 * only by an appender before it moves head, and read only by the slot's
 * notifier, which alone moves tail, so it reads records without the lock.
 * No other lock is taken under this one, nothing waits under it, and
 * latches are set and signals sent after it is released.
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

static int	wake_slotno = -1;
static int	my_slotno = -1;

/*
 * my_slot returns the current database's slot, taking a free one when it
 * has none, or else one that no notifier uses and whose queue is empty,
 * with no dropped changes left to tell of (its database's row leaves the
 * view); -1 when there is no slot to take.  Caller holds the lock
 * exclusively.
 */
static int
my_slot(void)
{
	int			i;
	int			pass;

	Assert(LWLockHeldByMeInMode(DlockNotifierShmem->lock, LW_EXCLUSIVE));
	if (my_slotno >= 0 &&
		DlockNotifierShmem->slots[my_slotno].dboid == MyDatabaseId)
		return my_slotno;
	my_slotno = DlockNotifierSlotOfDatabase(MyDatabaseId);
	if (my_slotno >= 0)
		return my_slotno;
	for (pass = 0; pass < 2; pass++)
	{
		for (i = 0; i < DlockNotifierShmem->nslots; i++)
		{
			NotifierSlot *slot = &DlockNotifierShmem->slots[i];

			if (pass == 0 ? !OidIsValid(slot->dboid) :
				(slot->state == NOTIFIER_NONE && slot->head == slot->tail &&
				 slot->unsent == 0))
			{
				DlockNotifierSlotReset(slot, MyDatabaseId);
				my_slotno = i;
				return i;
			}
		}
	}
	return -1;
}

/*
 * ring_put writes a record (xid, overflow, counted, payload) at *pos of
 * slot's ring and moves *pos past it, when the ring has room between *pos
 * and the slot's tail; returns false (writing nothing that counts) when
 * not.  Caller holds the lock exclusively; the record is not queued until
 * the caller moves head.
 */
static bool
ring_put(NotifierSlot *slot, char *ring, uint64 *pos, TransactionId xid,
		 const char *payload, int64 overflow, bool counted)
{
	Size		ring_size = DlockNotifierShmem->ring_size;
	Size		len = strlen(payload);
	Size		size = MAXALIGN(offsetof(NotifyRecord, payload) + len + 1);
	Size		off = (Size) (*pos % ring_size);
	Size		skip = 0;
	NotifyRecord *rec;

	Assert(LWLockHeldByMeInMode(DlockNotifierShmem->lock, LW_EXCLUSIVE));
	Assert(*pos >= slot->head && *pos - slot->tail <= ring_size);
	if (ring_size - off < size)
		skip = ring_size - off;
	if (size > ring_size || *pos - slot->tail + skip + size > ring_size)
		return false;
	if (skip > 0)
	{
		/* the rest of the ring stays unused: a size 0 says so */
		Assert(skip >= sizeof(uint32));
		*(uint32 *) (ring + off) = 0;
		*pos += skip;
		off = 0;
	}
	rec = (NotifyRecord *) (ring + off);
	rec->size = (uint32) size;
	rec->xid = xid;
	rec->overflow = overflow;
	rec->counted = counted;
	memcpy(rec->payload, payload, len + 1);
	*pos += size;
	return true;
}

/*
 * notifier_register registers the notifier of database dboid for slot
 * slotno, start generation generation; false when no background worker
 * slot is free.
 */
static bool
notifier_register(Oid dboid, int slotno, uint32 generation)
{
	BackgroundWorker worker;
	NotifierStart start;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, sizeof(worker.bgw_library_name), "dlock");
	snprintf(worker.bgw_function_name, sizeof(worker.bgw_function_name),
			 "dlock_notifier_main");
	snprintf(worker.bgw_name, sizeof(worker.bgw_name),
			 "dlock notifier of database %u", dboid);
	snprintf(worker.bgw_type, sizeof(worker.bgw_type), "dlock notifier");
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	start.dboid = dboid;
	start.slotno = slotno;
	start.generation = generation;
	StaticAssertStmt(sizeof(NotifierStart) <= BGW_EXTRALEN,
					 "NotifierStart must fit into bgw_extra");
	memcpy(worker.bgw_extra, &start, sizeof(start));
	return RegisterDynamicBackgroundWorker(&worker, NULL);
}

/*
 * DlockNotifierSlotStartWanted reports whether slot needs a notifier started now (it
 * has none, none is starting, and no stop mark names its database), and
 * if so marks it starting and returns its new generation in *generation.
 * Caller holds the lock exclusively.
 */
bool
DlockNotifierSlotStartWanted(NotifierSlot *slot, uint32 *generation)
{
	TimestampTz now = GetCurrentTimestamp();

	Assert(LWLockHeldByMeInMode(DlockNotifierShmem->lock, LW_EXCLUSIVE));
	if (DlockNotifierSlotHasNotifier(slot) ||
		(slot->state == NOTIFIER_STARTING &&
		 !TimestampDifferenceExceeds(slot->requested_at, now,
									 NOTIFIER_START_TIMEOUT_MS)))
		return false;
	if (DlockNotifierDatabaseStopped(slot->dboid))
		return false;
	slot->state = NOTIFIER_STARTING;
	slot->generation++;
	slot->requested_at = now;
	*generation = slot->generation;
	return true;
}

/*
 * DlockNotifierStart registers the notifier of slot slotno (database dboid,
 * generation generation, marked starting by DlockNotifierSlotStartWanted); when no
 * worker slot is free, drops the database's queued records with a
 * WARNING.  Takes the lock.
 */
void
DlockNotifierStart(Oid dboid, int slotno, uint32 generation)
{
	NotifierSlot *slot = &DlockNotifierShmem->slots[slotno];
	uint64		dropped = 0;

	if (notifier_register(dboid, slotno, generation))
		return;
	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	if (slot->dboid == dboid && slot->generation == generation &&
		slot->state == NOTIFIER_STARTING)
	{
		slot->state = NOTIFIER_NONE;
		dropped = slot->queued;
		DlockNotifierSlotDropQueued(slot);
	}
	LWLockRelease(DlockNotifierShmem->lock);
	ereport(WARNING,
			(errmsg("dlock: " UINT64_FORMAT " lease events not sent: no background worker slot is free for the notifier of database %u",
					dropped, dboid),
			 errhint("Each database that sends lease events needs a background worker of its own; raise max_worker_processes.")));
}

/*
 * DlockNotifierQueue appends the payloads of a committing transaction's
 * events (n of them; overflow[i] > 0 marks an "overflow" event for that
 * many changes) to the current
 * database's queue, tagged with its top-level transaction id, at
 * pre-commit.  When they do not fit, one "overflow" event for the
 * nchanges lease changes they stand for takes their place (overflow_payload),
 * or nothing when even that does not fit, with a WARNING; either way they
 * count as dropped.  Starts the database's notifier when it has none.
 * Never waits for the notifier; takes the lock.
 */
void
DlockNotifierQueue(char **payloads, const int64 *overflow, int n,
				   int64 nchanges, const char *overflow_payload)
{
	TransactionId xid = GetTopTransactionIdIfAny();
	NotifierSlot *slot;
	char	   *ring;
	uint64		pos;
	int			slotno;
	int			i;
	bool		queued = true;
	bool		start;
	uint32		generation = 0;

	Assert(DlockNotifierShmem != NULL && n > 0);
	/* every recorded change wrote a lease row, so the transaction has an id */
	Assert(TransactionIdIsValid(xid));
	if (!TransactionIdIsValid(xid))
		return;

	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	slotno = my_slot();
	if (slotno < 0)
	{
		LWLockRelease(DlockNotifierShmem->lock);
		ereport(WARNING,
				(errmsg("dlock: " INT64_FORMAT " lease events not sent: every notifier slot is taken by another database",
						nchanges),
				 errhint("Each database that sends lease events needs a background worker of its own; raise max_worker_processes.")));
		return;
	}
	slot = &DlockNotifierShmem->slots[slotno];
	ring = DlockNotifierSlotRing(slotno);
	pos = slot->head;
	for (i = 0; i < n && queued; i++)
		queued = ring_put(slot, ring, &pos, xid, payloads[i], overflow[i],
						  false);
	if (queued)
		slot->queued += n;
	else
	{
		pos = slot->head;
		slot->dropped += nchanges;
		if (ring_put(slot, ring, &pos, xid, overflow_payload, nchanges, true))
			slot->queued++;
	}
	if (pos != slot->head)
		wake_slotno = slotno;
	slot->head = pos;
	start = slot->head != slot->tail &&
		DlockNotifierSlotStartWanted(slot, &generation);
	LWLockRelease(DlockNotifierShmem->lock);

	if (!queued)
		ereport(WARNING,
				(errmsg("dlock: " INT64_FORMAT " lease events of this transaction not queued: the notifier's queue is full",
						nchanges),
				 errdetail("One \"overflow\" event is sent in their place when there is room for it."),
				 errhint("The notifier of this database is behind: see the view dlock_notifier, and dlock.notify_queue_size.")));
	if (start)
		DlockNotifierStart(MyDatabaseId, slotno, generation);
}

/*
 * DlockNotifierWake sets the latch of the notifier the current
 * transaction queued events for, once the transaction has ended
 * (committed or aborted: either way the notifier can decide), also while
 * it sends its exit event (it stays when records came).  Takes the lock
 * shared.
 */
void
DlockNotifierWake(void)
{
	int			procno = -1;
	NotifierSlot *slot;

	if (wake_slotno < 0)
		return;
	slot = &DlockNotifierShmem->slots[wake_slotno];
	wake_slotno = -1;
	LWLockAcquire(DlockNotifierShmem->lock, LW_SHARED);
	if (DlockNotifierSlotHasNotifier(slot))
		procno = slot->procno;
	LWLockRelease(DlockNotifierShmem->lock);
	if (procno >= 0)
		SetLatch(DlockProcLatch(procno));
}
