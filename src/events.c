/*-------------------------------------------------------------------------
 *
 * src/events.c
 *	  Lease events: with dlock.notify, a NOTIFY on channel "dlock" for every
 *	  committed lease change; with dlock.log_lease_changes, a log line.
 *
 * The entry points and the store record each change as it is made: a
 * grant (to a new name, after a release, or taking over an expired lease),
 * a release, a break, a purged row.  Nothing is recorded unless a setting
 * asks for it, and each record notes what the settings asked for when the
 * change was made (sent, logged, or both).  The records live in
 * TopTransactionContext, tagged with the subtransaction that made them: a
 * subtransaction that rolls back drops its own (and its children's), one
 * that commits hands them to its parent, so only what the transaction
 * commits is left at its end.  A transaction keeps at most
 * DLOCK_MAX_XACT_EVENTS records; further changes are only counted, per
 * subtransaction as well, and reported as one "overflow" event (a purge of
 * a million rows must not build a million notifications at commit).
 * Then:
 *
 *   - at PRE_COMMIT, the payload of each record to be sent (JSON, built
 *     here) is handed to the database's notifier (notifier.c): appended
 *     to its queue in shared memory, tagged with the transaction's id.
 *     The committing backend never NOTIFYs itself; the notifier, a
 *     background worker, sends the payloads once the transaction has
 *     committed and drops them if it did not (notifier.c's header argues
 *     why listeners hear only of committed changes, and those of one name
 *     in commit order).  Without preload there is no notifier: nothing is
 *     sent, and the session is warned once.
 *   - at COMMIT, after the transaction is committed, the log lines; and
 *     at COMMIT or ABORT the notifier is woken.
 *   - a transaction that is PREPAREd sends nothing (the notifier could not
 *     tell when a prepared transaction commits): its events are logged
 *     when it is prepared and sent to nobody (docs/sql-reference.md).
 *
 * Concurrency: backend-local state only, and no lock of its own; handing
 * the payloads over takes notifier.c's LWLock for a copy.  A commit never
 * waits for the notifier or for a listener, and never takes PostgreSQL's
 * notification lock for dlock's events.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "dlock.h"

/* dlock.log_lease_changes's values */
typedef enum DlockLogChanges
{
	DLOCK_LOG_CHANGES_OFF,
	DLOCK_LOG_CHANGES_TAKEOVERS,
	DLOCK_LOG_CHANGES_ALL
} DlockLogChanges;

static const struct config_enum_entry log_lease_changes_options[] = {
	{"off", DLOCK_LOG_CHANGES_OFF, false},
	{"takeovers", DLOCK_LOG_CHANGES_TAKEOVERS, false},
	{"all", DLOCK_LOG_CHANGES_ALL, false},
	{NULL, 0, false}
};

/* dlock.notify and dlock.log_lease_changes */
static bool dlock_notify = false;
static int	dlock_log_lease_changes = DLOCK_LOG_CHANGES_OFF;

/* The most changes a transaction records; further ones are only counted. */
#define DLOCK_MAX_XACT_EVENTS	10000

/* PostgreSQL's longest NOTIFY payload (NOTIFY_PAYLOAD_MAX_LENGTH, async.c). */
#define DLOCK_NOTIFY_PAYLOAD_MAX	(BLCKSZ - NAMEDATALEN - 128)

typedef enum LeaseEventKind
{
	EVENT_ACQUIRED,
	EVENT_TAKEN_OVER,
	EVENT_RELEASED,
	EVENT_BROKEN,
	EVENT_PURGED,
	EVENT_OVERFLOW				/* changes beyond DLOCK_MAX_XACT_EVENTS */
} LeaseEventKind;

static const char *const event_names[] =
{"acquired", "taken_over", "released", "broken", "purged", "overflow"};

/* One recorded lease change (in TopTransactionContext). */
typedef struct LeaseEvent
{
	LeaseEventKind kind;
	int			nestlevel;		/* the subtransaction that made it */
	bool		notify;			/* to be sent (dlock.notify at the change) */
	bool		log;			/* to be logged (dlock.log_lease_changes) */
	int64		count;			/* overflow: how many changes */
	char	   *lock_name;
	int64		token;
	int64		prev_token;		/* 0: none */
	char	   *prev_owner;		/* taken_over, broken: the holder's label, as
								 * the log line shows it (owner_text) */
	TimestampTz ended_at;		/* taken_over: when the old lease expired */
	char	   *by_role;		/* broken: the role that broke it */
} LeaseEvent;

static List *events = NIL;
static int	nrecorded = 0;		/* records in events, overflow ones aside */

/* The overflow record of the current subtransaction, if it has one. */
static LeaseEvent *overflow = NULL;

/* Whether this session was told that events need preload. */
static bool warned_unavailable = false;

/*
 * events_reset_callback forgets the events when TopTransactionContext is
 * reset or deleted, however the transaction ended (another library's
 * callback may have raised before this file's ran).
 */
static void
events_reset_callback(void *arg)
{
	events = NIL;
	nrecorded = 0;
	overflow = NULL;
}

/*
 * event_log_wanted reports whether dlock.log_lease_changes asks for a log
 * line of a change of kind.
 */
static bool
event_log_wanted(LeaseEventKind kind)
{
	if (dlock_log_lease_changes == DLOCK_LOG_CHANGES_ALL)
		return true;
	return dlock_log_lease_changes == DLOCK_LOG_CHANGES_TAKEOVERS &&
		(kind == EVENT_TAKEN_OVER || kind == EVENT_BROKEN);
}

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
 * DlockEventsWantOwner reports whether a lease change's record needs the
 * previous holder's owner label (only log lines show it).
 */
bool
DlockEventsWantOwner(void)
{
	return dlock_log_lease_changes != DLOCK_LOG_CHANGES_OFF;
}

/*
 * event_append appends a record of kind to the transaction's events, with
 * what the settings ask for it now, and returns it for the caller to fill
 * in.  Allocates in TopTransactionContext.
 */
static LeaseEvent *
event_append(LeaseEventKind kind)
{
	LeaseEvent *ev;

	Assert(IsTransactionState());
	Assert(CurrentMemoryContext == TopTransactionContext);
	if (events == NIL)
	{
		MemoryContextCallback *cb = palloc(sizeof(MemoryContextCallback));

		cb->func = events_reset_callback;
		cb->arg = NULL;
		MemoryContextRegisterResetCallback(TopTransactionContext, cb);
	}
	ev = palloc0(sizeof(LeaseEvent));
	ev->kind = kind;
	ev->nestlevel = GetCurrentTransactionNestLevel();
	ev->notify = dlock_notify;
	ev->log = event_log_wanted(kind);
	events = lappend(events, ev);
	return ev;
}

/*
 * event_new records a change of kind for lock_name and token and returns
 * the record, for the caller to fill in; NULL when the transaction has
 * recorded DLOCK_MAX_XACT_EVENTS already (the change is then counted in
 * the subtransaction's overflow record).
 */
static LeaseEvent *
event_new(LeaseEventKind kind, text *lock_name, int64 token)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	LeaseEvent *ev = NULL;

	if (nrecorded >= DLOCK_MAX_XACT_EVENTS)
	{
		if (overflow == NULL ||
			overflow->nestlevel != GetCurrentTransactionNestLevel())
			overflow = event_append(EVENT_OVERFLOW);
		overflow->count++;
		/* sent or logged if any change it stands for would have been */
		overflow->notify |= dlock_notify;
		overflow->log |= event_log_wanted(kind);
	}
	else
	{
		ev = event_append(kind);
		ev->lock_name = text_to_cstring(lock_name);
		ev->token = token;
		nrecorded++;
	}
	MemoryContextSwitchTo(old);
	return ev;
}

/*
 * owner_text returns how a log line names an owner label ("owner \"w1\"",
 * or "no owner label"), in TopTransactionContext: made when the change is
 * recorded, so that logging after the commit allocates nothing.
 */
static char *
owner_text(text *owner)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	char	   *result;

	result = owner == NULL ? pstrdup("no owner label") :
		psprintf("owner \"%s\"", text_to_cstring(owner));
	MemoryContextSwitchTo(old);
	return result;
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
	if (ev == NULL)
		return;
	Assert(prev->kind == DLOCK_GRANT_NEW || prev->token > 0);
	ev->prev_token = prev->kind == DLOCK_GRANT_NEW ? 0 : prev->token;
	if (takeover)
	{
		ev->prev_owner = owner_text(prev->owner);
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
	if (ev == NULL)
		return;
	ev->prev_owner = owner_text(owner);
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

	if (ev->kind == EVENT_OVERFLOW)
		return DlockNotifierOverflowPayload(ev->count);
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
 * queue_events hands the payload of each recorded event to be sent to the
 * database's notifier (see the file header), at pre-commit; without a
 * notifier (no preload, or dlock.notify_queue_size = 0) it sends nothing
 * and warns once per session.
 */
static void
queue_events(void)
{
	MemoryContext cxt;
	MemoryContext old;
	ListCell   *lc;
	char	  **payloads;
	int64	   *overflow;
	int			nsend = 0;
	int			n = 0;
	int64		nchanges = 0;

	foreach(lc, events)
	{
		if (((LeaseEvent *) lfirst(lc))->notify)
			nsend++;
	}
	if (nsend == 0)
		return;
	if (!DlockNotifierAvailable())
	{
		if (!warned_unavailable)
			ereport(WARNING,
					(errmsg("dlock: lease events are not sent: dlock.notify needs shared_preload_libraries = 'dlock' and a dlock.notify_queue_size above 0"),
					 errdetail("This session is told once.")));
		warned_unavailable = true;
		return;
	}

	cxt = AllocSetContextCreate(CurrentMemoryContext, "dlock events",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	payloads = palloc(sizeof(char *) * nsend);
	overflow = palloc(sizeof(int64) * nsend);
	foreach(lc, events)
	{
		LeaseEvent *ev = lfirst(lc);
		char	   *payload;

		if (!ev->notify)
			continue;
		nchanges += ev->kind == EVENT_OVERFLOW ? ev->count : 1;
		payload = event_payload(ev);
		/* a name of at most 512 bytes, escaped, cannot reach the limit */
		if (strlen(payload) >= DLOCK_NOTIFY_PAYLOAD_MAX)
		{
			ereport(WARNING,
					(errmsg("dlock: lease event for \"%s\" not sent: its payload is too long",
							ev->lock_name)));
			continue;
		}
		payloads[n] = payload;
		overflow[n] = ev->kind == EVENT_OVERFLOW ? ev->count : 0;
		n++;
	}
	if (n > 0)
		DlockNotifierQueue(payloads, overflow, n, nchanges,
						   DlockNotifierOverflowPayload(nchanges));
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/*
 * log_event writes ev's log line, if dlock.log_lease_changes asks for it;
 * prepared says the transaction was prepared rather than committed.
 */
static void
log_event(const LeaseEvent *ev, bool prepared)
{
	const char *when = prepared ? " (in a prepared transaction)" : "";

	if (!ev->log)
		return;

	switch (ev->kind)
	{
		case EVENT_TAKEN_OVER:
			ereport(LOG,
					(errmsg("dlock: lease \"%s\" taken over with token " INT64_FORMAT "%s",
							ev->lock_name, ev->token, when),
					 errdetail("Token " INT64_FORMAT " of %s expired at %s without a release.",
							   ev->prev_token, ev->prev_owner,
							   timestamptz_to_str(ev->ended_at))));
			break;
		case EVENT_BROKEN:
			ereport(LOG,
					(errmsg("dlock: lease \"%s\" broken by role \"%s\"%s",
							ev->lock_name, ev->by_role, when),
					 errdetail("Token " INT64_FORMAT " of %s would have expired at %s.",
							   ev->token, ev->prev_owner,
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
		case EVENT_OVERFLOW:
			ereport(LOG,
					(errmsg("dlock: " INT64_FORMAT " further lease changes of the transaction are not logged one by one%s",
							ev->count, when),
					 errdetail("A transaction logs and sends at most %d lease changes.",
							   DLOCK_MAX_XACT_EVENTS)));
			break;
	}
}

/*
 * DlockEventsXactEnd (xact.c calls it) queues the events for the notifier at PRE_COMMIT,
 * logs them once the transaction committed (or was prepared), wakes the
 * notifier once it committed or aborted, and forgets them when it ends.
 */
void
DlockEventsXactEnd(XactEvent event)
{
	ListCell   *lc;

	/* the notifier can decide about what this transaction queued */
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
		DlockNotifierWake();
	if (events == NIL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			queue_events();
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PREPARE:
			foreach(lc, events)
				log_event(lfirst(lc), event == XACT_EVENT_PREPARE);
			events_reset_callback(NULL);	/* freed with
											 * TopTransactionContext */
			return;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
			events_reset_callback(NULL);
			return;
		default:
			return;
	}
}

/*
 * DlockEventsSubXactEnd (xact.c calls it) drops the events of a subtransaction that rolls
 * back and hands those of one that commits to its parent.
 */
void
DlockEventsSubXactEnd(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (events == NIL)
		return;
	overflow = NULL;			/* the next one is found or made again */
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, events)
		{
			LeaseEvent *ev = lfirst(lc);

			if (ev->nestlevel >= level)
			{
				if (ev->kind != EVENT_OVERFLOW)
					nrecorded--;
				events = foreach_delete_current(events, lc);
			}
		}
		Assert(nrecorded >= 0);
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
 * DlockEventsInit defines dlock.notify and dlock.log_lease_changes;
 * _PG_init calls it.
 */
void
DlockEventsInit(void)
{
	DefineCustomBoolVariable("dlock.notify",
							 "Whether each committed lease change sends a NOTIFY on channel dlock.",
							 "The notifier of the database (a background worker, whose pid the view "
							 "dlock_notifier shows) sends it; needs shared_preload_libraries = 'dlock'.  "
							 "The payload is JSON: event, lock_name, token, previous_token.",
							 &dlock_notify,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("dlock.log_lease_changes",
							 "Which committed lease changes are logged.",
							 "takeovers: takeovers of expired leases and breaks; all: every grant, "
							 "release, break and purged row as well.",
							 &dlock_log_lease_changes,
							 DLOCK_LOG_CHANGES_OFF,
							 log_lease_changes_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
}
