/*-------------------------------------------------------------------------
 *
 * src/async_commit.c
 *	  A transaction that only released leases commits without waiting for
 *	  its commit record to reach disk (or a synchronous standby).
 *
 * Why that keeps every guarantee (docs/guarantees.md, "Releases and the
 * WAL flush"): a release that a crash or a failover loses leaves the lease
 * as it was before it, live until its expiry, with the same token; nothing
 * was granted in between, because any grant of the name is a later
 * transaction that read the release, and its commit record comes after the
 * release's in the WAL: when the grant is durable, so is the release (WAL
 * is flushed in order, and a standby replays it in order).  A grant whose
 * own commit is lost too is the case of any lost grant (token.c makes its
 * token safe; the fence rejects writes under it).  So losing a release
 * only ever means "the lease lasted until its ttl", which every holder
 * must already expect of a crash between its release and the reply.
 *
 * When it applies: dlock.async_release is on (the default; a user may
 * turn it off for a session or a role), and the release runs in a
 * transaction of its own - not in a transaction block (BEGIN, or several
 * statements sent as one), and nothing else in the transaction wrote WAL:
 * no transaction id existed before the first release of the transaction,
 * and the WAL position the transaction has written up to (XactLastRecEnd)
 * has not moved since the last release ended.  Anything else (a release in
 * a procedure that then writes, SELECT dlock_release(...) with an INSERT
 * in a CTE, a nextval() that logs its sequence) commits as configured.  A
 * nextval() that writes no WAL (31 calls out of 32) is not seen: its value
 * is then as durable as in a transaction that only called nextval(), and
 * a crash may hand it out again (docs/guarantees.md tells sessions that
 * rely on it to turn dlock.async_release off).
 *
 * The decision is taken at XACT_EVENT_PRE_COMMIT, and applied as SET LOCAL
 * synchronous_commit = off, which AtEOXact_GUC undoes after the commit
 * record (a failure to set it leaves the commit synchronous, with a
 * WARNING).  xact.c runs this step after dlock's other pre-commit steps
 * that could write, and its callback is registered in _PG_init, so that
 * the pre-commit callbacks of code loaded later, which run before it (the
 * list is called newest first), have written their WAL by then; a library
 * loaded before dlock (earlier in shared_preload_libraries) whose
 * pre-commit callback writes WAL after a release would commit with it
 * asynchronously: turn dlock.async_release off there.  Between
 * PRE_COMMIT and the commit record PostgreSQL itself writes only what
 * earlier WAL (and so a transaction id) or its own flush covers.  A
 * release that returned false or raised wrote nothing that matters.
 *
 * Concurrency: backend-local state only; no lock.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "utils/guc.h"

#include "dlock.h"

/* dlock.async_release: whether a release of its own skips the flush */
static bool dlock_async_release = true;

/* The state of the current transaction. */
typedef enum AsyncState
{
	ASYNC_NONE,					/* no release yet */
	ASYNC_ONLY_RELEASES,		/* only releases wrote WAL, up to last_end */
	ASYNC_NEVER					/* something else wrote, or a block */
} AsyncState;

static AsyncState async_state = ASYNC_NONE;
static XLogRecPtr last_end = InvalidXLogRecPtr;

/*
 * DlockAsyncReleaseXactEnd takes the decision at pre-commit and forgets
 * the state when the transaction ends (xact.c calls it after the other
 * modules' pre-commit steps that may write).
 */
void
DlockAsyncReleaseXactEnd(XactEvent event)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (async_state == ASYNC_ONLY_RELEASES &&
				XactLastRecEnd == last_end &&
				synchronous_commit > SYNCHRONOUS_COMMIT_OFF && dlock_async_release)
				(void) set_config_option("synchronous_commit", "off",
										 PGC_USERSET, PGC_S_SESSION,
										 GUC_ACTION_LOCAL, true, WARNING, false);
			async_state = ASYNC_NONE;
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PRE_PREPARE:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			async_state = ASYNC_NONE;
			break;
	}
}

/*
 * DlockAsyncReleaseBegin is called by a release before it changes
 * anything: it notes whether the transaction had written anything else.
 */
void
DlockAsyncReleaseBegin(void)
{
	if (IsTransactionBlock())
		async_state = ASYNC_NEVER;
	else if (async_state == ASYNC_NONE)
	{
		async_state = TransactionIdIsValid(GetTopTransactionIdIfAny()) ?
			ASYNC_NEVER : ASYNC_ONLY_RELEASES;
		last_end = XactLastRecEnd;
	}
	else if (async_state == ASYNC_ONLY_RELEASES && XactLastRecEnd != last_end)
		async_state = ASYNC_NEVER;
	/* nothing written yet, or only by earlier releases */
	Assert(async_state != ASYNC_ONLY_RELEASES ||
		   !TransactionIdIsValid(GetTopTransactionIdIfAny()) ||
		   XactLastRecEnd == last_end);
}

/*
 * DlockAsyncReleaseEnd is called by a release when it returns: what the
 * transaction has written so far was written by releases.
 */
void
DlockAsyncReleaseEnd(void)
{
	if (async_state == ASYNC_ONLY_RELEASES)
		last_end = XactLastRecEnd;
}

/*
 * DlockAsyncReleaseInit defines dlock.async_release; _PG_init calls it.
 */
void
DlockAsyncReleaseInit(void)
{
	DefineCustomBoolVariable("dlock.async_release",
							 "Whether a release in a transaction of its own commits without waiting for its WAL flush.",
							 "A lost release only keeps the lease until its ttl, and any later grant "
							 "of the name flushes past it.  Off: such transactions commit as "
							 "synchronous_commit says.",
							 &dlock_async_release,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
}
