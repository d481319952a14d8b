/*-------------------------------------------------------------------------
 *
 * src/wait_shmem.c
 *	  The shared memory of waiting (wait.c): the waiter slots, their "dlock"
 *	  LWLock, and the DSA area of the any-waiters' name sets, set up when
 *	  dlock is in shared_preload_libraries (DlockWaitInit).
 *
 * One slot per PGPROC (indexed by pgprocno): a backend waits for at most
 * one name (or one any-of list) at a time, so a queue never overflows.
 * The any-waiters' area is created in place in the struct "dlock
 * any-waiters" of DLOCK_ANY_AREA_BYTES, grows into dynamic segments as
 * needed, is created and pinned by the postmaster and attached by
 * backends at first use (DlockAnyArea).  Without preload DlockWaitShmem
 * stays NULL and wait.c polls.  The queues, and why no wake-up is lost,
 * are in wait.c's header and design.md §6.
 *
 * Concurrency: the "dlock" LWLock tranche has one lock: exclusive to take
 * or give up a slot (and its ticket and bucket count), shared to scan the
 * slots; latches are set after it is released.  bucket_waiters and
 * db_waiters change only under it held exclusively, with full-barrier
 * atomics, and are read without it.  The DSA area's own lock is taken
 * inside the dlock LWLock, never around it (design.md §5).
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

DlockWaitShared *DlockWaitShmem = NULL;

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
	return add_size(offsetof(DlockWaitShared, slots),
					mul_size(shmem_nslots(), sizeof(DlockWaiter)));
}

/*
 * shmem_request asks the postmaster for the waiter slots, the any-waiters'
 * area and the dlock LWLock, after chaining to the previous hook.
 */
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shmem_size());
	RequestAddinShmemSpace(DLOCK_ANY_AREA_BYTES);
	RequestNamedLWLockTranche("dlock", 1);
}

/*
 * shmem_startup attaches to (or, first, initialises) waiting's shared memory,
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
	DlockWaitShmem = ShmemInitStruct("dlock", shmem_size(), &found);
	any_area_place = ShmemInitStruct("dlock any-waiters", DLOCK_ANY_AREA_BYTES,
									 &any_found);
	Assert(found == any_found);
	if (!found)
	{
		dsa_area   *area;
		int			i;

		DlockWaitShmem->lock = &(GetNamedLWLockTranche("dlock"))->lock;
		DlockWaitShmem->next_ticket = 1;
		DlockWaitShmem->nslots = shmem_nslots();
		for (i = 0; i < DLOCK_WAIT_DBS; i++)
			pg_atomic_init_u32(&DlockWaitShmem->db_waiters[i], 0);
		for (i = 0; i < DLOCK_WAIT_BUCKETS; i++)
			pg_atomic_init_u32(&DlockWaitShmem->bucket_waiters[i], 0);
		memset(DlockWaitShmem->slots, 0, sizeof(DlockWaiter) * DlockWaitShmem->nslots);
		for (i = 0; i < DlockWaitShmem->nslots; i++)
		{
			SpinLockInit(&DlockWaitShmem->slots[i].any_mutex);
			pg_atomic_init_u64(&DlockWaitShmem->slots[i].attempts, 0);
			DlockWaitShmem->slots[i].any_set = InvalidDsaPointer;
		}

		/* the any-waiters' area: created and pinned, never used here */
		Assert(dsa_minimum_size() <= DLOCK_ANY_AREA_BYTES);
		DlockWaitShmem->any_tranche = LWLockNewTrancheId();
		area = dsa_create_in_place(any_area_place, DLOCK_ANY_AREA_BYTES,
								   DlockWaitShmem->any_tranche, NULL);
		dsa_pin(area);
		dsa_detach(area);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * DlockWaitInit installs the shared memory hooks when dlock is being
 * preloaded; otherwise it does nothing and waiting falls back to polling.
 * _PG_init calls it.
 */
void
DlockWaitInit(void)
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

	Assert(DlockWaitShmem != NULL && any_area_place != NULL);
	if (any_area != NULL)
		return any_area;
	LWLockRegisterTranche(DlockWaitShmem->any_tranche, "DlockAnyWaiters");
	oldcontext = MemoryContextSwitchTo(TopMemoryContext);
	any_area = dsa_attach_in_place(any_area_place, NULL);
	dsa_pin_mapping(any_area);
	MemoryContextSwitchTo(oldcontext);
	/* after wait.c's exit callback (before_shmem_exit) has freed our set */
	on_shmem_exit(dsa_on_shmem_exit_release_in_place,
				  PointerGetDatum(any_area_place));
	return any_area;
}
