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

#include "port/atomics.h"
#include "storage/itemptr.h"
#include "storage/spin.h"

/* Entries per bucket. */
#define FENCE_WAYS			8

/* The longest lock name an entry holds; longer names are never cached. */
#define FENCE_NAME_BYTES	88

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

/* NULL unless preloaded with a size > 0 (fence_cache.c) */
extern FenceCacheShared *fence_shared;
extern FenceBucket *fence_buckets;

/* dlock.fence_cache: whether this session's fence uses the cache */
extern bool dlock_fence_cache;

extern int	DlockFenceBucketOf(text *lock_name, uint32 *tag);

#endif							/* DLOCK_FENCE_CACHE_INT_H */
