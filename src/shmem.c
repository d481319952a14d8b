/*-------------------------------------------------------------------------
 *
 * src/shmem.c
 *	  Shared memory for event-driven waiting: the waiter slots and their
 *	  LWLock, set up when dlock is in shared_preload_libraries.
 *
 * One slot per PGPROC (indexed by pgprocno), so every backend has its own
 * and the queue can never overflow: a backend waits for at most one name
 * at a time.  A slot in use holds the 64-bit hash of the name waited for
 * and a ticket from a shared counter; the waiters of one name, in ticket
 * order, are that name's FIFO queue.  A waiter is woken by setting its
 * process latch.  bucket_waiters counts the slots in use per hash bucket,
 * so that a release can see without taking the LWLock that nobody waits.
 *
 * boot_dbs lists the databases whose token boot jump (token.c) this server
 * start has done; shared memory is rebuilt at every start, crash restarts
 * included, which is the point.
 *
 * The fence cache (fence_cache.c), the counters (stats.c) and the
 * notifiers' slots and queues (notifier.c) have shared memory structs of
 * their own, the cache's sized by dlock.fence_cache_size, the queues' by
 * dlock.notify_queue_size and max_worker_processes; shmem_request asks
 * for them and shmem_startup attaches to them.  Their protocols are in
 * those files' headers (the counters and the notifiers have an LWLock
 * tranche each, "dlock stats" and "dlock notify").
 *
 * Without preload, DlockShared stays NULL and wait.c polls instead (and
 * token.c flushes WAL per grant).
 *
 * Concurrency: the "dlock" LWLock tranche has one lock.  Exclusive to
 * take or give up a slot (and its ticket and bucket count) or to add a
 * boot_dbs entry; shared to scan the slots for a queue's head or to read
 * boot_dbs.  Latches are set after the lock is
 * released.  bucket_waiters is changed only under the exclusive lock, with
 * full-barrier atomics, and read without the lock (see wait.c for why a
 * stale zero cannot lose a wake-up).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"

DlockShared *DlockShmem = NULL;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;

/*
 * shmem_nslots returns the number of waiter slots: one per PGPROC.
 */
static int
shmem_nslots(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/*
 * shmem_size returns the bytes of shared memory dlock needs.
 */
static Size
shmem_size(void)
{
	return add_size(offsetof(DlockShared, slots),
					mul_size(shmem_nslots(), sizeof(DlockWaiter)));
}

/*
 * shmem_request asks the postmaster for dlock's shared memory and LWLock,
 * after chaining to the previous hook.
 */
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shmem_size());
	RequestAddinShmemSpace(DlockFenceCacheShmemSize());
	RequestAddinShmemSpace(DlockStatsShmemSize());
	RequestAddinShmemSpace(DlockNotifierShmemSize());
	RequestNamedLWLockTranche("dlock", 1);
	RequestNamedLWLockTranche("dlock stats", 1);
	RequestNamedLWLockTranche("dlock notify", 1);
}

/*
 * shmem_startup attaches to (or, first, initialises) dlock's shared memory,
 * after chaining to the previous hook.  Takes AddinShmemInitLock.
 */
static void
shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	DlockShmem = ShmemInitStruct("dlock", shmem_size(), &found);
	if (!found)
	{
		int			i;

		DlockShmem->lock = &(GetNamedLWLockTranche("dlock"))->lock;
		DlockShmem->next_ticket = 1;
		DlockShmem->nboot_dbs = 0;
		DlockShmem->nslots = shmem_nslots();
		for (i = 0; i < DLOCK_WAIT_BUCKETS; i++)
			pg_atomic_init_u32(&DlockShmem->bucket_waiters[i], 0);
		memset(DlockShmem->slots, 0, sizeof(DlockWaiter) * DlockShmem->nslots);
	}
	DlockFenceCacheShmemInit();
	DlockStatsShmemInit();
	DlockNotifierShmemInit();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * DlockShmemInstallHooks installs the shared memory hooks when dlock is being
 * preloaded; otherwise it does nothing and waiting falls back to polling.
 */
void
DlockShmemInstallHooks(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
}
