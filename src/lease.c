/*-------------------------------------------------------------------------
 *
 * src/lease.c
 *	  The SQL entry points dlock_acquire, dlock_renew, dlock_release and
 *	  dlock_break: argument checks, the lease state machine and the
 *	  holder-role rule.
 *
 * A lease on a name is, at any moment, one of: never acquired (no row),
 * live (not released and expires_at > now), or ended (released, or
 * expired).  Acquire moves never-acquired or ended to live with a new
 * token; renew keeps a live lease live with the same token; release and
 * break move live to ended.  "now" is always the server clock at the call
 * (GetCurrentTimestamp), never the transaction start or a client's time.
 *
 * Every argument is checked before anything is written, so bad input
 * changes nothing.  The functions are not STRICT: a NULL where a value is
 * needed is an error (22004), not a silent NULL result, because NULL from
 * dlock_acquire means "not acquired".
 *
 * The holder-role rule: renew and release of a lease's current token
 * need the caller to be able to act for the role that acquired the lease
 * (that role, a member of it, or a superuser), otherwise 42501.  A token
 * that is not current returns false whoever asks, so a holder whose lease
 * another role took over learns that it lost the lease.  The store
 * decides it on the row it read, before it writes or locks anything
 * (DLOCK_STORE_DENIED, lease_table.c's DlockLeaseChange).
 *
 * Concurrency: this file holds no lock of its own.  Between acquire
 * attempts it sleeps in wait.c holding nothing; store.c's header gives the
 * row- and name-lock protocol of each call.  Every call that changed a
 * lease asks wait.c to wake the name's waiters when the transaction ends.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "dlock.h"

/* dlock.max_ttl: the longest ttl an acquire or renew may ask for, in s */
static int	dlock_max_ttl = 86400;

PG_FUNCTION_INFO_V1(dlock_acquire);
PG_FUNCTION_INFO_V1(dlock_renew);
PG_FUNCTION_INFO_V1(dlock_release);
PG_FUNCTION_INFO_V1(dlock_break);
PG_FUNCTION_INFO_V1(dlock_purge);
PG_FUNCTION_INFO_V1(dlock_purge_marks);
PG_FUNCTION_INFO_V1(dlock_token_init);

/*
 * DlockCheckWritable raises 25006 when leases cannot be changed here: on a hot
 * standby (tested first, with a hint to go to the primary) or in a
 * read-only transaction.
 */
void
DlockCheckWritable(const char *funcname)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("leases cannot be changed during recovery"),
				 errdetail("This server is a standby; %s() changes the lease table.",
						   funcname),
				 errhint("Connect to the primary server.")));
	if (XactReadOnly)
		PreventCommandIfReadOnly(psprintf("%s()", funcname));
}

/*
 * arg_not_null raises 22004 when argument argno is NULL.
 */
static void
arg_not_null(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
}

/*
 * DlockCheckLockName raises 22023 when name, the argument what (say
 * "lock_name", or "lock_names[3]" for an array's element), is empty or over
 * DLOCK_MAX_NAME_BYTES bytes.
 */
void
DlockCheckLockName(text *name, const char *what)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > DLOCK_MAX_NAME_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("The name has %d bytes; the limit is %d bytes.",
						   len, DLOCK_MAX_NAME_BYTES)));
}

/*
 * DlockGetLockName returns argument 0 as a lock name, raising 22004 for
 * NULL and 22023 for an empty name or one over DLOCK_MAX_NAME_BYTES bytes.
 * Also used by dlock_check (fence.c).
 */
text *
DlockGetLockName(FunctionCallInfo fcinfo)
{
	text	   *name;

	arg_not_null(fcinfo, 0, "lock_name");
	name = PG_GETARG_TEXT_PP(0);
	DlockCheckLockName(name, "lock_name");
	return name;
}

/*
 * interval_text returns iv as text, for messages.
 */
static char *
interval_text(Interval *iv)
{
	return DatumGetCString(DirectFunctionCall1(interval_out,
											   IntervalPGetDatum(iv)));
}

/*
 * check_finite raises 22023 when iv, the argument argname, is 'infinity' or
 * '-infinity' (intervals that PostgreSQL 17 and later accept): a lease, a
 * wait and a purge horizon are all finite.
 */
static void
check_finite(Interval *iv, const char *argname)
{
	if (!DlockIntervalIsFinite(iv))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite interval", argname),
				 errdetail("The %s given is \"%s\".", argname, interval_text(iv))));
}

/*
 * ttl_exceeds_max raises 22023: ttl is longer than dlock.max_ttl.
 */
static void
ttl_exceeds_max(Interval *ttl)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ttl exceeds dlock.max_ttl"),
			 errdetail("The ttl given, \"%s\", would end the lease more than dlock.max_ttl (%d seconds) from now.",
					   interval_text(ttl), dlock_max_ttl),
			 errhint("Renew the lease before it expires instead, or ask a superuser to raise dlock.max_ttl.")));
}

/*
 * DlockGetTtl returns argument argno as a ttl, raising 22004 for NULL and
 * 22023 for a ttl that is infinite, not positive, or longer than
 * dlock.max_ttl, compared as intervals are (a month as 30 days, a day as
 * 24 hours).  That comparison alone is not the limit: DlockLeaseExpiry
 * applies the ttl to the clock and checks the lease it makes too.  It
 * refuses the plainly too long at once, before the calendar arithmetic
 * could overflow on them ('1000000 years').
 */
Interval *
DlockGetTtl(FunctionCallInfo fcinfo, int argno)
{
	Interval   *ttl;
	Interval	zero = {0};
	Interval	max = {0};

	arg_not_null(fcinfo, argno, "ttl");
	ttl = PG_GETARG_INTERVAL_P(argno);
	check_finite(ttl, "ttl");
	if (DatumGetBool(DirectFunctionCall2(interval_le, IntervalPGetDatum(ttl),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be greater than zero"),
				 errdetail("The ttl given is \"%s\".", interval_text(ttl))));
	max.time = (int64) dlock_max_ttl * USECS_PER_SEC;
	if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(ttl),
										 IntervalPGetDatum(&max))))
		ttl_exceeds_max(ttl);
	return ttl;
}

/*
 * get_token returns argument argno as a token, raising 22004 for NULL.
 */
static int64
get_token(FunctionCallInfo fcinfo, int argno)
{
	arg_not_null(fcinfo, argno, "token");
	return PG_GETARG_INT64(argno);
}

/*
 * timestamp_plus returns ts + iv with the calendar rules of timestamptz +
 * interval (raising 22008 when the result is out of range).
 */
static TimestampTz
timestamp_plus(TimestampTz ts, Interval *iv)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												   TimestampTzGetDatum(ts),
												   IntervalPGetDatum(iv)));
}

/*
 * DlockLeaseExpiry returns now + ttl with the calendar rules of timestamptz
 * + interval: the expires_at a lease from now for ttl gets.  Raises 22023
 * when that is no later than now (say, '1 month -31 days' in a 30-day
 * month), or later than now + dlock.max_ttl: the limit bounds the lease
 * actually written, however the interval mixes months, days and time
 * ('12 mon -359 days' is one day as an interval but six days from most
 * dates).  Every function that sets an expiry gets it here.
 */
TimestampTz
DlockLeaseExpiry(TimestampTz now, Interval *ttl)
{
	TimestampTz expires = timestamp_plus(now, ttl);

	if (expires <= now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be greater than zero"),
				 errdetail("The ttl given, \"%s\", ends no later than it starts at the current date.",
						   interval_text(ttl))));
	/* both are in the timestamp range, so the difference cannot overflow */
	Assert(dlock_max_ttl > 0);
	if (expires - now > (int64) dlock_max_ttl * USECS_PER_SEC)
		ttl_exceeds_max(ttl);
	return expires;
}

/*
 * client_info calls the no-argument SQL function fn (inet_client_addr or
 * inet_client_port) and returns its result as text, or NULL when it is
 * NULL (a Unix-socket or background session).  This avoids libpq-be.h,
 * which needs the GSSAPI headers.
 */
static char *
client_info(PGFunction fn, PGFunction outfn)
{
	LOCAL_FCINFO(call, 0);
	Datum		d;

	InitFunctionCallInfoData(*call, NULL, 0, InvalidOid, NULL, NULL);
	d = fn(call);
	if (call->isnull)
		return NULL;
	return DatumGetCString(DirectFunctionCall1(outfn, d));
}

/*
 * default_owner returns the owner label of a session that gave none:
 * application_name, backend pid and client address, e.g.
 * "psql pid 4242 127.0.0.1:51234" or "pid 4242 local".
 */
static text *
default_owner(void)
{
	StringInfoData buf;
	char	   *addr = client_info(inet_client_addr, inet_out);

	initStringInfo(&buf);
	if (application_name != NULL && application_name[0] != '\0')
		appendStringInfo(&buf, "%s ", application_name);
	appendStringInfo(&buf, "pid %d", MyProcPid);
	if (addr != NULL)
	{
		char	   *port = client_info(inet_client_port, int4out);

		appendStringInfo(&buf, " %s", addr);
		if (port != NULL)
			appendStringInfo(&buf, ":%s", port);
	}
	else
		appendStringInfoString(&buf, " local");
	return cstring_to_text_with_len(buf.data, buf.len);
}

/*
 * DlockGetOwner returns argument argno as the owner label, or the session's
 * default when NULL; raises 22023 when it is over DLOCK_MAX_OWNER_BYTES.
 */
text *
DlockGetOwner(FunctionCallInfo fcinfo, int argno)
{
	text	   *owner;
	int			len;

	if (PG_ARGISNULL(argno))
		return default_owner();
	owner = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(owner);
	if (len > DLOCK_MAX_OWNER_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("owner is too long"),
				 errdetail("The owner label has %d bytes; the limit is %d bytes.",
						   len, DLOCK_MAX_OWNER_BYTES)));
	return owner;
}

/*
 * DlockHolderDenied raises 42501: the current user named the current token
 * of the lease on lock_name but may not act for holder, the role that
 * acquired it (only that role, a member of it, with or without INHERIT, or
 * a superuser may; the store decided it, DLOCK_STORE_DENIED).  A holder
 * role that was dropped has no members, so its leases are left to
 * superusers (and dlock_break).
 */
void
DlockHolderDenied(Oid holder, text *lock_name, const char *action)
{
	char	   *holder_name;

	holder_name = GetUserNameFromId(holder, true);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s lease", action),
			 holder_name != NULL ?
			 errdetail("Lease \"%s\" was acquired by role \"%s\".",
					   text_to_cstring(lock_name), holder_name) :
			 errdetail("Lease \"%s\" was acquired by a role that has been dropped (OID %u).",
					   text_to_cstring(lock_name), holder),
			 errhint("Renew or release the lease as the role that acquired it, as a member of that role, or as a superuser.")));
}

/*
 * DlockGetWaitDeadline returns the deadline of argument argno, a wait,
 * counted from start: raises 22004 for NULL, 22023 for an infinite or
 * negative wait, 22008 when start + wait is out of range.
 */
TimestampTz
DlockGetWaitDeadline(FunctionCallInfo fcinfo, int argno, TimestampTz start)
{
	Interval   *wait;
	Interval	zero = {0};

	arg_not_null(fcinfo, argno, "wait");
	wait = PG_GETARG_INTERVAL_P(argno);
	check_finite(wait, "wait");
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(wait),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must not be negative"),
				 errdetail("The wait given is \"%s\".", interval_text(wait))));
	return timestamp_plus(start, wait);
}

/*
 * DlockCountAcquire counts an acquire call (of any of the three functions)
 * that ended without an error: a refusal or a wait that timed out when it
 * was not granted (info says whether it waited; wait.c counted the wait).
 * Grants are counted per name by DlockReportGrant.
 */
void
DlockCountAcquire(bool granted, const DlockWaitInfo *info)
{
	if (!granted)
		DlockStatsCount(info->waited ? DLOCK_STAT_WAIT_TIMEOUTS :
						DLOCK_STAT_REFUSALS, 1);
}

/* What an acquire attempt needs; token is its result. */
typedef struct AcquireArgs
{
	Oid			fn_oid;
	text	   *lock_name;
	text	   *owner;
	Oid			holder;
	Interval   *ttl;
	int64		token;
	DlockPrevLease prev;		/* the lease the grant replaced */
} AcquireArgs;

/*
 * acquire_attempt makes one attempt to grant the lease described by arg
 * (an AcquireArgs) from now for its ttl; a DlockAttemptFn.
 */
static bool
acquire_attempt(void *arg, TimestampTz *held_until)
{
	AcquireArgs *a = (AcquireArgs *) arg;
	TimestampTz now = GetCurrentTimestamp();

	return DlockStoreTryAcquire(a->fn_oid, a->lock_name, a->owner, a->holder,
								now, DlockLeaseExpiry(now, a->ttl),
								&a->token, held_until, &a->prev);
}

/*
 * dlock_acquire(lock_name text, ttl interval, wait interval, owner text)
 * returns bigint: a new fencing token when it granted the lease, NULL when
 * a live lease (or an open transaction changing it) held the name for the
 * whole of wait.  Waits in wait.c (queued and woken with preload, polling
 * without); never waits on a row lock or the name lock.  Raises 22004/22023 on bad
 * arguments, 25006 on a standby, 57014 when cancelled while waiting.
 */
Datum
dlock_acquire(PG_FUNCTION_ARGS)
{
	AcquireArgs args;
	TimestampTz start;
	TimestampTz deadline;
	TimestampTz held_until;
	bool		granted;
	DlockWaitInfo info;

	DlockCheckWritable("dlock_acquire");
	args.fn_oid = fcinfo->flinfo->fn_oid;
	args.holder = GetUserId();
	args.lock_name = DlockGetLockName(fcinfo);
	args.ttl = DlockGetTtl(fcinfo, 1);
	start = GetCurrentTimestamp();
	deadline = DlockGetWaitDeadline(fcinfo, 2, start);
	args.owner = DlockGetOwner(fcinfo, 3);
	(void) DlockLeaseExpiry(start, args.ttl);

	memset(&info, 0, sizeof(info));
	info.kind = DLOCK_WAIT_ONE;
	info.nnames = 1;
	info.lock_name = args.lock_name;
	if (deadline <= start)
		granted = acquire_attempt(&args, &held_until);
	else
		granted = DlockWaitAcquire(deadline, acquire_attempt, &args, &info);
	DlockCountAcquire(granted, &info);
	if (!granted)
		PG_RETURN_NULL();
	Assert(args.token > 0);
	DlockReportGrant(args.lock_name, args.token, &args.prev);
	DlockWakeAtXactEnd(args.lock_name);
	PG_RETURN_INT64(args.token);
}

/*
 * dlock_renew(lock_name text, token bigint, ttl interval) returns boolean:
 * true when (lock_name, token) was live and now expires at now + ttl, false
 * when the token no longer holds a live lease (whoever asks).  Raises 42501
 * when token is the lease's current token and the caller is not the
 * lease's holder role, a member of it or a superuser, 22004/22023 on bad
 * arguments, 25006 on a standby.
 */
Datum
dlock_renew(PG_FUNCTION_ARGS)
{
	text	   *lock_name;
	int64		token;
	Interval   *ttl;
	TimestampTz now;
	Oid			holder;
	DlockStoreOutcome outcome;

	DlockCheckWritable("dlock_renew");
	lock_name = DlockGetLockName(fcinfo);
	token = get_token(fcinfo, 1);
	ttl = DlockGetTtl(fcinfo, 2);

	now = GetCurrentTimestamp();
	outcome = DlockStoreRenew(fcinfo->flinfo->fn_oid, lock_name, token, now,
							  DlockLeaseExpiry(now, ttl), &holder);
	if (outcome == DLOCK_STORE_DENIED)
		DlockHolderDenied(holder, lock_name, "renew");
	DlockStatsCount(outcome == DLOCK_STORE_DONE ? DLOCK_STAT_RENEWALS :
					DLOCK_STAT_RENEWALS_FAILED, 1);
	if (outcome == DLOCK_STORE_DONE)
		DlockWakeAtXactEnd(lock_name);
	PG_RETURN_BOOL(outcome == DLOCK_STORE_DONE);
}

/*
 * dlock_release(lock_name text, token bigint) returns boolean: true when
 * the live lease (lock_name, token) ended now, false when the token holds
 * no live lease on that name.  The row keeps the token for fencing.  In a
 * transaction of its own it commits without waiting for the WAL flush
 * (async_commit.c).  Raises as dlock_renew does.
 */
Datum
dlock_release(PG_FUNCTION_ARGS)
{
	text	   *lock_name;
	int64		token;
	Oid			holder;
	DlockStoreOutcome outcome;

	DlockCheckWritable("dlock_release");
	lock_name = DlockGetLockName(fcinfo);
	token = get_token(fcinfo, 1);

	DlockAsyncReleaseBegin();
	outcome = DlockStoreRelease(fcinfo->flinfo->fn_oid, lock_name, token,
								GetCurrentTimestamp(), &holder);
	DlockAsyncReleaseEnd();
	if (outcome == DLOCK_STORE_DENIED)
		DlockHolderDenied(holder, lock_name, "release");
	DlockStatsCount(outcome == DLOCK_STORE_DONE ? DLOCK_STAT_RELEASES :
					DLOCK_STAT_RELEASES_FAILED, 1);
	if (outcome == DLOCK_STORE_DONE)
		DlockWakeAtXactEnd(lock_name);
	PG_RETURN_BOOL(outcome == DLOCK_STORE_DONE);
}

/*
 * dlock_break(lock_name text) returns boolean: true when it ended a live
 * lease on lock_name, whoever held it.  For operators: EXECUTE is revoked
 * from PUBLIC.  Raises 22004/22023 on a bad name, 25006 on a standby.
 */
Datum
dlock_break(PG_FUNCTION_ARGS)
{
	text	   *lock_name;
	int64		token;
	TimestampTz expires;
	text	   *owner;

	DlockCheckWritable("dlock_break");
	lock_name = DlockGetLockName(fcinfo);

	if (!DlockStoreBreak(fcinfo->flinfo->fn_oid, lock_name, GetCurrentTimestamp(),
						 &token, &expires, &owner))
		PG_RETURN_BOOL(false);
	DlockStatsCount(DLOCK_STAT_BREAKS, 1);
	DlockEventBreak(lock_name, token, owner, expires);
	DlockWakeAtXactEnd(lock_name);
	PG_RETURN_BOOL(true);
}

/*
 * purge_cutoff returns the server clock now minus argument 0, argname, a
 * purge horizon: raises 22004 for NULL, 22023 for an infinite or negative
 * one.
 */
static TimestampTz
purge_cutoff(FunctionCallInfo fcinfo, const char *argname)
{
	Interval   *older_than;
	Interval	zero = {0};

	arg_not_null(fcinfo, 0, argname);
	older_than = PG_GETARG_INTERVAL_P(0);
	check_finite(older_than, argname);
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(older_than),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", argname),
				 errdetail("The %s given is \"%s\".", argname, interval_text(older_than))));
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
												   TimestampTzGetDatum(GetCurrentTimestamp()),
												   IntervalPGetDatum(older_than)));
}

/*
 * dlock_purge(older_than interval) returns bigint: how many lease rows it
 * deleted, those whose lease ended (expired, released or broken) more than
 * older_than ago.  A purged name counts as never acquired; its next acquire
 * still gets a greater token.  For operators: EXECUTE is revoked from
 * PUBLIC.  Never waits for an open transaction (it skips the rows they
 * lock).  Raises 22004 for NULL, 22023 for a negative older_than, 25006 on
 * a standby.
 */
Datum
dlock_purge(PG_FUNCTION_ARGS)
{
	int64		purged;

	DlockCheckWritable("dlock_purge");
	purged = DlockStorePurge(fcinfo->flinfo->fn_oid,
							 purge_cutoff(fcinfo, "older_than"));
	DlockStatsCount(DLOCK_STAT_PURGED, (uint64) purged);
	PG_RETURN_INT64(purged);
}

/*
 * dlock_purge_marks(older_than interval) returns bigint: how many marks of
 * fencing mode 'seen' it deleted, those last raised more than older_than
 * ago (except marks a writer holds locked).  A deleted mark forgets the
 * highest token its database accepted for that name, so a holder paused
 * for longer than older_than could write again with an old token: choose
 * older_than above the longest pause plus ttl (docs/sql-reference.md).
 * For operators: EXECUTE is revoked from PUBLIC.  Raises 22004 for NULL,
 * 22023 for a negative or infinite older_than, 25006 on a standby.
 */
Datum
dlock_purge_marks(PG_FUNCTION_ARGS)
{
	DlockCheckWritable("dlock_purge_marks");
	PG_RETURN_INT64(DlockMarkPurge(fcinfo->flinfo->fn_oid,
								   purge_cutoff(fcinfo, "older_than")));
}

/*
 * dlock_token_init() records that this server issues the tokens of a newly
 * created extension (token.c).  Called once by the install script, which
 * then drops the SQL function; raises 55000 if the token state was already
 * used.
 */
Datum
dlock_token_init(PG_FUNCTION_ARGS)
{
	DlockCheckWritable("dlock_token_init");
	DlockStoreTokenInit(fcinfo->flinfo->fn_oid);
	PG_RETURN_VOID();
}

/*
 * DlockLeaseInit defines dlock.max_ttl; _PG_init calls it.
 */
void
DlockLeaseInit(void)
{
	DefineCustomIntVariable("dlock.max_ttl",
							"Longest lease time-to-live that dlock_acquire and dlock_renew accept.",
							"A crashed holder blocks a lock name for up to its ttl, so long "
							"ttls trade availability for fewer renewals.  Raising it weakens "
							"the protection, so only superusers may change it.",
							&dlock_max_ttl,
							86400,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}
