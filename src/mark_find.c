/*-------------------------------------------------------------------------
 *
 * src/mark_find.c
 *	  Finding and locking the mark of a lock name without SQL, the common
 *	  case of mode 'seen' (DlockMarkLock, for mark.c): where this backend
 *	  last found each mark (mark_hints), the primary key's scan when that
 *	  misses, and the row lock on the version found.
 *
 * Concurrency: the mark is locked FOR NO KEY UPDATE until the transaction
 * ends, following a concurrently changed row to its newest version as
 * READ COMMITTED does; the table is locked RowShareLock and its index,
 * when scanned, AccessShareLock, both kept until the transaction ends.
 * The hints are this backend's own memory, never trusted: a hinted
 * version counts only when the fresh snapshot sees it and it is the mark
 * of that owner and name (design.md §18 has the argument).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "common/hashfn.h"
#include "storage/bufmgr.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "dlock.h"
#include "lease_table.h"
#include "mark_int.h"
#include "store_int.h"

/*
 * Where this backend last locked the mark of a (table, owner, name):
 * MARK_HINT_SETS sets of MARK_HINT_WAYS entries, the set chosen by a hash
 * of the owner and the name, each set's entries most recently used first
 * (a new one drops the set's last); made in TopMemoryContext at the first
 * 'seen' check (80 kB), so that a backend writing to a thousand names
 * finds nearly all of them there (a direct-mapped array of the same size
 * missed a fifth of them: any two names that map to one entry evict each
 * other).  A hint is never trusted: DlockMarkLock checks that its block is
 * inside the table, fetches the tuple under its fresh snapshot, and uses
 * it only when that version is visible and has the owner and the name (the
 * primary key makes it the mark); the lock then follows the row to its
 * newest version as for one the index found.  So a hint made stale by a
 * raise, a purge, VACUUM or a rewrite of the table only costs the index
 * scan it did not save.
 */
#define MARK_HINT_SETS 1024
#define MARK_HINT_WAYS 4

typedef struct MarkHint
{
	Oid			relid;			/* the mark table; InvalidOid: empty */
	Oid			owner;
	uint32		namehash;
	ItemPointerData tid;
} MarkHint;

static MarkHint *mark_hints = NULL;

/* The hash of a lock name that mark_hints are found by. */
static uint32
mark_name_hash(text *lock_name)
{
	return hash_bytes((const unsigned char *) VARDATA_ANY(lock_name),
					  VARSIZE_ANY_EXHDR(lock_name));
}

/* The set of mark_hints where the hint of (owner, namehash) would be. */
static MarkHint *
mark_hint_set_of(Oid owner, uint32 namehash)
{
	if (mark_hints == NULL)
		mark_hints = MemoryContextAllocZero(TopMemoryContext, sizeof(MarkHint) *
											MARK_HINT_SETS * MARK_HINT_WAYS);
	return &mark_hints[((namehash ^ owner) % MARK_HINT_SETS) * MARK_HINT_WAYS];
}

/* The hint of (relid, owner, the name hashed to namehash), or NULL. */
static MarkHint *
mark_hint_find(Oid relid, Oid owner, uint32 namehash)
{
	MarkHint   *set = mark_hint_set_of(owner, namehash);
	int			i;

	for (i = 0; i < MARK_HINT_WAYS; i++)
		if (set[i].relid == relid && set[i].owner == owner &&
			set[i].namehash == namehash && ItemPointerIsValid(&set[i].tid))
			return &set[i];
	return NULL;
}

/*
 * mark_hint_set remembers that the mark of (relid, owner, the name hashed
 * to namehash) is at tid, as the most recent hint of its set: an older hint
 * of that key is dropped, or else the set's least recent one.
 */
static void
mark_hint_set(Oid relid, Oid owner, uint32 namehash, ItemPointer tid)
{
	MarkHint   *set = mark_hint_set_of(owner, namehash);
	int			i;

	Assert(ItemPointerIsValid(tid));
	for (i = 0; i < MARK_HINT_WAYS - 1; i++)
		if (set[i].relid == relid && set[i].owner == owner &&
			set[i].namehash == namehash)
			break;
	memmove(&set[1], &set[0], sizeof(MarkHint) * i);
	set[0].relid = relid;
	set[0].owner = owner;
	set[0].namehash = namehash;
	set[0].tid = *tid;
}

/*
 * DlockMarkHintReturned remembers the ctid that the store statement just run
 * returned in its first column as where the mark is.
 */
void
DlockMarkHintReturned(Oid relid, Oid owner, text *lock_name)
{
	bool		isnull;
	Datum		d = DlockStoreResultDatum(1, &isnull);

	Assert(!isnull);
	mark_hint_set(relid, owner, mark_name_hash(lock_name),
				  (ItemPointer) DatumGetPointer(d));
}

/*
 * mark_slot_is reports whether the version in slot is the mark of (owner,
 * lock_name).
 */
static bool
mark_slot_is(TupleTableSlot *slot, AttrNumber att_owner, AttrNumber att_name,
			 Oid owner, text *lock_name)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, att_owner, &isnull);

	return !isnull && DatumGetObjectId(d) == owner &&
		DlockSlotHasName(slot, att_name, lock_name);
}

/*
 * The mark table's primary key that mark_index_find found to be on
 * (owner, name), and the count of invalidations of the table's relcache
 * entry then (DlockStoreMarkInvals).  While the relcache still names that
 * index as the key (and none has come since), DlockMarkLock trusts a hint
 * without opening the index: an index's columns never change; what drops
 * or replaces the key (DROP CONSTRAINT, ADD PRIMARY KEY USING INDEX, a
 * column's new type) needs AccessExclusiveLock on the table, which the
 * RowShareLock taken first excludes, and a newly granted table lock first
 * processes the invalidations that such a change sent.  REINDEX
 * CONCURRENTLY may swap the key under that lock, but the old index stays
 * maintained until every such lock is gone and the new one is unique too:
 * the key's uniqueness never lapses.
 */
static struct
{
	Oid			relid;
	Oid			pkey;
	uint64		invals;
}			mark_pkey;

/* Whether pkey, the primary key of the mark table relid, is on (owner, name). */
static bool
mark_pkey_known(Oid relid, Oid pkey)
{
	return mark_pkey.relid == relid && mark_pkey.pkey == pkey &&
		mark_pkey.invals == DlockStoreMarkInvals();
}

/*
 * mark_index_find looks the mark of (owner, lock_name) up in the primary
 * key pkey of rel under snap, into slot: MARK_LOCKED (nothing is locked
 * yet) when found, MARK_ABSENT when not, MARK_UNSURE when the key is not
 * on (att_owner, att_name).  Takes AccessShareLock on the index, kept
 * until the transaction ends.
 */
static MarkLockResult
mark_index_find(Relation rel, Oid pkey, AttrNumber att_owner,
				AttrNumber att_name, Oid owner, text *lock_name,
				Snapshot snap, TupleTableSlot *slot)
{
	uint64		invals = DlockStoreMarkInvals();
	Relation	idx = index_open(pkey, AccessShareLock);
	IndexScanDesc scan;
	ScanKeyData keys[2];
	bool		found;

	if (IndexRelationGetNumberOfKeyAttributes(idx) != 2 ||
		idx->rd_index->indkey.values[0] != att_owner ||
		idx->rd_index->indkey.values[1] != att_name)
	{
		index_close(idx, NoLock);
		return MARK_UNSURE;
	}
	mark_pkey.relid = RelationGetRelid(rel);
	mark_pkey.pkey = pkey;
	mark_pkey.invals = invals;
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_OIDEQ, ObjectIdGetDatum(owner));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(lock_name));
	scan = DlockIndexBeginScan(rel, idx, snap, 2, 0);
	index_rescan(scan, keys, 2, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	/* no index page stays pinned while the caller's lock waits */
	index_endscan(scan);
	index_close(idx, NoLock);
	return found ? MARK_LOCKED : MARK_ABSENT;
}

/*
 * DlockMarkLock is the common case of mode 'seen' without SPI:
 * it looks the mark of (owner, lock_name) up in the mark table relid
 * (whose primary key is on columns att_owner, a regrole, and att_name,
 * text in the "C" collation) with a fresh snapshot, locks the visible
 * version FOR NO KEY UPDATE, waiting, and following a concurrently changed
 * row to its newest version as READ COMMITTED does, sets *token to that
 * version's column att_token, and returns MARK_LOCKED.  When the index
 * finds no row it returns MARK_ABSENT: the caller inserts the mark, whose
 * ON CONFLICT waits for a concurrent inserter and then finds nothing to
 * insert, so the next round locks that row (the statement that locks would
 * have found nothing either with its own fresh snapshot, but for an
 * insert that commits in between, which the insert meets the same way).
 * Anything else (a row deleted or changed in a way it does not follow, a
 * SERIALIZABLE transaction, which needs SSI's predicate locks of the SQL
 * statement) returns MARK_UNSURE and locks nothing new: the caller
 * then runs the SQL statement, which handles every case.  Takes
 * RowShareLock on the table, and AccessShareLock on its index when it
 * scans it, kept until the transaction ends.  Evaluates no user-defined
 * function.
 *
 * Before the index, it looks where this backend last locked the mark
 * (mark_hints): a version there that the snapshot sees and that is the
 * mark of (owner, lock_name) is the one the index would find, the key
 * being unique (mark_pkey: the table's primary key, found to be on
 * (owner, name), with no invalidation of the table's relcache entry
 * since).  The hinted block is checked against the table's size first:
 * reading past the end raises, and VACUUM may have truncated the table
 * since.  The fetched version stays pinned in slot until the lock
 * has its own pin, so its line pointer is not pruned in between.
 */
MarkLockResult
DlockMarkLock(Oid relid, AttrNumber att_owner, AttrNumber att_name,
			  AttrNumber att_token, Oid owner, text *lock_name, int64 *token)
{
	Relation	rel;
	Oid			pkey;
	Snapshot	snap;
	TupleTableSlot *slot;
	bool		found;
	MarkHint   *hint;
	uint32		namehash = mark_name_hash(lock_name);
	MarkLockResult result = MARK_UNSURE;

	if (IsolationIsSerializable())
		return MARK_UNSURE;
	rel = table_open(relid, RowShareLock);
	pkey = DlockPrimaryKeyIndex(rel);
	if (!OidIsValid(pkey))
	{
		table_close(rel, NoLock);
		return MARK_UNSURE;
	}
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	hint = mark_pkey_known(relid, pkey) ?
		mark_hint_find(relid, owner, namehash) : NULL;
	found = hint != NULL &&
		ItemPointerGetBlockNumber(&hint->tid) < RelationGetNumberOfBlocks(rel) &&
		table_tuple_fetch_row_version(rel, &hint->tid, snap, slot) &&
		mark_slot_is(slot, att_owner, att_name, owner, lock_name);
	if (!found)
	{
		MarkLockResult r;

		/* another name's mark fetched from the hint: unpin it first */
		ExecClearTuple(slot);
		r = mark_index_find(rel, pkey, att_owner, att_name, owner, lock_name,
							snap, slot);
		if (r == MARK_UNSURE)
		{
			ExecDropSingleTupleTableSlot(slot);
			UnregisterSnapshot(snap);
			table_close(rel, NoLock);
			return MARK_UNSURE;
		}
		found = r == MARK_LOCKED;
	}
	if (!found)
		result = MARK_ABSENT;
	else
	{
		ItemPointerData tid = slot->tts_tid;
		TM_FailureData tmfd;

		Assert(mark_slot_is(slot, att_owner, att_name, owner, lock_name));
		if (table_tuple_lock(rel, &tid, snap, slot, GetCurrentCommandId(true),
							 LockTupleNoKeyExclusive, LockWaitBlock,
							 TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS |
							 TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
							 &tmfd) == TM_Ok &&

		/*
		 * the newest version is still the mark of (owner, lock_name): the
		 * version checked above, unless the lock followed an update
		 */
			(!tmfd.traversed ||
			 mark_slot_is(slot, att_owner, att_name, owner, lock_name)))
		{
			bool		isnull;
			Datum		d = slot_getattr(slot, att_token, &isnull);

			Assert(mark_slot_is(slot, att_owner, att_name, owner, lock_name));
			Assert(!isnull);
			*token = DatumGetInt64(d);
			result = MARK_LOCKED;
			mark_hint_set(relid, owner, namehash, &slot->tts_tid);
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	return result;
}
