/*-------------------------------------------------------------------------
 *
 * src/fence.c
 *	  The fence: the dlock_fence trigger, which accepts a write to a
 *	  protected table only when the fencing token it carries passes for its
 *	  lock, and dlock_check, the same rule as a call, whose passes the
 *	  transaction remembers (checked.c).
 *
 * Owns the trigger protocol checks (INSERT, UPDATE, DELETE, TRUNCATE),
 * reading and filling in the row's token, and each mode's rule
 * (fence_verify); a fenced table's configuration from the trigger's
 * arguments and a row's lock name are fence_config.c's (fence_int.h).
 * 'latest' and 'live' compare with the lease (read through store.c),
 * 'seen' with the mark (mark.c).
 *
 * Concurrency: in 'latest' mode the protected row's own row lock orders
 * the accepted writes of one row, and the lease row is read with a fresh
 * snapshot and no lock; in 'live' mode the check holds dlock's name lock
 * (name_lock.c) until the writer's transaction ends, which every grant of
 * the name conflicts with (or, past the budget and under SERIALIZABLE, the
 * lease row FOR KEY SHARE, which a takeover's FOR UPDATE conflicts with);
 * TRUNCATE's ACCESS EXCLUSIVE lock comes before its check.
 * Why accepted tokens on a row never go backwards: design.md §17.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"
#include "fence_int.h"

/*
 * fence_same_name reports whether lock names a and b are the same bytes.
 */
static bool
fence_same_name(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * fence_reject_hint adds the hint of a fencing rejection under lock
 * lock_name.  For ereport.
 */
static int
fence_reject_hint(text *lock_name)
{
	return errhint("The writer does not hold lock \"%s\"; it must acquire it again and write with the new token.",
				   text_to_cstring(lock_name));
}

/*
 * fence_count counts a fence decision of mode for dlock_stats: accepted or
 * rejected.
 */
static void
fence_count(DlockFenceMode mode, bool accepted)
{
	static const DlockStat stats[3][2] = {
		{DLOCK_STAT_FENCE_LATEST_REJECTED, DLOCK_STAT_FENCE_LATEST_ACCEPTED},
		{DLOCK_STAT_FENCE_LIVE_REJECTED, DLOCK_STAT_FENCE_LIVE_ACCEPTED},
		{DLOCK_STAT_FENCE_SEEN_REJECTED, DLOCK_STAT_FENCE_SEEN_ACCEPTED}
	};

	Assert(mode >= DLOCK_FENCE_LATEST && mode <= DLOCK_FENCE_SEEN);
	DlockStatsCount(stats[mode][accepted ? 1 : 0], 1);
}

/*
 * fence_reject counts a rejection in mode and raises the fencing rejection
 * (55T01) of a write to the relation relname (NULL: of dlock_check) under
 * lock lock_name; the rest
 * are errdetail's format and arguments, saying why.  The trigger's message
 * names the relation, dlock_check's the lock; detail and hint are the same.
 */
#define fence_reject(mode, relname, lock_name, ...) \
	do { \
		fence_count((mode), false); \
		ereport(ERROR, \
				(errcode(ERRCODE_DLOCK_STALE_TOKEN), \
				 (relname) != NULL ? \
				 errmsg("fencing token rejected for relation \"%s\"", \
						(const char *) (relname)) : \
				 errmsg("fencing token rejected for lock \"%s\"", \
						text_to_cstring(lock_name)), \
				 errdetail(__VA_ARGS__), \
				 fence_reject_hint(lock_name))); \
	} while (0)

/*
 * fence_live_denied raises 42501 for a 'live' write or dlock_check (relname
 * NULL) by a role that may not act for holder, the holder role of lock
 * lock_name's lease: such a check would keep the lease from being taken
 * over until its transaction ends, which only the lease's holder may do.
 */
static void
fence_live_denied(const char *relname, text *lock_name, Oid holder)
{
	char	   *holder_name = GetUserNameFromId(holder, true);

	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 relname != NULL ?
			 errmsg("permission denied to write to relation \"%s\" under lease \"%s\" in mode 'live'",
					relname, text_to_cstring(lock_name)) :
			 errmsg("permission denied to check lease \"%s\" in mode 'live'",
					text_to_cstring(lock_name)),
			 holder_name != NULL ?
			 errdetail("Lease \"%s\" was acquired by role \"%s\"; a check in mode 'live' keeps it from being taken over until the transaction ends, which only that role, its members and superusers may do.",
					   text_to_cstring(lock_name), holder_name) :
			 errdetail("Lease \"%s\" was acquired by a role that has been dropped (OID %u); a check in mode 'live' keeps it from being taken over until the transaction ends, which only superusers may do for it.",
					   text_to_cstring(lock_name), holder),
			 errhint("Write as the role that acquired the lease or a member of it, or fence in mode 'latest'.")));
}

/*
 * fence_seen_denied raises 42501 for a dlock_check in mode 'seen' by a role
 * that may write no table fenced by lock_name in mode 'seen': it may
 * neither raise nor hold the lock's marks (mark.c).
 */
static void
fence_seen_denied(text *lock_name)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to check lock \"%s\" in mode 'seen'",
					text_to_cstring(lock_name)),
			 errdetail("Role \"%s\" may write no table of this database that a dlock_fence trigger in mode 'seen' fences with lock \"%s\"; only the writers of such tables may raise or hold its marks.",
					   GetUserNameFromId(GetUserId(), false),
					   text_to_cstring(lock_name)),
			 errhint("Grant the role INSERT, UPDATE, DELETE or TRUNCATE on a table fenced by this lock, or check in mode 'latest' where the leases are.")));
}

/*
 * fence_verify raises 55T01 unless token passes the fence of mode under
 * lock_name now (the rules and their ordering arguments: design.md §17,
 * and mark.c for 'seen'), and in mode 'live' 42501 when token is current
 * but the current user may not act for the lease's holder role (nothing
 * was locked then); relname is for the message (NULL: dlock_check).
 * fn_oid is the calling SQL function, whose schema is the extension's.
 * In mode 'seen', the marks are those of table_owner, the owner of the
 * written table, or for dlock_check (table_owner InvalidOid) of every
 * owner of a table fenced by the lock that the current user may write
 * (mark.c; 42501 when there is none), and checked, when not NULL, gets the
 * owners whose marks the transaction now holds at token.
 */
static void
fence_verify(Oid fn_oid, const char *relname, text *lock_name, int64 token,
			 DlockFenceMode mode, Oid table_owner, DlockChecked *checked)
{
	DlockFenceLease lease;

	if (mode == DLOCK_FENCE_SEEN)
	{
		DlockChecked prior;
		bool		have_prior;
		Oid		   *owners = &table_owner;
		int			nowners = 1;
		int			i;

		/* only dlock_check records its owners, and it names no table */
		Assert(checked == NULL || !OidIsValid(table_owner));
		if (!OidIsValid(table_owner))
		{
			nowners = DlockMarkOwners(fn_oid, lock_name, GetUserId(), &owners);
			if (nowners == 0)
				fence_seen_denied(lock_name);
		}
		have_prior = DlockCheckedLookup(lock_name, &prior);
		for (i = 0; i < nowners; i++)
		{
			int64		mark;

			/*
			 * A mark this transaction locked at token cannot have been moved
			 * by anyone else; when the transaction itself raised it above,
			 * DlockCheckedMarkMoved dropped it from the check's owners.
			 */
			if (have_prior && prior.token == token &&
				DlockCheckedHoldsMark(&prior, owners[i]))
				continue;
			if (!DlockMarkCheck(fn_oid, lock_name, owners[i], token, &mark))
				fence_reject(mode, relname, lock_name,
							 "Lock \"%s\": token " INT64_FORMAT " is lower than token " INT64_FORMAT ", the highest this database has accepted for it.",
							 text_to_cstring(lock_name), token, mark);
			/* the mark may now be above what the transaction checked before */
			DlockCheckedMarkMoved(lock_name, owners[i], token);
		}
		if (checked != NULL)
		{
			checked->nmark_owners = nowners;
			checked->mark_owners = owners;
		}
		return;
	}

	DlockStoreFenceLookup(fn_oid, lock_name, token, mode == DLOCK_FENCE_LIVE,
						  &lease);
	if (!lease.found)
		fence_reject(mode, relname, lock_name,
					 "Lock \"%s\" has no lease (it was never acquired, or was purged); the token is " INT64_FORMAT ".",
					 text_to_cstring(lock_name), token);
	if (token < lease.token)
		fence_reject(mode, relname, lock_name,
					 "Lock \"%s\": token " INT64_FORMAT " is not current; the current token is " INT64_FORMAT ".",
					 text_to_cstring(lock_name), token, lease.token);
	if (token > lease.token)
		fence_reject(mode, relname, lock_name,
					 "Lock \"%s\": token " INT64_FORMAT " was not issued for this lock; the current token is " INT64_FORMAT ".",
					 text_to_cstring(lock_name), token, lease.token);
	if (lease.denied)
		fence_live_denied(relname, lock_name, lease.holder);
	if (mode == DLOCK_FENCE_LIVE && lease.released)
		fence_reject(mode, relname, lock_name,
					 "Lock \"%s\": token " INT64_FORMAT " is current, but its lease was released at %s.",
					 text_to_cstring(lock_name), token, timestamptz_to_str(lease.expires_at));
	if (mode == DLOCK_FENCE_LIVE && lease.expires_at <= GetCurrentTimestamp())
		fence_reject(mode, relname, lock_name,
					 "Lock \"%s\": token " INT64_FORMAT " is current, but its lease expired at %s.",
					 text_to_cstring(lock_name), token, timestamptz_to_str(lease.expires_at));
}

/*
 * fence_changes returns a number that moves whenever this backend writes a
 * lease row or changes a mark (it counts both).
 */
static uint64
fence_changes(void)
{
	return DlockFenceCacheChanges() + DlockMarkChanges();
}

/*
 * fence_verify_row is fence_verify for a row of the trigger's statement,
 * in the mode of config.  In modes 'latest' and 'seen', a row whose lock
 * and token are those that last passed in this statement (in the same
 * subtransaction, with no change of a token or mark by this backend since)
 * is not checked again, so that a statement writing many rows under one
 * lock pays for one check (design.md §17, "One check per lock in a
 * statement"); the row's own history is still checked by the caller for
 * every row.  Mode 'live' checks every row: its lease must still be live
 * (a break or release is not held off by its lock).
 */
static void
fence_verify_row(FenceConfig *config, Oid fn_oid, Relation rel,
				 text *lock_name, int64 token)
{
	int			len = VARSIZE_ANY(lock_name);

	if (config->mode != DLOCK_FENCE_LIVE && config->passed_valid &&
		config->passed_token == token &&
		config->passed_subxact == GetCurrentSubTransactionId() &&
		config->passed_changes == fence_changes() &&
		config->passed_name.len == len &&
		memcmp(config->passed_name.data, lock_name, len) == 0)
		return;
	config->passed_valid = false;
	fence_verify(fn_oid, RelationGetRelationName(rel), lock_name, token,
				 config->mode, rel->rd_rel->relowner, NULL);
	if (config->mode == DLOCK_FENCE_LIVE)
		return;
	DlockFenceBuffer(config, &config->passed_name);
	appendBinaryStringInfo(&config->passed_name, (const char *) lock_name, len);
	config->passed_token = token;
	config->passed_subxact = GetCurrentSubTransactionId();
	config->passed_changes = fence_changes();
	config->passed_valid = true;
}

/*
 * fence_checked_token returns the token this transaction's dlock_check
 * recorded for lock_name, for a DELETE or TRUNCATE (what names the
 * statement) or, when moved_to is not NULL, for an UPDATE that moves a row
 * out of lock_name into lock moved_to; raises 55T01 when there is none.
 */
static int64
fence_checked_token(Relation rel, text *lock_name, const char *what,
					DlockFenceMode mode, text *moved_to)
{
	DlockChecked checked;

	if (!DlockCheckedLookup(lock_name, &checked))
	{
		fence_count(mode, false);
		ereport(ERROR,
				(errcode(ERRCODE_DLOCK_STALE_TOKEN),
				 errmsg("fencing token rejected for relation \"%s\"",
						RelationGetRelationName(rel)),
				 moved_to == NULL ?
				 errdetail("Lock \"%s\": the transaction has not checked this lock; a %s is accepted only after dlock_check passed in the same transaction.",
						   text_to_cstring(lock_name), what) :
				 errdetail("Lock \"%s\": the %s moves the row from this lock to lock \"%s\", and the transaction has not checked this lock; a row leaves its lock only after dlock_check passed for it in the same transaction.",
						   text_to_cstring(lock_name), what,
						   text_to_cstring(moved_to)),
				 errhint("Call dlock_check(%s, token) in the transaction before the %s.",
						 quote_literal_cstr(text_to_cstring(lock_name)), what)));
	}
	return checked.token;
}

/*
 * fence_token_column returns the token column of tuple, setting *isnull.
 */
static int64
fence_token_column(FenceConfig *config, Relation rel, HeapTuple tuple,
				   bool *isnull)
{
	Datum		d = heap_getattr(tuple, config->token_attnum,
								 RelationGetDescr(rel), isnull);

	return *isnull ? 0 : DatumGetInt64(d);
}

PG_FUNCTION_INFO_V1(dlock_fence);
PG_FUNCTION_INFO_V1(dlock_check);

/*
 * dlock_fence() is the fencing trigger (design.md §17 gives the rules
 * and the ordering argument):
 *
 *	- BEFORE INSERT OR UPDATE ... FOR EACH ROW: returns the new row when its
 *	  token passes the fence, after filling in the token the transaction
 *	  checked when the row carries none of its own; an UPDATE that moves
 *	  the row to another lock also needs the old lock checked (the DELETE
 *	  rule);
 *	- BEFORE DELETE ... FOR EACH ROW: returns the old row when the
 *	  transaction checked its lock and that token still passes;
 *	- BEFORE TRUNCATE (FOR EACH STATEMENT, template naming no column):
 *	  returns when the transaction checked the lock and the token passes.
 *
 * Raises 55T01 when the write is rejected, 39P01 when fired any other way,
 * 22023 for bad arguments, 22004 for a NULL template column.
 */
Datum
dlock_fence(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TriggerEvent event;
	FenceConfig *config;
	Relation	rel;
	const char *relname;
	HeapTuple	newtuple;
	text	   *lock_name;
	bool		isnull;
	int64		token;
	bool		oldnull;
	int64		oldtoken;
	bool		moved;
	text	   *old_lock = NULL;
	DlockChecked checked;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						"dlock_fence")));
	event = trigdata->tg_event;
	if (!TRIGGER_FIRED_BEFORE(event) ||
		!(TRIGGER_FIRED_FOR_ROW(event) ?
		  (TRIGGER_FIRED_BY_INSERT(event) || TRIGGER_FIRED_BY_UPDATE(event) ||
		   TRIGGER_FIRED_BY_DELETE(event)) :
		  TRIGGER_FIRED_BY_TRUNCATE(event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired BEFORE INSERT, UPDATE or DELETE FOR EACH ROW, or BEFORE TRUNCATE",
						"dlock_fence"),
				 errdetail("Trigger \"%s\" on relation \"%s\" fired otherwise.",
						   trigdata->tg_trigger->tgname,
						   RelationGetRelationName(trigdata->tg_relation))));

	config = DlockFenceGetConfig(fcinfo, trigdata);
	rel = trigdata->tg_relation;
	relname = RelationGetRelationName(rel);

	/* TRUNCATE: the statement's one lock must have been checked */
	if (TRIGGER_FIRED_BY_TRUNCATE(event))
	{
		lock_name = DlockFenceLockName(config, trigdata, NULL, &config->name);
		token = fence_checked_token(rel, lock_name, "TRUNCATE", config->mode,
									NULL);
		fence_verify(fcinfo->flinfo->fn_oid, relname, lock_name, token,
					 config->mode, rel->rd_rel->relowner, NULL);
		fence_count(config->mode, true);
		return PointerGetDatum(NULL);
	}

	/* DELETE: the old row's lock must have been checked */
	if (TRIGGER_FIRED_BY_DELETE(event))
	{
		HeapTuple	oldtuple = trigdata->tg_trigtuple;

		lock_name = DlockFenceLockName(config, trigdata, oldtuple, &config->name);
		token = fence_checked_token(rel, lock_name, "DELETE", config->mode,
									NULL);
		oldtoken = fence_token_column(config, rel, oldtuple, &isnull);
		if (!isnull && token < oldtoken)
			fence_reject(config->mode, relname, lock_name,
						 "Lock \"%s\": the row carries token " INT64_FORMAT ", higher than token " INT64_FORMAT " the transaction checked.",
						 text_to_cstring(lock_name), oldtoken, token);
		fence_verify_row(config, fcinfo->flinfo->fn_oid, rel, lock_name, token);
		fence_count(config->mode, true);
		return PointerGetDatum(oldtuple);
	}

	/* INSERT or UPDATE */
	newtuple = TRIGGER_FIRED_BY_UPDATE(event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	lock_name = DlockFenceLockName(config, trigdata, newtuple, &config->name);
	token = fence_token_column(config, rel, newtuple, &isnull);
	oldnull = true;
	oldtoken = 0;
	moved = false;
	if (TRIGGER_FIRED_BY_UPDATE(event))
	{
		oldtoken = fence_token_column(config, rel, trigdata->tg_trigtuple,
									  &oldnull);

		/*
		 * A template without columns names one lock for every row, and so do
		 * unchanged template columns.
		 */
		if (config->has_columns &&
			!DlockFenceSameColumns(config, trigdata, trigdata->tg_trigtuple,
								   newtuple))
		{
			old_lock = DlockFenceLockName(config, trigdata, trigdata->tg_trigtuple,
										  &config->old_name);
			moved = !fence_same_name(old_lock, lock_name);
		}
	}

	/*
	 * A row that changes lock leaves its old lock as a DELETE would (the
	 * transaction checked the old lock, that token still passes, and the row
	 * carries no higher one), and enters the new one as an INSERT would
	 * (below, without the row's history, which belongs to the old lock).
	 * Whoever holds both may move it; nobody else.
	 */
	if (moved)
	{
		int64		checked_old = fence_checked_token(rel, old_lock, "UPDATE",
													  config->mode, lock_name);

		if (!oldnull && checked_old < oldtoken)
			fence_reject(config->mode, relname, old_lock,
						 "Lock \"%s\": the row carries token " INT64_FORMAT ", higher than token " INT64_FORMAT " the transaction checked.",
						 text_to_cstring(old_lock), oldtoken, checked_old);
		fence_verify(fcinfo->flinfo->fn_oid, relname, old_lock, checked_old,
					 config->mode, rel->rd_rel->relowner, NULL);
	}

	/*
	 * A write that carries no token of its own (NULL; on UPDATE also the old
	 * row's token unchanged) takes the one the transaction checked.
	 */
	if (isnull || !oldnull)
	{
		bool		carries_own = !isnull && (oldnull || oldtoken != token);

		if (!carries_own && DlockCheckedLookup(lock_name, &checked))
		{
			int			attnum = config->token_attnum;
			Datum		value = Int64GetDatum(checked.token);
			bool		valnull = false;

			newtuple = heap_modify_tuple_by_cols(newtuple, RelationGetDescr(rel),
												 1, &attnum, &value, &valnull);
			token = checked.token;
			isnull = false;
		}
	}
	if (isnull)
		fence_reject(config->mode, relname, lock_name,
					 "Lock \"%s\": the row carries no token (column \"%s\" is null).",
					 text_to_cstring(lock_name), config->token_attname);

	fence_verify_row(config, fcinfo->flinfo->fn_oid, rel, lock_name, token);

	/*
	 * The row's own history never goes backwards under its lock, whatever the
	 * leases say.  A row that moved starts a history under its new lock: its
	 * old token was checked against the old one above.
	 */
	if (!moved && !oldnull && token < oldtoken)
		fence_reject(config->mode, relname, lock_name,
					 "Lock \"%s\": the row carries token " INT64_FORMAT ", lower than token " INT64_FORMAT " it already had.",
					 text_to_cstring(lock_name), token, oldtoken);

	fence_count(config->mode, true);
	return PointerGetDatum(newtuple);
}

/*
 * dlock_check(lock_name text, token bigint, mode text DEFAULT 'latest')
 * returns token when it passes the fence of mode under lock_name (the
 * trigger's rules), and records the check for the rest of the transaction
 * (checked.c), so that the fence trigger accepts a DELETE, a TRUNCATE or a
 * write without a token of its own under that lock.  Raises 55T01 when the
 * token is rejected (also when it is NULL), 22004 for a NULL name or mode,
 * 22023 for an empty or too long name or an unknown mode, 42501 in mode
 * 'live' for a role that may not act for the lease's holder role, and in
 * mode 'seen' for a role that may write no table fenced by the lock.
 */
Datum
dlock_check(PG_FUNCTION_ARGS)
{
	text	   *lock_name = DlockGetLockName(fcinfo);
	DlockChecked checked;
	int64		token;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("mode must not be null")));
	if (!DlockFenceParseMode(text_to_cstring(PG_GETARG_TEXT_PP(2)), &checked.mode))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown fencing mode"),
				 errdetail("The mode is \"%s\"; it must be \"latest\", \"live\" or \"seen\".",
						   text_to_cstring(PG_GETARG_TEXT_PP(2)))));
	if (PG_ARGISNULL(1))
		fence_reject(checked.mode, NULL, lock_name,
					 "Lock \"%s\": no token was given (the token is null).",
					 text_to_cstring(lock_name));
	token = PG_GETARG_INT64(1);

	/*
	 * 'live' holds a lease from a takeover and 'seen' locks a mark, which a
	 * standby must not pretend to do (the lock manager would let it take the
	 * name lock): say so, not the statement's name
	 */
	if (checked.mode != DLOCK_FENCE_LATEST && XactReadOnly)
		PreventCommandIfReadOnly(checked.mode == DLOCK_FENCE_LIVE ?
								 "dlock_check() in mode 'live'" :
								 "dlock_check() in mode 'seen'");

	checked.nmark_owners = 0;
	checked.mark_owners = NULL;
	fence_verify(fcinfo->flinfo->fn_oid, NULL, lock_name, token,
				 checked.mode, InvalidOid, &checked);

	checked.token = token;
	DlockCheckedRecord(lock_name, &checked);
	fence_count(checked.mode, true);
	PG_RETURN_INT64(token);
}
