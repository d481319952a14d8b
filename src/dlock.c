/*-------------------------------------------------------------------------
 *
 * src/dlock.c
 *	  Module entry: PG_MODULE_MAGIC and _PG_init.
 *
 * _PG_init only calls each module's DlockXxxInit, which defines the
 * module's dlock.* settings and sizes and sets up its shared memory
 * (design.md §1); no module calls back into this file.
 *
 * Concurrency: _PG_init runs once per backend (or in the postmaster when
 * preloaded) before any SQL can reach the module; it takes no locks.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "dlock.h"
#include "fence_cache.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init lets each module define its settings and, when dlock is being
 * preloaded, ask for its shared memory (each installs its own hooks,
 * chaining the previous ones), then registers the transaction callbacks
 * and reserves the prefix, so that a misspelt dlock.* setting is reported
 * instead of silently ignored.
 */
void
_PG_init(void)
{
	DlockLeaseInit();
	DlockFenceCacheInit();
	DlockFenceCacheWriteInit();
	DlockAsyncReleaseInit();
	DlockStatsInit();
	DlockEventsInit();
	DlockNotifierInit();
	DlockNotifierCommandInit();
	DlockWaitInit();
	DlockTokenInit();
	DlockXactInit();
	MarkGUCPrefixReserved("dlock");
}
