/*-------------------------------------------------------------------------
 *
 * src/fence_int.h
 *	  What fence.c and fence_config.c share: a fenced table's
 *	  configuration and the functions that read it.  Private to the fence.
 *
 * Concurrency: fence.c's header.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_FENCE_INT_H
#define DLOCK_FENCE_INT_H

#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/rel.h"

#include "dlock.h"

/* One piece of the lock name template: literal text, or a column's value. */
typedef struct FenceSegment
{
	char	   *literal;		/* NULL for a column */
	int			attnum;			/* column number, for a column */
	char	   *attname;
	Oid			typid;			/* the column's type */
	FmgrInfo	outfunc;		/* the column type's output function */
} FenceSegment;

/*
 * A trigger's parsed arguments and one statement's state, in fn_extra for one
 * statement (the parsed part is kept across statements: fence_config.c).
 */
typedef struct FenceConfig
{
	Oid			tgoid;			/* the trigger these are for */
	Size		block_size;		/* the chunk it is packed into, its strings,
								 * segments and name_memo included */
	int			nsegments;
	FenceSegment *segments;
	bool		has_columns;	/* the template names a column */
	int			token_attnum;
	char	   *token_attname;
	DlockFenceMode mode;
	MemoryContext cxt;			/* the statement's copy: where it lives */
	/* buffers, made at first use, in cxt (DlockFenceBuffer) */
	StringInfoData name;		/* the current row's lock name, as a text */
	StringInfoData old_name;	/* an UPDATE's old row's lock name */

	/*
	 * The template's column values that name was last built from (one per
	 * segment; name_memo_valid), so that a row whose columns hold the same
	 * bytes reuses the name instead of building it again.  Only when every
	 * column prints from its bytes alone (name_memo_ok: integers, text and
	 * varchar, which DlockFenceLockName copies without output functions, so
	 * no setting changes their text; also a template without columns);
	 * varlena values are copied into name_memo_cxt.
	 */
	bool		name_memo_ok;
	bool		name_memo_valid;
	Datum	   *name_memo;
	MemoryContext name_memo_cxt;

	/*
	 * The lock name and token that last passed the fence in this statement
	 * (mode 'latest' or 'seen'), in subtransaction passed_subxact, when this
	 * backend's own changes of tokens and marks numbered passed_changes: a
	 * later row with the same lock and token is not checked again while those
	 * are the same (design.md §17, "One check per lock in a statement").
	 * Valid only because fn_extra lives for one statement, which never spans
	 * the end of a transaction.
	 */
	bool		passed_valid;
	int64		passed_token;
	SubTransactionId passed_subxact;
	uint64		passed_changes;
	StringInfoData passed_name; /* the name, as a text */
} FenceConfig;



extern bool DlockFenceParseMode(const char *name, DlockFenceMode *mode);
extern FenceConfig *DlockFenceGetConfig(FunctionCallInfo fcinfo,
										TriggerData *trigdata);
extern void DlockFenceBuffer(FenceConfig *config, StringInfo buf);
extern bool DlockFenceSameColumns(FenceConfig *config, TriggerData *trigdata,
								  HeapTuple a, HeapTuple b);
extern text *DlockFenceLockName(FenceConfig *config, TriggerData *trigdata,
								HeapTuple tuple, StringInfo buf);

#endif							/* DLOCK_FENCE_INT_H */
