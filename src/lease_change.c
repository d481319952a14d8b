/*-------------------------------------------------------------------------
 *
 * src/lease_change.c
 *	  The direct operations that change a lease row: taking over an ended
 *	  lease (DlockLeaseTake), renew, release and break (DlockLeaseChange),
 *	  and a set acquire's read of the held leases among its names
 *	  (DlockLeaseFindHeld), on lease_table.c's primitives (design.md §14).
 *
 * Concurrency: a takeover takes dlock's name lock in ExclusiveLock and then
 * locks the version it checked FOR UPDATE, both without waiting (a lock it
 * cannot have means "held"), and releases the name lock once it has written
 * (name_lock.c); renew, release and break update the version they read,
 * may wait for a concurrent change of the row and then decide again on its
 * newest version (FOR NO KEY UPDATE).  Every write opens the name's fence
 * cache bucket before it (DlockLeaseWrite).  A call that
 * changes nothing keeps no lock.  All run as the lease table's owner.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/freespace.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "compat.h"
#include "dlock.h"
#include "lease_room.h"
#include "lease_table.h"
#include "lease_table_int.h"

/*
 * lease_new_row_size estimates the space a name's first row takes on a
 * page (with its line pointer): the header, the two texts and at most 64
 * bytes for the other columns and their alignment.  A hint for
 * DlockLeaseMakeRoom; the insert checks the real size.
 */
static Size
lease_new_row_size(text *lock_name, text *owner)
{
	return MAXALIGN(SizeofHeapTupleHeader) +
		MAXALIGN(VARSIZE_ANY(lock_name) + VARSIZE_ANY(owner) + 64) +
		sizeof(ItemIdData);
}

/*
 * lease_owner_copy returns a copy of a row's owner label for a lease
 * event's log line, in CurTransactionContext: the operation may run in
 * SPI's memory, which its store session frees, and a set acquire's
 * attempt that is rolled back frees its copies with its subtransaction.
 */
static text *
lease_owner_copy(text *owner)
{
	MemoryContext old = MemoryContextSwitchTo(CurTransactionContext);
	text	   *copy = DatumGetTextPCopy(PointerGetDatum(owner));

	MemoryContextSwitchTo(old);
	return copy;
}

/* Takeover attempts that meet a concurrent committed change before giving up. */
#define TAKE_TRIES	3

/*
 * DlockLeaseTake takes over the ended lease of lock_name, if it has one,
 * for holder (labelled owner) from now until expires: locks the version it
 * read FOR UPDATE without waiting (an open transaction's lock means held),
 * draws a token from the sequence seqrelid and writes the new lease.  Sets
 * *token and *prev (the lease it replaced; its owner label only when a
 * lease event wants it), or *held_until when a live lease holds the name.
 */
DlockTakeResult
DlockLeaseTake(const DlockLeaseTable *table, Oid seqrelid, text *lock_name,
			   text *owner, Oid holder, TimestampTz now, TimestampTz expires,
			   int64 *token, TimestampTz *held_until, DlockPrevLease *prev)
{
	LeaseAccess la;
	DlockTakeResult result = DLOCK_TAKE_HELD;
	int			try;

	DlockLeaseOpen(&la, table);
	for (try = 0; try < TAKE_TRIES; try++)
	{
		Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
		LeaseRow	row;
		TM_FailureData tmfd;
		TM_Result	res;
		LOCKTAG		tag;

		if (!DlockLeaseRead(&la, snapshot, lock_name, &row))
		{
			/*
			 * The caller inserts the name's first row: room for it.  Pruning
			 * while the snapshot is registered: this backend's xmin then
			 * keeps what it can see.
			 */
			if (DlockLeaseIsHeap(la.rel))
				DlockLeaseMakeRoom(la.rel, lease_new_row_size(lock_name, owner));
			UnregisterSnapshot(snapshot);
			result = DLOCK_TAKE_NO_ROW;
			break;
		}
		if (DlockLeaseRowLive(&row, now))
		{
			UnregisterSnapshot(snapshot);
			*held_until = row.f.expires_at;
			result = DLOCK_TAKE_HELD;
			break;
		}

		/* an open 'live' write of the name holds its name lock */
		if (!DlockNameLockTryGrant(&tag, lock_name))
		{
			UnregisterSnapshot(snapshot);
			*held_until = 0;
			result = DLOCK_TAKE_HELD;
			break;
		}

		/*
		 * FOR UPDATE: conflicts with every row lock, FOR KEY SHARE (a 'live'
		 * write past its transaction's budget of name locks, or in a
		 * SERIALIZABLE transaction) included
		 */
		res = table_tuple_lock(la.rel, &row.tid, snapshot, la.slot,
							   GetCurrentCommandId(true), LockTupleExclusive,
							   LockWaitSkip, 0, &tmfd);
		if (res != TM_Ok)
			DlockNameLockUndoGrant(&tag);
		if (res == TM_WouldBlock)
		{
			UnregisterSnapshot(snapshot);
			*held_until = 0;
			result = DLOCK_TAKE_HELD;	/* an open transaction is changing it */
			break;
		}
		if (res == TM_Updated || res == TM_Deleted)
		{
			UnregisterSnapshot(snapshot);
			continue;			/* changed since the read: read again */
		}
		if (res != TM_Ok)
			elog(ERROR, "unexpected result %d locking a dlock lease row", (int) res);

		/*
		 * Locked the version that was read (TM_Ok: not changed since), so it
		 * is still ended.  Take it.
		 */
		DlockLeaseRowFromSlot(&la, &row);
		Assert(!DlockLeaseRowLive(&row, now));
		prev->kind = row.f.released ? DLOCK_GRANT_AFTER_RELEASE :
			DLOCK_GRANT_TAKEOVER;
		prev->token = row.f.token;
		prev->ended_at = row.f.expires_at;
		prev->owner = NULL;
		if (row.f.owner != NULL && !row.f.released && DlockEventsWantOwner())
			prev->owner = lease_owner_copy(row.f.owner);
		/* tokens of a name only grow (token.c) */
		*token = DlockTokenDrawAbove(seqrelid, row.f.token);
		Assert(*token > row.f.token);

		/* DlockLeaseWrite opens the name's bucket of the fence cache first */
		row.f.token = *token;
		row.f.owner = owner;
		row.f.holder_role = holder;
		row.f.acquired_at = now;
		row.f.renewed_at = now;
		row.f.expires_at = expires;
		row.f.released = false;
		if (DlockLeaseWrite(&la, snapshot, lock_name, &row) != TM_Ok)
			elog(ERROR, "dlock lease row changed while locked");

		/*
		 * The old version's xmax is now this transaction's update, which a
		 * 'live' check that reads it waits for (lease_fence.c), so the name
		 * lock has done its part: a set acquire of thousands of names keeps
		 * no lock-table entry per name.  Unless the table is not a heap,
		 * whose xmax the check does not read.
		 */
		if (DlockLeaseIsHeap(la.rel))
			DlockNameLockUndoGrant(&tag);
		UnregisterSnapshot(snapshot);
		result = DLOCK_TAKE_GRANTED;
		break;
	}
	DlockLeaseClose(&la);
	return result;
}

/*
 * DlockLeaseRowBusy reports whether the version DlockLeaseRead found (row) is
 * locked or being changed by another transaction that is still in
 * progress (its xmax, read under the buffer's share lock by
 * DlockLeaseRowFromSlot).  A hint for a read that must not write: a
 * MultiXact xmax counts as not busy (its members may include this
 * transaction), and the attempt that follows decides for certain.
 */
bool
DlockLeaseRowBusy(const LeaseRow *row)
{
	if ((row->infomask & (HEAP_XMAX_INVALID | HEAP_XMAX_IS_MULTI)) != 0 ||
		!TransactionIdIsNormal(row->xmax) ||
		TransactionIdIsCurrentTransactionId(row->xmax))
		return false;
	return TransactionIdIsInProgress(row->xmax);
}

/*
 * DlockLeaseFindHeld reads the leases of the n names, in order, with one
 * fresh snapshot and no lock, and returns the index of the first that is
 * held: live at now (setting *held_until to its expiry), or locked or
 * being changed by another open transaction (setting *held_until to 0);
 * -1 when none is.  A read only: a set acquire (store_ops.c) asks first,
 * so that an attempt that would be refused by a lease that is plainly held
 * writes nothing; rows changed after the read are decided by the attempt
 * itself.
 */
int
DlockLeaseFindHeld(const DlockLeaseTable *table, text **names, int n,
				   TimestampTz now, TimestampTz *held_until)
{
	LeaseAccess la;
	Snapshot	snapshot;
	int			found = -1;
	int			i;

	DlockLeaseOpen(&la, table);
	la.want_xmax = true;
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	for (i = 0; i < n; i++)
	{
		LeaseRow	row;
		bool		has_row = DlockLeaseRead(&la, snapshot, names[i], &row);

		if (has_row && DlockLeaseRowLive(&row, now))
		{
			*held_until = row.f.expires_at;
			found = i;
			break;
		}
		/* a locked row, or an open 'live' write, grant or first insert */
		if ((has_row && DlockLeaseRowBusy(&row)) ||
			DlockNameLockBusy(names[i]))
		{
			*held_until = 0;
			found = i;
			break;
		}
	}
	UnregisterSnapshot(snapshot);
	DlockLeaseClose(&la);
	return found;
}

/*
 * DlockLeaseChange is the body of renew, release and break (c->kind says
 * which): it reads the row, and when its lease qualifies (live, and held
 * by c's token unless breaking) writes the change, waiting for a
 * concurrent transaction that changes the same row and then deciding
 * again on the row's newest version.  Renew and release decide in this
 * order: a token that is not the row's current token changes nothing
 * (DLOCK_STORE_NOT_HELD, whoever asks: a holder whose lease was taken
 * over, by any role, learns that it lost it); the current token named by
 * a caller who may not act for the row's holder role (DlockMayActFor:
 * that role, a member of it, a superuser) changes nothing and locks
 * nothing (DLOCK_STORE_DENIED: the caller raises 42501); an ended lease
 * changes nothing.  Sets c->outcome and c->holder (the row's holder role,
 * when the token was current); returns whether it changed the lease.
 */
bool
DlockLeaseChange(const DlockLeaseTable *table, DlockLeaseChangeOp *c)
{
	LeaseAccess la;
	bool		changed = false;

	c->holder = InvalidOid;
	DlockLeaseOpen(&la, table);
	for (;;)
	{
		Snapshot	snapshot;
		LeaseRow	row;
		TM_Result	res;

		CHECK_FOR_INTERRUPTS();
		snapshot = RegisterSnapshot(GetLatestSnapshot());
		if (!DlockLeaseRead(&la, snapshot, c->lock_name, &row))
		{
			UnregisterSnapshot(snapshot);
			c->outcome = DLOCK_STORE_NO_LEASE;
			break;
		}
		if (c->kind != DLOCK_CHANGE_BREAK)
		{
			if (row.f.token != c->token)
			{
				UnregisterSnapshot(snapshot);
				c->outcome = DLOCK_STORE_NOT_HELD;
				break;
			}
			c->holder = row.f.holder_role;
			/* checked before anything is written or locked */
			Assert(OidIsValid(c->caller));
			if (!DlockMayActFor(c->caller, row.f.holder_role))
			{
				UnregisterSnapshot(snapshot);
				c->outcome = DLOCK_STORE_DENIED;
				break;
			}
		}
		if (!DlockLeaseRowLive(&row, c->now))
		{
			UnregisterSnapshot(snapshot);
			c->outcome = DLOCK_STORE_NOT_HELD;
			break;
		}

		Assert(DlockLeaseRowLive(&row, c->now));
		Assert(c->kind == DLOCK_CHANGE_BREAK || row.f.token == c->token);
		if (c->kind == DLOCK_CHANGE_RENEW)
		{
			row.f.renewed_at = c->now;
			row.f.expires_at = c->expires;
		}
		else
		{
			if (c->kind == DLOCK_CHANGE_BREAK)
			{
				c->found_token = row.f.token;
				c->found_expires = row.f.expires_at;
				c->found_owner = NULL;
				if (row.f.owner != NULL && DlockEventsWantOwner())
					c->found_owner = lease_owner_copy(row.f.owner);
			}
			row.f.released = true;
			row.f.expires_at = c->now;
		}
		res = DlockLeaseWrite(&la, snapshot, c->lock_name, &row);
		UnregisterSnapshot(snapshot);
		if (res == TM_Ok)
		{
			c->outcome = DLOCK_STORE_DONE;
			changed = true;
			break;
		}
		/* a concurrent change committed first: decide on the newest version */
	}
	DlockLeaseClose(&la);
	return changed;
}
