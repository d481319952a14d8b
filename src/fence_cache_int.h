/*-------------------------------------------------------------------------
 *
 * src/fence_cache_int.h
 *	  The fence cache's shared layout (buckets, entries, the shared part)
 *	  and what its two files share: fence_cache.c (the shared memory, the
 *	  settings, the readers' lookup and fill) and fence_cache_write.c (the
 *	  writers' opens, records and closes).
 *
 * Concurrency: fence_cache.c's header gives the protocol.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_FENCE_CACHE_INT_H
#define DLOCK_FENCE_CACHE_INT_H

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/spin.h"

#include "fence_cache.h"

/* Slots per bucket (64 bytes each). */
#define FENCE_WAYS			8

/* The bytes of a name an entry's first slot holds */
#define FENCE_HEAD_NAME_BYTES	22

/*
 * The longest lock name an entry holds (its first slot's part and a whole
 * second slot); longer names are never cached.
 */
#define FENCE_NAME_BYTES	(FENCE_HEAD_NAME_BYTES + 64)

/*
 * One cached lease, in one slot (a cache line): its exact key, what the
 * fence checks of its row (DlockFenceCached), and its name when it has at
 * most FENCE_HEAD_NAME_BYTES bytes.  A longer name's entry takes two
 * adjacent slots, the second holding the rest of the name
 * (FenceSlot.rest).
 */
typedef struct FenceEntry
{
	int64		token;
	uint64		epoch;			/* the global epoch it was filled in */
	TimestampTz expires_at;
	Oid			dbid;
	Oid			relid;			/* the lease table */
	Oid			relnumber;		/* its relfilenode */
	Oid			holder;			/* the lease's holder role */
	uint8		namelen;
	bool		released;
	char		name[FENCE_HEAD_NAME_BYTES];
} FenceEntry;

typedef union FenceSlot
{
	FenceEntry	e;
	char		rest[64];		/* a long name's second slot */
} FenceSlot;

StaticAssertDecl(sizeof(FenceEntry) == 64 && sizeof(FenceSlot) == 64,
				 "a fence cache slot takes one cache line");
StaticAssertDecl(FENCE_NAME_BYTES <= PG_UINT8_MAX,
				 "an entry's namelen holds the longest name it holds");

/*
 * A slot's tag: 0 when empty; for an entry's first slot, bits of the name's
 * hash, always odd; FENCE_TAG_REST (even, so that no lookup matches it) for
 * the second slot of a long name's entry, whose first slot is the slot
 * before it.
 */
#define FENCE_TAG_REST		2

/* how many slots an entry for a name of namelen bytes takes */
#define FENCE_SLOTS_OF(namelen) ((namelen) > FENCE_HEAD_NAME_BYTES ? 2 : 1)

/*
 * A bucket's state, in its first cache line: the counters, and a tag per
 * slot, so that a lookup reads one entry, the one whose tag matches, and
 * then compares its whole key.
 */
typedef struct FenceBucketState
{
	pg_atomic_uint32 open;		/* changes of its names in progress */
	pg_atomic_uint32 version;	/* bumped by fills and clears; odd: writing */
	slock_t		mutex;			/* serialises fills and clears */
	uint8		victim;			/* the slot the next full fill replaces */
	uint32		tags[FENCE_WAYS];
} FenceBucketState;

typedef struct FenceBucket
{
	union
	{
		FenceBucketState s;
		char		pad[64];
	}			st;
	FenceSlot	slots[FENCE_WAYS];
} FenceBucket;

StaticAssertDecl(sizeof(FenceBucketState) <= 64,
				 "a fence cache bucket's state must fit in a cache line");
StaticAssertDecl(sizeof(FenceBucket) % 64 == 0,
				 "a fence cache bucket is whole cache lines");

/*
 * The key of a cached lease (its database is MyDatabaseId's), for the
 * writers' helpers below.
 */
typedef struct FenceKey
{
	Oid			relid;
	Oid			relnumber;
	uint32		tag;
	int			namelen;
	const char *name;
} FenceKey;

/*
 * fence_entry_is reports whether the entry whose first slot is way holds
 * key, in any epoch: its tag, database, table and whole name.  Under the
 * bucket's spinlock, or by a reader that checks the bucket's version after
 * (a torn read may then answer anything, but never reads past the bucket).
 */
static inline bool
fence_entry_is(FenceBucket *b, int way, const FenceKey *key)
{
	volatile FenceEntry *e = &b->slots[way].e;
	int			head = Min(key->namelen, FENCE_HEAD_NAME_BYTES);

	Assert(way >= 0 && way < FENCE_WAYS && key->namelen <= FENCE_NAME_BYTES);
	if (((volatile uint32 *) b->st.s.tags)[way] != key->tag ||
		e->dbid != MyDatabaseId || e->relid != key->relid ||
		e->relnumber != key->relnumber || e->namelen != key->namelen ||
		memcmp((const char *) e->name, key->name, head) != 0)
		return false;
	if (key->namelen == head)
		return true;
	return way + 1 < FENCE_WAYS &&
		memcmp((const char *) b->slots[way + 1].rest, key->name + head,
			   key->namelen - head) == 0;
}

/* The shared part. */
typedef struct FenceCacheShared
{
	pg_atomic_uint64 epoch;		/* bumped when a global change closes */
	pg_atomic_uint32 open_all;	/* global changes in progress */
	int			nbuckets;
} FenceCacheShared;

/* NULL unless preloaded with a size > 0 (fence_cache.c) */
extern FenceCacheShared *fence_shared;
extern FenceBucket *fence_buckets;

/* dlock.fence_cache: whether this session's fence uses the cache */
extern bool dlock_fence_cache;

extern int	DlockFenceBucketOf(text *lock_name, uint32 *tag);
extern int	DlockFenceTake(FenceBucket *b, int nslots, uint64 epoch);
extern void DlockFenceEntrySet(FenceBucket *b, int way, const FenceKey *key,
							   uint64 epoch, const DlockFenceCached *lease);
extern void DlockFenceEntryDrop(FenceBucket *b, int way);
extern void DlockFenceBucketCheck(FenceBucket *b);

#endif							/* DLOCK_FENCE_CACHE_INT_H */
