/*-------------------------------------------------------------------------
 *
 * src/wait.c
 *	  Sleeping between acquire attempts: bounded exponential backoff on the
 *	  process latch.
 *
 * An acquire with wait > 0 retries until its deadline.  Between attempts
 * the backend sleeps on its latch (no CPU, no busy loop), starting at
 * DLOCK_BACKOFF_MIN_MS and doubling up to DLOCK_BACKOFF_MAX_MS, never past
 * the deadline.  Query cancel, statement_timeout and backend termination
 * set the latch and are served by CHECK_FOR_INTERRUPTS() after each sleep;
 * postmaster death ends the process (WL_EXIT_ON_PM_DEATH).
 *
 * Concurrency: this file touches no table and holds no lock.  The caller
 * (lease.c) makes sure that no row lock or name lock is held across the
 * sleep: a failed attempt keeps nothing (see store.c).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "dlock.h"

#define DLOCK_BACKOFF_MIN_MS	1
#define DLOCK_BACKOFF_MAX_MS	50

/*
 * DlockBackoffInit resets the backoff to its shortest sleep.
 */
void
DlockBackoffInit(DlockBackoff *backoff)
{
	backoff->next_ms = DLOCK_BACKOFF_MIN_MS;
}

/*
 * DlockWaitUntilRetry sleeps until the next attempt is due: the current
 * backoff step or the deadline, whichever comes first, then doubles the
 * step.  It returns at once when the deadline has passed.  Raises whatever
 * CHECK_FOR_INTERRUPTS raises (cancel, statement_timeout, termination).
 */
void
DlockWaitUntilRetry(DlockBackoff *backoff, TimestampTz deadline)
{
	TimestampTz now = GetCurrentTimestamp();
	long		remaining_ms;
	long		sleep_ms;

	CHECK_FOR_INTERRUPTS();

	remaining_ms = TimestampDifferenceMilliseconds(now, deadline);
	if (remaining_ms <= 0)
		return;
	sleep_ms = Min(backoff->next_ms, remaining_ms);

	(void) WaitLatch(MyLatch,
					 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 sleep_ms,
					 DLOCK_WAIT_EVENT);
	ResetLatch(MyLatch);

	CHECK_FOR_INTERRUPTS();

	backoff->next_ms = Min(backoff->next_ms * 2, DLOCK_BACKOFF_MAX_MS);
}
