/*-------------------------------------------------------------------------
 *
 * src/fence_cache.c
 *	  The fence cache: the current token of recently fenced lock names, in
 *	  shared memory, so that the 'latest' fence answers without the B-tree
 *	  descent and heap fetch of the lease row.  Only with
 *	  shared_preload_libraries = 'dlock'; without it, and for whatever the
 *	  cache cannot answer, the fence reads the index (DlockLeaseFenceRead).
 *
 * Owns the shared memory and its layout (fence_cache_int.h): the buckets
 * (FENCE_WAYS entries each, keyed exactly: database, the lease table's OID
 * and relfilenode, the whole name), their open counts, versions and
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
	/* WAL replay changes leases without opening anything: no hit, no fill */
	if (RecoveryInProgress())
		return false;
	/* a relfilenode this transaction made may never be committed */
	if (DlockRelFileNumberIsNew(rel))
		return false;
	ticket->relid = RelationGetRelid(rel);
	ticket->relnumber = DlockRelFileNumber(rel);
	bno = DlockFenceBucketOf(lock_name, &tag);
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
