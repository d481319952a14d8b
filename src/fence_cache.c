/*-------------------------------------------------------------------------
 *
 * src/fence_cache.c
 *	  The fence cache: the current lease of recently fenced lock names (its
 *	  token, expiry, released flag and holder role), in shared memory, so
 *	  that the 'latest' and 'live' fences answer without the B-tree descent
 *	  and heap fetch of the lease row.  Only with
 *	  shared_preload_libraries = 'dlock'; without it, and for whatever the
 *	  cache cannot answer, the fence reads the index (lease_fence.c).
 *
 * Owns the shared memory and its layout (fence_cache_int.h): the buckets
 * (FENCE_WAYS slots of a cache line each; an entry, keyed exactly by
 * database, the lease table's OID and relfilenode and the whole name, takes
 * one slot, or two for a name longer than FENCE_HEAD_NAME_BYTES), their
 * open counts, versions and
 * spinlocks, the global open count and epoch; the settings; and the
 * readers' side, the lookup and the fill after a miss.  The writers' side
 * (opening buckets, recording writes, publishing or clearing at a
 * transaction's end) is fence_cache_write.c.  The rules other code must
 * keep are design.md §12; the argument
 * why a hit is never stale, with the memory order of both sides, is
 * design.md §12's "Why a hit is never stale", and why a published token
 * is the newest, its "Publishing".
 *
 * Concurrency: the bucket's spinlock is held only to fill, publish or
 * clear entries (no other lock is taken meanwhile, nothing can raise);
 * readers take no lock; open counts, versions and the epoch are atomics.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
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
#include "fence_cache_int.h"

/* dlock.fence_cache_size: names the cache holds (only with preload) */
static int	dlock_fence_cache_size = 65536;

/* dlock.fence_cache: whether this session's fence uses the cache */
bool		dlock_fence_cache = true;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* NULL unless preloaded with a size > 0 */
FenceCacheShared *fence_shared = NULL;
FenceBucket *fence_buckets = NULL;


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
	Assert((uintptr_t) fence_buckets % PG_CACHE_LINE_SIZE == 0);
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
 * DlockFenceBucketOf returns the bucket of lock_name in the current database,
 * and sets *tag to its tag there (never 0).
 */
int
DlockFenceBucketOf(text *lock_name, uint32 *tag)
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
 * hit it sets *lease (what the fence checks of the row) and returns
 * true.  On a miss it returns false and
 * fills in *ticket for DlockFenceCacheFill (ticket->bucket < 0: do not
 * fill); the caller then reads the index.  Takes no lock.
 */
bool
DlockFenceCacheGet(Relation rel, text *lock_name, DlockFenceCached *lease,
				   DlockFenceCacheTicket *ticket)
{
	ticket->bucket = -1;
	/* a relfilenode this transaction made may never be committed */
	if (DlockRelFileNumberIsNew(rel))
		return false;
	return DlockFenceCacheGetKey(RelationGetRelid(rel), DlockRelFileNumber(rel),
								 lock_name, lease, ticket);
}

/*
 * DlockFenceCacheGetKey is DlockFenceCacheGet for the lease table whose OID
 * is relid and relfilenode relnumber, without its relation: the caller
 * knows that relnumber is the relfilenode the table had when the lookup
 * began, and that this transaction did not make it (DlockLeaseFenceRead,
 * design.md §12, "A hit without the table's lock").
 */
bool
DlockFenceCacheGetKey(Oid relid, Oid relnumber, text *lock_name,
					  DlockFenceCached *lease, DlockFenceCacheTicket *ticket)
{
	int			namelen = VARSIZE_ANY_EXHDR(lock_name);
	FenceKey	key;
	int			bno;
	FenceBucket *b;
	uint32		open;
	uint32		open_all;
	uint32		version;
	uint64		epoch;
	bool		found = false;
	DlockFenceCached copy;
	uint32		tag;
	int			i;

	ticket->bucket = -1;
	if (fence_shared == NULL || !dlock_fence_cache ||
		namelen > FENCE_NAME_BYTES)
		return false;
	/* WAL replay changes leases without opening anything: no hit, no fill */
	if (RecoveryInProgress())
		return false;
	Assert(OidIsValid(relid) && OidIsValid(relnumber));
	ticket->relid = relid;
	ticket->relnumber = relnumber;
	bno = DlockFenceBucketOf(lock_name, &tag);
	b = &fence_buckets[bno];

	key.relid = ticket->relid;
	key.relnumber = ticket->relnumber;
	key.tag = tag;
	key.namelen = namelen;
	key.name = VARDATA_ANY(lock_name);

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
		volatile FenceEntry *e = &b->slots[i].e;

		if (((volatile uint32 *) b->st.s.tags)[i] == tag &&
			fence_entry_is(b, i, &key) && e->epoch == epoch)
		{
			copy.token = e->token;
			copy.expires_at = e->expires_at;
			copy.holder = e->holder;
			copy.released = e->released;
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
		Assert(copy.token > 0);
		*lease = copy;
		return true;
	}
	ticket->bucket = bno;
	ticket->tag = tag;
	ticket->version = version;
	ticket->epoch = epoch;
	return false;
}

/*
 * DlockFenceCacheFill stores *lease as the lease of lock_name, read from
 * the index after the miss that filled in *ticket, unless a change of the
 * bucket (or a global one) was open or closed since the ticket was taken.
 * Takes the bucket's spinlock.
 */
void
DlockFenceCacheFill(const DlockFenceCacheTicket *ticket, text *lock_name,
					const DlockFenceCached *lease)
{
	int			namelen = VARSIZE_ANY_EXHDR(lock_name);
	FenceBucket *b;
	FenceKey	key;
	int			way;

	/* no holder role: a superuser's hand edit, which publish refuses too */
	if (ticket->bucket < 0 || !OidIsValid(lease->holder))
		return;
	Assert(fence_shared != NULL && ticket->bucket < fence_shared->nbuckets);
	Assert(namelen <= FENCE_NAME_BYTES && lease->token > 0);
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

	pg_atomic_write_u32(&b->st.s.version, ticket->version + 1);
	pg_write_barrier();
	key.relid = ticket->relid;
	key.relnumber = ticket->relnumber;
	key.tag = ticket->tag;
	key.namelen = namelen;
	key.name = VARDATA_ANY(lock_name);
	way = DlockFenceTake(b, FENCE_SLOTS_OF(namelen), ticket->epoch);
	DlockFenceEntrySet(b, way, &key, ticket->epoch, lease);
	DlockFenceBucketCheck(b);
	pg_write_barrier();
	pg_atomic_write_u32(&b->st.s.version, ticket->version + 2);
	SpinLockRelease(&b->st.s.mutex);
}

/*
 * fence_head_of returns the first slot of the entry that slot way of b
 * belongs to, or -1 when the slot is empty.  Spinlock held.
 */
static int
fence_head_of(FenceBucket *b, int way)
{
	uint32		tag = b->st.s.tags[way];

	if (tag == 0)
		return -1;
	if (tag == FENCE_TAG_REST)
	{
		Assert(way > 0 && (b->st.s.tags[way - 1] & 1) != 0);
		return way - 1;
	}
	return way;
}

/*
 * DlockFenceTake finds nslots adjacent slots of b for a new entry in the
 * global epoch epoch and returns the first: the first run of slots that
 * are empty or hold entries of an older epoch, else the next victim's
 * (round robin).  Drops every entry with a slot among those it returns.
 * Spinlock held, version odd.
 */
int
DlockFenceTake(FenceBucket *b, int nslots, uint64 epoch)
{
	bool		free[FENCE_WAYS];
	int			way = -1;
	int			i;

	Assert(nslots == 1 || nslots == 2);
	Assert((pg_atomic_read_u32(&b->st.s.version) & 1) != 0);
	for (i = 0; i < FENCE_WAYS; i++)
	{
		int			h = fence_head_of(b, i);

		free[i] = h < 0 || b->slots[h].e.epoch != epoch;
	}
	for (i = 0; i + nslots <= FENCE_WAYS && way < 0; i++)
	{
		if (free[i] && (nslots == 1 || free[i + 1]))
			way = i;
	}
	if (way < 0)
	{
		way = b->st.s.victim;
		if (way + nslots > FENCE_WAYS)
			way = 0;
		b->st.s.victim = (way + nslots) % FENCE_WAYS;
	}
	for (i = way; i < way + nslots; i++)
	{
		int			h = fence_head_of(b, i);

		if (h >= 0)
			DlockFenceEntryDrop(b, h);
	}
	return way;
}

/*
 * DlockFenceEntrySet writes key's entry, with *lease and epoch,
 * into slot way of b (and the next slot, for a long name): slots that
 * DlockFenceTake returned, or those of key's own entry.  The tag goes last.
 * Spinlock held, version odd.
 */
void
DlockFenceEntrySet(FenceBucket *b, int way, const FenceKey *key,
				   uint64 epoch, const DlockFenceCached *lease)
{
	volatile FenceEntry *e = &b->slots[way].e;
	int			head = Min(key->namelen, FENCE_HEAD_NAME_BYTES);

	Assert(way + FENCE_SLOTS_OF(key->namelen) <= FENCE_WAYS);
	Assert(key->namelen <= FENCE_NAME_BYTES && (key->tag & 1) != 0);
	Assert(lease->token > 0 && OidIsValid(lease->holder));
	Assert((pg_atomic_read_u32(&b->st.s.version) & 1) != 0);
	e->dbid = MyDatabaseId;
	e->relid = key->relid;
	e->relnumber = key->relnumber;
	e->namelen = (uint8) key->namelen;
	e->epoch = epoch;
	e->token = lease->token;
	e->expires_at = lease->expires_at;
	e->holder = lease->holder;
	e->released = lease->released;
	memcpy((char *) e->name, key->name, head);
	if (key->namelen > head)
	{
		memcpy((char *) b->slots[way + 1].rest, key->name + head,
			   key->namelen - head);
		b->st.s.tags[way + 1] = FENCE_TAG_REST;
	}
	b->st.s.tags[way] = key->tag;
}

/*
 * DlockFenceEntryDrop empties the entry whose first slot is way (both of
 * its slots, for a long name).  Spinlock held, version odd.
 */
void
DlockFenceEntryDrop(FenceBucket *b, int way)
{
	Assert((b->st.s.tags[way] & 1) != 0);
	Assert((pg_atomic_read_u32(&b->st.s.version) & 1) != 0);
	if (way + 1 < FENCE_WAYS && b->st.s.tags[way + 1] == FENCE_TAG_REST)
		b->st.s.tags[way + 1] = 0;
	b->st.s.tags[way] = 0;
	b->slots[way].e.dbid = InvalidOid;
}

/*
 * DlockFenceBucketCheck asserts the layout of b's slots: a second slot
 * follows the first slot of an entry whose name is long, and only there.
 * Spinlock held.
 */
void
DlockFenceBucketCheck(FenceBucket *b)
{
#ifdef USE_ASSERT_CHECKING
	int			i;

	for (i = 0; i < FENCE_WAYS; i++)
	{
		uint32		tag = b->st.s.tags[i];
		bool		long_name = (tag & 1) != 0 &&
			b->slots[i].e.namelen > FENCE_HEAD_NAME_BYTES;

		Assert(tag == 0 || tag == FENCE_TAG_REST || (tag & 1) != 0);
		Assert(tag != FENCE_TAG_REST ||
			   (i > 0 && (b->st.s.tags[i - 1] & 1) != 0 &&
				b->slots[i - 1].e.namelen > FENCE_HEAD_NAME_BYTES));
		Assert(!long_name ||
			   (i + 1 < FENCE_WAYS && b->st.s.tags[i + 1] == FENCE_TAG_REST));
		Assert((tag & 1) == 0 || b->slots[i].e.namelen <= FENCE_NAME_BYTES);
	}
#endif
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
								"Slots of the fence cache, which keeps the current lease of lock names in shared memory.",
								"With shared_preload_libraries = 'dlock', the 'latest' and 'live' fences "
								"answer from this cache instead of the lease table.  A name "
								"of up to 22 bytes takes one slot (72 bytes), a longer one two; 0 turns the cache off.",
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
