/*-------------------------------------------------------------------------
 *
 * src/fence_cache_write.c
 *	  The fence cache's writers' side: what a transaction that changes
 *	  leases opens (DlockFenceCacheOpen, DlockFenceCacheOpenAll), what its
 *	  writes of lease rows record (DlockFenceCachePublish, forgotten when a
 *	  subtransaction rolls back), and its close at the end of the
 *	  top-level transaction (DlockFenceCacheXactEnd, called by xact.c):
 *	  under each opened bucket's spinlock, publishing the leases of the
 *	  names a committed transaction changed there, or clearing the bucket.
 *	  The buckets themselves, and the readers, are fence_cache.c's.
 *
 * Owns the backend-local list of opened names and their records (with
 * the index of each bucket's first name, opener_hash), the COMMIT
 * PREPARED hook, and the count of changes this backend opened
 * (DlockFenceCacheChanges).
 *
 * Concurrency: the protocol is fence_cache.c's (design.md §12; why a
 * published token is the newest: its "Publishing").  Opens are atomic
 * increments; a close takes the bucket's spinlock to publish or clear,
 * then decrements the open count; nothing here can raise.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "nodes/parsenodes.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"
#include "fence_cache_int.h"

/*
 * Names one transaction remembers before it opens the global count (a set
 * acquire of thousands of names publishes them all), and how many fit
 * without allocating.
 */
#define FENCE_MAX_PENDING	4096
#define FENCE_LOCAL_PENDING 64

/* What a name's record holds. */
typedef enum FencePublish
{
	PUBLISH_NOTHING_YET,		/* opened, no write recorded */
	PUBLISH_READY,				/* the name's last write is recorded */
	PUBLISH_NEVER				/* a write it cannot publish, or rolled back */
} FencePublish;

/*
 * A name this backend's transaction opened, and what it may publish when
 * the transaction commits: the name's row as the transaction's last write
 * left it (design.md §12, "Publishing").  The names of one bucket form a
 * chain from the one whose open incremented the bucket's count (the
 * opener), which also keeps what the close compares.
 */
typedef struct FencePending
{
	int			bucket;
	int			next;			/* the chain's next name, or -1 */
	bool		opener;			/* incremented the bucket's open count */
	int			hslot;			/* opener: its place in opener_hash */
	bool		clear_only;		/* opener: a name of the bucket it could not
								 * record (too long): clear at the close */
	uint32		version;		/* opener: the bucket's version, read after
								 * the increment */
	uint64		epoch;			/* opener: the global epoch, read then */
	FencePublish publish;
	SubTransactionId subid;		/* the subtransaction of the last write */
	Oid			relid;			/* the lease table */
	Oid			relnumber;		/* its relfilenode */
	DlockFenceCached lease;		/* the row as the last write left it */
	uint32		tag;
	uint16		namelen;
	char		name[FENCE_NAME_BYTES];
} FencePending;

/* What this backend's transaction opened (closed at its end). */
static FencePending local_pending[FENCE_LOCAL_PENDING];
static FencePending *pending = local_pending;	/* or in TopMemoryContext */
static int	npending = 0;
static int	max_pending = FENCE_LOCAL_PENDING;

/*
 * Where each opened bucket's opener is in the list: an open-addressing
 * table of bucket numbers (linear probing; an entry is the opener's index
 * + 1, 0 when free), twice as large as the list can grow, emptied entry by
 * entry when the list is, so that a transaction of thousands of names
 * finds a bucket's opener without scanning the list.
 */
#define FENCE_OPENER_HASH	(2 * FENCE_MAX_PENDING)
static uint16 opener_hash[FENCE_OPENER_HASH];

StaticAssertDecl(FENCE_MAX_PENDING < PG_UINT16_MAX &&
				 (FENCE_OPENER_HASH & (FENCE_OPENER_HASH - 1)) == 0,
				 "opener_hash holds list indexes + 1 and is a power of 2");
static bool pending_all = false;

/*
 * An invalidation of the lease table's relcache entry came while the
 * transaction had opened names (DlockFenceCacheTableChanged): its
 * relfilenode may have changed since the writes were recorded, so the
 * close publishes nothing.
 */
static bool table_changed = false;

static ProcessUtility_hook_type prev_utility_hook = NULL;

/* Changes this backend opened, ever (DlockFenceCacheChanges). */
static uint64 fence_changes = 0;

/*
 * fence_pending_grow makes room for more names in the list of opened ones
 * (four times as many, up to FENCE_MAX_PENDING), in TopMemoryContext;
 * returns false, keeping the list, when it may not grow or memory is
 * short.  Cannot raise.
 */
static bool
fence_pending_grow(void)
{
	int			n = Min(max_pending * 4, FENCE_MAX_PENDING);
	FencePending *grown;

	if (n <= max_pending)
		return false;
	grown = MemoryContextAllocExtended(TopMemoryContext,
									   n * sizeof(FencePending),
									   MCXT_ALLOC_NO_OOM);
	if (grown == NULL)
		return false;
	memcpy(grown, pending, npending * sizeof(FencePending));
	if (pending != local_pending)
		pfree(pending);
	pending = grown;
	max_pending = n;
	return true;
}

/*
 * fence_pending_reset empties the list of opened names, freeing what
 * fence_pending_grow took.
 */
static void
fence_pending_reset(void)
{
	int			i;

	for (i = 0; i < npending; i++)
	{
		if (pending[i].opener)
			opener_hash[pending[i].hslot] = 0;
	}
	npending = 0;
	table_changed = false;
	if (pending != local_pending)
	{
		pfree(pending);
		pending = local_pending;
		max_pending = FENCE_LOCAL_PENDING;
	}
}

/*
 * fence_opener_slot returns where bucket bno's search in opener_hash
 * starts.
 */
static inline uint32
fence_opener_slot(int bno)
{
	return ((uint32) bno * 2654435761U) & (FENCE_OPENER_HASH - 1);
}

/*
 * fence_opener returns the index of the opener of bucket bno in the list,
 * or -1 when this transaction has not opened it.
 */
static int
fence_opener(int bno)
{
	uint32		h = fence_opener_slot(bno);

	for (;; h = (h + 1) & (FENCE_OPENER_HASH - 1))
	{
		int			i = (int) opener_hash[h] - 1;

		if (i < 0)
			return -1;
		Assert(i < npending && pending[i].opener);
		if (pending[i].bucket == bno)
			return i;
	}
}

/*
 * fence_find returns the index of lock_name's record in the chain that
 * starts at the opener first, or -1.
 */
static int
fence_find(int first, text *lock_name)
{
	int			namelen = VARSIZE_ANY_EXHDR(lock_name);
	int			i;

	for (i = first; i >= 0; i = pending[i].next)
	{
		if (pending[i].namelen == namelen &&
			memcmp(pending[i].name, VARDATA_ANY(lock_name), namelen) == 0)
			return i;
	}
	return -1;
}

/*
 * DlockFenceCacheOpen marks lock_name's bucket as changing until the
 * current top-level transaction ends, and starts the name's record.  Call
 * it before any change of the name's lease row (its first insert, every
 * update, its delete) can be seen.  Nothing without the cache; cannot
 * raise.
 */
void
DlockFenceCacheOpen(text *lock_name)
{
	int			namelen = VARSIZE_ANY_EXHDR(lock_name);
	int			bno;
	uint32		tag;
	int			first;
	FencePending *p;

	fence_changes++;
	if (fence_shared == NULL || pending_all)
		return;					/* the global count covers every bucket */
	Assert(IsTransactionState());
	bno = DlockFenceBucketOf(lock_name, &tag);
	first = fence_opener(bno);
	if (first >= 0 && namelen > FENCE_NAME_BYTES)
	{
		pending[first].clear_only = true;
		return;
	}
	if (first >= 0 && fence_find(first, lock_name) >= 0)
		return;
	if (npending == max_pending && !fence_pending_grow())
	{
		DlockFenceCacheOpenAll();
		return;
	}
	p = &pending[npending];
	p->bucket = bno;
	p->tag = tag;
	p->publish = PUBLISH_NOTHING_YET;
	p->namelen = 0;
	p->clear_only = false;
	if (namelen <= FENCE_NAME_BYTES)
	{
		p->namelen = (uint16) namelen;
		memcpy(p->name, VARDATA_ANY(lock_name), namelen);
	}
	else
		p->clear_only = true;
	if (first >= 0)
	{
		/* the bucket is open already: into its chain */
		p->opener = false;
		p->next = pending[first].next;
		pending[first].next = npending++;
		return;
	}
	p->opener = true;
	p->next = -1;
	p->hslot = fence_opener_slot(bno);
	while (opener_hash[p->hslot] != 0)
		p->hslot = (p->hslot + 1) & (FENCE_OPENER_HASH - 1);
	opener_hash[p->hslot] = (uint16) (npending + 1);
	npending++;

	/*
	 * A full barrier, then what the bucket's version and the epoch are: a
	 * close or a fill of the bucket after this shows as another version at
	 * this transaction's close.
	 */
	(void) pg_atomic_fetch_add_u32(&fence_buckets[bno].st.s.open, 1);
	p->version = pg_atomic_read_u32(&fence_buckets[bno].st.s.version);
	p->epoch = pg_atomic_read_u64(&fence_shared->epoch);
}

/*
 * DlockFenceCachePublish records that this transaction's latest write of
 * lock_name's row in the lease table rel left *lease, for the close to
 * publish if the transaction commits and nothing else touched the bucket
 * meanwhile (fence_close).  Call it after every write of a row by dlock,
 * which opened the name before.  Cannot raise.
 */
void
DlockFenceCachePublish(Relation rel, text *lock_name,
					   const DlockFenceCached *lease)
{
	uint32		tag;
	int			first;
	int			i;
	FencePending *p;

	if (fence_shared == NULL || pending_all || npending == 0)
		return;
	first = fence_opener(DlockFenceBucketOf(lock_name, &tag));
	i = first >= 0 ? fence_find(first, lock_name) : -1;
	if (i < 0)
		return;
	p = &pending[i];
	if (p->publish == PUBLISH_NEVER)
		return;
	if (lease->token <= 0 || !OidIsValid(lease->holder) ||
		DlockRelFileNumberIsNew(rel))
	{
		p->publish = PUBLISH_NEVER;
		return;
	}
	p->publish = PUBLISH_READY;
	p->subid = GetCurrentSubTransactionId();
	p->relid = RelationGetRelid(rel);
	p->relnumber = DlockRelFileNumber(rel);
	p->lease = *lease;
}

/*
 * DlockFenceCacheOpenAll marks every name as changing until the current
 * top-level transaction ends (a purge, or more names than a transaction
 * remembers).  Nothing without the cache; cannot raise.
 */
void
DlockFenceCacheOpenAll(void)
{
	fence_changes++;
	if (fence_shared == NULL || pending_all)
		return;
	Assert(IsTransactionState());
	pending_all = true;
	(void) pg_atomic_fetch_add_u32(&fence_shared->open_all, 1);
}

/*
 * DlockFenceCacheChanges returns how many changes of lease rows this
 * backend has opened so far (with the cache or without it): a value that
 * moves whenever the backend itself wrote a lease row (a token, an expiry,
 * a release), for the fence's one check per lock in a statement (fence.c).
 */
uint64
DlockFenceCacheChanges(void)
{
	return fence_changes;
}

/*
 * DlockFenceCacheTableChanged (store_cache.c's relcache callback calls it)
 * notes that an invalidation of the lease table's relcache entry, or of
 * every entry, was processed: when the transaction has opened names, its
 * close then clears their buckets instead of publishing.  Its own
 * TRUNCATE, VACUUM FULL, CLUSTER or rewriting ALTER TABLE of the table
 * after a write gives the table a relfilenode other than the one the write
 * recorded, and the close runs before the invalidation reaches other
 * backends: a reader that takes no lock on the table (design.md §12, "A
 * hit without the table's lock") could otherwise hit an entry published
 * under the old relfilenode for a row the TRUNCATE removed.  Only sets a
 * flag (an invalidation callback may not do more); cannot raise.
 */
void
DlockFenceCacheTableChanged(void)
{
	if (npending > 0)
		table_changed = true;
}

/*
 * DlockFenceCacheSubXactEnd (xact.c calls it) forgets, when a
 * subtransaction rolls back, the writes recorded in it or in any
 * subtransaction under it (those have greater ids: they began after it,
 * while it was open): the name's row is no longer as they left it, so its
 * bucket publishes nothing.  The bucket stays open until the top level
 * ends.
 */
void
DlockFenceCacheSubXactEnd(SubXactEvent event, SubTransactionId mySubid)
{
	int			i;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	for (i = 0; i < npending; i++)
	{
		if (pending[i].publish == PUBLISH_READY &&
			pending[i].subid >= mySubid)
			pending[i].publish = PUBLISH_NEVER;
	}
}

/*
 * fence_publish writes what p recorded into its bucket b (spinlock held,
 * version odd), as of the global epoch epoch: replaces the name's entry,
 * else takes slots as a fill does (DlockFenceTake).
 */
static void
fence_publish(FenceBucket *b, const FencePending *p, uint64 epoch)
{
	FenceKey	key;
	int			way = -1;
	int			i;

	key.relid = p->relid;
	key.relnumber = p->relnumber;
	key.tag = p->tag;
	key.namelen = p->namelen;
	key.name = p->name;
	for (i = 0; i < FENCE_WAYS; i++)
	{
		if (!fence_entry_is(b, i, &key))
			continue;
		if (way < 0)
			way = i;
		else
			DlockFenceEntryDrop(b, i);	/* a second entry of the name */
	}
	if (way < 0)
		way = DlockFenceTake(b, FENCE_SLOTS_OF(p->namelen), epoch);
	DlockFenceEntrySet(b, way, &key, epoch, &p->lease);
}

/*
 * fence_may_publish reports whether the bucket whose opener is first may
 * publish its names, as far as this backend can tell: the transaction
 * committed, opened nothing globally, and recorded the last write of every
 * name it opened there.  The bucket's part is checked under its spinlock.
 */
static bool
fence_may_publish(int first, bool commit)
{
	int			i;

	if (!commit || pending_all || table_changed || pending[first].clear_only)
		return false;
	for (i = first; i >= 0; i = pending[i].next)
	{
		if (pending[i].publish != PUBLISH_READY)
			return false;
	}
	return true;
}

/*
 * fence_close closes what the ending transaction opened: under each
 * bucket's spinlock, bumps its version and either publishes the names the
 * transaction changed there (when it committed and nothing else opened or
 * closed the bucket since it opened it: design.md §12, "Publishing") or
 * clears the bucket's entries, then decrements its open count; bumps the
 * epoch before decrementing the global count.  Runs after the
 * transaction's changes became visible.
 */
static void
fence_close(bool commit)
{
	int			i;

	for (i = 0; i < npending; i++)
	{
		FencePending *p = &pending[i];
		FenceBucket *b;
		bool		may_publish;
		uint32		version;
		int			way;

		if (!p->opener)
			continue;
		b = &fence_buckets[p->bucket];
		may_publish = fence_may_publish(i, commit);
		SpinLockAcquire(&b->st.s.mutex);
		version = pg_atomic_read_u32(&b->st.s.version);
		Assert((version & 1) == 0);
		pg_atomic_write_u32(&b->st.s.version, version + 1);
		pg_write_barrier();
		if (may_publish && version == p->version &&
			pg_atomic_read_u32(&b->st.s.open) == 1 &&
			pg_atomic_read_u32(&fence_shared->open_all) == 0 &&
			pg_atomic_read_u64(&fence_shared->epoch) == p->epoch)
		{
			int			j;

			for (j = i; j >= 0; j = pending[j].next)
				fence_publish(b, &pending[j], p->epoch);
		}
		else
		{
			for (way = 0; way < FENCE_WAYS; way++)
			{
				b->st.s.tags[way] = 0;
				b->slots[way].e.dbid = InvalidOid;
			}
		}
		DlockFenceBucketCheck(b);
		pg_write_barrier();
		pg_atomic_write_u32(&b->st.s.version, version + 2);
		SpinLockRelease(&b->st.s.mutex);
		Assert(pg_atomic_read_u32(&b->st.s.open) > 0);
		(void) pg_atomic_fetch_sub_u32(&b->st.s.open, 1);
	}
	fence_pending_reset();
	if (pending_all)
	{
		(void) pg_atomic_fetch_add_u64(&fence_shared->epoch, 1);
		Assert(pg_atomic_read_u32(&fence_shared->open_all) > 0);
		(void) pg_atomic_fetch_sub_u32(&fence_shared->open_all, 1);
		pending_all = false;
	}
}

/*
 * DlockFenceCacheXactEnd (xact.c calls it) closes, when the top-level transaction ends
 * (after ProcArrayEndTransaction), what it opened; leaves it open for good
 * when it was prepared; and before a session with dlock.fence_cache = off
 * or session_replication_role = replica (logical replication's apply)
 * commits or prepares a transaction that wrote, opens the global count.
 */
void
DlockFenceCacheXactEnd(XactEvent event)
{
	if (fence_shared == NULL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			if ((!dlock_fence_cache ||
				 SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA) &&
				TransactionIdIsValid(GetTopTransactionIdIfAny()))
				DlockFenceCacheOpenAll();
			break;
		case XACT_EVENT_COMMIT:
			if (npending > 0 || pending_all)
				fence_close(true);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (npending > 0 || pending_all)
				fence_close(false);
			break;
		case XACT_EVENT_PREPARE:
			/* visible at COMMIT PREPARED, anywhere: stay open until restart */
			fence_pending_reset();
			pending_all = false;
			break;
		default:
			break;
	}
	Assert(event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PRE_PREPARE ||
		   event == XACT_EVENT_PARALLEL_PRE_COMMIT ||
		   (npending == 0 && !pending_all));
}

/*
 * fence_utility_hook opens the global count before COMMIT PREPARED, in
 * the transaction that runs it: the prepared transaction's changes become
 * visible in it, and its close bumps the epoch after that.  The buckets
 * that transaction opened before its PREPARE are still open when the
 * server has run since, but not after a restart, which rebuilt the cache
 * with every count at zero (and a fill may have stored the tokens it is
 * about to replace).  Then runs the statement (the previous hook, or
 * standard_ProcessUtility).
 */
static void
fence_utility_hook(PlannedStmt *pstmt, const char *queryString,
				   bool readOnlyTree, ProcessUtilityContext context,
				   ParamListInfo params, QueryEnvironment *queryEnv,
				   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (fence_shared != NULL && IsA(stmt, TransactionStmt) &&
		((TransactionStmt *) stmt)->kind == TRANS_STMT_COMMIT_PREPARED &&
		IsTransactionState())
		DlockFenceCacheOpenAll();
	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString, readOnlyTree, context,
						  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * DlockFenceCacheWriteInit installs fence_utility_hook (chaining the
 * previous ProcessUtility_hook) when dlock is being preloaded, the only
 * way the cache exists; _PG_init calls it.
 */
void
DlockFenceCacheWriteInit(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = fence_utility_hook;
}
