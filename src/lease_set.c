/*-------------------------------------------------------------------------
 *
 * src/lease_set.c
 *	  The SQL entry points for many names at once: dlock_acquire_all,
 *	  dlock_acquire_any, dlock_renew_each and dlock_release_each.
 *
 * Every element follows the rules of the single calls (lease.c): the same
 * argument checks, the same lease state machine, the same holder-role
 * rule; all arguments, every element included, are checked before
 * anything is written.
 *
 * All or nothing (dlock_acquire_all).  The names are taken in one
 * canonical order, the byte order of the lease table's "C" key, in one
 * attempt (store_ops.c: DlockStoreTryAcquireAll): a read without locks
 * first refuses the set when one of its leases is plainly held, writing
 * nothing; otherwise the names are taken in a subtransaction, and when a
 * name is held, the subtransaction is rolled back, so a refused
 * attempt keeps no lease, row lock or name lock, and the caller then waits
 * (wait.c) in the queue of the name that refused it, woken as a single
 * waiter of that name is.  Why two sets never deadlock or livelock: an
 * attempt never waits for a lock (acquire never does, store.c), so there
 * is no wait-for cycle; and an attempt can be refused by another
 * attempt's uncommitted work only on a name that the other has already
 * passed in the common order, so of two attempts that meet, the one
 * further along is never refused by the other and completes (or is refused
 * by a lease that is really held, by a third party).  Whatever is held
 * long-term, some attempt always progresses; a set can still lose every
 * race to callers of its names (no reservation is kept while it waits).
 *
 * Any of (dlock_acquire_any).  The names are tried in array order, each
 * attempt as a single acquire (failed attempts keep no lock); the first
 * granted wins.  While none is free the caller sleeps in an any-slot of
 * wait.c, woken by a change of one of its names, and then tries the names
 * that changed, in array order; it polls without preload.
 *
 * Bulk renew and release take their rows in the canonical order too (and
 * report in array order), so two of them that wait for each other's rows
 * cannot deadlock; the holder-role rule is decided element by element as
 * the store reaches it (the first element whose current token the caller
 * may not touch stops the statement with 42501, undoing the changes made
 * before it).
 *
 * Concurrency: no lock of its own; the store's protocol (store.c,
 * lease_table.c) and the queues (wait.c) apply element by element.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "dlock.h"

PG_FUNCTION_INFO_V1(dlock_acquire_all);
PG_FUNCTION_INFO_V1(dlock_acquire_any);
PG_FUNCTION_INFO_V1(dlock_renew_each);
PG_FUNCTION_INFO_V1(dlock_release_each);

/* An element of a lock_names array, with its index in the array. */
typedef struct NameEntry
{
	text	   *name;
	int			pos;			/* 0-based, in the array as given */
} NameEntry;

/*
 * name_cmp orders NameEntry by name in byte order (a prefix first), as the
 * "C" collation of the lease table's key does, then by position; a qsort
 * comparator.
 */
static int
name_cmp(const void *a, const void *b)
{
	const NameEntry *x = (const NameEntry *) a;
	const NameEntry *y = (const NameEntry *) b;
	int			lx = VARSIZE_ANY_EXHDR(x->name);
	int			ly = VARSIZE_ANY_EXHDR(y->name);
	int			c = memcmp(VARDATA_ANY(x->name), VARDATA_ANY(y->name), Min(lx, ly));

	if (c != 0)
		return c;
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return x->pos < y->pos ? -1 : (x->pos > y->pos ? 1 : 0);
}

/*
 * same_name reports whether a and b hold the same name.
 */
static bool
same_name(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * get_array returns argument argno, an array argname, deconstructed into
 * *elems (nulls refused) and its length: raises 22004 for a NULL array or
 * element and 22023 for an array of more than one dimension.
 */
static int
get_array(FunctionCallInfo fcinfo, int argno, const char *argname,
		  Oid elemtype, int elemlen, bool elembyval, char elemalign,
		  Datum **elems)
{
	ArrayType  *arr;
	bool	   *nulls;
	int			n;
	int			i;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", argname),
				 errdetail("The array given has %d dimensions.", ARR_NDIM(arr))));
	Assert(ARR_ELEMTYPE(arr) == elemtype);
	deconstruct_array(arr, elemtype, elemlen, elembyval, elemalign,
					  elems, &nulls, &n);
	for (i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain nulls", argname),
					 errdetail("Element %d is null.", i + 1)));
	return n;
}

/*
 * get_names returns argument 0, lock_names, as NameEntry in array order
 * and sets *n: raises as get_array does, 22023 for an empty or too long
 * name (DlockCheckLockName), and with a positive max 22023 for an empty
 * array or one of more than max names.
 */
static NameEntry *
get_names(FunctionCallInfo fcinfo, int max, int *n)
{
	Datum	   *elems;
	NameEntry  *entries;
	int			i;

	*n = get_array(fcinfo, 0, "lock_names", TEXTOID, -1, false, TYPALIGN_INT,
				   &elems);
	if (max > 0 && *n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock_names must not be empty")));
	if (max > 0 && *n > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock_names has too many names"),
				 errdetail("The array has %d names; the limit is %d.", *n, max)));
	entries = palloc(sizeof(NameEntry) * Max(*n, 1));
	for (i = 0; i < *n; i++)
	{
		char		what[32];

		entries[i].name = DatumGetTextPP(elems[i]);
		entries[i].pos = i;
		snprintf(what, sizeof(what), "lock_names[%d]", i + 1);
		DlockCheckLockName(entries[i].name, what);
	}
	return entries;
}

/*
 * sorted_names returns a copy of the n entries in canonical order; with
 * distinct it raises 22023 when a name appears twice.
 */
static NameEntry *
sorted_names(const NameEntry *entries, int n, bool distinct)
{
	NameEntry  *sorted = palloc(sizeof(NameEntry) * Max(n, 1));
	int			i;

	memcpy(sorted, entries, sizeof(NameEntry) * n);
	qsort(sorted, n, sizeof(NameEntry), name_cmp);
	if (distinct)
		for (i = 1; i < n; i++)
			if (same_name(sorted[i - 1].name, sorted[i].name))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("lock_names must not contain duplicates"),
						 errdetail("Elements %d and %d are both \"%s\".",
								   sorted[i - 1].pos + 1, sorted[i].pos + 1,
								   text_to_cstring(sorted[i].name))));
	return sorted;
}

/* What an attempt on a set or a list of names needs. */
typedef struct SetArgs
{
	Oid			fn_oid;
	Oid			holder;
	text	   *owner;
	Interval   *ttl;
	int			n;
	text	  **names;			/* all: canonical order; any: array order */
	uint64	   *hashes;			/* any: DlockNameHash of names[i] */
	int64	   *tokens;			/* all: out, one per names[i] */
	DlockPrevLease *prevs;		/* all: out, what each grant replaced */
	int			granted;		/* any: out, the index granted */
	int64		token;			/* any: out, its token */
	DlockPrevLease prev;		/* any: out, what the grant replaced */
	DlockWaitInfo info;			/* the call, as dlock_waiters shows it */
} SetArgs;

/*
 * get_set_call checks the arguments of dlock_acquire_all and
 * dlock_acquire_any (lock_names, distinct; ttl; wait; owner) and fills *a
 * with the calling function, the caller's role, owner, ttl and the names:
 * in canonical order with canonical, else in array order and with their
 * hashes (for wait.c's any-slot).  Returns the names' entries in that
 * order and sets *start and *deadline (start + wait).
 */
static NameEntry *
get_set_call(FunctionCallInfo fcinfo, bool canonical, SetArgs *a,
			 TimestampTz *start, TimestampTz *deadline)
{
	NameEntry  *entries;
	NameEntry  *sorted;
	int			n;
	int			i;

	entries = get_names(fcinfo, DLOCK_MAX_SET_NAMES, &n);
	sorted = sorted_names(entries, n, true);
	a->ttl = DlockGetTtl(fcinfo, 1);
	*start = GetCurrentTimestamp();
	*deadline = DlockGetWaitDeadline(fcinfo, 2, *start);
	a->owner = DlockGetOwner(fcinfo, 3);
	(void) DlockLeaseExpiry(*start, a->ttl);
	if (canonical)
		entries = sorted;

	a->fn_oid = fcinfo->flinfo->fn_oid;
	a->holder = GetUserId();
	a->n = n;
	a->names = palloc(sizeof(text *) * n);
	a->hashes = canonical ? NULL : palloc(sizeof(uint64) * n);
	a->tokens = palloc0(sizeof(int64) * n);
	a->prevs = palloc0(sizeof(DlockPrevLease) * n);
	a->granted = -1;
	a->token = 0;
	memset(&a->info, 0, sizeof(a->info));
	a->info.kind = canonical ? DLOCK_WAIT_ALL : DLOCK_WAIT_ANY;
	a->info.nnames = n;
	/* all: the set's first name, until a refusal says which; any: the first */
	a->info.lock_name = entries[0].name;
	for (i = 0; i < n; i++)
	{
		a->names[i] = entries[i].name;
		if (!canonical)
			a->hashes[i] = DlockNameHash(entries[i].name);
	}
	return entries;
}

/*
 * all_attempt makes one all-or-nothing attempt on the set of a SetArgs
 * from now for its ttl; a DlockAttemptFn that reports the name that
 * refused it in the call's info.lock_name.
 */
static bool
all_attempt(void *arg, TimestampTz *held_until)
{
	SetArgs    *a = (SetArgs *) arg;
	TimestampTz now = GetCurrentTimestamp();
	int			refused;

	if (DlockStoreTryAcquireAll(a->fn_oid, a->names, a->n, a->owner,
								a->holder, now, DlockLeaseExpiry(now, a->ttl),
								a->tokens, a->prevs, held_until, &refused))
		return true;
	Assert(refused >= 0 && refused < a->n);
	a->info.lock_name = a->names[refused];
	return false;
}

/*
 * any_attempt_one tries name i of a SetArgs (array order) as a single
 * acquire from now for its ttl, and records it as the one granted when it
 * is; a DlockAttemptOneFn.
 */
static bool
any_attempt_one(void *arg, int i, TimestampTz *held_until)
{
	SetArgs    *a = (SetArgs *) arg;
	TimestampTz now = GetCurrentTimestamp();

	Assert(i >= 0 && i < a->n);
	if (!DlockStoreTryAcquire(a->fn_oid, a->names[i], a->owner, a->holder,
							  now, DlockLeaseExpiry(now, a->ttl),
							  &a->token, held_until, &a->prev))
		return false;
	a->granted = i;
	return true;
}

/*
 * dlock_acquire_all(lock_names text[], ttl interval, wait interval, owner
 * text) returns bigint[]: one new fencing token per name, in the order
 * given, when it granted the leases on all of them; NULL when it could not
 * have them all within wait, and then it holds none of them.  Takes the
 * names in canonical order and waits in the queue of the name that refused
 * it (see the file header).  Raises 22004 for a NULL array or element,
 * 22023 for an empty array, more than DLOCK_MAX_SET_NAMES names, a
 * duplicate, a bad name, ttl, wait or owner, 25006 on a standby or in a
 * read-only transaction, 57014 when cancelled while waiting.
 */
Datum
dlock_acquire_all(PG_FUNCTION_ARGS)
{
	NameEntry  *sorted;
	SetArgs		a;
	TimestampTz start;
	TimestampTz deadline;
	TimestampTz held_until;
	bool		granted;
	Datum	   *result;
	int			n;
	int			i;

	DlockCheckWritable("dlock_acquire_all");
	sorted = get_set_call(fcinfo, true, &a, &start, &deadline);
	n = a.n;

	if (deadline <= start)
		granted = all_attempt(&a, &held_until);
	else
		granted = DlockWaitAcquire(deadline, all_attempt, &a, &a.info);
	DlockCountAcquire(granted, &a.info);
	if (!granted)
		PG_RETURN_NULL();

	result = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		Assert(a.tokens[i] > 0);
		Assert(i == 0 || a.tokens[i] > a.tokens[i - 1]);
		DlockReportGrant(a.names[i], a.tokens[i], &a.prevs[i]);
		DlockWakeAtXactEnd(a.names[i]);
		result[sorted[i].pos] = Int64GetDatum(a.tokens[i]);
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(result, n, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * dlock_acquire_any(lock_names text[], ttl interval, wait interval, owner
 * text) returns TABLE(lock_name text, token bigint): one row, the first
 * name in array order whose lease it granted and its new token, or no row
 * when none was free within wait (it then waited for whichever freed
 * first).  Raises as dlock_acquire_all does.
 */
Datum
dlock_acquire_any(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	MemoryContext oldcontext;
	SetArgs		a;
	TimestampTz start;
	TimestampTz deadline;
	bool		granted;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	DlockCheckWritable("dlock_acquire_any");
	(void) get_set_call(fcinfo, false, &a, &start, &deadline);

	oldcontext = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	tupdesc = CreateTupleDescCopy(tupdesc);
	tupstore = tuplestore_begin_heap(true, false, work_mem);
	MemoryContextSwitchTo(oldcontext);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tupstore;
	rsinfo->setDesc = tupdesc;

	/* tries every name, then waits unless wait is 0 */
	granted = DlockWaitAcquireAny(a.hashes, a.n, deadline, any_attempt_one, &a,
								  &a.info);
	DlockCountAcquire(granted, &a.info);
	if (granted)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		Assert(a.granted >= 0 && a.granted < a.n && a.token > 0);
		DlockReportGrant(a.names[a.granted], a.token, &a.prev);
		DlockWakeAtXactEnd(a.names[a.granted]);
		values[0] = PointerGetDatum(a.names[a.granted]);
		values[1] = Int64GetDatum(a.token);
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * get_tokens returns argument 1, tokens, as n int64 values: raises as
 * get_array does, and 22023 unless it has n elements.
 */
static int64 *
get_tokens(FunctionCallInfo fcinfo, int n)
{
	Datum	   *elems;
	int64	   *tokens;
	int			ntokens;
	int			i;

	ntokens = get_array(fcinfo, 1, "tokens", INT8OID, sizeof(int64),
						FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems);
	if (ntokens != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock_names and tokens must have the same length"),
				 errdetail_plural("lock_names has %d element, tokens %d.",
								  "lock_names has %d elements, tokens %d.",
								  n, n, ntokens)));
	tokens = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
		tokens[i] = DatumGetInt64(elems[i]);
	return tokens;
}

/*
 * get_items returns the pairs of lock_names and tokens (arguments 0 and 1)
 * as store items in canonical order, and sets *n and *pos (each item's
 * index in the arrays).  Raises as get_names and get_tokens do.
 */
static DlockStoreItem *
get_items(FunctionCallInfo fcinfo, int *n, int **pos)
{
	NameEntry  *entries = get_names(fcinfo, 0, n);
	int64	   *tokens = get_tokens(fcinfo, *n);
	NameEntry  *sorted = sorted_names(entries, *n, false);
	DlockStoreItem *items = palloc(sizeof(DlockStoreItem) * Max(*n, 1));
	int			i;

	*pos = palloc(sizeof(int) * Max(*n, 1));
	for (i = 0; i < *n; i++)
	{
		items[i].lock_name = sorted[i].name;
		items[i].token = tokens[sorted[i].pos];
		(*pos)[i] = sorted[i].pos;
	}
	return items;
}

/* each_result counts a false result in the counter after a true one's */
StaticAssertDecl(DLOCK_STAT_RENEWALS_FAILED == DLOCK_STAT_RENEWALS + 1 &&
				 DLOCK_STAT_RELEASES_FAILED == DLOCK_STAT_RELEASES + 1,
				 "dlock_stats: a failed counter follows its counter");

/*
 * each_result raises 42501 for action (DlockHolderDenied) when the store
 * denied an item (the caller named the current token of a lease whose
 * holder role it may not act for; the store stopped there), counts the
 * outcomes (done: the counter of a true result, the next one that of a
 * false one), wakes
 * the waiters of every name changed, and returns the outcomes as a
 * boolean[] in array order.
 */
static ArrayType *
each_result(DlockStoreItem *items, const int *pos, int n, const char *action,
			DlockStat done)
{
	int			ndone = 0;

	Datum	   *result = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		if (items[i].outcome == DLOCK_STORE_DENIED)
			DlockHolderDenied(items[i].holder, items[i].lock_name, action);
	for (i = 0; i < n; i++)
	{
		if (items[i].outcome == DLOCK_STORE_DONE)
		{
			ndone++;
			DlockWakeAtXactEnd(items[i].lock_name);
		}
		result[pos[i]] = BoolGetDatum(items[i].outcome == DLOCK_STORE_DONE);
	}
	DlockStatsCount(done, ndone);
	DlockStatsCount((DlockStat) (done + 1), n - ndone);
	return construct_array(result, n, BOOLOID, 1, true, TYPALIGN_CHAR);
}

/*
 * dlock_renew_each(lock_names text[], tokens bigint[], ttl interval) returns
 * boolean[]: for each pair, what dlock_renew(lock_name, token, ttl) would
 * return, in one statement.  Raises 22004 for a NULL array or element,
 * 22023 for arrays of different lengths or a bad name or ttl, 42501 when
 * the caller may not renew one of the leases (undoing them all), 25006 on
 * a standby or in a read-only transaction.
 */
Datum
dlock_renew_each(PG_FUNCTION_ARGS)
{
	DlockStoreItem *items;
	int		   *pos;
	Interval   *ttl;
	TimestampTz now;
	int			n;

	DlockCheckWritable("dlock_renew_each");
	items = get_items(fcinfo, &n, &pos);
	ttl = DlockGetTtl(fcinfo, 2);
	now = GetCurrentTimestamp();
	if (n > 0)
		DlockStoreRenewEach(fcinfo->flinfo->fn_oid, items, n, now,
							DlockLeaseExpiry(now, ttl));
	PG_RETURN_ARRAYTYPE_P(each_result(items, pos, n, "renew",
									  DLOCK_STAT_RENEWALS));
}

/*
 * dlock_release_each(lock_names text[], tokens bigint[]) returns boolean[]: for
 * each pair, what dlock_release(lock_name, token) would return, in one
 * statement; its own transaction commits without waiting for the WAL
 * flush (async_commit.c).  Raises as dlock_renew_each does.
 */
Datum
dlock_release_each(PG_FUNCTION_ARGS)
{
	DlockStoreItem *items;
	int		   *pos;
	int			n;

	DlockCheckWritable("dlock_release_each");
	items = get_items(fcinfo, &n, &pos);
	if (n > 0)
	{
		DlockAsyncReleaseBegin();
		DlockStoreReleaseEach(fcinfo->flinfo->fn_oid, items, n,
							  GetCurrentTimestamp());
		DlockAsyncReleaseEnd();
	}
	PG_RETURN_ARRAYTYPE_P(each_result(items, pos, n, "release",
									  DLOCK_STAT_RELEASES));
}
