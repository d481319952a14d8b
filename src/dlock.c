/*-------------------------------------------------------------------------
 *
 * src/dlock.c
 *	  Module entry: PG_MODULE_MAGIC, _PG_init and the dlock.* settings.
 *
 * _PG_init only defines settings and delegates; lease logic lives in
 * lease.c, table access in store.c, shared memory in shmem.c.
 *
 * Concurrency: _PG_init runs once per backend (or in the postmaster when
 * preloaded) before any SQL can reach the module; it takes no locks.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "utils/guc.h"

#include "compat.h"
#include "dlock.h"

PG_MODULE_MAGIC;

/* dlock.max_ttl: the longest ttl an acquire or renew may ask for */
int			dlock_max_ttl = 86400;

void		_PG_init(void);

/*
 * _PG_init defines the dlock.* settings and reserves the prefix, so that a
 * misspelt dlock.* setting is reported instead of silently ignored, and,
 * when preloaded, asks for the shared memory of event-driven waiting.
 */
void
_PG_init(void)
{
	DefineCustomIntVariable("dlock.max_ttl",
							"Longest lease time-to-live that dlock_acquire and dlock_renew accept.",
							"A crashed holder blocks a lock name for up to its ttl, so long "
							"ttls trade availability for fewer renewals.  Raising it weakens "
							"the protection, so only superusers may change it.",
							&dlock_max_ttl,
							86400,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("dlock");

	DlockCheckedInit();
	DlockShmemInstallHooks();
}
