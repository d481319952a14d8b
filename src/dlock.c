/*-------------------------------------------------------------------------
 *
 * src/dlock.c
 *	  Module entry: PG_MODULE_MAGIC, _PG_init and the dlock.* settings.
 *
 * _PG_init only defines settings and delegates; lease logic lives in
 * lease.c, table access in store.c, shared memory in shmem.c, the fence
 * cache in fence_cache.c, the notifier (and its ProcessUtility hook) in
 * notifier.c.
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
#include "fence_cache.h"

PG_MODULE_MAGIC;

/* dlock.max_ttl: the longest ttl an acquire or renew may ask for */
int			dlock_max_ttl = 86400;

/* dlock.fence_cache_size: names the fence cache holds (fence_cache.c) */
int			dlock_fence_cache_size = 65536;

/* dlock.fence_cache: whether this session's fence uses the cache */
bool		dlock_fence_cache = true;

/* dlock.async_release: whether a release of its own skips the flush */
bool		dlock_async_release = true;

/* dlock.log_lease_changes's values */
static const struct config_enum_entry log_lease_changes_options[] = {
	{"off", DLOCK_LOG_CHANGES_OFF, false},
	{"takeovers", DLOCK_LOG_CHANGES_TAKEOVERS, false},
	{"all", DLOCK_LOG_CHANGES_ALL, false},
	{NULL, 0, false}
};

/* The smallest queue of a database: room for a few of the longest events. */
#define DLOCK_MIN_NOTIFY_QUEUE_KB	64

void		_PG_init(void);

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
 * _PG_init defines the dlock.* settings and reserves the prefix, so that a
 * misspelt dlock.* setting is reported instead of silently ignored, and,
 * when preloaded, asks for the shared memory of event-driven waiting and
 * of the fence cache.
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

	/*
	 * The sizes of the cache and of the notifiers' queues are fixed at
	 * server start, so they are settings only when preloaded: a
	 * PGC_POSTMASTER setting cannot be defined by a library loaded later
	 * (and without preload there is neither).  The notifier's idle timeout
	 * is read by notifiers only, which exist only with preload.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("dlock.fence_cache_size",
								"Lock names whose current token the fence cache keeps in shared memory.",
								"With shared_preload_libraries = 'dlock', the 'latest' fence answers "
								"from this cache instead of the lease table's index.  Each name takes "
								"136 bytes; 0 turns the cache off.",
								&dlock_fence_cache_size,
								65536,
								0,
								16777216,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
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
	}

	DefineCustomBoolVariable("dlock.fence_cache",
							 "Whether this session's fence checks use the fence cache.",
							 "Off: the fence reads the lease table's index, and every transaction "
							 "of the session that writes drops the whole cache when it commits.  A "
							 "superuser who writes dlock_lease by hand must do it with this off.",
							 &dlock_fence_cache,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

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

	DefineCustomBoolVariable("dlock.track_stats",
							 "Whether lease operations and fence decisions are counted for dlock_stats.",
							 "Needs shared_preload_libraries = 'dlock'.",
							 &dlock_track_stats,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

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

	MarkGUCPrefixReserved("dlock");

	DlockXactInit();
	DlockShmemInstallHooks();
	DlockNotifierInit();
}
