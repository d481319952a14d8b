/*-------------------------------------------------------------------------
 *
 * src/stats.c
 *	  dlock's counters: what the dlock_stats view shows, per database,
 *	  since the server started or since dlock_stats_reset().
 *
 * With shared_preload_libraries = 'dlock', shared memory holds one counter
 * block per backend (indexed by pgprocno) and one total block per database
 * (DLOCK_STATS_DBS of them).  A backend counts into its own block only:
 * the counters are pg_atomic_uint64 written by their owner alone, with a
 * plain read and write (no locked instruction), so counting costs a few
 * stores, and others read them whole.  A database's figure is its total
 * block plus, for every backend block of that database in use, the
 * backend's counter minus its base (the counter's value at the last
 * reset).  When a backend exits it adds counter minus base to its
 * database's totals and gives its block up.  So every event is counted in
 * exactly one place at any time, and the figures are exact.
 *
 * Without preload there is no shared memory: nothing is counted and the
 * view has no rows (documented in docs/sql-reference.md).  The setting
 * dlock.track_stats (superuser) turns counting off.
 *
 * Concurrency: the "dlock stats" LWLock.  Exclusive to take or give up a
 * backend block, to add a database's total block, to fold a block into
 * the totals at exit and to reset (which sets the bases of other backends'
 * blocks and zeroes the totals); shared to read the figures.  A backend
 * writes its own counters without the lock; bases and totals are written
 * only under the exclusive lock.  Counting happens in any state (also
 * while a lease function raises), and never takes the lock after the
 * backend's first count.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "dlock.h"

/* Databases whose counters a server start keeps apart. */
#define DLOCK_STATS_DBS		1024

/* One backend's counters (owner writes) and their values at the last reset. */
typedef struct StatsBackend
{
	bool		in_use;
	Oid			dboid;
	pg_atomic_uint64 count[DLOCK_NUM_STATS];
	uint64		base[DLOCK_NUM_STATS];
} StatsBackend;

/* A database's totals: what its exited backends counted since the reset. */
typedef struct StatsDb
{
	Oid			dboid;
	TimestampTz reset;
	uint64		total[DLOCK_NUM_STATS];
} StatsDb;

typedef struct StatsShared
{
	LWLock	   *lock;
	TimestampTz start;			/* when shared memory was set up */
	int			nbackends;
	int			ndbs;
	StatsDb		dbs[DLOCK_STATS_DBS];
	StatsBackend backends[FLEXIBLE_ARRAY_MEMBER];	/* indexed by pgprocno */
} StatsShared;

static StatsShared *stats_shmem = NULL;

/* dlock.track_stats */
static bool dlock_track_stats = true;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* This backend's block, once it counted; stats_unavailable: none to have. */
static StatsBackend *my_stats = NULL;
static bool stats_unavailable = false;
static bool exit_callback_registered = false;

/*
 * stats_nbackends returns the number of backend blocks: one per PGPROC.
 */
static int
stats_nbackends(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/*
 * stats_shmem_size returns the bytes of shared memory the counters need.
 */
static Size
stats_shmem_size(void)
{
	return add_size(offsetof(StatsShared, backends),
					mul_size(stats_nbackends(), sizeof(StatsBackend)));
}

/*
 * stats_shmem_request asks for the counters' shared memory and LWLock,
 * after chaining to the previous hook.
 */
static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(stats_shmem_size());
	RequestNamedLWLockTranche("dlock stats", 1);
}

/*
 * stats_shmem_startup attaches to (or, first, sets up) the counters'
 * shared memory, after chaining to the previous hook.  Takes
 * AddinShmemInitLock.
 */
static void
stats_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stats_shmem = ShmemInitStruct("dlock stats", stats_shmem_size(), &found);
	if (!found)
	{
		int			i;
		int			j;

		stats_shmem->lock = &(GetNamedLWLockTranche("dlock stats"))->lock;
		stats_shmem->start = GetCurrentTimestamp();
		stats_shmem->nbackends = stats_nbackends();
		stats_shmem->ndbs = 0;
		for (i = 0; i < stats_shmem->nbackends; i++)
		{
			StatsBackend *b = &stats_shmem->backends[i];

			b->in_use = false;
			b->dboid = InvalidOid;
			for (j = 0; j < DLOCK_NUM_STATS; j++)
			{
				pg_atomic_init_u64(&b->count[j], 0);
				b->base[j] = 0;
			}
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * DlockStatsInit defines dlock.track_stats and, when dlock is being
 * preloaded, installs the hooks of the counters' shared memory; _PG_init
 * calls it.
 */
void
DlockStatsInit(void)
{
	DefineCustomBoolVariable("dlock.track_stats",
							 "Whether lease operations and fence decisions are counted for dlock_stats.",
							 "Needs shared_preload_libraries = 'dlock'.",
							 &dlock_track_stats,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

/*
 * stats_db_locked returns the total block of database dboid, adding it
 * when add (NULL when there is none, or no room).  Caller holds the lock,
 * exclusively when add.
 */
static StatsDb *
stats_db_locked(Oid dboid, bool add)
{
	StatsDb    *db;
	int			i;

	Assert(LWLockHeldByMe(stats_shmem->lock));
	for (i = 0; i < stats_shmem->ndbs; i++)
		if (stats_shmem->dbs[i].dboid == dboid)
			return &stats_shmem->dbs[i];
	if (!add || stats_shmem->ndbs >= DLOCK_STATS_DBS)
		return NULL;
	Assert(LWLockHeldByMeInMode(stats_shmem->lock, LW_EXCLUSIVE));
	db = &stats_shmem->dbs[stats_shmem->ndbs++];
	db->dboid = dboid;
	db->reset = stats_shmem->start;
	memset(db->total, 0, sizeof(db->total));
	return db;
}

/*
 * stats_exit_callback adds this backend's counts to its database's totals
 * and gives its block up, when the backend exits.
 */
static void
stats_exit_callback(int code, Datum arg)
{
	StatsDb    *db;
	int			i;

	/* nothing counts from here on (a count during exit must not attach) */
	stats_unavailable = true;
	if (my_stats == NULL)
		return;
	LWLockAcquire(stats_shmem->lock, LW_EXCLUSIVE);
	db = stats_db_locked(my_stats->dboid, false);
	/* the database's block was added before this block was taken */
	Assert(db != NULL);
	for (i = 0; i < DLOCK_NUM_STATS; i++)
	{
		uint64		c = pg_atomic_read_u64(&my_stats->count[i]);

		Assert(c >= my_stats->base[i]);
		if (db != NULL)
			db->total[i] += c - my_stats->base[i];
	}
	my_stats->in_use = false;
	LWLockRelease(stats_shmem->lock);
	my_stats = NULL;
}

/*
 * stats_attach takes this backend's block for the current database; sets
 * stats_unavailable when there is none to have (not preloaded, or no room
 * for another database).  Takes the lock exclusively, once per backend.
 */
static void
stats_attach(void)
{
	StatsBackend *b;
	int			procno = DlockMyProcNumber();
	int			i;
	bool		room;

	if (stats_shmem == NULL || !OidIsValid(MyDatabaseId) ||
		procno < 0 || procno >= stats_shmem->nbackends)
	{
		stats_unavailable = true;
		return;
	}
	b = &stats_shmem->backends[procno];
	/* first, so that a block taken is always given up (this can raise) */
	if (!exit_callback_registered)
	{
		before_shmem_exit(stats_exit_callback, (Datum) 0);
		exit_callback_registered = true;
	}
	LWLockAcquire(stats_shmem->lock, LW_EXCLUSIVE);
	room = stats_db_locked(MyDatabaseId, true) != NULL;
	if (room)
	{
		/* the previous user of this PGPROC gave the block up at its exit */
		Assert(!b->in_use);
		b->dboid = MyDatabaseId;
		for (i = 0; i < DLOCK_NUM_STATS; i++)
		{
			pg_atomic_write_u64(&b->count[i], 0);
			b->base[i] = 0;
		}
		b->in_use = true;
	}
	LWLockRelease(stats_shmem->lock);
	if (!room)
	{
		stats_unavailable = true;
		ereport(LOG,
				(errmsg("dlock: no room to count lease operations of database %u", MyDatabaseId),
				 errdetail("Counters are kept for at most %d databases per server start.",
						   DLOCK_STATS_DBS)));
		return;
	}
	my_stats = b;
}

/*
 * DlockStatsCount adds n to this backend's counter stat, when counting is
 * on and possible (see the file header).  Never raises once attached.
 */
void
DlockStatsCount(DlockStat stat, uint64 n)
{
	pg_atomic_uint64 *c;

	Assert(stat >= 0 && stat < DLOCK_NUM_STATS);
	if (!dlock_track_stats || n == 0)
		return;
	if (unlikely(my_stats == NULL))
	{
		if (stats_unavailable)
			return;
		stats_attach();
		if (my_stats == NULL)
			return;
	}
	Assert(my_stats->in_use && my_stats->dboid == MyDatabaseId);
	c = &my_stats->count[stat];
	/* only this backend writes its counters: no locked instruction needed */
	pg_atomic_write_u64(c, pg_atomic_read_u64(c) + n);
}

/* dlock_stats_read's columns: datid, the counters, stats_reset. */
#define STATS_COLS	(DLOCK_NUM_STATS + 2)

PG_FUNCTION_INFO_V1(dlock_stats_read);

/*
 * dlock_stats_read() returns setof record: one row per database counted
 * since the server start (datid oid, the DLOCK_NUM_STATS counters in
 * DlockStat order as bigint, stats_reset timestamptz), for the dlock_stats
 * view.  No rows without preload.
 */
Datum
dlock_stats_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StatsDb    *sums;
	int			ndbs;
	int			d;
	int			b;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (stats_shmem == NULL)
		return (Datum) 0;

	/* the totals plus each live backend's counts, in one pass, locked */
	sums = palloc(sizeof(StatsDb) * DLOCK_STATS_DBS);
	LWLockAcquire(stats_shmem->lock, LW_SHARED);
	ndbs = stats_shmem->ndbs;
	memcpy(sums, stats_shmem->dbs, sizeof(StatsDb) * ndbs);
	for (b = 0; b < stats_shmem->nbackends; b++)
	{
		StatsBackend *be = &stats_shmem->backends[b];

		if (!be->in_use)
			continue;
		for (d = 0; d < ndbs && sums[d].dboid != be->dboid; d++)
			;
		/* a backend's database has its block before the backend counts */
		Assert(d < ndbs);
		if (d == ndbs)
			continue;
		for (i = 0; i < DLOCK_NUM_STATS; i++)
			sums[d].total[i] += pg_atomic_read_u64(&be->count[i]) - be->base[i];
	}
	LWLockRelease(stats_shmem->lock);

	for (d = 0; d < ndbs; d++)
	{
		Datum		values[STATS_COLS];
		bool		nulls[STATS_COLS] = {0};

		values[0] = ObjectIdGetDatum(sums[d].dboid);
		for (i = 0; i < DLOCK_NUM_STATS; i++)
			values[1 + i] = Int64GetDatum((int64) sums[d].total[i]);
		values[1 + DLOCK_NUM_STATS] = TimestampTzGetDatum(sums[d].reset);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(dlock_stats_reset);

/*
 * dlock_stats_reset() sets the current database's counters to zero and its
 * stats_reset to now.  For operators: EXECUTE is revoked from PUBLIC.  Does
 * nothing without preload.
 */
Datum
dlock_stats_reset(PG_FUNCTION_ARGS)
{
	StatsDb    *db;
	int			b;

	if (stats_shmem == NULL)
		PG_RETURN_VOID();
	LWLockAcquire(stats_shmem->lock, LW_EXCLUSIVE);
	db = stats_db_locked(MyDatabaseId, true);
	if (db != NULL)
	{
		memset(db->total, 0, sizeof(db->total));
		db->reset = GetCurrentTimestamp();
		for (b = 0; b < stats_shmem->nbackends; b++)
		{
			StatsBackend *be = &stats_shmem->backends[b];
			int			i;

			if (!be->in_use || be->dboid != MyDatabaseId)
				continue;
			for (i = 0; i < DLOCK_NUM_STATS; i++)
				be->base[i] = pg_atomic_read_u64(&be->count[i]);
		}
	}
	LWLockRelease(stats_shmem->lock);
	PG_RETURN_VOID();
}
