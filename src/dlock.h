/*-------------------------------------------------------------------------
 *
 * src/dlock.h
 *	  What dlock's modules share, in one section per file, named by the
 *	  file that defines it (design.md §1 is the map of the files); a
 *	  module's private header (lease_table_int.h, notifier_int.h,
 *	  wait_int.h, fence_int.h, store_int.h) and the headers of
 *	  fence_cache.c, lease_table.c, lease_room.c and name_hash.c declare
 *	  the rest.  compat.h (every PostgreSQL version difference) comes
 *	  with it; template.c and the other files are in the sections below.
 *
 * Concurrency: each function's locking is in its file's header (design.md
 * §5); nothing declared here takes a lock by itself.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_H
#define DLOCK_H

#include "access/xact.h"
#include "common/hashfn.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "port/atomics.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/dsa.h"
#include "utils/timestamp.h"

#include "compat.h"

/* ---- shared by every module: limits and codes ---- */

/* The SQLSTATE of every fencing rejection: class 55, dlock subclass T01. */
#define ERRCODE_DLOCK_STALE_TOKEN	MAKE_SQLSTATE('5','5','T','0','1')

/*
 * Input limits: a lock name takes at most DLOCK_MAX_NAME_BYTES bytes, an
 * owner label at most DLOCK_MAX_OWNER_BYTES; longer ones are refused
 * (22023) before anything is written.  The README documents them.
 */
#define DLOCK_MAX_NAME_BYTES	512
#define DLOCK_MAX_OWNER_BYTES	1024

/*
 * The most names one dlock_acquire_all or dlock_acquire_any takes
 * (docs/sql-reference.md: each new name takes a lock-table entry).
 */
#define DLOCK_MAX_SET_NAMES		10000

/* How a lease was granted: the name's row before the grant. */
typedef enum DlockGrantKind
{
	DLOCK_GRANT_NEW,			/* no row: the name's first lease */
	DLOCK_GRANT_AFTER_RELEASE,	/* the previous lease was released or broken */
	DLOCK_GRANT_TAKEOVER		/* the previous lease expired unreleased */
} DlockGrantKind;

/* The lease a grant replaced (none for DLOCK_GRANT_NEW). */
typedef struct DlockPrevLease
{
	DlockGrantKind kind;
	int64		token;			/* the previous token; 0 for a new name */
	text	   *owner;			/* its owner label, only when a log line wants
								 * it (DlockEventsWantOwner) */
	TimestampTz ended_at;		/* its expiry, or release time */
} DlockPrevLease;

/* ---- src/dlock.c: _PG_init (no declarations) ---- */

/* ---- src/xact.c: the one transaction callback ---- */
extern void DlockXactInit(void);

/* ---- src/name_hash.c: the keyed hash of a lock name ---- */
extern uint64 DlockNameHash(text *lock_name);

/* ---- src/name_lock.c: the name lock in the lock manager ---- */
extern void DlockNameLockTag(LOCKTAG *tag, text *lock_name);
extern bool DlockNameLockTryGrant(LOCKTAG *tag, text *lock_name);
extern void DlockNameLockUndoGrant(const LOCKTAG *tag);
extern bool DlockNameLockLive(LOCKTAG *tag, text *lock_name);
extern void DlockNameLockUndoLive(const LOCKTAG *tag);
extern bool DlockNameLockBusy(text *lock_name);
extern void DlockNameLockXactEnd(XactEvent event);

/* ---- src/async_commit.c: a transaction that only released leases ---- */
extern void DlockAsyncReleaseInit(void);
extern void DlockAsyncReleaseXactEnd(XactEvent event);
extern void DlockAsyncReleaseBegin(void);
extern void DlockAsyncReleaseEnd(void);

/* ---- src/stats.c: the counters of dlock_stats ---- */
/*
 * The counters of the dlock_stats view, in its column order
 * (docs/sql-reference.md says what each counts).
 */
typedef enum DlockStat
{
	DLOCK_STAT_GRANTS_NEW,
	DLOCK_STAT_GRANTS_AFTER_RELEASE,
	DLOCK_STAT_TAKEOVERS,
	DLOCK_STAT_REFUSALS,
	DLOCK_STAT_WAITS,
	DLOCK_STAT_WAIT_TIMEOUTS,
	DLOCK_STAT_RENEWALS,
	DLOCK_STAT_RENEWALS_FAILED,
	DLOCK_STAT_RELEASES,
	DLOCK_STAT_RELEASES_FAILED,
	DLOCK_STAT_BREAKS,
	DLOCK_STAT_PURGED,
	DLOCK_STAT_FENCE_LATEST_ACCEPTED,
	DLOCK_STAT_FENCE_LATEST_REJECTED,
	DLOCK_STAT_FENCE_LIVE_ACCEPTED,
	DLOCK_STAT_FENCE_LIVE_REJECTED,
	DLOCK_STAT_FENCE_SEEN_ACCEPTED,
	DLOCK_STAT_FENCE_SEEN_REJECTED,
	DLOCK_STAT_TOKEN_JUMPS,
	DLOCK_NUM_STATS
} DlockStat;

extern void DlockStatsInit(void);
extern void DlockStatsCount(DlockStat stat, uint64 n);

/*
 * DlockStatsCountGrant counts a grant of kind.
 */
static inline void
DlockStatsCountGrant(DlockGrantKind kind)
{
	DlockStatsCount(kind == DLOCK_GRANT_NEW ? DLOCK_STAT_GRANTS_NEW :
					kind == DLOCK_GRANT_AFTER_RELEASE ?
					DLOCK_STAT_GRANTS_AFTER_RELEASE : DLOCK_STAT_TAKEOVERS, 1);
}

/* ---- src/events.c: lease events, sent (by the notifier) and logged at commit ---- */
extern void DlockEventsInit(void);
extern void DlockEventsXactEnd(XactEvent event);
extern void DlockEventsSubXactEnd(SubXactEvent event, SubTransactionId mySubid,
								  SubTransactionId parentSubid);
extern void DlockEventGrant(text *lock_name, int64 token,
							const DlockPrevLease *prev);
extern void DlockEventRelease(text *lock_name, int64 token);
extern void DlockEventBreak(text *lock_name, int64 token, text *owner,
							TimestampTz expires_at);
extern void DlockEventPurge(text *lock_name, int64 token);
extern bool DlockEventsWanted(bool takeover_or_break);
extern bool DlockEventsWantOwner(void);

/*
 * DlockReportGrant counts the grant of token on lock_name and records its
 * lease event; prev is the lease it replaced.
 */
static inline void
DlockReportGrant(text *lock_name, int64 token, const DlockPrevLease *prev)
{
	DlockStatsCountGrant(prev->kind);
	DlockEventGrant(lock_name, token, prev);
}

/* ---- src/notifier.c: appending events to the notifier's queue ---- */
extern void DlockNotifierQueue(char **payloads, const int64 *overflow, int n,
							   int64 nchanges, const char *overflow_payload);
extern void DlockNotifierWake(void);

/* ---- src/notifier_shmem.c: the notifiers' shared memory and settings ---- */
extern void DlockNotifierInit(void);
extern bool DlockNotifierAvailable(void);
extern char *DlockNotifierOverflowPayload(int64 count);

/* ---- src/notifier_command.c: the ProcessUtility_hook ---- */
extern void DlockNotifierCommandInit(void);

/* ---- src/store_ops.c: the store's operations ---- */
/* What a renew or release found. */
typedef enum DlockStoreOutcome
{
	DLOCK_STORE_DONE,			/* the live lease (name, token) was changed */
	DLOCK_STORE_NOT_HELD,		/* a row exists, but the token holds no live
								 * lease: not current, or its lease ended */
	DLOCK_STORE_NO_LEASE,		/* no row for the name */
	DLOCK_STORE_DENIED			/* the token is the row's current token, but
								 * the caller may not act for its holder role:
								 * nothing was changed */
} DlockStoreOutcome;

extern bool DlockStoreTryAcquire(Oid fn_oid, text *lock_name, text *owner,
								 Oid holder, TimestampTz now,
								 TimestampTz expires,
								 int64 *token, TimestampTz *held_until,
								 DlockPrevLease *prev);
extern bool DlockStoreTryAcquireAll(Oid fn_oid, text **names, int n,
									text *owner, Oid holder, TimestampTz now,
									TimestampTz expires, int64 *tokens,
									DlockPrevLease *prevs,
									TimestampTz *held_until, int *refused);
extern DlockStoreOutcome DlockStoreRenew(Oid fn_oid, text *lock_name,
										 int64 token, TimestampTz now,
										 TimestampTz expires, Oid *holder);
extern DlockStoreOutcome DlockStoreRelease(Oid fn_oid, text *lock_name,
										   int64 token, TimestampTz now,
										   Oid *holder);

/* One lease of a renew or release of many, and what was found. */
typedef struct DlockStoreItem
{
	text	   *lock_name;
	int64		token;
	DlockStoreOutcome outcome;	/* out */
	Oid			holder;			/* out: the row's holder role (when the token
								 * was current) */
} DlockStoreItem;

extern void DlockStoreRenewEach(Oid fn_oid, DlockStoreItem *items, int n,
								TimestampTz now, TimestampTz expires);
extern void DlockStoreReleaseEach(Oid fn_oid, DlockStoreItem *items, int n,
								  TimestampTz now);
extern bool DlockStoreBreak(Oid fn_oid, text *lock_name, TimestampTz now,
							int64 *token, TimestampTz *expires, text **owner);
extern int64 DlockStorePurge(Oid fn_oid, TimestampTz cutoff);
extern void DlockStoreTokenInit(Oid fn_oid);

/* ---- src/store.c: the fence's lookup ---- */
/* The lease behind a fenced write, as the fence trigger sees it. */
typedef struct DlockFenceLease
{
	bool		found;			/* false: the name has no row */
	int64		token;
	bool		released;
	TimestampTz expires_at;
	/* 'live' only: the writer's token is current, but ... */
	bool		denied;			/* ... the writer may not act for the lease's
								 * holder role: the row was not locked */
	Oid			holder;			/* the lease's holder role, when denied */
} DlockFenceLease;

extern void DlockStoreFenceLookup(Oid fn_oid, text *lock_name, int64 token,
								  bool lock_row, DlockFenceLease *lease);

/* ---- src/store_restricted.c: the store's security-restricted operations ---- */
typedef struct DlockRestricted
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} DlockRestricted;

extern void DlockRestrictedBegin(DlockRestricted *saved);
extern void DlockRestrictedEnd(DlockRestricted *saved);

/* ---- src/template.c: lock name templates (dlock_fence's first argument) ---- */
typedef struct DlockTemplatePart
{
	char	   *literal;		/* literal text, or NULL for a column */
	char	   *column;			/* the column's name, for a column */
} DlockTemplatePart;

typedef enum DlockTemplateError
{
	DLOCK_TEMPLATE_OK,
	DLOCK_TEMPLATE_UNCLOSED,	/* a "{" that nothing closes */
	DLOCK_TEMPLATE_EMPTY_COLUMN,	/* "{}" */
	DLOCK_TEMPLATE_STRAY_CLOSE, /* a "}" that closes nothing */
	DLOCK_TEMPLATE_EMPTY		/* no text at all */
} DlockTemplateError;

extern DlockTemplateError DlockTemplateSplit(const char *template,
											 DlockTemplatePart **parts,
											 int *nparts, int *errpos);
extern bool DlockTemplateMatches(const DlockTemplatePart *parts, int nparts,
								 const char *name, int len);

/* ---- src/mark.c: the marks of fencing mode 'seen' (dlock_fence_mark) ---- */
extern bool DlockMarkCheck(Oid fn_oid, text *lock_name, Oid table_owner,
						   int64 token, int64 *mark);
extern int	DlockMarkOwners(Oid fn_oid, text *lock_name, Oid roleid,
							Oid **owners);
extern int64 DlockMarkPurge(Oid fn_oid, TimestampTz cutoff);
extern uint64 DlockMarkChanges(void);

/* ---- src/checked.c: what a transaction checked, in the fence's modes ---- */
typedef enum DlockFenceMode
{
	DLOCK_FENCE_LATEST,			/* the token is the lease's current token */
	DLOCK_FENCE_LIVE,			/* ... and the lease is live, kept from a
								 * takeover */
	DLOCK_FENCE_SEEN			/* no token lower than the highest seen here */
} DlockFenceMode;

/* A dlock_check that passed in the current transaction. */
typedef struct DlockChecked
{
	int64		token;
	DlockFenceMode mode;
	/* 'seen': the marks this transaction holds locked at token, by owner */
	int			nmark_owners;
	Oid		   *mark_owners;
} DlockChecked;

extern void DlockCheckedXactEnd(XactEvent event);
extern void DlockCheckedSubXactEnd(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid);
extern void DlockCheckedRecord(text *lock_name, const DlockChecked *check);
extern bool DlockCheckedLookup(text *lock_name, DlockChecked *check);
extern bool DlockCheckedHoldsMark(const DlockChecked *check, Oid table_owner);
extern void DlockCheckedMarkMoved(text *lock_name, Oid table_owner,
								  int64 token);

/* ---- src/token.c: token jumps and draws (the store calls them, as owner) ---- */
extern void DlockTokenInit(void);
extern void DlockTokenPrepare(Oid seqrelid, Oid originrelid);
extern void DlockTokenMakeDurable(Oid seqrelid);
extern int64 DlockTokenDrawAbove(Oid seqrelid, int64 floor);
extern void DlockTokenForget(void);
extern void DlockTokenSetOrigin(Oid seqrelid, Oid originrelid);

/* ---- src/wait_shmem.c: waiting's shared memory (NULL unless preloaded) ---- */
#define DLOCK_WAIT_BUCKETS	1024
#define DLOCK_WAIT_DBS		64	/* db_waiters: database OID mod this */

/*
 * The hashes of changed names an any-slot that joined during a waker's
 * commit is handed (wait.c: "late" any-slots); more set any_rescan.
 */
#define DLOCK_ANY_RING		16

/* What a waiting call is (the kind column of dlock_waiters). */
typedef enum DlockWaitKind
{
	DLOCK_WAIT_ONE,				/* dlock_acquire */
	DLOCK_WAIT_ALL,				/* dlock_acquire_all */
	DLOCK_WAIT_ANY				/* dlock_acquire_any */
} DlockWaitKind;

/*
 * A backend's waiter slot (wait.c's header has the protocol).  Written by
 * its backend under the dlock LWLock held exclusively, except what the
 * fields say.
 */
typedef struct DlockWaiter
{
	bool		in_use;
	bool		any;			/* an any-slot (dlock_acquire_any, wait.c) */
	uint64		hash;			/* a queue slot: DlockNameHash of name, the
								 * name whose queue it stands in */
	uint64		ticket;			/* queue position: lower waits longer */
	uint64		any_buckets[DLOCK_WAIT_BUCKETS / 64];	/* an any-slot's buckets */
	/* an any-slot's names, in dlock's DSA area (DlockAnyArea) */
	dsa_pointer any_set;		/* any_nhashes sorted distinct DlockNameHash
								 * values, then one changed bit per value
								 * (pg_atomic_uint32 words, set by wakers
								 * under the LWLock held shared) */
	int			any_nhashes;
	slock_t		any_mutex;		/* protects any_nring, any_ring, any_rescan */
	int			any_nring;
	bool		any_rescan;		/* try every name: the ring overflowed */
	uint64		any_ring[DLOCK_ANY_RING];	/* hashes handed by wakers */
	pg_atomic_uint64 attempts;	/* the call's attempts so far; written by its
								 * backend alone, read without a lock */
	/* what dlock_waiters shows */
	int			pid;
	Oid			dboid;
	Oid			roleid;
	DlockWaitKind kind;
	int			nnames;
	TimestampTz since;
	TimestampTz until;
	int			namelen;
	char		name[DLOCK_MAX_NAME_BYTES]; /* a queue slot: the name whose
											 * queue it stands in; an
											 * any-slot: its first name (not
											 * terminated) */
} DlockWaiter;

typedef struct DlockWaitShared
{
	LWLock	   *lock;
	uint64		next_ticket;
	int			any_tranche;	/* the LWLock tranche of DlockAnyArea */
	int			nslots;
	pg_atomic_uint32 db_waiters[DLOCK_WAIT_DBS];	/* slots in use per
													 * database class */
	pg_atomic_uint32 bucket_waiters[DLOCK_WAIT_BUCKETS];
	DlockWaiter slots[FLEXIBLE_ARRAY_MEMBER];	/* indexed by pgprocno */
} DlockWaitShared;

extern DlockWaitShared *DlockWaitShmem;
extern void DlockWaitInit(void);
extern dsa_area *DlockAnyArea(void);

/* ---- src/wait.c: waiting for a lease ---- */
/*
 * One attempt to take a lease (or a set of leases).  Returns true when
 * granted; otherwise sets *held_until to the expiry of the live lease that
 * held a name, or to 0 when that is unknown (an open transaction is
 * changing the lease).  A set's attempt also updates the lock_name of its
 * DlockWaitInfo to the name that refused it, so that the waiter queues
 * there.
 */
typedef bool (*DlockAttemptFn) (void *arg, TimestampTz *held_until);

/*
 * One attempt to take the lease of name i of a dlock_acquire_any (in array
 * order); returns and sets *held_until as a DlockAttemptFn.
 */
typedef bool (*DlockAttemptOneFn) (void *arg, int i, TimestampTz *held_until);

/*
 * A waiting call, as dlock_waiters shows it.  lock_name is the name whose
 * queue it waits in: a set's attempt function updates it to the name that
 * refused it.  waited is set when the call starts to wait; attempts counts
 * the attempts wait.c made for the call (names tried by dlock_acquire_any,
 * attempts of the name or of the whole set otherwise).
 */
typedef struct DlockWaitInfo
{
	DlockWaitKind kind;
	int			nnames;
	text	   *lock_name;
	TimestampTz since;			/* set by wait.c */
	bool		waited;			/* out */
	int64		attempts;		/* out */
} DlockWaitInfo;

extern bool DlockWaitAcquire(TimestampTz deadline, DlockAttemptFn attempt,
							 void *arg, DlockWaitInfo *info);

/* ---- src/wait_any.c: waiting of dlock_acquire_any ---- */
extern bool DlockWaitAcquireAny(const uint64 *hashes, int n,
								TimestampTz deadline,
								DlockAttemptOneFn attempt, void *arg,
								DlockWaitInfo *info);

/* ---- src/wait_wake.c: the wake-ups at a transaction's end ---- */
extern void DlockWakeAtXactEnd(text *lock_name);
extern void DlockWaitXactEnd(XactEvent event);

/* ---- src/lease.c: the SQL entry points; argument checks shared with fence.c and lease_set.c ---- */
extern void DlockLeaseInit(void);
extern void DlockCheckWritable(const char *funcname);
extern void DlockCheckLockName(text *name, const char *what);
extern text *DlockGetLockName(FunctionCallInfo fcinfo);
extern Interval *DlockGetTtl(FunctionCallInfo fcinfo, int argno);
extern TimestampTz DlockGetWaitDeadline(FunctionCallInfo fcinfo, int argno,
										TimestampTz start);
extern text *DlockGetOwner(FunctionCallInfo fcinfo, int argno);
extern TimestampTz DlockLeaseExpiry(TimestampTz now, Interval *ttl);
extern void DlockHolderDenied(Oid holder, text *lock_name, const char *action);
extern void DlockCountAcquire(bool granted, const DlockWaitInfo *info);

#endif							/* DLOCK_H */
