/*-------------------------------------------------------------------------
 *
 * src/shmem.c
 *	  Shared memory for event-driven waiting: the waiter slots and their
 *	  LWLock, and the DSA area of the any-waiters' name sets, set up when
 *	  dlock is in shared_preload_libraries.
 *
 * One slot per PGPROC (indexed by pgprocno), so every backend has its own
 * and the queue can never overflow: a backend waits for at most one name
 * (or one any-of list) at a time.  A queue slot holds the name waited for
 * (its bytes and its DlockNameHash), its database and a ticket from a
 * shared counter; the waiters of one name in one database, in ticket
 * order, are that name's FIFO queue.  A waiter is woken by setting its
 * process latch.  bucket_waiters counts the slots in use per hash bucket,
 * and db_waiters per database (OID mod DLOCK_WAIT_DBS), so that a release
 * can see without taking the LWLock that nobody waits for its names, or
 * nobody in its database.
 *
 * The any-waiters' area.  A dlock_acquire_any waiter keeps the hashes of
 * its names, with a changed bit per hash, in a DSA area (utils/dsa.h)
 * created in place in the struct "dlock any-waiters" of DLOCK_ANY_AREA_BYTES
 * (as PostgreSQL's cumulative statistics create theirs): what does not fit
 * there goes into dynamic shared memory segments, which the area creates
 * as needed and frees when they are empty, so its size follows what the
 * waiters of the moment need (at most DLOCK_MAX_SET_NAMES hashes per
 * backend) and no setting sizes it.  The postmaster creates and pins the
 * area and detaches from it (it never uses dynamic shared memory);
 * backends attach at first use (DlockAnyArea) and keep their mappings
 * until they exit.  The area's LWLock tranche is allocated at startup
 * (any_tranche) and named "DlockAnyWaiters" in each backend that attaches.
 *
 * boot_dbs lists the databases whose token boot jump (token.c) this server
 * start has done; shared memory is rebuilt at every start, crash restarts
 * included, which is the point.
 *
 * The fence cache (fence_cache.c), the counters (stats.c) and the
 * notifiers' slots, stop marks and queues (notifier.c) have shared memory
 * structs of their own, the cache's sized by dlock.fence_cache_size, the
 * queues' by dlock.notify_queue_size and max_worker_processes, the marks'
 * by the number of server processes; shmem_request asks
 * for them and shmem_startup attaches to them.  Their protocols are in
 * those files' headers (the counters and the notifiers have an LWLock
 * tranche each, "dlock stats" and "dlock notify").
 *
 * Without preload, DlockShared stays NULL and wait.c polls instead (and
 * token.c flushes WAL per grant).
 *
 * Concurrency: the "dlock" LWLock tranche has one lock.  Exclusive to
 * take or give up a slot (and its ticket and bucket count) or to add a
 * boot_dbs entry; shared to scan the slots for a queue's head or the
 * any-slots a change concerns, or to read boot_dbs.  Latches are set after
 * the lock is released.  bucket_waiters and db_waiters are changed only
 * under the exclusive lock, with full-barrier atomics, and read without
 * the lock
 * (see wait.c for why a stale zero cannot lose a wake-up).  The DSA area's
 * own lock is taken inside the dlock LWLock (a waker maps an any-slot's
 * set under it held shared), never the other way round: a waiter
 * allocates its set before taking the dlock LWLock and frees it after
 * releasing it.  What else the slots hold (the any-slots' rings, the
 * attempt counters) is in wait.c's header.
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
#include "utils/memutils.h"

#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"

DlockShared *DlockShmem = NULL;

/*
 * The bytes of plain shared memory the any-waiters' DSA area starts in: a
 * few small name sets fit there, larger ones take dynamic segments.
 */
#define DLOCK_ANY_AREA_BYTES	(128 * 1024)

/* Where the area lives, and this backend's attachment to it. */
static void *any_area_place = NULL;
static dsa_area *any_area = NULL;

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
	RequestAddinShmemSpace(DLOCK_ANY_AREA_BYTES);
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
	bool		any_found PG_USED_FOR_ASSERTS_ONLY;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	DlockShmem = ShmemInitStruct("dlock", shmem_size(), &found);
	any_area_place = ShmemInitStruct("dlock any-waiters", DLOCK_ANY_AREA_BYTES,
									 &any_found);
	Assert(found == any_found);
	if (!found)
	{
		dsa_area   *area;
		int			i;

		DlockShmem->lock = &(GetNamedLWLockTranche("dlock"))->lock;
		DlockShmem->next_ticket = 1;
		DlockShmem->nboot_dbs = 0;
		DlockShmem->nslots = shmem_nslots();
		for (i = 0; i < DLOCK_WAIT_DBS; i++)
			pg_atomic_init_u32(&DlockShmem->db_waiters[i], 0);
		for (i = 0; i < DLOCK_WAIT_BUCKETS; i++)
			pg_atomic_init_u32(&DlockShmem->bucket_waiters[i], 0);
		memset(DlockShmem->slots, 0, sizeof(DlockWaiter) * DlockShmem->nslots);
		for (i = 0; i < DlockShmem->nslots; i++)
		{
			SpinLockInit(&DlockShmem->slots[i].any_mutex);
			pg_atomic_init_u64(&DlockShmem->slots[i].attempts, 0);
			DlockShmem->slots[i].any_set = InvalidDsaPointer;
		}

		/* the any-waiters' area: created and pinned, never used here */
		Assert(dsa_minimum_size() <= DLOCK_ANY_AREA_BYTES);
		DlockShmem->any_tranche = LWLockNewTrancheId();
		area = dsa_create_in_place(any_area_place, DLOCK_ANY_AREA_BYTES,
								   DlockShmem->any_tranche, NULL);
		dsa_pin(area);
		dsa_detach(area);
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

/*
 * DlockAnyArea returns the any-waiters' DSA area, attaching this backend to
 * it at the first call (its mappings then stay until the backend exits,
 * and the attachment is released at exit).  Only with preload.  Can raise
 * (out of memory); never called where an error is not allowed (wait.c).
 */
dsa_area *
DlockAnyArea(void)
{
	MemoryContext oldcontext;

	Assert(DlockShmem != NULL && any_area_place != NULL);
	if (any_area != NULL)
		return any_area;
	LWLockRegisterTranche(DlockShmem->any_tranche, "DlockAnyWaiters");
	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	any_area = dsa_attach_in_place(any_area_place, NULL);
	dsa_pin_mapping(any_area);
	MemoryContextSwitchTo(oldcontext);
	/* after wait.c's exit callback (before_shmem_exit) has freed our set */
	on_shmem_exit(dsa_on_shmem_exit_release_in_place,
				  PointerGetDatum(any_area_place));
	return any_area;
}
