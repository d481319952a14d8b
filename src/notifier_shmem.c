/*-------------------------------------------------------------------------
 *
 * src/notifier_shmem.c
 *	  The notifiers' shared memory: the slots (one per possible notifier,
 *	  max_worker_processes), their queues of dlock.notify_queue_size kB,
 *	  the stop marks (one per PGPROC), the settings that size them, and
 *	  what the dlock_notifier view shows (design.md §16).
 *
 * Concurrency: the "dlock notify" LWLock (its own tranche), as
 * notifier.c's header says; a stop mark is set and cleared under it held
 * exclusively.
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

static int	dlock_notify_queue_size = 256;
int			DlockNotifierIdleTimeout = 10000;
NotifierShared *DlockNotifierShmem = NULL;
Oid			DlockNotifierMyStopDboid = InvalidOid;
static bool stop_mark_cleanup = false;	/* its exit callback is registered */
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void stop_mark_at_exit(int code, Datum arg);

/*
 * notifier_nslots returns the number of slots: one per background worker
 * that could run.
 */
static int
notifier_nslots(void)
{
	return dlock_notify_queue_size > 0 ? max_worker_processes : 0;
}

/*
 * notifier_nprocs returns the number of stop marks: one per PGPROC.
 */
static int
notifier_nprocs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/*
 * notifier_ring_size returns the bytes of one ring.
 */
static Size
notifier_ring_size(void)
{
	return (Size) TYPEALIGN_DOWN(MAXIMUM_ALIGNOF,
								 (Size) dlock_notify_queue_size * 1024);
}

/*
 * marks_offset returns where the stop marks start in the shared struct.
 */
static Size
marks_offset(int nslots)
{
	return MAXALIGN(add_size(offsetof(NotifierShared, slots),
							 mul_size(nslots, sizeof(NotifierSlot))));
}

/*
 * rings_offset returns where the rings start in the shared struct.
 */
static Size
rings_offset(int nslots, int nprocs)
{
	return MAXALIGN(add_size(marks_offset(nslots),
							 mul_size(nprocs, sizeof(Oid))));
}

/*
 * notifier_shmem_size returns the bytes of shared memory the notifiers'
 * slots, stop marks and queues need (none when dlock.notify_queue_size
 * is 0).
 */
static Size
notifier_shmem_size(void)
{
	int			nslots = notifier_nslots();

	if (nslots == 0)
		return 0;
	return add_size(rings_offset(nslots, notifier_nprocs()),
					mul_size(nslots, notifier_ring_size()));
}

/*
 * stop_marks returns the stop marks, one per PGPROC.
 */
static Oid *
stop_marks(void)
{
	return (Oid *) ((char *) DlockNotifierShmem +
					marks_offset(DlockNotifierShmem->nslots));
}

/*
 * DlockNotifierOverflowPayload returns the JSON text of the NOTIFY payload
 * of an "overflow" event for count lease changes that were not sent one by
 * one (palloc'd); events.c's payloads have the same keys.
 */
char *
DlockNotifierOverflowPayload(int64 count)
{
	return psprintf("{\"event\": \"overflow\", \"lock_name\": null, \"token\": null, \"previous_token\": null, \"count\": " INT64_FORMAT "}",
					count);
}

/*
 * DlockNotifierExitPayload returns the JSON text of the NOTIFY payload of the
 * "notifier_exit" event, the last notification a notifier sends before it
 * exits: a listener drops its sender's pid from the pids it accepts
 * (docs/sql-reference.md, the listener's rule).
 */
const char *
DlockNotifierExitPayload(void)
{
	return "{\"event\": \"notifier_exit\", \"lock_name\": null, \"token\": null, \"previous_token\": null}";
}

/*
 * notifier_shmem_request asks for the notifiers' shared memory and LWLock,
 * after chaining to the previous hook.
 */
static void
notifier_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(notifier_shmem_size());
	RequestNamedLWLockTranche("dlock notify", 1);
}

/*
 * notifier_shmem_init attaches to (or, first, sets up) the notifiers'
 * shared memory.  Caller holds AddinShmemInitLock.
 */
static void
notifier_shmem_init(void)
{
	bool		found;
	int			nslots = notifier_nslots();

	if (nslots == 0)
		return;
	DlockNotifierShmem = ShmemInitStruct("dlock notify", notifier_shmem_size(),
										 &found);
	if (!found)
	{
		DlockNotifierShmem->lock = &(GetNamedLWLockTranche("dlock notify"))->lock;
		DlockNotifierShmem->nslots = nslots;
		DlockNotifierShmem->nprocs = notifier_nprocs();
		DlockNotifierShmem->nstopping = 0;
		DlockNotifierShmem->ring_size = notifier_ring_size();
		memset(DlockNotifierShmem->slots, 0, sizeof(NotifierSlot) * nslots);
		memset(stop_marks(), 0, sizeof(Oid) * DlockNotifierShmem->nprocs);
	}
}

/*
 * notifier_shmem_startup attaches to the notifiers' shared memory, after
 * chaining to the previous hook.  Takes AddinShmemInitLock.
 */
static void
notifier_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	notifier_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * DlockNotifierAvailable reports whether lease events can be queued: dlock
 * is preloaded and dlock.notify_queue_size is not 0.
 */
bool
DlockNotifierAvailable(void)
{
	return DlockNotifierShmem != NULL;
}

/*
 * DlockNotifierSlotRing returns the ring of slot slotno.
 */
char *
DlockNotifierSlotRing(int slotno)
{
	Assert(slotno >= 0 && slotno < DlockNotifierShmem->nslots);
	return (char *) DlockNotifierShmem +
		rings_offset(DlockNotifierShmem->nslots, DlockNotifierShmem->nprocs) +
		(Size) slotno * DlockNotifierShmem->ring_size;
}

/*
 * DlockNotifierSlotHasNotifier reports whether a notifier is attached to slot
 * (RUNNING, or EXITING: sending its exit event).  Caller holds the lock.
 */
bool
DlockNotifierSlotHasNotifier(const NotifierSlot *slot)
{
	return slot->state == NOTIFIER_RUNNING || slot->state == NOTIFIER_EXITING;
}

/*
 * DlockNotifierSlotReset makes slot an empty slot of database dboid (InvalidOid: a
 * free one).  Caller holds the lock exclusively; nothing runs for it.
 */
void
DlockNotifierSlotReset(NotifierSlot *slot, Oid dboid)
{
	uint32		generation = slot->generation;

	Assert(LWLockHeldByMeInMode(DlockNotifierShmem->lock, LW_EXCLUSIVE));
	Assert(!DlockNotifierSlotHasNotifier(slot));
	memset(slot, 0, sizeof(NotifierSlot));
	slot->dboid = dboid;
	/* a worker registered for the slot's last user must not attach */
	slot->generation = generation + 1;
}

/*
 * DlockNotifierSlotDropQueued drops every record in slot's ring and counts them as
 * dropped.  Caller holds the lock exclusively, and the slot has no
 * notifier that could be reading them.
 */
void
DlockNotifierSlotDropQueued(NotifierSlot *slot)
{
	Assert(LWLockHeldByMeInMode(DlockNotifierShmem->lock, LW_EXCLUSIVE));
	Assert(!DlockNotifierSlotHasNotifier(slot));
	slot->dropped += slot->queued;
	slot->queued = 0;
	slot->tail = slot->head;
}

/*
 * DlockNotifierDatabaseStopped reports whether a backend's stop mark names database
 * dboid: a database command of that backend needs its notifier gone.
 * Caller holds the lock.
 */
bool
DlockNotifierDatabaseStopped(Oid dboid)
{
	Oid		   *marks;
	int			i;

	Assert(LWLockHeldByMe(DlockNotifierShmem->lock));
	if (DlockNotifierShmem->nstopping == 0)
		return false;
	marks = stop_marks();
	for (i = 0; i < DlockNotifierShmem->nprocs; i++)
		if (marks[i] == dboid)
			return true;
	return false;
}

/*
 * DlockNotifierStopMark sets this backend's stop mark on database dboid: no notifier of
 * it starts, attaches or keeps running until the mark is cleared
 * (DlockNotifierStopUnmarkLocked; at exit, stop_mark_at_exit).  Takes the lock.
 */
void
DlockNotifierStopMark(Oid dboid)
{
	int			procno = DlockMyProcNumber();

	Assert(OidIsValid(dboid) && !OidIsValid(DlockNotifierMyStopDboid));
	Assert(procno >= 0 && procno < DlockNotifierShmem->nprocs);
	if (!stop_mark_cleanup)
	{
		/* registered before the mark is set: a FATAL clears it */
		before_shmem_exit(stop_mark_at_exit, (Datum) 0);
		stop_mark_cleanup = true;
	}
	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	Assert(!OidIsValid(stop_marks()[procno]));
	stop_marks()[procno] = dboid;
	DlockNotifierShmem->nstopping++;
	DlockNotifierMyStopDboid = dboid;
	LWLockRelease(DlockNotifierShmem->lock);
}

/*
 * DlockNotifierStopUnmarkLocked clears this backend's stop mark, if it has one.
 * Caller holds the lock exclusively.
 */
void
DlockNotifierStopUnmarkLocked(void)
{
	int			procno = DlockMyProcNumber();

	Assert(LWLockHeldByMeInMode(DlockNotifierShmem->lock, LW_EXCLUSIVE));
	if (!OidIsValid(DlockNotifierMyStopDboid))
		return;
	Assert(stop_marks()[procno] == DlockNotifierMyStopDboid);
	Assert(DlockNotifierShmem->nstopping > 0);
	stop_marks()[procno] = InvalidOid;
	DlockNotifierShmem->nstopping--;
	DlockNotifierMyStopDboid = InvalidOid;
}

/*
 * stop_mark_at_exit clears this backend's stop mark when it exits with it
 * set (a FATAL during a database command).  Takes the lock.
 */
static void
stop_mark_at_exit(int code, Datum arg)
{
	if (!OidIsValid(DlockNotifierMyStopDboid))
		return;
	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	DlockNotifierStopUnmarkLocked();
	LWLockRelease(DlockNotifierShmem->lock);
}

/*
 * DlockNotifierSlotOfDatabase returns the number of database dboid's slot, or -1
 * when it has none.  Caller holds the lock.
 */
int
DlockNotifierSlotOfDatabase(Oid dboid)
{
	int			i;

	Assert(OidIsValid(dboid));
	for (i = 0; i < DlockNotifierShmem->nslots; i++)
		if (DlockNotifierShmem->slots[i].dboid == dboid)
			return i;
	return -1;
}

/*
 * check_notify_queue_size accepts dlock.notify_queue_size values of 0 (no
 * notifier) and of at least DLOCK_MIN_NOTIFY_QUEUE_KB.
 */
static bool
check_notify_queue_size(int *newval, void **extra, GucSource source)
{
	if (*newval != 0 && *newval < DLOCK_MIN_NOTIFY_QUEUE_KB)
	{
		GUC_check_errdetail("dlock.notify_queue_size must be 0 or at least %d kB.",
							DLOCK_MIN_NOTIFY_QUEUE_KB);
		return false;
	}
	return true;
}

/*
 * DlockNotifierInit, when dlock is being preloaded (the notifier exists
 * only then), defines dlock.notify_queue_size (fixed at server start) and
 * dlock.notifier_idle_timeout (read by notifiers only), installs the hooks
 * of the notifiers' shared memory, and the ProcessUtility_hook (chaining
 * the previous one), so that every backend has it; _PG_init calls it.
 */
void
DlockNotifierInit(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomIntVariable("dlock.notify_queue_size",
							"Shared memory for the lease events of one database waiting for its notifier.",
							"With shared_preload_libraries = 'dlock', each of max_worker_processes "
							"slots gets this much; 0: no notifier, dlock.notify sends nothing; "
							"else at least 64 kB.",
							&dlock_notify_queue_size,
							256,
							0,
							1048576,
							PGC_POSTMASTER,
							GUC_UNIT_KB,
							check_notify_queue_size, NULL, NULL);
	DefineCustomIntVariable("dlock.notifier_idle_timeout",
							"How long a notifier waits with nothing to send before it exits.",
							"With shared_preload_libraries = 'dlock': an idle notifier gives its "
							"background worker back (and its connection to the database) after "
							"this long, telling listeners by a notifier_exit event; the next "
							"lease change with an event starts another.",
							&DlockNotifierIdleTimeout,
							10000,
							100,
							INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = notifier_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = notifier_shmem_startup;
}

/* dlock_notifier_read's columns. */
#define NOTIFIER_COLS	6

PG_FUNCTION_INFO_V1(dlock_notifier_read);

/*
 * dlock_notifier_read() returns setof record: one row per database with a
 * notifier slot this server start (datid oid, pid int4 or NULL when no
 * notifier runs or it is sending its exit event, started_at timestamptz
 * or NULL then, events_sent, events_dropped and events_queued bigint),
 * for the dlock_notifier view.  No rows without preload.  Takes the lock
 * shared.
 */
Datum
dlock_notifier_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	NotifierSlot *copy;
	int			nslots;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (DlockNotifierShmem == NULL)
		return (Datum) 0;

	nslots = DlockNotifierShmem->nslots;
	copy = palloc(sizeof(NotifierSlot) * nslots);
	LWLockAcquire(DlockNotifierShmem->lock, LW_SHARED);
	memcpy(copy, DlockNotifierShmem->slots, sizeof(NotifierSlot) * nslots);
	LWLockRelease(DlockNotifierShmem->lock);

	for (i = 0; i < nslots; i++)
	{
		Datum		values[NOTIFIER_COLS];
		bool		nulls[NOTIFIER_COLS] = {0};
		NotifierSlot *slot = &copy[i];

		/* an EXITING notifier has said its last word: not shown */
		bool		running = slot->state == NOTIFIER_RUNNING;

		if (!OidIsValid(slot->dboid))
			continue;
		values[0] = ObjectIdGetDatum(slot->dboid);
		values[1] = Int32GetDatum(slot->pid);
		nulls[1] = !running;
		values[2] = TimestampTzGetDatum(slot->started_at);
		nulls[2] = !running;
		values[3] = Int64GetDatum((int64) slot->sent);
		values[4] = Int64GetDatum((int64) slot->dropped);
		values[5] = Int64GetDatum((int64) slot->queued);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
