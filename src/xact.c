/*-------------------------------------------------------------------------
 *
 * src/xact.c
 *	  The one transaction callback and the one subtransaction callback of
 *	  dlock: the order in which the modules' end-of-transaction steps run.
 *
 * PostgreSQL calls the transaction callbacks newest first
 * (CallXactCallbacks walks a list that RegisterXactCallback prepends to,
 * on 15, 17 and 18 alike), so code loaded after dlock runs before all of
 * these steps, and code loaded before dlock after them.  DlockXactInit
 * registers both callbacks in _PG_init; every step decides for itself
 * whether it has anything to do (without preload, the fence cache and
 * the wake-ups have nothing).
 *
 * The order, for every event (design.md §13):
 *
 *   1. wait.c (DlockWaitXactEnd): at pre-commit, the any-waiters' pass,
 *      which may still raise; after the commit or abort, the wake-ups.
 *   2. fence_cache.c (DlockFenceCacheXactEnd): at pre-commit, a session
 *      that writes without the cache opens the global count; after the
 *      end, it closes what the transaction opened.
 *   3. async_commit.c (DlockAsyncReleaseXactEnd): at pre-commit, whether
 *      the commit may skip its WAL flush.  It compares the WAL the
 *      transaction wrote with what its releases wrote, so it must come
 *      after every pre-commit step that could write WAL: those of code
 *      loaded later (called before dlock's callback), and 1 and 2 above.
 *      The steps after it (4 and 5) write no WAL at pre-commit.
 *   4. events.c (DlockEventsXactEnd): at pre-commit, the lease events go
 *      into the notifier's queue in shared memory; after the end, the log
 *      lines and the notifier's wake-up.
 *   5. checked.c (DlockCheckedXactEnd): the record of checks is dropped.
 *   6. name_lock.c (DlockNameLockXactEnd): after the end, the budget of
 *      'live' name locks starts again (the lock manager releases the
 *      locks after every callback).
 *
 * This is the order in which the five modules' own callbacks ran when
 * each registered its own (checked.c, events.c, async_commit.c and
 * fence_cache.c from _PG_init in that order, wait.c at its first use, so
 * newest first: wait, fence cache, async commit, events, checked); only
 * the wake-ups moved, from before the callbacks of libraries loaded
 * later to after them, which they do not depend on.  At a
 * subtransaction's end fence_cache.c forgets the writes a rollback
 * undid, then events.c runs before checked.c, as before.
 *
 * Concurrency: none of its own; each step's locking is in its file.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"

#include "dlock.h"
#include "fence_cache.h"

/*
 * dlock_xact_callback runs each module's step of a transaction event, in
 * the order of the file header.
 */
static void
dlock_xact_callback(XactEvent event, void *arg)
{
	DlockWaitXactEnd(event);
	DlockFenceCacheXactEnd(event);
	DlockAsyncReleaseXactEnd(event);
	DlockEventsXactEnd(event);
	DlockCheckedXactEnd(event);
	DlockNameLockXactEnd(event);
}

/*
 * dlock_subxact_callback runs each module's step of a subtransaction
 * event: the fence cache's record of writes, the lease events, then the
 * record of checks.
 */
static void
dlock_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	DlockFenceCacheSubXactEnd(event, mySubid);
	DlockEventsSubXactEnd(event, mySubid, parentSubid);
	DlockCheckedSubXactEnd(event, mySubid, parentSubid);
}

/*
 * DlockXactInit registers the two callbacks; _PG_init calls it once per
 * process (a preloaded library's registration is inherited by every
 * backend).
 */
void
DlockXactInit(void)
{
	RegisterXactCallback(dlock_xact_callback, NULL);
	RegisterSubXactCallback(dlock_subxact_callback, NULL);
}
