/*-------------------------------------------------------------------------
 *
 * src/store_cache.c
 *	  The store's per-backend cache of where the extension lives: its
 *	  schema (that of the calling SQL function, fn_oid: nothing is looked
 *	  up in pg_extension), the lease table's OID, owner and columns, the
 *	  token sequences and the mark table.
 *
 * The cache goes stale on what changes it (design.md §4): a relcache
 * invalidation of the lease table (DROP EXTENSION, ALTER ... OWNER, a
 * cache reset), and a change of a pg_class row with the name and schema
 * of any relation it looks up by name, present or absent (an update
 * script that adds one, such as dlock_fence_mark in 1.2; a syscache
 * callback on RELNAMENSP); the next call rebuilds it.  The callbacks only
 * flip a flag: freeing plans there could pull them from under a running
 * call (store.c frees its plans at the start of its next session).
 *
 * Concurrency: backend-local; building opens the lease table with
 * AccessShareLock for a moment.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "dlock.h"
#include "fence_cache.h"
#include "store_int.h"

/* How many calling functions the cache remembers as being in its schema. */
#define DLOCK_KNOWN_FNS		8

/* Per-backend cache of where the extension lives. */
typedef struct DlockStoreCache
{
	bool		valid;			/* false: rebuild before use */
	uint64		inval_count;	/* relcache invalidations seen so far */
	Oid			nspid;			/* the extension's schema */
	DlockLeaseTable table;		/* dlock_lease: where it is, its columns */
	Oid			seqrelid;		/* dlock_token_seq */
	Oid			originrelid;	/* dlock_token_origin (InvalidOid before 1.1) */
	Oid			markrelid;		/* dlock_fence_mark (InvalidOid before 1.2) */
	AttrNumber	mark_att_owner; /* its table_owner, lock_name and token */
	AttrNumber	mark_att_name;
	AttrNumber	mark_att_token;
	Oid			fns[DLOCK_KNOWN_FNS];	/* functions known to be in nspid */
	uint64		generation;		/* rebuilds so far (store.c's plans) */
	/* RELNAMENSP hash values of the relations it looks up by name */
	uint32		name_hashes[4];
} DlockStoreCache;

/* The relations the cache looks up by name in the extension's schema. */
static const char *const cached_names[4] = {
	"dlock_lease", "dlock_token_seq", "dlock_token_origin", "dlock_fence_mark"
};

static DlockStoreCache store_cache;

static bool callback_registered = false;
static bool syscache_callback_registered = false;

/* Every relcache invalidation this backend has seen (DlockStoreRelcacheInvals). */
static uint64 relcache_invals = 0;

/* Those of the mark table's entry, or of every entry (DlockStoreMarkInvals). */
static uint64 mark_invals = 0;


/*
 * store_relcache_callback counts every relcache invalidation
 * (DlockStoreRelcacheInvals) and marks the cache stale when the lease
 * table's entry is invalidated (or all entries are), which it also tells the
 * fence cache's writers (DlockFenceCacheTableChanged).  It only counts and
 * flips flags: freeing plans here could pull them from under a running
 * call.
 */
static void
store_relcache_callback(Datum arg, Oid relid)
{
	relcache_invals++;
	if (!OidIsValid(relid) || relid == store_cache.markrelid)
		mark_invals++;
	if (!OidIsValid(relid) || relid == store_cache.table.relid)
	{
		store_cache.valid = false;
		store_cache.inval_count++;
		DlockFenceCacheTableChanged();
	}
}

/*
 * store_syscache_callback marks the cache stale when a pg_class row with
 * the name and schema of one of the relations it looks up by name changes
 * (is created, dropped, renamed or moved: an update script that adds one,
 * a DROP EXTENSION), or on a reset of the catalog caches (hashvalue 0).
 * Only flips a flag, as store_relcache_callback.
 */
static void
store_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	int			i;

	for (i = 0; i < (int) lengthof(store_cache.name_hashes); i++)
	{
		if (hashvalue == 0 || hashvalue == store_cache.name_hashes[i])
		{
			store_cache.valid = false;
			store_cache.inval_count++;
			return;
		}
	}
}

/*
 * store_register_callback registers store_relcache_callback and
 * store_syscache_callback, once per backend (PostgreSQL allows an
 * extension few such callbacks: dlock registers these two only).
 */
static void
store_register_callback(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(store_relcache_callback, (Datum) 0);
		callback_registered = true;
	}
	if (!syscache_callback_registered)
	{
		CacheRegisterSyscacheCallback(RELNAMENSP, store_syscache_callback,
									  (Datum) 0);
		syscache_callback_registered = true;
	}
}

/*
 * DlockStoreTableInvals returns how many invalidations of the lease table's
 * relcache entry (or of every entry), or of the pg_class rows of the
 * extension's relations' names, this backend has processed since it
 * registered dlock's callbacks, which it does now if it has not: every
 * change of the table's relfilenode, and its drop, sends one
 * (store.c's fence_table_key).
 */
uint64
DlockStoreTableInvals(void)
{
	store_register_callback();
	return store_cache.inval_count;
}

/*
 * DlockStoreRelcacheInvals returns how many relcache invalidations (of any
 * relation) this backend has processed since it registered dlock's
 * callback, which it does now if it has not: a cache of catalog contents
 * that any relation's change may change (mark.c's list of 'seen' fences)
 * is current while this number has not moved since it was read.
 */
uint64
DlockStoreRelcacheInvals(void)
{
	store_register_callback();
	return relcache_invals;
}

/*
 * DlockStoreMarkInvals returns how many invalidations of the relcache entry
 * of the mark table that DlockStoreMarkTable last named (or of every entry)
 * this backend has processed, registering dlock's callbacks if it has not:
 * every change of the table's indexes or constraints sends one
 * (mark_find.c's mark_pkey).
 */
uint64
DlockStoreMarkInvals(void)
{
	store_register_callback();
	return mark_invals;
}

/*
 * store_cache_current reports whether store_cache is valid for the schema
 * of the SQL function fn_oid.
 */
static bool
store_cache_current(Oid fn_oid)
{
	int			i;

	if (!store_cache.valid)
		return false;
	for (i = 0; i < DLOCK_KNOWN_FNS && OidIsValid(store_cache.fns[i]); i++)
	{
		if (store_cache.fns[i] == fn_oid)
			return true;
	}
	if (store_cache.nspid != get_func_namespace(fn_oid))
		return false;
	/* remember it (a function's schema changes only with an invalidation) */
	if (i == DLOCK_KNOWN_FNS)
		i = 0;
	store_cache.fns[i] = fn_oid;
	return true;
}

/*
 * DlockStoreCacheMakeCurrent makes the cache valid for the schema of the
 * SQL function fn_oid: finds dlock_lease, its owner and columns, and the
 * other relations of the extension, and counts a rebuild (so that store.c
 * prepares its statements again).  Raises if the extension's table or
 * sequence is missing (a broken install).
 */
void
DlockStoreCacheMakeCurrent(Oid fn_oid)
{
	Oid			nspid;
	char	   *nspname;
	Oid			relid;
	HeapTuple	tup;
	uint64		inval_start;
	int			i;

	if (store_cache_current(fn_oid))
		return;
	nspid = get_func_namespace(fn_oid);
	store_cache.valid = false;
	memset(store_cache.fns, 0, sizeof(store_cache.fns));
	inval_start = store_cache.inval_count;

	store_register_callback();
	store_cache.generation++;
	for (i = 0; i < (int) lengthof(cached_names); i++)
		store_cache.name_hashes[i] =
			GetSysCacheHashValue2(RELNAMENSP, CStringGetDatum(cached_names[i]),
								  ObjectIdGetDatum(nspid));

	nspname = get_namespace_name(nspid);
	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for namespace %u", nspid);
	relid = get_relname_relid("dlock_lease", nspid);
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table of extension \"dlock\" is missing"),
				 errdetail("Relation \"%s.dlock_lease\" does not exist.", nspname),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));

	store_cache.seqrelid = get_relname_relid("dlock_token_seq", nspid);
	if (!OidIsValid(store_cache.seqrelid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("token sequence of extension \"dlock\" is missing"),
				 errdetail("Sequence \"%s.dlock_token_seq\" does not exist.", nspname),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));

	/* absent when the extension's SQL is 1.0: then no token jumps */
	store_cache.originrelid = get_relname_relid("dlock_token_origin", nspid);
	/* absent when the extension's SQL is older than 1.2: then no 'seen' */
	store_cache.markrelid = get_relname_relid("dlock_fence_mark", nspid);
	if (OidIsValid(store_cache.markrelid))
	{
		store_cache.mark_att_owner = get_attnum(store_cache.markrelid, "table_owner");
		store_cache.mark_att_name = get_attnum(store_cache.markrelid, "lock_name");
		store_cache.mark_att_token = get_attnum(store_cache.markrelid, "token");
		if (store_cache.mark_att_owner <= 0 || store_cache.mark_att_name <= 0 ||
			store_cache.mark_att_token <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("mark table of extension \"dlock\" has unexpected columns"),
					 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));
	}
	DlockTokenForget();

	{
		Relation	rel = table_open(relid, AccessShareLock);

		DlockLeaseTableDescribe(&store_cache.table, rel);
		table_close(rel, AccessShareLock);
	}

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	store_cache.table.owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);

	store_cache.nspid = nspid;
	store_cache.table.relid = relid;


	/*
	 * Opening the table locks it and so may have processed an invalidation of
	 * it (say, a concurrent owner change): then what was read above may be
	 * stale, so serve this call but rebuild on the next.
	 */
	store_cache.valid = (store_cache.inval_count == inval_start);
}

/*
 * DlockStoreTable, DlockStoreTokenSeq and DlockStoreTokenOrigin return the
 * lease table's description and the token sequences of the current store
 * session (valid between store_begin and store_end, and in the fence's
 * lookup); DlockStoreCacheSchema the extension's schema;
 * DlockStoreCacheGeneration how often the cache was rebuilt.
 */
Oid
DlockStoreCacheSchema(void)
{
	Assert(OidIsValid(store_cache.nspid));
	return store_cache.nspid;
}

uint64
DlockStoreCacheGeneration(void)
{
	return store_cache.generation;
}

DlockLeaseTable *
DlockStoreTable(void)
{
	Assert(OidIsValid(store_cache.table.relid));
	return &store_cache.table;
}

Oid
DlockStoreTokenSeq(void)
{
	Assert(OidIsValid(store_cache.seqrelid));
	return store_cache.seqrelid;
}

Oid
DlockStoreTokenOrigin(void)
{
	return store_cache.originrelid;
}

/*
 * DlockStoreRequireMarks raises 0A000 when the extension's SQL has no mark
 * table (dlock_fence_mark, created by version 1.2): fencing mode 'seen'
 * needs it.  Valid in a store session.
 */
void
DlockStoreRequireMarks(void)
{
	if (!OidIsValid(store_cache.markrelid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("fencing mode \"seen\" needs version 1.2 of extension \"dlock\""),
				 errdetail("Relation \"dlock_fence_mark\" does not exist in the extension's schema."),
				 errhint("Update the extension with ALTER EXTENSION dlock UPDATE.")));
}

/*
 * DlockStoreMarkTable returns where the mark table and its table_owner,
 * lock_name and token columns are, in the current store session (after
 * DlockStoreRequireMarks).
 */
Oid
DlockStoreMarkTable(AttrNumber *att_owner, AttrNumber *att_name,
					AttrNumber *att_token)
{
	Assert(OidIsValid(store_cache.markrelid));
	*att_owner = store_cache.mark_att_owner;
	*att_name = store_cache.mark_att_name;
	*att_token = store_cache.mark_att_token;
	return store_cache.markrelid;
}
