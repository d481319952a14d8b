/*-------------------------------------------------------------------------
 *
 * src/lease_fence.c
 *	  The fence's direct access to the lease table: the 'latest' fence's
 *	  read (DlockLeaseFenceRead, answered by the fence cache when it can)
 *	  and the 'live' fence's read under a lock (DlockLeaseFenceLock), which
 *	  run as the caller (design.md §14, §17).
 *
 * Concurrency: the 'latest' read takes AccessShareLock on the table and
 * its index and no row lock, with a fresh snapshot; a hit of the fence
 * cache under a relfilenode store.c knows to be current takes no lock at
 * all (DlockLeaseFenceHit, design.md §12).  The 'live' check
 * takes dlock's name lock in ShareLock, waiting for a grant of the name
 * in progress, and reads with a snapshot taken after it (AccessShareLock);
 * when a takeover that has written the row is in the row's update chain,
 * not aborted, it gives the lock back, waits for that transaction and
 * starts again (lease_chain_taker);
 * in a SERIALIZABLE transaction, and past a transaction's budget of name
 * locks (name_lock.c), it locks the row FOR KEY SHARE instead (RowShareLock),
 * waiting, following a concurrently changed row to its newest version as
 * READ COMMITTED does (a SERIALIZABLE transaction gets 40001).  All keep
 * their locks until the transaction ends, except a 'live' check's lock
 * when its write will not pass.
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
#include "fence_cache.h"
#include "lease_room.h"
#include "lease_table.h"
#include "lease_table_int.h"

/*
 * lease_slot_has_name reports whether the version in slot is the row of
 * lock_name (the recheck an executor does on a row version it followed an
 * update to; dlock never changes a row's lock_name).
 */
static inline bool
lease_slot_has_name(const DlockLeaseTable *table, TupleTableSlot *slot,
					text *lock_name)
{
	return DlockSlotHasName(slot, table->att_lock_name, lock_name);
}

/*
 * lease_fence_fields copies what the fence reads of the lease row in slot
 * into *lease.
 */
static void
lease_fence_fields(const DlockLeaseTable *table, TupleTableSlot *slot,
				   DlockFenceLease *lease)
{
	lease->token = DatumGetInt64(DlockLeaseField(slot, table->att_token));
	lease->expires_at = DatumGetTimestampTz(DlockLeaseField(slot, table->att_expires_at));
	lease->released = DatumGetBool(DlockLeaseField(slot, table->att_released));
	lease->state_read = true;
}

/*
 * DlockLeaseFenceRead reads the lease of lock_name into *lease for the
 * 'latest' fence: from the fence cache when it knows the name
 * (fence_cache.c; then only found and token are set, and state_read is
 * false), otherwise straight from the primary key index and the heap, with
 * a fresh snapshot and no row lock, without SPI's per-statement executor
 * setup, and then offers the token to the cache.  The same MVCC read as
 * DlockLeaseRead.  Takes AccessShareLock on the table (and on the index when
 * it reads it), kept until the transaction ends; the table's lock is what
 * makes its relfilenode, part of the cache's key, current.  Sets *relnumber
 * to that relfilenode, or InvalidOid when this transaction made it (the
 * cache is then not used).  Runs as the caller (opening a relation checks
 * no privilege); the lookup evaluates no user-defined function.
 */
void
DlockLeaseFenceRead(const DlockLeaseTable *table, text *lock_name,
					DlockFenceLease *lease, Oid *relnumber)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	TupleTableSlot *slot;
	DlockFenceCacheTicket ticket;
	ItemPointerData root;

	Assert(OidIsValid(table->relid) && table->att_token > 0);
	rel = table_open(table->relid, AccessShareLock);
	*relnumber = DlockRelFileNumberIsNew(rel) ? InvalidOid : DlockRelFileNumber(rel);
	lease->state_read = false;
	lease->released = false;
	lease->expires_at = 0;
	if (DlockFenceCacheGet(rel, lock_name, &lease->token, &root, &ticket))
	{
		lease->found = true;
		table_close(rel, NoLock);
		return;
	}

	idx = DlockLeasePkeyOpen(table, rel, AccessShareLock);
	/* taken after the ticket (fence_cache.c: a fill needs that order) */
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);

	lease->found = DlockLeaseLookup(rel, idx, snap, lock_name, slot, &root);
	if (lease->found)
		lease_fence_fields(table, slot, lease);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	if (lease->found)
		DlockFenceCacheFill(&ticket, lock_name, lease->token, &root);
}

/*
 * DlockLeaseFenceHit is DlockLeaseFenceRead answered by the fence cache
 * alone, without opening the table: relnumber is the table's relfilenode,
 * which the caller knows to be current (store.c, design.md §12, "A hit
 * without the table's lock").  Returns false, having set nothing, when the
 * cache does not know the name; the caller then reads.  Takes no lock.
 */
bool
DlockLeaseFenceHit(const DlockLeaseTable *table, Oid relnumber,
				   text *lock_name, DlockFenceLease *lease)
{
	DlockFenceCacheTicket ticket;
	ItemPointerData root;
	int64		token;

	Assert(OidIsValid(table->relid) && OidIsValid(relnumber));
	if (!DlockFenceCacheGetKey(table->relid, relnumber, lock_name, &token,
							   &root, &ticket))
		return false;
	lease->found = true;
	lease->token = token;
	lease->state_read = false;
	lease->released = false;
	lease->expires_at = 0;
	return true;
}

/*
 * lease_fetch_hint fetches, with snapshot, the visible version of the HOT
 * chain whose root is at *root into slot, and returns whether there was one
 * and it is lock_name's row: what DlockLeaseLookup would find, without the
 * B-tree descent.  The fence cache's root (fence_cache.c) is a hint, and
 * this checks it; it always points into the table (a page holding a live
 * row's root is never truncated, and a non-HOT update or a delete of the
 * row opens the name's bucket until its transaction has ended).
 */
static bool
lease_fetch_hint(const DlockLeaseTable *table, Relation rel,
				 Snapshot snapshot, ItemPointer root, text *lock_name,
				 TupleTableSlot *slot)
{
	IndexFetchTableData *fetch = table_index_fetch_begin(rel);
	ItemPointerData tid = *root;
	bool		call_again = false;
	bool		all_dead = false;
	bool		found;

	found = table_index_fetch_tuple(fetch, &tid, snapshot, slot, &call_again,
									&all_dead);
	table_index_fetch_end(fetch);
	return found && lease_slot_has_name(table, slot, lock_name);
}

/* The visible version of a lease row that lease_find found, and how. */
typedef struct LeaseFind
{
	Snapshot	snap;			/* taken after the cache's ticket */
	TupleTableSlot *slot;		/* the version */
	Relation	idx;			/* the primary key, when it was read */
} LeaseFind;

/*
 * lease_find finds the version of lock_name's row in rel (the lease table,
 * locked by the caller) visible to a fresh snapshot: through the fence
 * cache's root hint when use_cache and the cache knows the name (checked:
 * lease_fetch_hint), else through the primary key (AccessShareLock, kept
 * until the transaction ends), and then offers its token to the cache.
 * Returns whether there is one, in f->slot; lease_find_end frees *f.
 */
static bool
lease_find(const DlockLeaseTable *table, Relation rel, text *lock_name,
		   bool use_cache, LeaseFind *f)
{
	DlockFenceCacheTicket ticket;
	ItemPointerData root;
	int64		cached_token;
	bool		hinted = false;
	bool		seen;

	ticket.bucket = -1;
	if (use_cache)
		hinted = DlockFenceCacheGet(rel, lock_name, &cached_token, &root,
									&ticket);
	/* taken after the ticket (fence_cache.c: a fill needs that order) */
	f->snap = RegisterSnapshot(GetLatestSnapshot());
	f->slot = table_slot_create(rel, NULL);
	f->idx = NULL;
	seen = hinted &&
		lease_fetch_hint(table, rel, f->snap, &root, lock_name, f->slot);
	if (!seen)
	{
		f->idx = DlockLeasePkeyOpen(table, rel, AccessShareLock);
		seen = DlockLeaseLookup(rel, f->idx, f->snap, lock_name, f->slot,
								&root);
		if (seen && !hinted)
			DlockFenceCacheFill(&ticket, lock_name,
								DatumGetInt64(DlockLeaseField(f->slot, table->att_token)),
								&root);
	}
	return seen;
}

/*
 * lease_find_end drops what lease_find took, but the relation locks.
 */
static void
lease_find_end(LeaseFind *f)
{
	ExecDropSingleTupleTableSlot(f->slot);
	UnregisterSnapshot(f->snap);
	if (f->idx != NULL)
		index_close(f->idx, NoLock);
}

/*
 * lease_holder_denies applies the holder-role rule to the version in slot:
 * when it carries token and actor may not act for its holder role
 * (DlockMayActFor), it sets lease->denied and lease->holder and returns
 * true.
 */
static bool
lease_holder_denies(const DlockLeaseTable *table, TupleTableSlot *slot,
					int64 token, Oid actor, DlockFenceLease *lease)
{
	Oid			holder;

	if (DatumGetInt64(DlockLeaseField(slot, table->att_token)) != token)
		return false;
	holder = DatumGetObjectId(DlockLeaseField(slot, table->att_holder_role));
	if (DlockMayActFor(actor, holder))
		return false;
	lease->denied = true;
	lease->holder = holder;
	return true;
}

/*
 * lease_fence_row_lock reads the lease of lock_name into *lease for the
 * 'live' fence and locks its row FOR KEY SHARE until the transaction ends,
 * as SELECT ... FOR KEY SHARE would, without SPI: the version visible to a
 * fresh snapshot, found through the root of its HOT chain that the fence
 * cache keeps (checked: lease_fetch_hint) or else through the primary key
 * (then offered to the cache), then table_tuple_lock on that version,
 * waiting for a transaction that holds a conflicting lock (a takeover's
 * FOR UPDATE) or changed the row.  READ COMMITTED rules, also under
 * REPEATABLE READ: when the row was changed concurrently, the lock follows
 * it to its newest version (TUPLE_LOCK_FLAG_FIND_LAST_VERSION), which is
 * then the lease read (a deleted row: no lease).  A SERIALIZABLE
 * transaction keeps its rules, as the SQL statement did: a concurrent
 * update or delete raises 40001 (the messages and codes of ExecLockRows);
 * it always goes through the index, whose predicate locks SSI needs.
 * Takes RowShareLock on the table (before the cache lookup: it keeps VACUUM
 * from truncating the table under the hint) and AccessShareLock on its
 * index, kept until the transaction ends.  Runs as the caller (locking a
 * row directly checks no privilege), so the holder-role rule is applied
 * here, to the session's role (GetOuterUserId: the role SET ROLE made
 * current, not the owner of a SECURITY DEFINER function or of the table a
 * foreign key's cascade writes, which runs as that owner): only the
 * holder keeps its lease from being taken over past its expiry.  When the
 * visible version carries the writer's token but that role may not act
 * for its holder role (DlockMayActFor), nothing is locked, the lease is
 * returned as read, and lease->denied is set (the fence raises 42501).  A
 * version the lock follows an update to (a takeover that was in flight)
 * is checked the same way after it is locked: then the lock is held, and
 * the 42501 that ends the (sub)transaction releases it, as the 55T01 of a
 * token that is not current does.  The lookup evaluates no user-defined
 * function.
 */
static void
lease_fence_row_lock(const DlockLeaseTable *table, text *lock_name,
					 int64 token, DlockFenceLease *lease)
{
	Relation	rel;
	LeaseFind	f;
	TupleTableSlot *slot;
	int			lockflags = TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS;
	bool		seen;
	Oid			actor = GetOuterUserId();

	Assert(OidIsValid(table->relid) && table->att_token > 0);
	rel = table_open(table->relid, RowShareLock);
	if (!IsolationIsSerializable())
		lockflags |= TUPLE_LOCK_FLAG_FIND_LAST_VERSION;
	lease->found = false;
	lease->state_read = false;
	lease->released = false;
	lease->expires_at = 0;
	/* SERIALIZABLE goes through the index, whose predicate locks SSI needs */
	seen = lease_find(table, rel, lock_name, !IsolationIsSerializable(), &f);
	slot = f.slot;
	if (seen && lease_holder_denies(table, slot, token, actor, lease))
	{
		/* the holder-role rule: not locked, not to be taken over */
		lease->found = true;
		lease_fence_fields(table, slot, lease);
		seen = false;
	}
	if (seen)
	{
		ItemPointerData tid = slot->tts_tid;
		TM_FailureData tmfd;
		TM_Result	res;

		res = table_tuple_lock(rel, &tid, f.snap, slot,
							   GetCurrentCommandId(true), LockTupleKeyShare,
							   LockWaitBlock, lockflags, &tmfd);
		switch (res)
		{
			case TM_Ok:
				/* locked; the newest version when it followed an update */
				lease->found = !tmfd.traversed ||
					lease_slot_has_name(table, slot, lock_name);
				break;
			case TM_SelfModified:
				/* changed by a later command of this transaction: skipped */
				break;
			case TM_Updated:
			case TM_Deleted:
				if (IsolationIsSerializable())
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not serialize access due to concurrent update")));
				if (res == TM_Updated)
					elog(ERROR, "unexpected result %d locking a dlock lease row", (int) res);
				break;			/* deleted (purged) meanwhile: no lease */
			default:
				elog(ERROR, "unexpected result %d locking a dlock lease row", (int) res);
		}
		if (lease->found)
		{
			lease_fence_fields(table, slot, lease);
			/* a takeover the lock waited for may have another holder */
			(void) lease_holder_denies(table, slot, token, actor, lease);
		}
	}
	lease_find_end(&f);
	table_close(rel, NoLock);
}

/*
 * lease_chain_taker follows the update chain of the lease row from the
 * version in slot (fetched from the heap with a snapshot, its buffer
 * pinned) and returns the first transaction in it, not this one and not
 * aborted (in progress, or committed after the snapshot), that took the
 * row over; InvalidTransactionId when there is none.  A
 * takeover locks the version it replaces FOR UPDATE before it updates it,
 * so heap_update keeps that stronger mode and marks the old version's
 * xmax HEAP_KEYS_UPDATED (compute_new_xmax_infomask; GetMultiXactIdHintBits
 * for a MultiXact); renew, release and break update without that lock and
 * change no key, and a lock-only xmax (a 'live' writer's FOR KEY SHARE) is
 * no change: neither is waited for, as the row lock waited for neither.
 * A delete sets it too, but only a purge deletes, and only a lease that
 * ended, which the check rejects anyway: a deleted version (its t_ctid is
 * itself) ends the chain, so a check never waits for a purge (which could
 * wait for the writer's own rows: a deadlock for nothing).  A version a
 * transaction had locked FOR UPDATE before a renew (the owner's SQL, a
 * purge's leftover lock) is marked too: a wait for nothing, never a wrong
 * answer.  Each version is read under its buffer's share
 * lock, and the chain ends where the next version's xmin is not the
 * updater (pruned, or a line pointer reused), as heap_get_latest_tid
 * ends it.
 */
static TransactionId
lease_chain_taker(Relation rel, TupleTableSlot *slot)
{
	BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;
	ItemPointerData tid = slot->tts_tid;
	TransactionId prior = InvalidTransactionId;
	bool		first = true;

	Assert(TTS_IS_BUFFERTUPLE(slot) && BufferIsValid(bslot->buffer));
	for (;;)
	{
		Buffer		buf;
		Page		page;
		OffsetNumber off = ItemPointerGetOffsetNumber(&tid);
		ItemId		lp;
		HeapTupleHeader htup;
		TransactionId xmax = InvalidTransactionId;
		bool		taken = false;
		ItemPointerData next;

		buf = first ? bslot->buffer :
			ReadBuffer(rel, ItemPointerGetBlockNumber(&tid));
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		ItemPointerSetInvalid(&next);
		if (off >= FirstOffsetNumber && off <= PageGetMaxOffsetNumber(page) &&
			ItemIdIsNormal(lp = PageGetItemId(page, off)))
		{
			htup = (HeapTupleHeader) PageGetItem(page, lp);
			if ((first ||
				 TransactionIdEquals(prior, HeapTupleHeaderGetXmin(htup))) &&
				!(htup->t_infomask & HEAP_XMAX_INVALID) &&
				!HEAP_XMAX_IS_LOCKED_ONLY(htup->t_infomask))
			{
				xmax = HeapTupleHeaderGetUpdateXid(htup);
				next = htup->t_ctid;
				/* a delete leaves t_ctid pointing at the version itself */
				taken = (htup->t_infomask2 & HEAP_KEYS_UPDATED) != 0 &&
					!ItemPointerEquals(&next, &tid);
			}
		}
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
		if (!first)
			ReleaseBuffer(buf);

		/* no later version, or one this transaction made */
		if (!TransactionIdIsNormal(xmax) ||
			TransactionIdIsCurrentTransactionId(xmax))
			return InvalidTransactionId;
		/* in progress first: a transaction that ends meanwhile is then found */
		if (!TransactionIdIsInProgress(xmax) && !TransactionIdDidCommit(xmax))
			return InvalidTransactionId;	/* aborted: the rest is dead */
		if (taken)
			return xmax;
		if (!ItemPointerIsValid(&next) || ItemPointerEquals(&next, &tid))
			return InvalidTransactionId;
		prior = xmax;
		tid = next;
		first = false;
	}
}

/*
 * lease_fence_name_lock reads the lease of lock_name into *lease for the
 * 'live' fence under the name lock that DlockNameLockLive took (tag): the
 * newest committed version, found through the fence cache's root hint or
 * the primary key (then offered to the cache) with a snapshot taken after
 * the lock.  A first row's insert holds the name lock until its
 * transaction ends, so the lock waited for one in progress and refuses
 * later ones.  A takeover holds it only until it has written its row (so
 * that a set acquire of thousands of names keeps no lock-table entry per
 * name), and then is in the version's update chain (lease_chain_taker), in
 * progress or committed after the snapshot: this then releases the name
 * lock and returns that transaction, which the caller waits for before it
 * tries again.  Otherwise it returns
 * InvalidTransactionId: no grant can commit before this transaction ends
 * (a takeover needs the name lock, which conflicts, and then locks the row
 * FOR UPDATE).  The holder-role rule is applied as in
 * lease_fence_row_lock.  When the write cannot pass (no row, another
 * token, denied, released), the lock is released again, so that a stale
 * or foreign writer keeps nobody from a takeover.  Takes AccessShareLock
 * on the table (before the cache lookup: it keeps VACUUM from truncating
 * the table under the hint) and, when it reads it, on its index, kept
 * until the transaction ends.
 */
static TransactionId
lease_fence_name_lock(const DlockLeaseTable *table, text *lock_name,
					  int64 token, const LOCKTAG *tag, DlockFenceLease *lease)
{
	Relation	rel;
	LeaseFind	f;
	bool		seen;
	TransactionId taker = InvalidTransactionId;

	Assert(!IsolationIsSerializable());
	rel = table_open(table->relid, AccessShareLock);
	lease->found = false;
	lease->state_read = false;
	lease->released = false;
	lease->expires_at = 0;
	/* the snapshot is taken after the name lock */
	seen = lease_find(table, rel, lock_name, true, &f);

	/*
	 * not a heap (a DBA's doing): takeovers keep the name lock
	 * (lease_change.c)
	 */
	if (seen && DlockLeaseIsHeap(rel))
		taker = lease_chain_taker(rel, f.slot);
	if (seen && !TransactionIdIsValid(taker))
	{
		lease->found = true;
		lease_fence_fields(table, f.slot, lease);
		(void) lease_holder_denies(table, f.slot, token, GetOuterUserId(),
								   lease);
	}
	lease_find_end(&f);
	table_close(rel, NoLock);

	/*
	 * fence.c rejects all of these.  Not an expiry: fence.c judges that on
	 * its own reading of the clock, and a write it accepts must be locked.
	 * Nor does a check keep the lock while it waits for a takeover.
	 */
	if (TransactionIdIsValid(taker) || !lease->found ||
		lease->token != token || lease->denied || lease->released)
		DlockNameLockUndoLive(tag);
	return taker;
}

/*
 * DlockLeaseFenceLock reads the lease of lock_name into *lease for the
 * 'live' fence of a write carrying token, and keeps a grant of the name
 * from any other transaction until this one ends when the write passes:
 * with the name lock in the lock manager (name_lock.c,
 * lease_fence_name_lock), waiting for a takeover whose row is written and
 * trying again, or with a row lock on the lease row (lease_fence_row_lock)
 * in a SERIALIZABLE transaction (whose rules, 40001 on a concurrent change
 * and SSI's predicate locks, the row lock keeps) and past the
 * transaction's budget of name locks.  Every grant honours both
 * (DlockLeaseTake, store_ops.c).  When token is current but the session's
 * role may not act for the lease's holder role, it sets lease->denied (the
 * fence raises 42501) and keeps nothing.
 */
void
DlockLeaseFenceLock(const DlockLeaseTable *table, text *lock_name, int64 token,
					DlockFenceLease *lease)
{
	LOCKTAG		tag;

	Assert(OidIsValid(table->relid) && table->att_token > 0);
	for (;;)
	{
		TransactionId taker;

		if (IsolationIsSerializable() || !DlockNameLockLive(&tag, lock_name))
		{
			lease_fence_row_lock(table, lock_name, token, lease);
			return;
		}
		taker = lease_fence_name_lock(table, lock_name, token, &tag, lease);
		if (!TransactionIdIsValid(taker))
			return;
		/* a takeover in progress, or just committed: its outcome decides */
		XactLockTableWait(taker, NULL, NULL, XLTW_None);
	}
}
