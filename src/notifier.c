/*-------------------------------------------------------------------------
 *
 * src/notifier.c
 *	  The notifier: one background worker per database that sends the lease
 *	  events (events.c) as NOTIFY on channel dlock, and the databases'
 *	  queues of events in shared memory.
 *
 * Owns the notifiers' slots, queues (rings of dlock.notify_queue_size kB)
 * and stop marks in shared memory, starting a notifier on demand and its
 * exit when idle (dlock.notifier_idle_timeout) with its notifier_exit
 * event, the ProcessUtility_hook that stops it before DROP DATABASE and
 * the other commands that need a database without connections, and what
 * the dlock_notifier view shows.  Why listeners hear only of committed
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

/* dlock.notify_queue_size: kB of queue per database (0: no notifier) */
static int	dlock_notify_queue_size = 256;

/* dlock.notifier_idle_timeout: ms with nothing to do before it exits */
static int	dlock_notifier_idle_timeout = 10000;

/* The smallest queue of a database: room for a few of the longest events. */
#define DLOCK_MIN_NOTIFY_QUEUE_KB	64

/* The channel of lease events. */
#define DLOCK_NOTIFY_CHANNEL	"dlock"

/* Above this share of the notification queue in use, events are dropped. */
#define DLOCK_NOTIFY_QUEUE_LIMIT	0.5

/* The queue's use is read again after this long, or for this many events. */
#define DLOCK_NOTIFY_QUEUE_CHECK_MS		1000
#define DLOCK_NOTIFY_QUEUE_CHECK_EVENTS 1000

/* The most records the notifier sends in one transaction of its own. */
#define NOTIFIER_BATCH			1000

/* A registered notifier that has not attached by then is registered again. */
#define NOTIFIER_START_TIMEOUT_MS	10000

/* How long the notifier sleeps before it looks at a running transaction again. */
#define NOTIFIER_XACT_POLL_MS	1000

/*
 * How long a database command waits for the notifier it stopped to send
 * its exit event and exit, before it sends SIGTERM (the notifier may be
 * waiting for PostgreSQL's notification lock), and how long in all.
 */
#define NOTIFIER_EXIT_WAIT_MS	1000
#define NOTIFIER_STOP_WAIT_MS	5000
#define NOTIFIER_STOP_POLL_MS	10

typedef enum NotifierState
{
	NOTIFIER_NONE,				/* none: the next committer starts one */
	NOTIFIER_STARTING,			/* registered, not attached yet */
	NOTIFIER_RUNNING,			/* attached: pid is set */
	NOTIFIER_EXITING			/* committing its exit event: pid is set, the
								 * view shows none, nobody starts another
								 * (file header) */
} NotifierState;

/* A database's queue and notifier. */
typedef struct NotifierSlot
{
	Oid			dboid;			/* InvalidOid: free */
	NotifierState state;
	uint32		generation;		/* of the last start request */
	TimestampTz requested_at;	/* when it was made */
	int			pid;			/* the notifier, when RUNNING or EXITING */
	int			procno;			/* its PGPROC number (its latch) */
	TimestampTz started_at;		/* when it attached */
	uint64		sent;			/* notifications sent */
	uint64		dropped;		/* lease changes not sent (file header) */
	int64		unsent;			/* changes dropped and not yet told of by an
								 * "overflow" event */
	uint64		queued;			/* records in the ring */
	uint64		head;			/* bytes ever appended */
	uint64		tail;			/* bytes ever taken by the notifier */
} NotifierSlot;

typedef struct NotifierShared
{
	LWLock	   *lock;
	int			nslots;
	int			nprocs;			/* stop marks: one per PGPROC */
	int			nstopping;		/* stop marks in use */
	Size		ring_size;		/* bytes per ring, MAXALIGNed */
	NotifierSlot slots[FLEXIBLE_ARRAY_MEMBER];
	/* then nprocs stop marks (Oid), from marks_offset(), */
	/* and nslots rings of ring_size bytes, from rings_offset() */
} NotifierShared;

/* One queued event; size 0 marks the rest of the ring unused. */
typedef struct NotifyRecord
{
	uint32		size;			/* bytes of the record, MAXALIGNed */
	TransactionId xid;			/* the top-level transaction */
	int64		overflow;		/* an "overflow" event: the changes it
								 * stands for; 0: any other event */
	bool		counted;		/* its changes count as dropped already */
	char		payload[FLEXIBLE_ARRAY_MEMBER];	/* NUL-terminated JSON */
} NotifyRecord;

/* What a notifier is started for (bgw_extra). */
typedef struct NotifierStart
{
	Oid			dboid;
	int			slotno;
	uint32		generation;
} NotifierStart;

static NotifierShared *notifier_shmem = NULL;

/* The slot the current transaction appended to (-1: none); woken at its end. */
static int	wake_slotno = -1;

/* This backend's database's slot, as last found (checked under the lock). */
static int	my_slotno = -1;

/* The database this backend's stop mark names (InvalidOid: none). */
static Oid	my_stop_dboid = InvalidOid;
static bool stop_mark_cleanup = false;	/* its exit callback is registered */

/* In the notifier: its slot, whether it connected, and the queue's use. */
static int	notifier_slotno = -1;
static bool notifier_connected = false;
static TimestampTz queue_checked_at = 0;
static double queue_usage = 0;
static int	queue_checked_events = 0;

/*
 * In the notifier: changes dropped since it last sent, for an overflow
 * event (kept in its slot's unsent after each pass), and a transaction
 * whose outcome it could not look up (its records are dropped).
 */
static int64 unsent_overflow = 0;
static TransactionId unresolved_xid = InvalidTransactionId;

static ProcessUtility_hook_type prev_utility_hook = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PGDLLEXPORT void dlock_notifier_main(Datum main_arg);
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
	return (Oid *) ((char *) notifier_shmem +
					marks_offset(notifier_shmem->nslots));
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
 * notifier_exit_payload returns the JSON text of the NOTIFY payload of the
 * "notifier_exit" event, the last notification a notifier sends before it
 * exits: a listener drops its sender's pid from the pids it accepts
 * (docs/sql-reference.md, the listener's rule).
 */
static const char *
notifier_exit_payload(void)
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
	notifier_shmem = ShmemInitStruct("dlock notify", notifier_shmem_size(),
									 &found);
	if (!found)
	{
		notifier_shmem->lock = &(GetNamedLWLockTranche("dlock notify"))->lock;
		notifier_shmem->nslots = nslots;
		notifier_shmem->nprocs = notifier_nprocs();
		notifier_shmem->nstopping = 0;
		notifier_shmem->ring_size = notifier_ring_size();
		memset(notifier_shmem->slots, 0, sizeof(NotifierSlot) * nslots);
		memset(stop_marks(), 0, sizeof(Oid) * notifier_shmem->nprocs);
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
	return notifier_shmem != NULL;
}

/*
 * slot_ring returns the ring of slot slotno.
 */
static char *
slot_ring(int slotno)
{
	Assert(slotno >= 0 && slotno < notifier_shmem->nslots);
	return (char *) notifier_shmem +
		rings_offset(notifier_shmem->nslots, notifier_shmem->nprocs) +
		(Size) slotno * notifier_shmem->ring_size;
}

/*
 * slot_has_notifier reports whether a notifier is attached to slot
 * (RUNNING, or EXITING: sending its exit event).  Caller holds the lock.
 */
static bool
slot_has_notifier(const NotifierSlot *slot)
{
	return slot->state == NOTIFIER_RUNNING || slot->state == NOTIFIER_EXITING;
}

/*
 * slot_reset makes slot an empty slot of database dboid (InvalidOid: a
 * free one).  Caller holds the lock exclusively; nothing runs for it.
 */
static void
slot_reset(NotifierSlot *slot, Oid dboid)
{
	uint32		generation = slot->generation;

	Assert(LWLockHeldByMeInMode(notifier_shmem->lock, LW_EXCLUSIVE));
	Assert(!slot_has_notifier(slot));
	memset(slot, 0, sizeof(NotifierSlot));
	slot->dboid = dboid;
	/* a worker registered for the slot's last user must not attach */
	slot->generation = generation + 1;
}

/*
 * slot_drop_queued drops every record in slot's ring and counts them as
 * dropped.  Caller holds the lock exclusively, and the slot has no
 * notifier that could be reading them.
 */
static void
slot_drop_queued(NotifierSlot *slot)
{
	Assert(LWLockHeldByMeInMode(notifier_shmem->lock, LW_EXCLUSIVE));
	Assert(!slot_has_notifier(slot));
	slot->dropped += slot->queued;
	slot->queued = 0;
	slot->tail = slot->head;
}

/*
 * database_stopped reports whether a backend's stop mark names database
 * dboid: a database command of that backend needs its notifier gone.
 * Caller holds the lock.
 */
static bool
database_stopped(Oid dboid)
{
	Oid		   *marks;
	int			i;

	Assert(LWLockHeldByMe(notifier_shmem->lock));
	if (notifier_shmem->nstopping == 0)
		return false;
	marks = stop_marks();
	for (i = 0; i < notifier_shmem->nprocs; i++)
		if (marks[i] == dboid)
			return true;
	return false;
}

/*
 * stop_mark sets this backend's stop mark on database dboid: no notifier of
 * it starts, attaches or keeps running until the mark is cleared
 * (stop_unmark_locked; at exit, stop_mark_at_exit).  Takes the lock.
 */
static void
stop_mark(Oid dboid)
{
	int			procno = DlockMyProcNumber();

	Assert(OidIsValid(dboid) && !OidIsValid(my_stop_dboid));
	Assert(procno >= 0 && procno < notifier_shmem->nprocs);
	if (!stop_mark_cleanup)
	{
		/* registered before the mark is set: a FATAL clears it */
		before_shmem_exit(stop_mark_at_exit, (Datum) 0);
		stop_mark_cleanup = true;
	}
	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	Assert(!OidIsValid(stop_marks()[procno]));
	stop_marks()[procno] = dboid;
	notifier_shmem->nstopping++;
	my_stop_dboid = dboid;
	LWLockRelease(notifier_shmem->lock);
}

/*
 * stop_unmark_locked clears this backend's stop mark, if it has one.
 * Caller holds the lock exclusively.
 */
static void
stop_unmark_locked(void)
{
	int			procno = DlockMyProcNumber();

	Assert(LWLockHeldByMeInMode(notifier_shmem->lock, LW_EXCLUSIVE));
	if (!OidIsValid(my_stop_dboid))
		return;
	Assert(stop_marks()[procno] == my_stop_dboid);
	Assert(notifier_shmem->nstopping > 0);
	stop_marks()[procno] = InvalidOid;
	notifier_shmem->nstopping--;
	my_stop_dboid = InvalidOid;
}

/*
 * stop_mark_at_exit clears this backend's stop mark when it exits with it
 * set (a FATAL during a database command).  Takes the lock.
 */
static void
stop_mark_at_exit(int code, Datum arg)
{
	if (!OidIsValid(my_stop_dboid))
		return;
	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	stop_unmark_locked();
	LWLockRelease(notifier_shmem->lock);
}

/*
 * slot_of_database returns the number of database dboid's slot, or -1
 * when it has none.  Caller holds the lock.
 */
static int
slot_of_database(Oid dboid)
{
	int			i;

	Assert(OidIsValid(dboid));
	for (i = 0; i < notifier_shmem->nslots; i++)
		if (notifier_shmem->slots[i].dboid == dboid)
			return i;
	return -1;
}

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

	Assert(LWLockHeldByMeInMode(notifier_shmem->lock, LW_EXCLUSIVE));
	if (my_slotno >= 0 &&
		notifier_shmem->slots[my_slotno].dboid == MyDatabaseId)
		return my_slotno;
	my_slotno = slot_of_database(MyDatabaseId);
	if (my_slotno >= 0)
		return my_slotno;
	for (pass = 0; pass < 2; pass++)
	{
		for (i = 0; i < notifier_shmem->nslots; i++)
		{
			NotifierSlot *slot = &notifier_shmem->slots[i];

			if (pass == 0 ? !OidIsValid(slot->dboid) :
				(slot->state == NOTIFIER_NONE && slot->head == slot->tail &&
				 slot->unsent == 0))
			{
				slot_reset(slot, MyDatabaseId);
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
	Size		ring_size = notifier_shmem->ring_size;
	Size		len = strlen(payload);
	Size		size = MAXALIGN(offsetof(NotifyRecord, payload) + len + 1);
	Size		off = (Size) (*pos % ring_size);
	Size		skip = 0;
	NotifyRecord *rec;

	Assert(LWLockHeldByMeInMode(notifier_shmem->lock, LW_EXCLUSIVE));
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
 * slot_start_wanted reports whether slot needs a notifier started now (it
 * has none, none is starting, and no stop mark names its database), and
 * if so marks it starting and returns its new generation in *generation.
 * Caller holds the lock exclusively.
 */
static bool
slot_start_wanted(NotifierSlot *slot, uint32 *generation)
{
	TimestampTz now = GetCurrentTimestamp();

	Assert(LWLockHeldByMeInMode(notifier_shmem->lock, LW_EXCLUSIVE));
	if (slot_has_notifier(slot) ||
		(slot->state == NOTIFIER_STARTING &&
		 !TimestampDifferenceExceeds(slot->requested_at, now,
									 NOTIFIER_START_TIMEOUT_MS)))
		return false;
	if (database_stopped(slot->dboid))
		return false;
	slot->state = NOTIFIER_STARTING;
	slot->generation++;
	slot->requested_at = now;
	*generation = slot->generation;
	return true;
}

/*
 * notifier_start registers the notifier of slot slotno (database dboid,
 * generation generation, marked starting by slot_start_wanted); when no
 * worker slot is free, drops the database's queued records with a
 * WARNING.  Takes the lock.
 */
static void
notifier_start(Oid dboid, int slotno, uint32 generation)
{
	NotifierSlot *slot = &notifier_shmem->slots[slotno];
	uint64		dropped = 0;

	if (notifier_register(dboid, slotno, generation))
		return;
	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	if (slot->dboid == dboid && slot->generation == generation &&
		slot->state == NOTIFIER_STARTING)
	{
		slot->state = NOTIFIER_NONE;
		dropped = slot->queued;
		slot_drop_queued(slot);
	}
	LWLockRelease(notifier_shmem->lock);
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

	Assert(notifier_shmem != NULL && n > 0);
	/* every recorded change wrote a lease row, so the transaction has an id */
	Assert(TransactionIdIsValid(xid));
	if (!TransactionIdIsValid(xid))
		return;

	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	slotno = my_slot();
	if (slotno < 0)
	{
		LWLockRelease(notifier_shmem->lock);
		ereport(WARNING,
				(errmsg("dlock: " INT64_FORMAT " lease events not sent: every notifier slot is taken by another database",
						nchanges),
				 errhint("Each database that sends lease events needs a background worker of its own; raise max_worker_processes.")));
		return;
	}
	slot = &notifier_shmem->slots[slotno];
	ring = slot_ring(slotno);
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
		slot_start_wanted(slot, &generation);
	LWLockRelease(notifier_shmem->lock);

	if (!queued)
		ereport(WARNING,
				(errmsg("dlock: " INT64_FORMAT " lease events of this transaction not queued: the notifier's queue is full",
						nchanges),
				 errdetail("One \"overflow\" event is sent in their place when there is room for it."),
				 errhint("The notifier of this database is behind: see the view dlock_notifier, and dlock.notify_queue_size.")));
	if (start)
		notifier_start(MyDatabaseId, slotno, generation);
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
	slot = &notifier_shmem->slots[wake_slotno];
	wake_slotno = -1;
	LWLockAcquire(notifier_shmem->lock, LW_SHARED);
	if (slot_has_notifier(slot))
		procno = slot->procno;
	LWLockRelease(notifier_shmem->lock);
	if (procno >= 0)
		SetLatch(DlockProcLatch(procno));
}

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

	if (start->slotno < 0 || start->slotno >= notifier_shmem->nslots)
		return false;
	slot = &notifier_shmem->slots[start->slotno];
	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	if (slot->dboid == start->dboid && slot->generation == start->generation &&
		slot->state == NOTIFIER_STARTING)
	{
		if (database_stopped(slot->dboid))
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
	LWLockRelease(notifier_shmem->lock);
	return attached;
}

/*
 * notifier_exit gives the slot up when the notifier exits, also when it
 * did not say its last word (terminated, or a FATAL error); when it never
 * connected to its database (which may be gone), it drops the records
 * queued there, which no notifier could send.  The slot keeps the count
 * of changes dropped and not told of as of the last pass.  Takes the
 * lock.
 */
static void
notifier_exit(int code, Datum arg)
{
	NotifierSlot *slot = &notifier_shmem->slots[DatumGetInt32(arg)];

	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	if (slot_has_notifier(slot) && slot->pid == MyProcPid)
	{
		slot->state = NOTIFIER_NONE;
		slot->pid = 0;
		slot->procno = 0;
		if (!notifier_connected)
			slot_drop_queued(slot);
	}
	LWLockRelease(notifier_shmem->lock);
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
	NotifierSlot *slot = &notifier_shmem->slots[notifier_slotno];
	char	   *ring = slot_ring(notifier_slotno);
	Size		ring_size = notifier_shmem->ring_size;
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

	LWLockAcquire(notifier_shmem->lock, LW_SHARED);
	head = slot->head;
	start_pos = slot->tail;
	LWLockRelease(notifier_shmem->lock);
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

	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	Assert(slot->pid == MyProcPid && slot->tail == start_pos);
	slot->tail = pos;
	Assert(slot->queued >= (uint64) nrecords);
	slot->queued -= nrecords;
	slot->sent += nsent;
	slot->dropped += ndropped;
	slot->unsent = unsent_overflow;
	if (result == PASS_DONE && pos != slot->head)
		result = PASS_MORE;
	LWLockRelease(notifier_shmem->lock);
	return result;
}

/*
 * notifier_leave says this notifier's last word and exits (file header):
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
	NotifierSlot *slot = &notifier_shmem->slots[notifier_slotno];
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
		Async_Notify(DLOCK_NOTIFY_CHANNEL, notifier_exit_payload());

		/* the view stops showing this pid before a listener can read it */
		LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
		Assert(slot->state == NOTIFIER_RUNNING && slot->pid == MyProcPid);
		if (!stopping && slot->head != slot->tail &&
			!database_stopped(dboid))
			stay = true;
		else
			slot->state = NOTIFIER_EXITING;
		LWLockRelease(notifier_shmem->lock);

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

	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	Assert(slot_has_notifier(slot) && slot->pid == MyProcPid);
	if (committed)
	{
		unsent_overflow -= told;
		slot->unsent = unsent_overflow;
		if (told > 0)
			slot->sent++;
	}
	stopping = stopping || database_stopped(dboid);
	leave = stopping || (committed && slot->head == slot->tail);
	if (leave)
	{
		slot->state = NOTIFIER_NONE;
		slot->pid = 0;
		slot->procno = 0;
	}
	else
		slot->state = NOTIFIER_RUNNING;
	LWLockRelease(notifier_shmem->lock);
	if (!leave)
		return;
	if (stopping)
		ereport(LOG,
				(errmsg("dlock: notifier of database %u exits for a database command%s",
						dboid, committed ? "" : ", without its exit event")));
	else
		ereport(LOG,
				(errmsg("dlock: notifier of database %u exits after %d ms with nothing to send",
						dboid, dlock_notifier_idle_timeout)));
	proc_exit(0);
}

/*
 * notifier_stop_wanted reports whether a stop mark names this notifier's
 * database.  Takes the lock shared.
 */
static bool
notifier_stop_wanted(void)
{
	NotifierSlot *slot = &notifier_shmem->slots[notifier_slotno];
	bool		mine;
	bool		stop;

	LWLockAcquire(notifier_shmem->lock, LW_SHARED);
	/* nobody takes or resets a slot that has a notifier */
	mine = slot->state == NOTIFIER_RUNNING && slot->pid == MyProcPid;
	stop = database_stopped(slot->dboid);
	LWLockRelease(notifier_shmem->lock);
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

	if (notifier_shmem == NULL || !notifier_attach(&start))
		proc_exit(0);
	notifier_slotno = start.slotno;
	before_shmem_exit(notifier_exit, Int32GetDatum(start.slotno));

	BackgroundWorkerInitializeConnectionByOid(start.dboid, InvalidOid, 0);
	notifier_connected = true;

	/*
	 * Its commits carry only notifications: no flush or standby to wait
	 * for.  Nothing a database or role setting says may stop it.
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
				TimestampTzPlusMilliseconds(busy_at, dlock_notifier_idle_timeout);

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

/*
 * command_refused reports whether PostgreSQL refuses a database command
 * before it looks at anything: in a read-only transaction or in parallel
 * mode (standard_ProcessUtility), and, for a command that cannot run in a
 * transaction block (in_block_refused), in a transaction block, a
 * subtransaction, a pipeline or a function (PreventInTransactionBlock,
 * whose conditions IsInTransactionBlock repeats).
 */
static bool
command_refused(bool top_level, bool in_block_refused)
{
	if (XactReadOnly || IsInParallelMode())
		return true;
	return in_block_refused && IsInTransactionBlock(top_level);
}

/*
 * database_lookup returns the oid of database name (InvalidOid when there
 * is none), with whether it is a template and its tablespace.
 */
static Oid
database_lookup(const char *name, bool *istemplate, Oid *tablespace)
{
	Oid			dboid = get_database_oid(name, true);
	HeapTuple	tuple;

	if (!OidIsValid(dboid))
		return InvalidOid;
	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
	if (!HeapTupleIsValid(tuple))
		return InvalidOid;		/* dropped meanwhile */
	*istemplate = ((Form_pg_database) GETSTRUCT(tuple))->datistemplate;
	*tablespace = ((Form_pg_database) GETSTRUCT(tuple))->dattablespace;
	ReleaseSysCache(tuple);
	return dboid;
}

/*
 * user_has_createdb reports whether the current user may create databases:
 * a superuser, or a role with CREATEDB (what dbcommands.c's
 * have_createdb_privilege, static there, reads).
 */
static bool
user_has_createdb(void)
{
	HeapTuple	tuple;
	bool		createdb = false;

	if (superuser())
		return true;
	tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	if (HeapTupleIsValid(tuple))
	{
		createdb = ((Form_pg_authid) GETSTRUCT(tuple))->rolcreatedb;
		ReleaseSysCache(tuple);
	}
	return createdb;
}

/*
 * dropdb_database returns the database DROP DATABASE stmt drops, when the
 * user gets past dropdb's checks before its wait for other sessions: not
 * in a transaction block, the database exists, the user owns it, it is
 * not a template and not the current database; else InvalidOid.
 */
static Oid
dropdb_database(DropdbStmt *stmt, bool top_level)
{
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;

	if (command_refused(top_level, true))
		return InvalidOid;
	dboid = database_lookup(stmt->dbname, &istemplate, &tablespace);
	if (!OidIsValid(dboid) || istemplate || dboid == MyDatabaseId ||
		!DlockDatabaseOwnercheck(dboid, GetUserId()))
		return InvalidOid;
	return dboid;
}

/*
 * createdb_template returns the template CREATE DATABASE stmt copies (the
 * one it names, template1 when it names none), when the user gets past
 * createdb's checks of privileges and names before its wait for other
 * sessions: not in a transaction block, CREATEDB, allowed to make the
 * owner it names (if any) the owner, allowed to copy the template (it is
 * marked datistemplate, or the user owns it), the new name free; else
 * InvalidOid.
 */
static Oid
createdb_template(CreatedbStmt *stmt, bool top_level)
{
	const char *template_name = "template1";
	DefElem    *template_opt = NULL;
	DefElem    *owner_opt = NULL;
	Oid			owner = GetUserId();
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;
	ListCell   *lc;

	if (command_refused(top_level, true) || !user_has_createdb())
		return InvalidOid;
	foreach(lc, stmt->options)
	{
		DefElem    *opt = lfirst(lc);

		/* a second TEMPLATE or OWNER is refused */
		if (strcmp(opt->defname, "template") == 0)
		{
			if (template_opt != NULL)
				return InvalidOid;
			template_opt = opt;
		}
		else if (strcmp(opt->defname, "owner") == 0)
		{
			if (owner_opt != NULL)
				return InvalidOid;
			owner_opt = opt;
		}
	}
	/* TEMPLATE DEFAULT and OWNER DEFAULT have no argument */
	if (template_opt != NULL && template_opt->arg != NULL)
		template_name = defGetString(template_opt);
	if (owner_opt != NULL && owner_opt->arg != NULL)
		owner = get_role_oid(defGetString(owner_opt), true);
	if (!OidIsValid(owner) || !DlockCanSetRole(GetUserId(), owner))
		return InvalidOid;
	dboid = database_lookup(template_name, &istemplate, &tablespace);
	if (!OidIsValid(dboid) ||
		(!istemplate && !DlockDatabaseOwnercheck(dboid, GetUserId())) ||
		OidIsValid(get_database_oid(stmt->dbname, true)))
		return InvalidOid;
	return dboid;
}

/*
 * renamedb_database returns the database ALTER DATABASE ... RENAME stmt
 * renames, when the user gets past RenameDatabase's checks before its
 * wait for other sessions: the database exists, the user owns it and has
 * CREATEDB, the new name is free, it is not the current database; else
 * InvalidOid.  (It may run in a transaction block.)
 */
static Oid
renamedb_database(RenameStmt *stmt)
{
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;

	if (command_refused(false, false))
		return InvalidOid;
	dboid = database_lookup(stmt->subname, &istemplate, &tablespace);
	if (!OidIsValid(dboid) || dboid == MyDatabaseId ||
		!DlockDatabaseOwnercheck(dboid, GetUserId()) || !user_has_createdb() ||
		OidIsValid(get_database_oid(stmt->newname, true)))
		return InvalidOid;
	return dboid;
}

/*
 * movedb_database returns the database ALTER DATABASE ... SET TABLESPACE
 * stmt moves, when the user gets past AlterDatabase's and movedb's checks
 * before its wait for other sessions: the tablespace is its only option,
 * not in a transaction block, the database exists, the user owns it, it
 * is not the current database, the tablespace exists, the user may
 * create in it, it is not pg_global and not the database's tablespace
 * already (a no-op that waits for nobody); else InvalidOid.  Any other
 * ALTER DATABASE: InvalidOid.
 */
static Oid
movedb_database(AlterDatabaseStmt *stmt, bool top_level)
{
	DefElem    *opt;
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;
	Oid			target;

	if (list_length(stmt->options) != 1)
		return InvalidOid;
	opt = linitial(stmt->options);
	if (strcmp(opt->defname, "tablespace") != 0 ||
		command_refused(top_level, true))
		return InvalidOid;
	dboid = database_lookup(stmt->dbname, &istemplate, &tablespace);
	if (!OidIsValid(dboid) || dboid == MyDatabaseId ||
		!DlockDatabaseOwnercheck(dboid, GetUserId()))
		return InvalidOid;
	target = get_tablespace_oid(defGetString(opt), true);
	if (!OidIsValid(target) || target == GLOBALTABLESPACE_OID ||
		target == tablespace || !DlockTablespaceCreateOk(target, GetUserId()))
		return InvalidOid;
	return dboid;
}

/*
 * command_database returns the database a utility statement needs no
 * other process connected to (DROP DATABASE, CREATE DATABASE from a
 * template, ALTER DATABASE ... RENAME or SET TABLESPACE), when the
 * current user can run it that far (file header), or InvalidOid;
 * top_level says it is a top-level statement, *is_drop that it is a DROP
 * DATABASE.
 */
static Oid
command_database(Node *stmt, bool top_level, bool *is_drop)
{
	*is_drop = false;
	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			*is_drop = true;
			return dropdb_database((DropdbStmt *) stmt, top_level);
		case T_CreatedbStmt:
			return createdb_template((CreatedbStmt *) stmt, top_level);
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
				return renamedb_database((RenameStmt *) stmt);
			break;
		case T_AlterDatabaseStmt:
			return movedb_database((AlterDatabaseStmt *) stmt, top_level);
		default:
			break;
	}
	return InvalidOid;
}

/*
 * notifier_stop_for stops the notifier of database dboid for a database
 * command of this backend: sets this backend's stop mark on it (no
 * notifier of it starts, attaches or keeps running while the mark
 * stays), sets its notifier's latch and waits up to NOTIFIER_EXIT_WAIT_MS
 * for it to send its exit event and exit, then sends it SIGTERM and waits
 * until NOTIFIER_STOP_WAIT_MS have passed.  Takes the lock; obeys
 * interrupts while it waits (the caller clears the mark on error).
 */
static void
notifier_stop_for(Oid dboid)
{
	NotifierSlot *slot = NULL;
	int			slotno;
	int			pid = 0;
	int			procno = 0;
	bool		signalled = false;
	TimestampTz start;

	stop_mark(dboid);
	LWLockAcquire(notifier_shmem->lock, LW_SHARED);
	slotno = slot_of_database(dboid);
	if (slotno >= 0)
		slot = &notifier_shmem->slots[slotno];
	if (slot != NULL && slot_has_notifier(slot))
	{
		pid = slot->pid;
		procno = slot->procno;
	}
	LWLockRelease(notifier_shmem->lock);

	if (pid == 0)
		return;
	ereport(LOG,
			(errmsg("dlock: stopping the notifier of database %u (pid %d) for a database command",
					dboid, pid)));
	SetLatch(DlockProcLatch(procno));
	start = GetCurrentTimestamp();
	while (BackendPidGetProc(pid) != NULL)
	{
		TimestampTz now = GetCurrentTimestamp();

		if (TimestampDifferenceExceeds(start, now, NOTIFIER_STOP_WAIT_MS))
			break;
		if (!signalled &&
			TimestampDifferenceExceeds(start, now, NOTIFIER_EXIT_WAIT_MS))
		{
			bool		alive;

			/* it did not leave by itself: it may wait for a lock */
			LWLockAcquire(notifier_shmem->lock, LW_SHARED);
			alive = slot_has_notifier(slot) && slot->pid == pid;
			LWLockRelease(notifier_shmem->lock);
			if (alive)
				(void) kill(pid, SIGTERM);
			signalled = true;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 NOTIFIER_STOP_POLL_MS, DlockNotifierWaitEvent());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * notifier_resume clears this backend's stop mark after its command on
 * database dboid; after a DROP DATABASE that succeeded (dropped), frees
 * the database's slot and drops its records; otherwise starts a notifier
 * when records are queued.  Takes the lock.  Runs on the error path too:
 * raises nothing of its own.
 */
static void
notifier_resume(Oid dboid, bool dropped)
{
	NotifierSlot *slot = NULL;
	int			slotno;
	bool		start = false;
	uint32		generation = 0;

	LWLockAcquire(notifier_shmem->lock, LW_EXCLUSIVE);
	stop_unmark_locked();
	slotno = slot_of_database(dboid);
	if (slotno >= 0)
		slot = &notifier_shmem->slots[slotno];
	if (slot != NULL && dropped)
	{
		/*
		 * None is connected to the dropped database; one that attached but
		 * had not connected yet (when the wait for it ran out) fails to, and
		 * gives the slot up itself (notifier_exit).
		 */
		if (!slot_has_notifier(slot))
		{
			/* a worker registered for it finds the slot gone */
			slot->state = NOTIFIER_NONE;
			slot_drop_queued(slot);
			slot_reset(slot, InvalidOid);
		}
	}
	else if (slot != NULL && slot->head != slot->tail)
		start = slot_start_wanted(slot, &generation);
	LWLockRelease(notifier_shmem->lock);
	if (start)
		notifier_start(dboid, slotno, generation);
}

/*
 * run_utility runs a utility statement as PostgreSQL would without dlock's
 * hook: the previous hook, or standard_ProcessUtility.
 */
static void
run_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString, readOnlyTree, context,
						  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * run_stopped runs a database command on database dboid (a DROP DATABASE
 * when is_drop) with the database's notifier stopped, and lets notifiers
 * start again afterwards, also when the command raises.
 */
static void
run_stopped(Oid dboid, bool is_drop, PlannedStmt *pstmt,
			const char *queryString, bool readOnlyTree,
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	PG_TRY();
	{
		notifier_stop_for(dboid);
		run_utility(pstmt, queryString, readOnlyTree, context, params,
					queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		notifier_resume(dboid, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	notifier_resume(dboid, is_drop);
}

/*
 * notifier_utility_hook is dlock's ProcessUtility_hook: before a database
 * command that fails while another process is connected to the database,
 * and that the user can run as far as that check (command_database), it
 * stops that database's notifier, runs the command (the previous hook,
 * or standard_ProcessUtility), and lets notifiers start again, also when
 * the command raises (run_stopped).
 */
static void
notifier_utility_hook(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Oid			dboid = InvalidOid;
	bool		is_drop = false;

	/* one stop mark per backend: a command inside another stops nothing */
	if (notifier_shmem != NULL && !OidIsValid(my_stop_dboid))
		dboid = command_database(pstmt->utilityStmt,
								 context == PROCESS_UTILITY_TOPLEVEL, &is_drop);
	if (OidIsValid(dboid))
		run_stopped(dboid, is_drop, pstmt, queryString, readOnlyTree, context,
					params, queryEnv, dest, qc);
	else
		run_utility(pstmt, queryString, readOnlyTree, context, params,
					queryEnv, dest, qc);
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
							&dlock_notifier_idle_timeout,
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
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = notifier_utility_hook;
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
	if (notifier_shmem == NULL)
		return (Datum) 0;

	nslots = notifier_shmem->nslots;
	copy = palloc(sizeof(NotifierSlot) * nslots);
	LWLockAcquire(notifier_shmem->lock, LW_SHARED);
	memcpy(copy, notifier_shmem->slots, sizeof(NotifierSlot) * nslots);
	LWLockRelease(notifier_shmem->lock);

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
