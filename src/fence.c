/*-------------------------------------------------------------------------
 *
 * src/fence.c
 *	  The dlock_fence trigger: a write to a protected table is accepted only
 *	  when the fencing token it carries is the current one for its lock.
 *
 *	  CREATE TRIGGER t BEFORE INSERT OR UPDATE ON tab FOR EACH ROW
 *	    EXECUTE FUNCTION dlock_fence('account:{id}', 'fence_token' [, 'latest' | 'live']);
 *
 * Argument 1 is the lock name template: {col} stands for the text of
 * NEW.col, {{ and }} for literal braces.  Argument 2 names the bigint column
 * that carries the writer's token.  Argument 3 is the mode.  The arguments
 * are parsed and resolved against the table's columns on the first row of
 * each statement and kept in fn_extra for the rest of it.
 *
 * A write is rejected, with SQLSTATE 55T01, when its token is NULL, when
 * the lock has no lease row (never acquired, or purged), when the token is
 * not the lease's current token (older: a stale holder; newer: a token of
 * another lock), in 'live' mode when the lease has ended (released or
 * expired), and on UPDATE when the token is lower than the one the row
 * already carries.  Misuse (wrong event, arguments or columns) raises a
 * different error on the first row.
 *
 * Concurrency: why accepted tokens on a row never go backwards.
 *
 * Tokens of one lock only grow: a new token is granted only when no live
 * lease holds the name, and it comes from one increasing sequence.  The
 * lease row is read with a fresh snapshot (store.c), so the check sees
 * every lease change committed before it starts, also in a REPEATABLE
 * READ transaction whose own snapshot is older.
 *
 * 'latest' mode, UPDATE.  PostgreSQL locks the old row before it fires a
 * BEFORE ROW UPDATE trigger (GetTupleForTrigger), waiting for a concurrent
 * writer of that row to finish and, under READ COMMITTED, continuing with
 * the newest row version; under REPEATABLE READ a concurrent update raises
 * 40001 instead.  Say write W1 with token t1 committed on a row and W2,
 * with t2, locks the row afterwards.  W1's check found t1 current, so t1's
 * grant was committed (or made in W1's own transaction, which committed).
 * W2's check starts after W1 committed, so the current token it sees is
 * t1 or newer, and W2 passes only if t2 is that token: t2 >= t1.  Row
 * locks order the accepted writes of one row; the lease row needs no lock,
 * which keeps hot lease rows free of shared-lock traffic.
 *
 * 'latest' mode, INSERT.  A new row has no history.  Two inserts of the
 * same key are ordered by the unique index (the second fails, or under ON
 * CONFLICT DO UPDATE becomes an UPDATE and follows the rule above).
 *
 * 'live' mode.  As 'latest', and the lease row is locked FOR KEY SHARE
 * until the writer's transaction ends.  A takeover locks the lease row FOR
 * UPDATE (SKIP LOCKED: acquire reports the name as held), so no newer
 * token can be granted while an accepted write is uncommitted; a takeover
 * that is itself uncommitted makes the writer wait for it and then see its
 * new token.  Renew, release and break take FOR NO KEY UPDATE and are not
 * blocked; the lease must be live when the write is checked.
 *
 * What is not covered: DELETE (a trigger on DELETE is refused: there is no
 * NEW row to carry a token), TRUNCATE, and writes while the trigger does
 * not fire (session_replication_role = replica, logical replication apply,
 * a disabled trigger).  specs/race-fence-*.spec prove the interleavings.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "dlock.h"

PG_FUNCTION_INFO_V1(dlock_fence);

/* One piece of the lock name template: literal text, or a column's value. */
typedef struct FenceSegment
{
	char	   *literal;		/* NULL for a column */
	int			attnum;			/* column number, for a column */
	char	   *attname;
	FmgrInfo	outfunc;		/* the column type's output function */
} FenceSegment;

/* A trigger's parsed arguments, cached in fn_extra for one statement. */
typedef struct FenceConfig
{
	Oid			tgoid;			/* the trigger these are for */
	int			nsegments;
	FenceSegment *segments;
	int			token_attnum;
	char	   *token_attname;
	bool		live;			/* mode 'live' */
} FenceConfig;

/*
 * fence_usage_hint adds the hint of a bad trigger argument: how trigger
 * on rel should call dlock_fence.  For ereport.
 */
static int
fence_usage_hint(Trigger *trigger, Relation rel)
{
	return errhint("Trigger \"%s\" on relation \"%s\" must call dlock_fence(lock name template, token column [, 'latest' | 'live']).",
				   trigger->tgname, RelationGetRelationName(rel));
}

/*
 * fence_bad_argument raises 22023 for an argument of trigger on rel that
 * cannot work; msg and detail are errmsg(...) and errdetail(...), so the
 * messages stay literal at each call.
 */
#define fence_bad_argument(trigger, rel, msg, detail) \
	ereport(ERROR, \
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE), \
			 (msg), (detail), fence_usage_hint((trigger), (rel))))

/*
 * fence_column returns the number of the live column attname of rel, or
 * raises 22023 naming what it was for: the lock name template (when
 * for_template) or the token column argument.
 */
static int
fence_column(Trigger *trigger, Relation rel, const char *attname,
			 bool for_template)
{
	AttrNumber	attnum = get_attnum(RelationGetRelid(rel), attname);

	if (attnum <= 0)
		fence_bad_argument(trigger, rel,
						   errmsg("column \"%s\" does not exist", attname),
						   for_template ?
						   errdetail("The lock name template names column \"%s\", which relation \"%s\" does not have.",
									 attname, RelationGetRelationName(rel)) :
						   errdetail("The token column argument names column \"%s\", which relation \"%s\" does not have.",
									 attname, RelationGetRelationName(rel)));
	return attnum;
}

/*
 * fence_parse_template splits template into literal and column segments of
 * config, resolving columns against rel.  Raises 22023 for an unclosed or
 * empty {}, a lone } or a missing column.
 */
static void
fence_parse_template(FenceConfig *config, Trigger *trigger, Relation rel,
					 const char *template)
{
	int			len = strlen(template);
	StringInfoData lit;
	int			i = 0;

	/* at most one segment per character, plus one */
	config->segments = palloc0(sizeof(FenceSegment) * (len + 1));
	config->nsegments = 0;
	initStringInfo(&lit);

	while (i < len)
	{
		char		c = template[i];

		if ((c == '{' || c == '}') && i + 1 < len && template[i + 1] == c)
		{
			appendStringInfoChar(&lit, c);
			i += 2;
		}
		else if (c == '{')
		{
			const char *close = strchr(template + i + 1, '}');
			FenceSegment *seg;
			Oid			typoutput;
			bool		typisvarlena;

			if (close == NULL)
				fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
								   errdetail("The \"{\" at position %d of template \"%s\" is not closed; write \"{{\" for a literal brace.",
											 i + 1, template));
			if (close == template + i + 1)
				fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
								   errdetail("Template \"%s\" has an empty \"{}\" at position %d.",
											 template, i + 1));
			if (lit.len > 0)
			{
				config->segments[config->nsegments++].literal = pstrdup(lit.data);
				resetStringInfo(&lit);
			}
			seg = &config->segments[config->nsegments++];
			seg->attname = pnstrdup(template + i + 1, close - (template + i + 1));
			seg->attnum = fence_column(trigger, rel, seg->attname,
									   true);
			getTypeOutputInfo(TupleDescAttr(RelationGetDescr(rel), seg->attnum - 1)->atttypid,
							  &typoutput, &typisvarlena);
			fmgr_info_cxt(typoutput, &seg->outfunc, CurrentMemoryContext);
			i = close - template + 1;
		}
		else if (c == '}')
			fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
							   errdetail("The \"}\" at position %d of template \"%s\" closes nothing; write \"}}\" for a literal brace.",
										 i + 1, template));
		else
		{
			appendStringInfoChar(&lit, c);
			i++;
		}
	}
	if (lit.len > 0)
		config->segments[config->nsegments++].literal = pstrdup(lit.data);
	if (config->nsegments == 0)
		fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
						   errdetail("The lock name template is empty."));
}

/*
 * fence_config returns the parsed arguments of the trigger firing now,
 * from fn_extra when this statement already parsed them.  Raises 39P01 for
 * a wrong argument count and 22023 for arguments that cannot work.
 */
static FenceConfig *
fence_config(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	FenceConfig *config = (FenceConfig *) fcinfo->flinfo->fn_extra;
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	MemoryContext oldcxt;
	Form_pg_attribute tokatt;

	if (config != NULL && config->tgoid == trigger->tgoid)
		return config;

	if (trigger->tgnargs != 2 && trigger->tgnargs != 3)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" takes 2 or 3 trigger arguments, not %d",
						"dlock_fence", trigger->tgnargs),
				 errhint("Use dlock_fence(lock name template, token column [, 'latest' | 'live']).")));

	oldcxt = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	config = palloc0(sizeof(FenceConfig));
	config->tgoid = trigger->tgoid;

	if (trigger->tgnargs == 3 && strcmp(trigger->tgargs[2], "live") == 0)
		config->live = true;
	else if (trigger->tgnargs == 3 && strcmp(trigger->tgargs[2], "latest") != 0)
		fence_bad_argument(trigger, rel, errmsg("unknown fencing mode"),
						   errdetail("The mode is \"%s\"; it must be \"latest\" or \"live\".",
									 trigger->tgargs[2]));

	config->token_attname = pstrdup(trigger->tgargs[1]);
	config->token_attnum = fence_column(trigger, rel, config->token_attname,
										false);
	tokatt = TupleDescAttr(RelationGetDescr(rel), config->token_attnum - 1);
	if (getBaseType(tokatt->atttypid) != INT8OID)
		fence_bad_argument(trigger, rel, errmsg("token column must be of type bigint"),
						   errdetail("Column \"%s\" of relation \"%s\" is of type %s.",
									 config->token_attname,
									 RelationGetRelationName(rel),
									 format_type_be(tokatt->atttypid)));

	fence_parse_template(config, trigger, rel, trigger->tgargs[0]);

	MemoryContextSwitchTo(oldcxt);
	fcinfo->flinfo->fn_extra = config;
	return config;
}

/*
 * fence_lock_name builds the lock name of row tuple from the template.
 * Raises 22004 when a column named in the template is NULL.
 */
static text *
fence_lock_name(FenceConfig *config, TriggerData *trigdata, HeapTuple tuple)
{
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	for (i = 0; i < config->nsegments; i++)
	{
		FenceSegment *seg = &config->segments[i];
		bool		isnull;
		Datum		value;

		if (seg->literal != NULL)
		{
			appendStringInfoString(&buf, seg->literal);
			continue;
		}
		value = heap_getattr(tuple, seg->attnum, tupdesc, &isnull);
		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("lock name template column \"%s\" is null",
							seg->attname),
					 errdetail("Trigger \"%s\" on relation \"%s\" builds the lock name from template \"%s\".",
							   trigdata->tg_trigger->tgname,
							   RelationGetRelationName(trigdata->tg_relation),
							   trigdata->tg_trigger->tgargs[0])));
		appendStringInfoString(&buf, OutputFunctionCall(&seg->outfunc, value));
	}
	return cstring_to_text_with_len(buf.data, buf.len);
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
 * fence_reject raises the fencing rejection (55T01) for a write to rel
 * under lock lock_name; the rest are errdetail's format and arguments,
 * saying why.
 */
#define fence_reject(rel, lock_name, ...) \
	ereport(ERROR, \
			(errcode(ERRCODE_DLOCK_STALE_TOKEN), \
			 errmsg("fencing token rejected for relation \"%s\"", \
					RelationGetRelationName(rel)), \
			 errdetail(__VA_ARGS__), \
			 fence_reject_hint(lock_name)))

/*
 * dlock_fence() is a BEFORE INSERT OR UPDATE ... FOR EACH ROW trigger that
 * returns the new row when its token is current for its lock and raises
 * 55T01 otherwise (see the file header for the rules and the ordering
 * argument).  In 'live' mode it locks the lease row FOR KEY SHARE until the
 * transaction ends.  Raises 39P01 when fired any other way, 22023 for bad
 * arguments, 22004 for a NULL template column.
 */
Datum
dlock_fence(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	FenceConfig *config;
	Relation	rel;
	TupleDesc	tupdesc;
	HeapTuple	newtuple;
	text	   *lock_name;
	Datum		d;
	bool		isnull;
	int64		token;
	DlockFenceLease lease;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						"dlock_fence")));
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!(TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired BEFORE INSERT OR UPDATE FOR EACH ROW",
						"dlock_fence"),
				 errdetail("Trigger \"%s\" on relation \"%s\" fired otherwise.",
						   trigdata->tg_trigger->tgname,
						   RelationGetRelationName(trigdata->tg_relation))));

	config = fence_config(fcinfo, trigdata);
	rel = trigdata->tg_relation;
	tupdesc = RelationGetDescr(rel);
	newtuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;

	lock_name = fence_lock_name(config, trigdata, newtuple);

	d = heap_getattr(newtuple, config->token_attnum, tupdesc, &isnull);
	if (isnull)
		fence_reject(rel, lock_name,
					 "Lock \"%s\": the row carries no token (column \"%s\" is null).",
					 text_to_cstring(lock_name), config->token_attname);
	token = DatumGetInt64(d);

	DlockStoreFenceLookup(fcinfo->flinfo->fn_oid, lock_name, config->live,
						  &lease);
	if (!lease.found)
		fence_reject(rel, lock_name,
					 "Lock \"%s\" has no lease (it was never acquired, or was purged); the row carries token " INT64_FORMAT ".",
					 text_to_cstring(lock_name), token);
	if (token < lease.token)
		fence_reject(rel, lock_name,
					 "Lock \"%s\": the row carries token " INT64_FORMAT ", but the current token is " INT64_FORMAT ".",
					 text_to_cstring(lock_name), token, lease.token);
	if (token > lease.token)
		fence_reject(rel, lock_name,
					 "Lock \"%s\": the row carries token " INT64_FORMAT ", which was not issued for this lock; the current token is " INT64_FORMAT ".",
					 text_to_cstring(lock_name), token, lease.token);
	if (config->live && lease.released)
		fence_reject(rel, lock_name,
					 "Lock \"%s\": token " INT64_FORMAT " is current, but its lease was released at %s.",
					 text_to_cstring(lock_name), token, timestamptz_to_str(lease.expires_at));
	if (config->live && lease.expires_at <= GetCurrentTimestamp())
		fence_reject(rel, lock_name,
					 "Lock \"%s\": token " INT64_FORMAT " is current, but its lease expired at %s.",
					 text_to_cstring(lock_name), token, timestamptz_to_str(lease.expires_at));

	/*
	 * The row's own history never goes backwards, whatever the leases say:
	 * a row moved to another lock cannot take a lower token with it.
	 */
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		Datum		oldd = heap_getattr(trigdata->tg_trigtuple,
										config->token_attnum, tupdesc, &isnull);

		if (!isnull && token < DatumGetInt64(oldd))
			fence_reject(rel, lock_name,
						 "Lock \"%s\": the row carries token " INT64_FORMAT ", lower than token " INT64_FORMAT " it already had.",
						 text_to_cstring(lock_name), token, DatumGetInt64(oldd));
	}

	return PointerGetDatum(newtuple);
}
