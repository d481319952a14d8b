/*-------------------------------------------------------------------------
 *
 * src/fence_cache.c
 *	  The fence cache: the current token of recently fenced lock names, in
 *	  shared memory, so that the 'latest' fence answers without the B-tree
 *	  descent and heap fetch of the lease row.  Only with
 *	  shared_preload_libraries = 'dlock'; without it, and for whatever the
 *	  cache cannot answer, the fence reads the index (DlockLeaseFenceRead).
 *
 * Owns the buckets (FENCE_WAYS entries each, keyed exactly: database,
 * the lease table's OID and relfilenode, the whole name), their open
 * counts, versions and spinlocks, the global open count and epoch, and
 * closing what a transaction opened at its end (DlockFenceCacheXactEnd,
 * called by xact.c).  The rules other code must keep are design.md §12;
 * the argument why a hit is never stale, with the memory order of both
 * sides, is design.md §12's "Why a hit is never stale".
 *
 * Concurrency: the bucket's spinlock is held only to fill or clear entries
 * (no other lock is taken meanwhile, nothing can raise); readers take no
 * lock; open counts, versions and the epoch are atomics.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"

/* Entries per bucket. */
#define FENCE_WAYS			8

/* The longest lock name an entry holds; longer names are never cached. */
#define FENCE_NAME_BYTES	88

/* Buckets one transaction remembers before it opens the global count. */
#define FENCE_MAX_PENDING	64

/*
 * One cached lease: its exact key, its token and where its row is (128
 * bytes; a name of up to 26 bytes is in the entry's first cache line).
 */
typedef struct FenceEntry
{
	Oid			dbid;			/* InvalidOid: empty */
	Oid			relid;			/* the lease table */
	Oid			relnumber;		/* its relfilenode */
	uint16		namelen;
	uint64		epoch;			/* the global epoch it was filled in */
	int64		token;
	ItemPointerData root;		/* the root of the row's HOT chain: a hint */
	char		name[FENCE_NAME_BYTES];
} FenceEntry;

StaticAssertDecl(sizeof(FenceEntry) == 128,
				 "a fence cache entry takes two cache lines");

/*
 * A bucket's state, in its first cache line: the counters, and a tag per
 * entry (bits of the name's hash, never 0; 0 for an empty entry), so that
 * a lookup reads one entry, the one whose tag matches, and then compares
 * its whole key.
 */
typedef struct FenceBucketState
{
	pg_atomic_uint32 open;		/* changes of its names in progress */
	pg_atomic_uint32 version;	/* bumped by fills and clears; odd: writing */
	slock_t		mutex;			/* serialises fills and clears */
	uint8		victim;			/* the entry the next full fill replaces */
	uint32		tags[FENCE_WAYS];
} FenceBucketState;

typedef struct FenceBucket
{
	union
	{
		FenceBucketState s;
		char		pad[64];
	}			st;
	FenceEntry	entries[FENCE_WAYS];
} FenceBucket;

StaticAssertDecl(sizeof(FenceBucketState) <= 64,
				 "a fence cache bucket's state must fit in a cache line");

/* The shared part. */
typedef struct FenceCacheShared
{
	pg_atomic_uint64 epoch;		/* bumped when a global change closes */
	pg_atomic_uint32 open_all;	/* global changes in progress */
	int			nbuckets;
} FenceCacheShared;

/* NULL unless preloaded with a size > 0 */
/* dlock.fence_cache_size: names the cache holds (only with preload) */
static int	dlock_fence_cache_size = 65536;

/* dlock.fence_cache: whether this session's fence uses the cache */
static bool dlock_fence_cache = true;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static FenceCacheShared *fence_shared = NULL;
static FenceBucket *fence_buckets = NULL;

/* What this backend's transaction opened (closed at its end). */
static int	pending[FENCE_MAX_PENDING];
static int	npending = 0;
static bool pending_all = false;

/* Changes this backend opened, ever (DlockFenceCacheChanges). */
static uint64 fence_changes = 0;

/*
 * fence_nbuckets returns the number of buckets dlock.fence_cache_size asks
 * for.
 */
static int
fence_nbuckets(void)
{
	return (dlock_fence_cache_size + FENCE_WAYS - 1) / FENCE_WAYS;
}

/*
 * fence_shmem_size returns the bytes of shared memory the cache needs (0
 * when it is off).
 */
static Size
fence_shmem_size(void)
{
	if (fence_nbuckets() == 0)
		return 0;
	return add_size(CACHELINEALIGN(sizeof(FenceCacheShared)),
					mul_size(fence_nbuckets(), sizeof(FenceBucket)));
}

/*
 * fence_shmem_request asks for the cache's shared memory, after chaining
 * to the previous hook.
 */
static void
fence_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(fence_shmem_size());
}

/*
 * fence_shmem_init attaches to (or, first, initialises) the cache's shared
 * memory.  Caller holds AddinShmemInitLock.
 */
static void
fence_shmem_init(void)
{
	bool		found;
	int			nbuckets = fence_nbuckets();
	int			i;

	if (nbuckets == 0)
		return;
	fence_shared = ShmemInitStruct("dlock fence cache",
								   fence_shmem_size(), &found);
	fence_buckets = (FenceBucket *) ((char *) fence_shared +
									 CACHELINEALIGN(sizeof(FenceCacheShared)));
	if (found)
	{
		Assert(fence_shared->nbuckets == nbuckets);
		return;
	}
	pg_atomic_init_u64(&fence_shared->epoch, 1);
	pg_atomic_init_u32(&fence_shared->open_all, 0);
	fence_shared->nbuckets = nbuckets;
	for (i = 0; i < nbuckets; i++)
	{
		FenceBucket *b = &fence_buckets[i];

		memset(b, 0, sizeof(FenceBucket));
		pg_atomic_init_u32(&b->st.s.open, 0);
		pg_atomic_init_u32(&b->st.s.version, 0);
		SpinLockInit(&b->st.s.mutex);
		b->st.s.victim = 0;
	}
}

/*
 * fence_shmem_startup attaches to the cache's shared memory, after
 * chaining to the previous hook.  Takes AddinShmemInitLock.
 */
static void
fence_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	fence_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * fence_bucket_of returns the bucket of lock_name in the current database,
 * and sets *tag to its tag there (never 0).
 */
static int
fence_bucket_of(text *lock_name, uint32 *tag)
{
	uint64		h = hash_combine64(DlockNameHash(lock_name),
								   (uint64) MyDatabaseId);

	Assert(fence_shared != NULL && fence_shared->nbuckets > 0);
	*tag = (uint32) (h >> 32) | 1;
	return (int) (h % (uint64) fence_shared->nbuckets);
}

/*
 * DlockFenceCacheGet looks the lease of lock_name in the lease table rel
 * (locked by the caller, at least AccessShareLock) up in the cache.  On a
 * hit it sets *token and *root (the hint of where the row is) and returns
 * true.  On a miss it returns false and
 * fills in *ticket for DlockFenceCacheFill (ticket->bucket < 0: do not
 * fill); the caller then reads the index.  Takes no lock.
 */
bool
DlockFenceCacheGet(Relation rel, text *lock_name, int64 *token,
				   ItemPointer root, DlockFenceCacheTicket *ticket)
{
	const char *name = VARDATA_ANY(lock_name);
	int			namelen = VARSIZE_ANY_EXHDR(lock_name);
	int			bno;
	FenceBucket *b;
	uint32		open;
	uint32		open_all;
	uint32		version;
	uint64		epoch;
	bool		found = false;
	int64		tok = 0;
	ItemPointerData tid;
	uint32		tag;
	int			i;

	ticket->bucket = -1;
	if (fence_shared == NULL || !dlock_fence_cache ||
		namelen > FENCE_NAME_BYTES)
		return false;
	/* a relfilenode this transaction made may never be committed */
	if (DlockRelFileNumberIsNew(rel))
		return false;
	ticket->relid = RelationGetRelid(rel);
	ticket->relnumber = DlockRelFileNumber(rel);
	bno = fence_bucket_of(lock_name, &tag);
	b = &fence_buckets[bno];

	/* first whether a change is open, then the versions, then the entries */
	open = pg_atomic_read_u32(&b->st.s.open);
	open_all = pg_atomic_read_u32(&fence_shared->open_all);
	pg_read_barrier();
	version = pg_atomic_read_u32(&b->st.s.version);
	epoch = pg_atomic_read_u64(&fence_shared->epoch);
	if (open != 0 || open_all != 0 || (version & 1) != 0)
		return false;			/* neither a hit nor a fill */
	pg_read_barrier();
	for (i = 0; i < FENCE_WAYS; i++)
	{
		volatile FenceEntry *e = &b->entries[i];

		if (((volatile uint32 *) b->st.s.tags)[i] != tag)
			continue;
		if (e->dbid == MyDatabaseId && e->relid == ticket->relid &&
			e->relnumber == ticket->relnumber && e->namelen == namelen &&
			e->epoch == epoch &&
			memcmp((const char *) e->name, name, namelen) == 0)
		{
			tok = e->token;
			tid = *(ItemPointer) &e->root;
			found = true;
			break;
		}
	}
	pg_read_barrier();
	if (pg_atomic_read_u32(&b->st.s.version) != version ||
		pg_atomic_read_u32(&b->st.s.open) != 0 ||
		pg_atomic_read_u32(&fence_shared->open_all) != 0 ||
		pg_atomic_read_u64(&fence_shared->epoch) != epoch)
		return false;			/* changed while read: neither */
	if (found)
	{
		Assert(tok > 0 && ItemPointerIsValid(&tid));
		*token = tok;
		*root = tid;
		return true;
	}
	ticket->bucket = bno;
	ticket->tag = tag;
	ticket->version = version;
	ticket->epoch = epoch;
	return false;
}

/*
 * DlockFenceCacheFill stores token as the lease of lock_name, and root as
 * the root of its row's HOT chain, read from the index after the miss that
 * filled in *ticket, unless a change of the
 * bucket (or a global one) was open or closed since the ticket was taken.
 * Takes the bucket's spinlock.
 */
void
DlockFenceCacheFill(const DlockFenceCacheTicket *ticket, text *lock_name,
					int64 token, ItemPointer root)
{
	int			namelen = VARSIZE_ANY_EXHDR(lock_name);
	FenceBucket *b;
	int			i;
	int			way = -1;

	if (ticket->bucket < 0)
		return;
	Assert(fence_shared != NULL && ticket->bucket < fence_shared->nbuckets);
	Assert(namelen <= FENCE_NAME_BYTES && token > 0);
	Assert(ItemPointerIsValid(root));
	Assert((ticket->version & 1) == 0);
	b = &fence_buckets[ticket->bucket];

	SpinLockAcquire(&b->st.s.mutex);
	if (pg_atomic_read_u32(&b->st.s.open) != 0 ||
		pg_atomic_read_u32(&b->st.s.version) != ticket->version ||
		pg_atomic_read_u32(&fence_shared->open_all) != 0 ||
		pg_atomic_read_u64(&fence_shared->epoch) != ticket->epoch)
	{
		SpinLockRelease(&b->st.s.mutex);
		return;
	}

	/* an empty entry, or one of an older epoch, else the next victim */
	for (i = 0; i < FENCE_WAYS && way < 0; i++)
	{
		if (b->st.s.tags[i] == 0 || b->entries[i].epoch != ticket->epoch)
			way = i;
	}
	if (way < 0)
	{
		way = b->st.s.victim;
		b->st.s.victim = (way + 1) % FENCE_WAYS;
	}

	pg_atomic_write_u32(&b->st.s.version, ticket->version + 1);
	pg_write_barrier();
	{
		volatile FenceEntry *e = &b->entries[way];

		e->dbid = MyDatabaseId;
		e->relid = ticket->relid;
		e->relnumber = ticket->relnumber;
		e->namelen = (uint16) namelen;
		e->epoch = ticket->epoch;
		e->token = token;
		*(ItemPointer) &e->root = *root;
		memcpy((char *) e->name, VARDATA_ANY(lock_name), namelen);
		((volatile uint32 *) b->st.s.tags)[way] = ticket->tag;
	}
	pg_write_barrier();
	pg_atomic_write_u32(&b->st.s.version, ticket->version + 2);
	SpinLockRelease(&b->st.s.mutex);
}

/*
 * DlockFenceCacheOpen marks lock_name's bucket as changing until the
 * current top-level transaction ends.  Call it before modifying a lease
 * row in a way that changes its token or its existence.  Nothing without
 * the cache; cannot raise.
 */
void
DlockFenceCacheOpen(text *lock_name)
{
	int			bno;
	uint32		tag;
	int			i;

	fence_changes++;
	if (fence_shared == NULL || pending_all)
		return;					/* the global count covers every bucket */
	Assert(IsTransactionState());
	bno = fence_bucket_of(lock_name, &tag);
	for (i = 0; i < npending; i++)
	{
		if (pending[i] == bno)
			return;
	}
	if (npending == FENCE_MAX_PENDING)
	{
		DlockFenceCacheOpenAll();
		return;
	}
	pending[npending++] = bno;
	(void) pg_atomic_fetch_add_u32(&fence_buckets[bno].st.s.open, 1);
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
 * DlockFenceCacheChanges returns how many changes of lease tokens or rows
 * this backend has opened so far (with the cache or without it): a value
 * that moves whenever the backend itself changed a token, for the fence's
 * one check per lock in a statement (fence.c).
 */
uint64
DlockFenceCacheChanges(void)
{
	return fence_changes;
}

/*
 * fence_close closes what the ending transaction opened: clears each
 * bucket's entries and bumps its version under its spinlock, then
 * decrements its open count; bumps the epoch before decrementing the
 * global count.  Runs after the transaction's changes became visible.
 */
static void
fence_close(void)
{
	int			i;

	for (i = 0; i < npending; i++)
	{
		FenceBucket *b = &fence_buckets[pending[i]];
		uint32		version;
		int			way;

		SpinLockAcquire(&b->st.s.mutex);
		version = pg_atomic_read_u32(&b->st.s.version);
		Assert((version & 1) == 0);
		pg_atomic_write_u32(&b->st.s.version, version + 1);
		pg_write_barrier();
		for (way = 0; way < FENCE_WAYS; way++)
		{
			b->st.s.tags[way] = 0;
			b->entries[way].dbid = InvalidOid;
		}
		pg_write_barrier();
		pg_atomic_write_u32(&b->st.s.version, version + 2);
		SpinLockRelease(&b->st.s.mutex);
		Assert(pg_atomic_read_u32(&b->st.s.open) > 0);
		(void) pg_atomic_fetch_sub_u32(&b->st.s.open, 1);
	}
	npending = 0;
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
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (npending > 0 || pending_all)
				fence_close();
			break;
		case XACT_EVENT_PREPARE:
			/* visible at COMMIT PREPARED, anywhere: stay open until restart */
			npending = 0;
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
 * DlockFenceCacheInit defines dlock.fence_cache and, when dlock is being
 * preloaded, dlock.fence_cache_size (fixed at server start, so a setting
 * only then) and the hooks of the cache's shared memory; _PG_init calls
 * it.
 */
void
DlockFenceCacheInit(void)
{
	if (process_shared_preload_libraries_in_progress)
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

	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = fence_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = fence_shmem_startup;
}
