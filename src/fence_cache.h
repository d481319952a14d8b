/*-------------------------------------------------------------------------
 *
 * src/fence_cache.h
 *	  The fence cache (fence_cache.c): what the fence checks of the leases
 *	  of recently fenced lock names (token, expiry, released, holder role),
 *	  in shared memory, for the 'latest' and 'live' fences' reads, and the
 *	  calls that every change of a lease row must make.
 *
 * Concurrency: fence_cache.c's header gives the protocol (a bucket's open
 * count, version and spinlock, the global open count and epoch) and the
 * argument why a hit is never stale.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_FENCE_CACHE_H
#define DLOCK_FENCE_CACHE_H

#include "access/xact.h"
#include "datatype/timestamp.h"
#include "utils/relcache.h"

/* What the cache keeps of a lease: the fields of its row the fence checks. */
typedef struct DlockFenceCached
{
	int64		token;
	TimestampTz expires_at;
	Oid			holder;			/* holder_role */
	bool		released;
} DlockFenceCached;

/*
 * What a miss of DlockFenceCacheGet remembers for DlockFenceCacheFill: the
 * entry's key and the bucket's state read before the index read.
 */
typedef struct DlockFenceCacheTicket
{
	int			bucket;			/* -1: do not fill */
	uint32		tag;			/* the name's tag in the bucket */
	uint32		version;		/* the bucket's version before the read */
	uint64		epoch;			/* the global epoch before the read */
	Oid			relid;			/* the lease table */
	Oid			relnumber;		/* its relfilenode */
} DlockFenceCacheTicket;

/* its settings and shared memory, and its COMMIT PREPARED hook (_PG_init) */
extern void DlockFenceCacheInit(void);
extern void DlockFenceCacheWriteInit(void);

/* the end of a transaction or subtransaction (xact.c) */
extern void DlockFenceCacheXactEnd(XactEvent event);
extern void DlockFenceCacheSubXactEnd(SubXactEvent event,
									  SubTransactionId mySubid);

/* the fence's read and lock (lease_fence.c) */
extern bool DlockFenceCacheGet(Relation rel, text *lock_name,
							   DlockFenceCached *lease,
							   DlockFenceCacheTicket *ticket);
extern bool DlockFenceCacheGetKey(Oid relid, Oid relnumber, text *lock_name,
								  DlockFenceCached *lease,
								  DlockFenceCacheTicket *ticket);
extern void DlockFenceCacheFill(const DlockFenceCacheTicket *ticket,
								text *lock_name,
								const DlockFenceCached *lease);

/* the lease table's relcache entry was invalidated (store_cache.c) */
extern void DlockFenceCacheTableChanged(void);

/* writers: before a change of a name's row can be seen */
extern void DlockFenceCacheOpen(text *lock_name);
extern void DlockFenceCacheOpenAll(void);

/* writers: after every write of a row, what it left (lease_table.c, store_ops.c) */
extern void DlockFenceCachePublish(Relation rel, text *lock_name,
								   const DlockFenceCached *lease);

/* whether this backend wrote a lease row since (fence.c) */
extern uint64 DlockFenceCacheChanges(void);

#endif							/* DLOCK_FENCE_CACHE_H */
