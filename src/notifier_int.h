/*-------------------------------------------------------------------------
 *
 * src/notifier_int.h
 *	  What the notifier's files share (notifier.c, notifier_shmem.c,
 *	  notifier_worker.c, notifier_command.c): the shared memory's layout,
 *	  its limits and the functions on slots and stop marks.  Private to
 *	  the notifier.
 *
 * Concurrency: notifier.c's header (the "dlock notify" LWLock).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_NOTIFIER_INT_H
#define DLOCK_NOTIFIER_INT_H

#include "access/transam.h"
#include "storage/lwlock.h"
#include "tcop/utility.h"
#include "utils/timestamp.h"

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
								 * (design.md §16) */
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
	uint64		dropped;		/* lease changes not sent (design.md §16) */
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
	int64		overflow;		/* an "overflow" event: the changes it stands
								 * for; 0: any other event */
	bool		counted;		/* its changes count as dropped already */
	char		payload[FLEXIBLE_ARRAY_MEMBER]; /* NUL-terminated JSON */
} NotifyRecord;

/* What a notifier is started for (bgw_extra). */
typedef struct NotifierStart
{
	Oid			dboid;
	int			slotno;
	uint32		generation;
} NotifierStart;

/* dlock.notifier_idle_timeout, ms (notifier_shmem.c) */
extern int	DlockNotifierIdleTimeout;

/* the shared memory (NULL: no notifier) and this backend's stop mark */
extern NotifierShared *DlockNotifierShmem;
extern Oid	DlockNotifierMyStopDboid;

extern const char *DlockNotifierExitPayload(void);
extern char *DlockNotifierSlotRing(int slotno);
extern bool DlockNotifierSlotHasNotifier(const NotifierSlot *slot);
extern void DlockNotifierSlotReset(NotifierSlot *slot, Oid dboid);
extern void DlockNotifierSlotDropQueued(NotifierSlot *slot);
extern bool DlockNotifierDatabaseStopped(Oid dboid);
extern void DlockNotifierStopMark(Oid dboid);
extern void DlockNotifierStopUnmarkLocked(void);
extern int	DlockNotifierSlotOfDatabase(Oid dboid);
extern bool DlockNotifierSlotStartWanted(NotifierSlot *slot,
										 uint32 *generation);
extern void DlockNotifierStart(Oid dboid, int slotno, uint32 generation);
extern void DlockNotifierAtExit(int code, Datum arg);

#endif							/* DLOCK_NOTIFIER_INT_H */
