/*-------------------------------------------------------------------------
 *
 * src/name_lock.c
 *	  dlock's name lock: a transaction-scoped advisory lock per lock name
 *	  in the lock manager (class DLOCK_LOCKTAG_CLASS, keyed on the name's
 *	  DlockNameHash), which keeps a name from being granted anew while a
 *	  'live' fenced write is open (design.md §14, §17).
 *
 * Who takes it, and in which mode:
 *   - every grant of a name (a takeover, lease_change.c, and the insert of
 *     its first row, store_ops.c) takes ExclusiveLock, only ever without
 *     waiting (DlockNameLockTryGrant): one it cannot have means "held";
 *     a first row's insert keeps it until the transaction ends, a
 *     takeover until it has updated the row (then the update, in the
 *     row's chain, which a 'live' check waits for, does the rest:
 *     lease_fence.c), and a call that grants nothing releases it at once;
 *   - a 'live' check (lease_fence.c) takes ShareLock, waiting, before it
 *     reads the lease (DlockNameLockLive), and keeps it until the
 *     transaction ends when the write passes, released at once otherwise;
 *   - a set acquire's read (lease_change.c) asks whether another
 *     transaction holds it in either mode (DlockNameLockBusy), locking
 *     nothing.
 * Only ShareLock requests ever wait, so a waiter never queues behind
 * another waiter and the grants never wait for anybody: a deadlock needs
 * a 'live' writer that waits for a grant (for its name lock, or, after
 * releasing its own, for a takeover's transaction) whose transaction
 * waits for that writer, which the deadlock detector resolves as it resolves the
 * row-lock waits of earlier releases.  The lock lives in shared memory only: a prepared
 * transaction keeps it through a restart and a promotion
 * (lock_twophase_recover), a crash drops it together with the open
 * transactions it protected (docs/guarantees.md, "Fencing").
 *
 * The budget.  The lock manager's shared table is sized for
 * max_locks_per_transaction entries per connection, for all sessions
 * together; a transaction that fences thousands of names in mode 'live'
 * would fill it and make every session's locks fail.  So a transaction
 * takes at most DLOCK_LIVE_BUDGET new name locks in ShareLock (half of
 * max_locks_per_transaction); past that, or when the shared table has no
 * room, DlockNameLockLive returns false and the fence locks the lease
 * row FOR KEY SHARE instead, which every grant also honours.
 *
 * Concurrency: the lock manager's own; the budget is backend-local and
 * reset at the end of every top-level transaction (xact.c).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/resowner.h"

#include "compat.h"
#include "dlock.h"

/* field4 of the name lock's tag; the SQL advisory functions use 1 and 2 */
#define DLOCK_LOCKTAG_CLASS		0xD10C

/* New 'live' name locks a transaction may take before it locks rows */
#define DLOCK_LIVE_BUDGET	Max(max_locks_per_xact / 2, 1)

/* The 'live' name locks this transaction has taken (reset at its end) */
static int	live_locks_taken = 0;

/* A shared lock table without room: use rows until the transaction ends */
static bool live_table_full = false;

/*
 * name_lock_acquire takes the name lock (tag) in mode for the current
 * (sub)transaction, never for a portal: a lock a cursor's fetch took
 * belongs to the cursor's resource owner, which a later fetch that fails
 * inside a savepoint hands to that savepoint and releases at its rollback
 * (AtSubAbort_Portals), while the write the lock protects stays.  Waits
 * unless dont_wait; with no_memory_error, a full shared lock table returns
 * LOCKACQUIRE_NOT_AVAIL (only when waiting) instead of raising 53200.
 */
static LockAcquireResult
name_lock_acquire(const LOCKTAG *tag, LOCKMODE mode, bool dont_wait,
				  bool no_memory_error)
{
	ResourceOwner save = CurrentResourceOwner;
	LockAcquireResult res;

	Assert(!(dont_wait && no_memory_error));
	CurrentResourceOwner = CurTransactionResourceOwner;
	PG_TRY();
	{
		if (no_memory_error)
			res = DlockLockAcquireNoMemoryError(tag, mode);
		else
			res = LockAcquire(tag, mode, false, dont_wait);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = save;
	}
	PG_END_TRY();
	return res;
}

/*
 * name_lock_release releases one hold of the name lock in mode that
 * name_lock_acquire took (a hold of an earlier call of this transaction
 * stays).
 */
static void
name_lock_release(const LOCKTAG *tag, LOCKMODE mode)
{
	ResourceOwner save = CurrentResourceOwner;

	CurrentResourceOwner = CurTransactionResourceOwner;
	LockRelease(tag, mode, false);
	CurrentResourceOwner = save;
}

/*
 * DlockNameLockTag fills tag with dlock's name lock for lock_name in the
 * current database.
 */
void
DlockNameLockTag(LOCKTAG *tag, text *lock_name)
{
	uint64		h = DlockNameHash(lock_name);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 DLOCK_LOCKTAG_CLASS);
}

/*
 * DlockNameLockTryGrant takes the name lock of lock_name (tag, filled
 * here) in ExclusiveLock without waiting, for a grant of the name, and
 * returns whether it has it: false means another transaction holds it
 * (an open 'live' write, grant or first insert of the name).  The caller
 * keeps it when it grants and calls DlockNameLockUndoGrant otherwise.
 */
bool
DlockNameLockTryGrant(LOCKTAG *tag, text *lock_name)
{
	DlockNameLockTag(tag, lock_name);
	if (name_lock_acquire(tag, ExclusiveLock, true, false) ==
		LOCKACQUIRE_NOT_AVAIL)
		return false;
	Assert(DlockLockHeldByMe(tag, ExclusiveLock));
	return true;
}

/*
 * DlockNameLockUndoGrant releases the hold DlockNameLockTryGrant took (a
 * hold of an earlier call of this transaction stays).
 */
void
DlockNameLockUndoGrant(const LOCKTAG *tag)
{
	name_lock_release(tag, ExclusiveLock);
}

/*
 * DlockNameLockLive takes the name lock of lock_name (tag, filled here) in
 * ShareLock for a 'live' check, waiting for a transaction that is granting
 * the name, and returns true; or takes nothing and returns false when the
 * transaction has used its budget of name locks or the lock manager's
 * shared table has no room, and the caller must lock the lease row
 * instead.  A name this transaction holds already costs no budget: the
 * lock manager answers it from the backend's own table.  The caller keeps
 * the lock when the write passes and calls DlockNameLockUndoLive
 * otherwise.
 */
bool
DlockNameLockLive(LOCKTAG *tag, text *lock_name)
{
	LockAcquireResult res;

	DlockNameLockTag(tag, lock_name);
	if (live_table_full)
		return false;
	if (live_locks_taken >= DLOCK_LIVE_BUDGET &&
		!DlockLockHeldByMe(tag, ShareLock))
		return false;
	res = name_lock_acquire(tag, ShareLock, false, true);
	if (res == LOCKACQUIRE_NOT_AVAIL)
	{
		/* waiting, so only a full shared table refuses */
		live_table_full = true;
		return false;
	}
	if (res == LOCKACQUIRE_OK)
		live_locks_taken++;
	Assert(DlockLockHeldByMe(tag, ShareLock));
	return true;
}

/*
 * DlockNameLockUndoLive releases the hold DlockNameLockLive took (a hold of
 * an earlier check of this transaction stays).
 */
void
DlockNameLockUndoLive(const LOCKTAG *tag)
{
	name_lock_release(tag, ShareLock);
	if (!DlockLockHeldByMe(tag, ShareLock) && live_locks_taken > 0)
		live_locks_taken--;
}

/*
 * DlockNameLockBusy reports whether another transaction holds the name lock
 * of lock_name in a mode a grant conflicts with (an open 'live' write, a
 * prepared one included, or a grant in progress), without locking: a
 * snapshot of the moment, for a read that must not write.
 */
bool
DlockNameLockBusy(text *lock_name)
{
	LOCKTAG		tag;
	int			n = 0;
	VirtualTransactionId *vxids;

	DlockNameLockTag(&tag, lock_name);
	vxids = GetLockConflicts(&tag, ExclusiveLock, &n);
	/* palloc'd: only the startup process gets a static array */
	pfree(vxids);
	return n > 0;
}

/*
 * DlockNameLockXactEnd resets the budget when a top-level transaction ends
 * (the lock manager releases the locks themselves).
 */
void
DlockNameLockXactEnd(XactEvent event)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			live_locks_taken = 0;
			live_table_full = false;
			break;
		default:
			break;
	}
}
