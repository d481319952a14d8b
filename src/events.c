/*-------------------------------------------------------------------------
 *
 * src/events.c
 *	  Lease events: with dlock.notify, a NOTIFY on channel "dlock" for every
 *	  committed lease change; with dlock.log_lease_changes, a log line.
 *
 * The store (store_ops.c) records each change as it makes it: a grant (to
 * a new name, after a release, or taking over an expired lease), a
 * release, a break, a purged row.  Nothing is recorded unless a setting
 * asks for it.  The records live in TopTransactionContext, tagged with the
 * subtransaction that made them: a subtransaction that rolls back drops
 * its own (and its children's), one that commits hands them to its parent,
 * so only what the transaction commits is left at its end.  Then:
 *
 *   - at PRE_COMMIT, with dlock.notify, each record becomes a NOTIFY
 *     (Async_Notify), which PostgreSQL delivers once the commit is done
 *     and drops if the commit fails after all.  Listeners therefore never
 *     hear of a change that was rolled back.  When the notification queue
 *     is more than half full (a listener that stopped reading), the events
 *     are dropped with a WARNING rather than risk the commit failing on a
 *     full queue: events must never stop a lease change.
 *   - at COMMIT, after the transaction is committed, the log lines.
 *   - a transaction that is PREPAREd cannot NOTIFY: its events are logged
 *     when it is prepared and sent to nobody (docs/sql-reference.md).
 *
 * Concurrency: backend-local state only.  PostgreSQL's NOTIFY takes its
 * own queue lock while committing; nothing here waits for anything.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/async.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "dlock.h"

/* dlock.notify and dlock.log_lease_changes */
bool		dlock_notify = false;
int			dlock_log_lease_changes = DLOCK_LOG_CHANGES_OFF;

/* The channel of lease events. */
#define DLOCK_NOTIFY_CHANNEL	"dlock"

/* Above this share of the notification queue in use, events are dropped. */
#define DLOCK_NOTIFY_QUEUE_LIMIT	0.5

typedef enum LeaseEventKind
{
	EVENT_ACQUIRED,
	EVENT_TAKEN_OVER,
	EVENT_RELEASED,
	EVENT_BROKEN,
	EVENT_PURGED
} LeaseEventKind;

static const char *const event_names[] =
{"acquired", "taken_over", "released", "broken", "purged"};

/* One recorded lease change (in TopTransactionContext). */
typedef struct LeaseEvent
{
	LeaseEventKind kind;
	int			nestlevel;		/* the subtransaction that made it */
	char	   *lock_name;
	int64		token;
	int64		prev_token;		/* 0: none */
	char	   *prev_owner;		/* taken_over, broken: the holder's label */
	TimestampTz ended_at;		/* taken_over: when the old lease expired */
	char	   *by_role;		/* broken: the role that broke it */
} LeaseEvent;

static List *events = NIL;

/*
 * DlockEventsWanted reports whether a lease change is to be recorded: one
 * that is a takeover or a break (takeover_or_break) or any other.
 */
bool
DlockEventsWanted(bool takeover_or_break)
{
	return dlock_notify ||
		dlock_log_lease_changes == DLOCK_LOG_CHANGES_ALL ||
		(takeover_or_break &&
		 dlock_log_lease_changes == DLOCK_LOG_CHANGES_TAKEOVERS);
}

/*
 * event_new appends a record of kind for lock_name and token to the
 * transaction's events and returns it, for the caller to fill in.
 */
static LeaseEvent *
event_new(LeaseEventKind kind, text *lock_name, int64 token)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	LeaseEvent *ev = palloc0(sizeof(LeaseEvent));

	Assert(IsTransactionState());
	ev->kind = kind;
	ev->nestlevel = GetCurrentTransactionNestLevel();
	ev->lock_name = text_to_cstring(lock_name);
	ev->token = token;
	events = lappend(events, ev);
	MemoryContextSwitchTo(old);
	return ev;
}

/*
 * copy_owner returns a copy of an owner label in TopTransactionContext
 * (NULL for none).
 */
static char *
copy_owner(text *owner)
{
	return owner == NULL ? NULL :
		MemoryContextStrdup(TopTransactionContext, text_to_cstring(owner));
}

/*
 * DlockEventGrant records the grant of token on lock_name; prev is the lease
 * it replaced (its kind says whether there was one).
 */
void
DlockEventGrant(text *lock_name, int64 token, const DlockPrevLease *prev)
{
	LeaseEvent *ev;
	bool		takeover = prev->kind == DLOCK_GRANT_TAKEOVER;

	if (!DlockEventsWanted(takeover))
		return;
	ev = event_new(takeover ? EVENT_TAKEN_OVER : EVENT_ACQUIRED, lock_name,
				   token);
	Assert(prev->kind == DLOCK_GRANT_NEW || prev->token > 0);
	ev->prev_token = prev->kind == DLOCK_GRANT_NEW ? 0 : prev->token;
	if (takeover)
	{
		ev->prev_owner = copy_owner(prev->owner);
		ev->ended_at = prev->ended_at;
	}
}

/*
 * DlockEventRelease records the release of the lease (lock_name, token).
 */
void
DlockEventRelease(text *lock_name, int64 token)
{
	if (DlockEventsWanted(false))
		(void) event_new(EVENT_RELEASED, lock_name, token);
}

/*
 * DlockEventBreak records the break of the lease (lock_name, token), held
 * by owner until expires_at, by the current role.
 */
void
DlockEventBreak(text *lock_name, int64 token, text *owner,
				TimestampTz expires_at)
{
	LeaseEvent *ev;

	if (!DlockEventsWanted(true))
		return;
	ev = event_new(EVENT_BROKEN, lock_name, token);
	ev->prev_owner = copy_owner(owner);
	ev->ended_at = expires_at;
	ev->by_role = MemoryContextStrdup(TopTransactionContext,
									  GetUserNameFromId(GetUserId(), false));
}

/*
 * DlockEventPurge records that the row of lock_name, last with token, was
 * deleted.
 */
void
DlockEventPurge(text *lock_name, int64 token)
{
	if (DlockEventsWanted(false))
		(void) event_new(EVENT_PURGED, lock_name, token);
}

/*
 * event_payload returns the JSON text of ev's NOTIFY payload.
 */
static char *
event_payload(const LeaseEvent *ev)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"event\": \"%s\", \"lock_name\": ",
					 event_names[ev->kind]);
	escape_json(&buf, ev->lock_name);
	appendStringInfo(&buf, ", \"token\": " INT64_FORMAT ", \"previous_token\": ",
					 ev->token);
	if (ev->prev_token > 0)
		appendStringInfo(&buf, INT64_FORMAT "}", ev->prev_token);
	else
		appendStringInfoString(&buf, "null}");
	return buf.data;
}

/*
 * notify_queue_usage returns the share of the notification queue in use
 * (pg_notification_queue_usage()).
 */
static double
notify_queue_usage(void)
{
	return DatumGetFloat8(DirectFunctionCall1(pg_notification_queue_usage,
											  (Datum) 0));
}

/*
 * send_events queues a NOTIFY for each recorded event (see the file
 * header), unless the notification queue is too full.
 */
static void
send_events(void)
{
	ListCell   *lc;
	double		usage = notify_queue_usage();

	if (usage > DLOCK_NOTIFY_QUEUE_LIMIT)
	{
		ereport(WARNING,
				(errmsg("dlock: %d lease events not sent: the notification queue is %.0f%% full",
						list_length(events), usage * 100),
				 errhint("A session that LISTENs has stopped reading its notifications.")));
		return;
	}
	foreach(lc, events)
		Async_Notify(DLOCK_NOTIFY_CHANNEL, event_payload(lfirst(lc)));
}

/*
 * owner_text returns how a log line names an owner label.
 */
static const char *
owner_text(const char *owner)
{
	return owner != NULL ? owner : "(none)";
}

/*
 * log_event writes ev's log line, if dlock.log_lease_changes asks for it;
 * prepared says the transaction was prepared rather than committed.
 */
static void
log_event(const LeaseEvent *ev, bool prepared)
{
	const char *when = prepared ? " (in a prepared transaction)" : "";

	if (dlock_log_lease_changes == DLOCK_LOG_CHANGES_OFF ||
		(dlock_log_lease_changes == DLOCK_LOG_CHANGES_TAKEOVERS &&
		 ev->kind != EVENT_TAKEN_OVER && ev->kind != EVENT_BROKEN))
		return;

	switch (ev->kind)
	{
		case EVENT_TAKEN_OVER:
			ereport(LOG,
					(errmsg("dlock: lease \"%s\" taken over with token " INT64_FORMAT "%s",
							ev->lock_name, ev->token, when),
					 errdetail("Token " INT64_FORMAT " of owner %s expired at %s without a release.",
							   ev->prev_token, owner_text(ev->prev_owner),
							   timestamptz_to_str(ev->ended_at))));
			break;
		case EVENT_BROKEN:
			ereport(LOG,
					(errmsg("dlock: lease \"%s\" broken by role \"%s\"%s",
							ev->lock_name, ev->by_role, when),
					 errdetail("Token " INT64_FORMAT " of owner %s would have expired at %s.",
							   ev->token, owner_text(ev->prev_owner),
							   timestamptz_to_str(ev->ended_at))));
			break;
		case EVENT_ACQUIRED:
			if (ev->prev_token > 0)
				ereport(LOG,
						(errmsg("dlock: lease \"%s\" acquired with token " INT64_FORMAT " after token " INT64_FORMAT "%s",
								ev->lock_name, ev->token, ev->prev_token, when)));
			else
				ereport(LOG,
						(errmsg("dlock: lease \"%s\" acquired with token " INT64_FORMAT " (a new name)%s",
								ev->lock_name, ev->token, when)));
			break;
		case EVENT_RELEASED:
			ereport(LOG,
					(errmsg("dlock: lease \"%s\" with token " INT64_FORMAT " released%s",
							ev->lock_name, ev->token, when)));
			break;
		case EVENT_PURGED:
			ereport(LOG,
					(errmsg("dlock: lease row \"%s\" with token " INT64_FORMAT " purged%s",
							ev->lock_name, ev->token, when)));
			break;
	}
}

/*
 * events_xact_callback sends the events at PRE_COMMIT, logs them once the
 * transaction committed (or was prepared), and forgets them when it ends.
 */
static void
events_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (events == NIL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (dlock_notify)
				send_events();
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PREPARE:
			foreach(lc, events)
				log_event(lfirst(lc), event == XACT_EVENT_PREPARE);
			events = NIL;		/* freed with TopTransactionContext */
			return;
		case XACT_EVENT_ABORT:
			events = NIL;
			return;
		default:
			return;
	}
}

/*
 * events_subxact_callback drops the events of a subtransaction that rolls
 * back and hands those of one that commits to its parent.
 */
static void
events_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (events == NIL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, events)
		{
			LeaseEvent *ev = lfirst(lc);

			if (ev->nestlevel >= level)
				events = foreach_delete_current(events, lc);
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, events)
		{
			LeaseEvent *ev = lfirst(lc);

			if (ev->nestlevel >= level)
				ev->nestlevel = level - 1;
		}
	}
}

/*
 * DlockEventsInit registers the transaction callbacks (from _PG_init, so
 * that they run whichever library's callbacks come first).
 */
void
DlockEventsInit(void)
{
	RegisterXactCallback(events_xact_callback, NULL);
	RegisterSubXactCallback(events_subxact_callback, NULL);
}
