/*-------------------------------------------------------------------------
 *
 * src/fence_config.c
 *	  A fenced table's configuration, from the dlock_fence trigger's
 *	  arguments: the mode, the token column and the lock name template
 *	  (split by template.c, its columns looked up in the table), and the
 *	  lock name of a row (design.md §1).  The parsed arguments are kept
 *	  across statements (config_slots) until any relcache invalidation.
 *
 * Concurrency: none of its own; it reads the trigger's relation, which
 * the firing statement has locked, and its catalog entries.
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
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "compat.h"
#include "dlock.h"
#include "fence_int.h"
#include "store_int.h"

/*
 * DlockFenceParseMode parses a fencing mode's name into *mode; returns false when
 * it names none.
 */
bool
DlockFenceParseMode(const char *name, DlockFenceMode *mode)
{
	if (strcmp(name, "latest") == 0)
		*mode = DLOCK_FENCE_LATEST;
	else if (strcmp(name, "live") == 0)
		*mode = DLOCK_FENCE_LIVE;
	else if (strcmp(name, "seen") == 0)
		*mode = DLOCK_FENCE_SEEN;
	else
		return false;
	return true;
}

/*
 * fence_usage_hint adds the hint of a bad trigger argument: how trigger
 * on rel should call dlock_fence.  For ereport.
 */
static int
fence_usage_hint(Trigger *trigger, Relation rel)
{
	return errhint("Trigger \"%s\" on relation \"%s\" must call dlock_fence(lock name template, token column [, 'latest' | 'live' | 'seen']).",
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
 * fence_prints_from_bytes reports whether DlockFenceLockName copies a
 * column of type typid into the name without its output function, so that
 * the same bytes always give the same text.
 */
static bool
fence_prints_from_bytes(Oid typid)
{
	return typid == INT2OID || typid == INT4OID || typid == INT8OID ||
		typid == TEXTOID || typid == VARCHAROID;
}

/*
 * fence_parse_template splits template into literal and column segments of
 * config (DlockTemplateSplit), resolving columns against rel.  Raises 22023
 * for an unclosed or empty {}, a lone } or a missing column.
 */
static void
fence_parse_template(FenceConfig *config, Trigger *trigger, Relation rel,
					 const char *template)
{
	DlockTemplatePart *parts = NULL;
	int			nparts = 0;
	int			pos;
	int			i;

	switch (DlockTemplateSplit(template, &parts, &nparts, &pos))
	{
		case DLOCK_TEMPLATE_OK:
			break;
		case DLOCK_TEMPLATE_UNCLOSED:
			fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
							   errdetail("The \"{\" at position %d of template \"%s\" is not closed; write \"{{\" for a literal brace.",
										 pos, template));
			break;
		case DLOCK_TEMPLATE_EMPTY_COLUMN:
			fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
							   errdetail("Template \"%s\" has an empty \"{}\" at position %d.",
										 template, pos));
			break;
		case DLOCK_TEMPLATE_STRAY_CLOSE:
			fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
							   errdetail("The \"}\" at position %d of template \"%s\" closes nothing; write \"}}\" for a literal brace.",
										 pos, template));
			break;
		case DLOCK_TEMPLATE_EMPTY:
			fence_bad_argument(trigger, rel, errmsg("invalid lock name template"),
							   errdetail("The lock name template is empty."));
			break;
	}

	config->segments = palloc0(sizeof(FenceSegment) * nparts);
	config->nsegments = nparts;
	for (i = 0; i < nparts; i++)
	{
		FenceSegment *seg = &config->segments[i];
		Oid			typoutput;
		bool		typisvarlena;

		if (parts[i].literal != NULL)
		{
			seg->literal = parts[i].literal;
			continue;
		}
		seg->attname = parts[i].column;
		seg->attnum = fence_column(trigger, rel, seg->attname, true);
		seg->typid = TupleDescAttr(RelationGetDescr(rel), seg->attnum - 1)->atttypid;
		getTypeOutputInfo(seg->typid, &typoutput, &typisvarlena);
		fmgr_info_cxt(typoutput, &seg->outfunc, CurrentMemoryContext);
		config->has_columns = true;
	}
	config->name_memo_ok = true;
	for (i = 0; i < nparts; i++)
		if (config->segments[i].literal == NULL &&
			!fence_prints_from_bytes(config->segments[i].typid))
			config->name_memo_ok = false;
}

/*
 * The parsed arguments of recently fired triggers, kept across statements
 * in a small table indexed by the trigger's OID, each in a memory context
 * of its own: parsing looks columns and types up in the catalogs, which a
 * single-row UPDATE would otherwise pay at every execution.  An entry
 * serves while no relcache invalidation of any relation has come since it
 * was made (DlockStoreRelcacheInvals): every change of a table's columns or
 * triggers sends one for the table, processed when the statement locks it,
 * before its triggers fire.
 */
#define FENCE_CONFIG_SLOTS 16

typedef struct FenceConfigSlot
{
	Oid			tgoid;			/* InvalidOid: empty */
	Oid			relid;
	uint64		invals;			/* DlockStoreRelcacheInvals when made */
	MemoryContext cxt;			/* holds config */
	FenceConfig *config;		/* the parsed part only */
} FenceConfigSlot;

static FenceConfigSlot config_slots[FENCE_CONFIG_SLOTS];

/*
 * fence_config_pack returns the parsed part of src packed into one chunk of
 * the current memory context, its strings, segments and name memo inside
 * it (block_size bytes), with empty buffers and nothing passed yet: what
 * fence_config_copy copies for each statement with one palloc and a
 * memcpy.
 */
static FenceConfig *
fence_config_pack(const FenceConfig *src)
{
	Size		size;
	char	   *block;
	char	   *at;
	FenceConfig *dst;
	int			i;

	size = MAXALIGN(sizeof(FenceConfig)) +
		MAXALIGN(sizeof(FenceSegment) * src->nsegments) +
		MAXALIGN(sizeof(Datum) * src->nsegments) +
		strlen(src->token_attname) + 1;
	for (i = 0; i < src->nsegments; i++)
		size += strlen(src->segments[i].literal != NULL ?
					   src->segments[i].literal : src->segments[i].attname) + 1;

	block = palloc0(size);
	dst = (FenceConfig *) block;
	at = block + MAXALIGN(sizeof(FenceConfig));
	dst->block_size = size;
	dst->tgoid = src->tgoid;
	dst->mode = src->mode;
	dst->has_columns = src->has_columns;
	dst->name_memo_ok = src->name_memo_ok;
	dst->token_attnum = src->token_attnum;
	dst->nsegments = src->nsegments;
	dst->segments = (FenceSegment *) at;
	at += MAXALIGN(sizeof(FenceSegment) * src->nsegments);
	dst->name_memo = (Datum *) at;
	at += MAXALIGN(sizeof(Datum) * src->nsegments);
	dst->token_attname = at;
	at += strlen(src->token_attname) + 1;
	strcpy(dst->token_attname, src->token_attname);
	for (i = 0; i < src->nsegments; i++)
	{
		const FenceSegment *from = &src->segments[i];
		FenceSegment *to = &dst->segments[i];
		char	  **str = from->literal != NULL ? &to->literal : &to->attname;

		*str = at;
		strcpy(at, from->literal != NULL ? from->literal : from->attname);
		at += strlen(at) + 1;
		if (from->literal != NULL)
			continue;
		to->attnum = from->attnum;
		to->typid = from->typid;
		fmgr_info_copy(&to->outfunc, unconstify(FmgrInfo *, &from->outfunc),
					   CurrentMemoryContext);
	}
	Assert(at == block + size);
	return dst;
}

/* fence_relocate returns ptr, which pointed into the chunk at from, moved to to */
#define fence_relocate(ptr, from, to) \
	((void *) ((char *) (to) + ((const char *) (ptr) - (const char *) (from))))

/*
 * fence_config_copy returns a copy of packed (fence_config_pack) in the
 * current memory context: what one statement then uses and changes.  Its
 * buffers are made at their first use (DlockFenceBuffer).
 */
static FenceConfig *
fence_config_copy(const FenceConfig *packed)
{
	FenceConfig *dst = palloc(packed->block_size);
	int			i;

	memcpy(dst, packed, packed->block_size);
	dst->cxt = CurrentMemoryContext;
	dst->segments = fence_relocate(packed->segments, packed, dst);
	dst->name_memo = fence_relocate(packed->name_memo, packed, dst);
	dst->token_attname = fence_relocate(packed->token_attname, packed, dst);
	for (i = 0; i < dst->nsegments; i++)
	{
		FenceSegment *seg = &dst->segments[i];

		if (seg->literal != NULL)
		{
			seg->literal = fence_relocate(seg->literal, packed, dst);
			continue;
		}
		seg->attname = fence_relocate(seg->attname, packed, dst);
		/* as fmgr_info_copy does */
		seg->outfunc.fn_mcxt = CurrentMemoryContext;
		seg->outfunc.fn_extra = NULL;
	}
	Assert(dst->name.data == NULL && dst->old_name.data == NULL &&
		   dst->passed_name.data == NULL && !dst->passed_valid &&
		   !dst->name_memo_valid && dst->name_memo_cxt == NULL);
	return dst;
}

/*
 * DlockFenceBuffer empties buf, one of config's buffers; it is made at its
 * first use, in config's context (the statement's, not the row's).
 */
void
DlockFenceBuffer(FenceConfig *config, StringInfo buf)
{
	MemoryContext oldcxt;

	if (buf->data != NULL)
	{
		resetStringInfo(buf);
		return;
	}
	oldcxt = MemoryContextSwitchTo(config->cxt);
	initStringInfo(buf);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * fence_config_parse parses the arguments of trigger on rel into a new
 * FenceConfig in the current memory context.  Raises 39P01 for a wrong
 * argument count and 22023 for arguments that cannot work.
 */
static FenceConfig *
fence_config_parse(Trigger *trigger, Relation rel)
{
	FenceConfig *config;
	Form_pg_attribute tokatt;

	if (trigger->tgnargs != 2 && trigger->tgnargs != 3)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" takes 2 or 3 trigger arguments, not %d",
						"dlock_fence", trigger->tgnargs),
				 errhint("Use dlock_fence(lock name template, token column [, 'latest' | 'live' | 'seen']).")));

	config = palloc0(sizeof(FenceConfig));
	config->tgoid = trigger->tgoid;

	config->mode = DLOCK_FENCE_LATEST;
	if (trigger->tgnargs == 3 && !DlockFenceParseMode(trigger->tgargs[2], &config->mode))
		fence_bad_argument(trigger, rel, errmsg("unknown fencing mode"),
						   errdetail("The mode is \"%s\"; it must be \"latest\", \"live\" or \"seen\".",
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
	return config;
}

/*
 * DlockFenceGetConfig returns the parsed arguments of the trigger firing
 * now, for this statement: from fn_extra when this statement already has
 * them, else a copy of those kept from an earlier statement
 * (config_slots), else parsed now (and kept).  Raises 39P01 for a wrong
 * argument count and 22023 for arguments that cannot work.
 */
FenceConfig *
DlockFenceGetConfig(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	FenceConfig *config = (FenceConfig *) fcinfo->flinfo->fn_extra;
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	FenceConfigSlot *slot;
	uint64		invals;
	MemoryContext oldcxt;

	if (config != NULL && config->tgoid == trigger->tgoid)
		return config;

	slot = &config_slots[trigger->tgoid % FENCE_CONFIG_SLOTS];
	invals = DlockStoreRelcacheInvals();

	if (slot->tgoid != trigger->tgoid || slot->relid != RelationGetRelid(rel) ||
		slot->invals != invals)
	{
		FenceConfig *parsed = fence_config_parse(trigger, rel);
		MemoryContext cxt;

		/* parsed: kept, in a context of its own */
		cxt = AllocSetContextCreate(CacheMemoryContext, "dlock fence config",
									ALLOCSET_SMALL_SIZES);
		oldcxt = MemoryContextSwitchTo(cxt);
		config = fence_config_pack(parsed);
		MemoryContextSwitchTo(oldcxt);
		if (slot->cxt != NULL)
			MemoryContextDelete(slot->cxt);
		slot->cxt = cxt;
		slot->config = config;
		slot->tgoid = trigger->tgoid;
		slot->relid = RelationGetRelid(rel);
		slot->invals = invals;
	}
	Assert(slot->config->tgoid == trigger->tgoid);

	oldcxt = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	config = fence_config_copy(slot->config);
	MemoryContextSwitchTo(oldcxt);

	/* a statement has no row to take a column's value from */
	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event) && config->has_columns)
		fence_bad_argument(trigger, rel,
						   errmsg("lock name template of a TRUNCATE trigger must not name a column"),
						   errdetail("Template \"%s\" names columns, but TRUNCATE has no row to take their values from.",
									 trigger->tgargs[0]));

	fcinfo->flinfo->fn_extra = config;
	return config;
}

/*
 * fence_columns_equal reports whether the template's columns of tuple hold
 * the same bytes, none of them NULL, as those of tuple other or, when other
 * is NULL, as values (one per segment).
 */
static bool
fence_columns_equal(FenceConfig *config, TupleDesc tupdesc, HeapTuple tuple,
					HeapTuple other, const Datum *values)
{
	int			i;

	for (i = 0; i < config->nsegments; i++)
	{
		FenceSegment *seg = &config->segments[i];
		Form_pg_attribute att;
		bool		isnull;
		Datum		v;
		Datum		w;

		if (seg->literal != NULL)
			continue;
		att = TupleDescAttr(tupdesc, seg->attnum - 1);
		v = heap_getattr(tuple, seg->attnum, tupdesc, &isnull);
		if (isnull)
			return false;
		if (other == NULL)
			w = values[i];
		else
		{
			w = heap_getattr(other, seg->attnum, tupdesc, &isnull);
			if (isnull)
				return false;
		}
		if (!(att->attbyval ? v == w : datumIsEqual(v, w, false, att->attlen)))
			return false;
	}
	return true;
}

/*
 * DlockFenceSameColumns reports whether the template's columns hold the
 * same bytes in tuples a and b (none of them NULL): then both rows have the
 * same lock name, and an UPDATE need not build the old row's.  False when
 * it cannot tell (a NULL, a value stored differently): the caller builds
 * both names and compares them.
 */
bool
DlockFenceSameColumns(FenceConfig *config, TriggerData *trigdata,
					  HeapTuple a, HeapTuple b)
{
	return fence_columns_equal(config, RelationGetDescr(trigdata->tg_relation),
							   a, b, NULL);
}

/*
 * fence_name_memo_matches reports whether the template's columns of tuple
 * hold the bytes config->name was built from (none NULL).
 */
static bool
fence_name_memo_matches(FenceConfig *config, TupleDesc tupdesc, HeapTuple tuple)
{
	return fence_columns_equal(config, tupdesc, tuple, NULL, config->name_memo);
}

/*
 * fence_name_memo_keep records the template's column values of tuple, from
 * which config->name was just built (none NULL, or the build raised); it
 * records nothing when a value is an indirect pointer (which only C code
 * makes, and whose target may change between rows).
 */
static void
fence_name_memo_keep(FenceConfig *config, TupleDesc tupdesc, HeapTuple tuple)
{
	MemoryContext oldcxt;
	int			i;

	Assert(config->name_memo_ok && !config->name_memo_valid);
	if (config->name_memo_cxt != NULL)
		MemoryContextReset(config->name_memo_cxt);
	for (i = 0; i < config->nsegments; i++)
	{
		FenceSegment *seg = &config->segments[i];
		Form_pg_attribute att;
		bool		isnull;
		Datum		value;

		if (seg->literal != NULL)
			continue;
		att = TupleDescAttr(tupdesc, seg->attnum - 1);
		value = heap_getattr(tuple, seg->attnum, tupdesc, &isnull);
		Assert(!isnull);
		if (att->attbyval)
		{
			config->name_memo[i] = value;
			continue;
		}
		/* an indirect pointer's bytes say nothing of the value it points to */
		if (att->attlen == -1 &&
			VARATT_IS_EXTERNAL_INDIRECT(DatumGetPointer(value)))
			return;
		if (config->name_memo_cxt == NULL)
			config->name_memo_cxt = AllocSetContextCreate(config->cxt,
														  "dlock fence name",
														  ALLOCSET_SMALL_SIZES);
		oldcxt = MemoryContextSwitchTo(config->name_memo_cxt);
		config->name_memo[i] = datumCopy(value, false, att->attlen);
		MemoryContextSwitchTo(oldcxt);
	}
	config->name_memo_valid = true;
}

/*
 * DlockFenceLockName builds the lock name of row tuple from the template (of a
 * statement trigger: tuple is NULL and the template names no column), as a
 * text in buf, one of config's buffers: valid until the next row.  Integer
 * and text columns are copied without their output functions (which give
 * the same text); when all of the template's columns are such, a row whose
 * columns hold the bytes that config->name was last built from gets that
 * name again without building it (the many rows of one lock in a
 * statement).  Raises 22004 when a column named in the template is
 * NULL, 22023 when the name is longer than a lock name may be
 * (DLOCK_MAX_NAME_BYTES, as for every function that takes a name).
 */
text *
DlockFenceLockName(FenceConfig *config, TriggerData *trigdata, HeapTuple tuple,
				   StringInfo buf)
{
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	bool		memo = buf == &config->name && config->name_memo_ok;
	int			i;

	Assert(tuple != NULL || !config->has_columns);
	if (memo && config->name_memo_valid)
	{
		if (fence_name_memo_matches(config, tupdesc, tuple))
			return (text *) buf->data;
		config->name_memo_valid = false;
	}
	DlockFenceBuffer(config, buf);
	appendStringInfoSpaces(buf, VARHDRSZ);	/* the text's header */
	for (i = 0; i < config->nsegments; i++)
	{
		FenceSegment *seg = &config->segments[i];
		bool		isnull;
		Datum		value;

		if (seg->literal != NULL)
		{
			appendStringInfoString(buf, seg->literal);
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
		switch (seg->typid)
		{
			case INT2OID:
			case INT4OID:
			case INT8OID:
				{
					char		digits[MAXINT8LEN + 1];
					int			len;

					if (seg->typid == INT2OID)
						len = pg_itoa(DatumGetInt16(value), digits);
					else if (seg->typid == INT4OID)
						len = pg_ltoa(DatumGetInt32(value), digits);
					else
						len = pg_lltoa(DatumGetInt64(value), digits);
					appendBinaryStringInfo(buf, digits, len);
					break;
				}
			case TEXTOID:
			case VARCHAROID:
				{
					text	   *t = (text *) pg_detoast_datum_packed((struct varlena *) DatumGetPointer(value));

					appendBinaryStringInfo(buf, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
					break;
				}
			default:
				appendStringInfoString(buf, OutputFunctionCall(&seg->outfunc, value));
				break;
		}
	}
	SET_VARSIZE(buf->data, buf->len);
	if (buf->len - VARHDRSZ > DLOCK_MAX_NAME_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock name is too long"),
				 errdetail("Trigger \"%s\" on relation \"%s\" built a lock name of %d bytes from template \"%s\"; the limit is %d bytes.",
						   trigdata->tg_trigger->tgname,
						   RelationGetRelationName(trigdata->tg_relation),
						   buf->len - VARHDRSZ, trigdata->tg_trigger->tgargs[0],
						   DLOCK_MAX_NAME_BYTES)));
	if (memo)
		fence_name_memo_keep(config, tupdesc, tuple);
	return (text *) buf->data;
}
