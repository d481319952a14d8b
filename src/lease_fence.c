/*-------------------------------------------------------------------------
 *
 * src/lease_fence.c
 *	  The fence's direct access to the lease table: the 'latest' fence's
 *	  read (DlockLeaseFenceRead, answered by the fence cache when it can)
 *	  and the 'live' fence's read under a lock (DlockLeaseFenceLock), which
 *	  run as the caller (design.md §14, §17).
 *
 * Owns the relfilenode of the lease table that its last locked read found
 * (fence_table_key), with which the fence cache answers without a lock on
 * the table.
 *
 * Concurrency: the 'latest' read takes AccessShareLock on the table and
 * its index and no row lock, with a fresh snapshot; a hit of the fence
 * cache under a relfilenode known to be current takes no lock at all
 * (lease_fence_hit, design.md §12).  The 'live' check
 * takes dlock's name lock in ShareLock, waiting for a grant of the name
 * in progress, then reads the fence cache (without a lock on the table,
 * as the 'latest' read) or with a snapshot taken after it (AccessShareLock);
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
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"
#include "lease_room.h"
#include "lease_table.h"
#include "lease_table_int.h"
#include "store_int.h"

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
	lease->found = true;
	lease->token = DatumGetInt64(DlockLeaseField(slot, table->att_token));
	lease->expires_at = DatumGetTimestampTz(DlockLeaseField(slot, table->att_expires_at));
	lease->released = DatumGetBool(DlockLeaseField(slot, table->att_released));
}

/*
 * lease_version_settled reports whether the version in slot, fetched from
 * the heap of rel with its buffer pinned, has no update or delete by a
 * transaction that has not aborted (a lock alone does not count): then no
 * later version of the row can become visible but through a change that
 * opens the name's bucket.  Every other updater keeps the bucket open
 * until its close, but one prepared before a restart or a promotion does
 * not (the counts start at zero), and a fill of the version it replaces
 * would let a 'live' check pass without finding it in the chain
 * (design.md §12, "The 'live' fence from the cache").  false for a table
 * that is not a heap.
 */
static bool
lease_version_settled(Relation rel, TupleTableSlot *slot)
{
	BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;
	HeapTupleHeader htup;
	TransactionId updater = InvalidTransactionId;
	bool		updated = false;

	if (!DlockLeaseIsHeap(rel) || !TTS_IS_BUFFERTUPLE(slot))
		return false;
	Assert(BufferIsValid(bslot->buffer));
	LockBuffer(bslot->buffer, BUFFER_LOCK_SHARE);
	htup = bslot->base.tupdata.t_data;
	if (!(htup->t_infomask & HEAP_XMAX_INVALID) &&
		!HEAP_XMAX_IS_LOCKED_ONLY(htup->t_infomask))
	{
		updated = true;
		updater = HeapTupleHeaderGetUpdateXid(htup);
	}
	LockBuffer(bslot->buffer, BUFFER_LOCK_UNLOCK);
	if (!updated)
		return true;
	/* in progress first: one that ends meanwhile is then found committed */
	return TransactionIdIsNormal(updater) &&
		!TransactionIdIsCurrentTransactionId(updater) &&
		!TransactionIdIsInProgress(updater) &&
		!TransactionIdDidCommit(updater);
}

/*
 * lease_fence_fill offers what the fence checks of the lease row in slot
 * (of rel), read after the miss that filled in *ticket, to the fence
 * cache: only a version no live transaction replaces
 * (lease_version_settled).
 */
static void
lease_fence_fill(const DlockLeaseTable *table, Relation rel,
				 TupleTableSlot *slot, text *lock_name,
				 const DlockFenceCacheTicket *ticket)
{
	DlockFenceCached c;

	if (ticket->bucket < 0 || !lease_version_settled(rel, slot))
		return;
	c.token = DatumGetInt64(DlockLeaseField(slot, table->att_token));
	c.expires_at = DatumGetTimestampTz(DlockLeaseField(slot, table->att_expires_at));
	c.holder = DatumGetObjectId(DlockLeaseField(slot, table->att_holder_role));
	c.released = DatumGetBool(DlockLeaseField(slot, table->att_released));
	DlockFenceCacheFill(ticket, lock_name, &c);
}

/*
 * lease_fence_cached copies the fence cache's copy c of a lease row into
 * *lease.
 */
static void
lease_fence_cached(const DlockFenceCached *c, DlockFenceLease *lease)
{
	lease->found = true;
	lease->token = c->token;
	lease->expires_at = c->expires_at;
	lease->released = c->released;
}

/*
 * The lease table's relfilenode as the last fence read that opened the
 * table found it under its lock (not one this transaction made), and how
 * many invalidations of the table this backend had processed then
 * (DlockStoreTableInvals).  While none has been processed since, it is
 * still the table's (a new relfilenode, or a dropped table, sends one), and
 * a read answered by the fence cache needs no lock on the table
 * (design.md §12, "A hit without the table's lock").  relid InvalidOid:
 * nothing known.
 */
static struct
{
	Oid			relid;
	Oid			relnumber;
	uint64		invals;
}			fence_table_key;

/*
 * lease_fence_remember notes the relfilenode of rel, the lease table,
 * which the caller has locked, in fence_table_key; nothing when this
 * transaction made it (it may never be committed).
 */
static void
lease_fence_remember(Relation rel)
{
	if (DlockRelFileNumberIsNew(rel))
	{
		fence_table_key.relid = InvalidOid;
		return;
	}
	fence_table_key.relid = RelationGetRelid(rel);
	fence_table_key.relnumber = DlockRelFileNumber(rel);
	fence_table_key.invals = DlockStoreTableInvals();
}

/*
 * lease_fence_hit answers the read of lock_name from the fence cache
 * without opening the lease table, when the relfilenode in
 * fence_table_key is still current: sets *c and returns true; false: read
 * it.  The full barrier keeps AcceptInvalidationMessages' unlocked look at
 * the invalidation queue from moving before what the fence read before
 * this (a lock acquisition would do that too).  Takes no lock.
 */
static bool
lease_fence_hit(const DlockLeaseTable *table, text *lock_name,
				DlockFenceCached *c)
{
	DlockFenceCacheTicket ticket;

	if (fence_table_key.relid != table->relid)
		return false;
	pg_memory_barrier();
	AcceptInvalidationMessages();
	if (fence_table_key.invals != DlockStoreTableInvals())
		return false;
	return DlockFenceCacheGetKey(table->relid, fence_table_key.relnumber,
								 lock_name, c, &ticket);
}

/*
 * DlockLeaseFenceRead reads the lease of lock_name into *lease for the
 * 'latest' fence: from the fence cache when it knows the name
 * (fence_cache.c), without even opening the table while the relfilenode
 * its last read found is current (lease_fence_hit), otherwise straight
 * from the primary key index and the heap, with a fresh snapshot and no
 * row lock, without SPI's per-statement executor setup, and then offers
 * the row to the cache.  The same MVCC read as DlockLeaseRead.  But for
 * the hit without the table, takes AccessShareLock on the table (and on
 * the index when it reads it), kept until the transaction ends; the
 * table's lock is what makes its relfilenode, part of the cache's key,
 * current.  Runs as the caller (opening a relation checks no privilege);
 * the lookup evaluates no user-defined function.
 */
void
DlockLeaseFenceRead(const DlockLeaseTable *table, text *lock_name,
					DlockFenceLease *lease)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	TupleTableSlot *slot;
	DlockFenceCacheTicket ticket;
	DlockFenceCached c;

	Assert(OidIsValid(table->relid) && table->att_token > 0);
	if (lease_fence_hit(table, lock_name, &c))
	{
		lease_fence_cached(&c, lease);
		return;
	}
	rel = table_open(table->relid, AccessShareLock);
	lease_fence_remember(rel);
	if (DlockFenceCacheGet(rel, lock_name, &c, &ticket))
	{
		lease_fence_cached(&c, lease);
		table_close(rel, NoLock);
		return;
	}

	idx = DlockLeasePkeyOpen(table, rel, AccessShareLock);
	/* taken after the ticket (fence_cache.c: a fill needs that order) */
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);

	lease->found = DlockLeaseLookup(rel, idx, snap, lock_name, slot);
	if (lease->found)
	{
		lease_fence_fields(table, slot, lease);
		lease_fence_fill(table, rel, slot, lock_name, &ticket);
	}
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
}

/* The visible version of a lease row that lease_find found. */
typedef struct LeaseFind
{
	Snapshot	snap;			/* taken after the cache's ticket */
	TupleTableSlot *slot;		/* the version */
	Relation	idx;			/* the primary key */
} LeaseFind;

/*
 * lease_find finds the version of lock_name's row in rel (the lease table,
 * locked by the caller) visible to a fresh snapshot, through the primary
 * key (AccessShareLock, kept until the transaction ends), and then offers
 * it to the cache with *ticket (the miss's, taken before: bucket < 0 for
 * none).  Returns whether there is one, in f->slot; lease_find_end frees
 * *f.
 */
static bool
lease_find(const DlockLeaseTable *table, Relation rel, text *lock_name,
		   const DlockFenceCacheTicket *ticket, LeaseFind *f)
{
	bool		seen;

	/* taken after the ticket (fence_cache.c: a fill needs that order) */
	f->snap = RegisterSnapshot(GetLatestSnapshot());
	f->slot = table_slot_create(rel, NULL);
	f->idx = DlockLeasePkeyOpen(table, rel, AccessShareLock);
	seen = DlockLeaseLookup(rel, f->idx, f->snap, lock_name, f->slot);
	if (seen)
		lease_fence_fill(table, rel, f->slot, lock_name, ticket);
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
 * fresh snapshot, found through the primary key (then offered to the
 * cache, but in a SERIALIZABLE transaction), then table_tuple_lock on that version,
 * waiting for a transaction that holds a conflicting lock (a takeover's
 * FOR UPDATE) or changed the row.  READ COMMITTED rules, also under
 * REPEATABLE READ: when the row was changed concurrently, the lock follows
 * it to its newest version (TUPLE_LOCK_FLAG_FIND_LAST_VERSION), which is
 * then the lease read (a deleted row: no lease).  A SERIALIZABLE
 * transaction keeps its rules, as the SQL statement did: a concurrent
 * update or delete raises 40001 (the messages and codes of ExecLockRows);
 * it always goes through the index, whose predicate locks SSI needs.
 * Takes RowShareLock on the table and AccessShareLock on its index, kept
 * until the transaction ends.  Runs as the caller (locking a
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
	DlockFenceCacheTicket ticket;
	DlockFenceCached c;

	Assert(OidIsValid(table->relid) && table->att_token > 0);
	rel = table_open(table->relid, RowShareLock);
	if (!IsolationIsSerializable())
		lockflags |= TUPLE_LOCK_FLAG_FIND_LAST_VERSION;
	lease->found = false;
	lease->released = false;
	lease->expires_at = 0;

	/*
	 * The row is read to be locked; the cache only learns it, but not from a
	 * SERIALIZABLE transaction (as before the cache: its rules decide)
	 */
	ticket.bucket = -1;
	if (!IsolationIsSerializable())
		(void) DlockFenceCacheGet(rel, lock_name, &c, &ticket);
	seen = lease_find(table, rel, lock_name, &ticket, &f);
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
 * lease_fence_live_cached answers the 'live' check of a write carrying
 * token from the fence cache's copy c of the lease row, when the write
 * passes on it: c carries token, is not released, has not expired, and the
 * session's role may act for its holder role (lease_holder_denies' rule).
 * Then it copies c into *lease and returns true; otherwise false, and the
 * read under the table's lock decides, as without the cache, with the same
 * rejection and its message, or a wait for a takeover (design.md §12, "The
 * 'live' fence from the cache").
 */
static bool
lease_fence_live_cached(const DlockFenceCached *c, int64 token,
						DlockFenceLease *lease)
{
	if (c->token != token || c->released ||
		c->expires_at <= GetCurrentTimestamp() ||
		!DlockMayActFor(GetOuterUserId(), c->holder))
		return false;
	lease_fence_cached(c, lease);
	return true;
}

/*
 * lease_fence_name_lock reads the lease of lock_name into *lease for the
 * 'live' fence under the name lock that DlockNameLockLive took (tag): the
 * newest committed version, from the fence cache when the write passes on
 * it (without opening the table while the relfilenode its last read found
 * is current, lease_fence_hit; lease_fence_live_cached), else through the
 * primary key (then offered to the cache) with a snapshot taken after the
 * lock.  A first row's insert holds the name lock until its transaction
 * ends, so the lock waited for one in progress and refuses later ones.  A
 * takeover holds it only until it has written its row (so that a set
 * acquire of thousands of names keeps no lock-table entry per name), and
 * then is in the version's update chain (lease_chain_taker), in progress
 * or committed after the snapshot: this then releases the name lock and
 * returns that transaction, which the caller waits for before it tries
 * again.  A takeover keeps the name's bucket open from before it writes
 * until after its commit, so the cache answers only when there is none, or
 * its close has put its lease there (design.md §12).  Otherwise it returns
 * InvalidTransactionId: no grant can commit before this transaction ends
 * (a takeover needs the name lock, which conflicts, and then locks the row
 * FOR UPDATE).  The holder-role rule is applied as in
 * lease_fence_row_lock.  When the write cannot pass (no row, another
 * token, denied, released), the lock is released again, so that a stale or
 * foreign writer keeps nobody from a takeover.  Unless the cache answers
 * without the table, takes AccessShareLock on the table and, when it reads
 * it, on its index, kept until the transaction ends.
 */
static TransactionId
lease_fence_name_lock(const DlockLeaseTable *table, text *lock_name,
					  int64 token, const LOCKTAG *tag, DlockFenceLease *lease)
{
	Relation	rel;
	LeaseFind	f;
	bool		seen;
	TransactionId taker = InvalidTransactionId;
	DlockFenceCacheTicket ticket;
	DlockFenceCached c;
	bool		hit;

	Assert(!IsolationIsSerializable());
	/* the cache is read, or the snapshot taken, after the name lock */
	hit = lease_fence_hit(table, lock_name, &c);
	if (hit && lease_fence_live_cached(&c, token, lease))
		return InvalidTransactionId;	/* the lock is kept */

	lease->found = false;
	lease->released = false;
	lease->expires_at = 0;
	rel = table_open(table->relid, AccessShareLock);
	lease_fence_remember(rel);

	/*
	 * after the name lock, whether or not the table's lock was taken now
	 * (lease_fence_hit has its own)
	 */
	pg_memory_barrier();
	/* a hit that did not pass is not looked up again, and leaves no ticket */
	ticket.bucket = -1;
	if (!hit && DlockFenceCacheGet(rel, lock_name, &c, &ticket) &&
		lease_fence_live_cached(&c, token, lease))
	{
		table_close(rel, NoLock);
		return InvalidTransactionId;	/* the lock is kept */
	}
	seen = lease_find(table, rel, lock_name, &ticket, &f);

	/*
	 * not a heap (a DBA's doing): takeovers keep the name lock
	 * (lease_change.c)
	 */
	if (seen && DlockLeaseIsHeap(rel))
		taker = lease_chain_taker(rel, f.slot);
	if (seen && !TransactionIdIsValid(taker))
	{
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
