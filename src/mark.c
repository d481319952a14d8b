/*-------------------------------------------------------------------------
 *
 * src/mark.c
 *	  The marks of fencing mode 'seen': for a database that is not the
 *	  lease store (another service's data, a shard, another cluster), the
 *	  highest token accepted so far for each lock name, kept in the
 *	  extension's table dlock_fence_mark (dumped with the database).  A
 *	  token lower than the mark is rejected; a higher one raises it.  This
 *	  file owns that rule (DlockMarkCheck), the removal of old marks
 *	  (DlockMarkPurge), and who may raise and hold them (DlockMarkOwners);
 *	  fence.c calls them.  The mark's row lock without SQL in the common
 *	  case is mark_find.c's.
 *
 * Concurrency: every accepted check holds the lock name's mark row (per
 * owner of the fenced tables) FOR NO KEY UPDATE until its transaction
 * ends, raising it in place when its token is higher; a name with no mark
 * yet gets one by INSERT ... ON CONFLICT DO NOTHING.  So the accepted
 * writes under one name commit in non-decreasing token order: design.md
 * §18 has the argument.  Where a mark was found last is remembered per
 * backend (mark_find.c's hints), only as a place to look first: the row
 * found there counts only when it is visible, is the mark of that owner
 * and name, and is then locked as one the index found (design.md §18).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "dlock.h"
#include "mark_int.h"
#include "store_int.h"

/* Arguments and results of one 'seen' check. */
typedef struct MarkCheckOp
{
	text	   *lock_name;
	Oid			table_owner;	/* whose tables' mark */
	int64		token;
	TimestampTz now;
	bool		accepted;		/* out */
	int64		mark;			/* out: the mark when rejected */
} MarkCheckOp;

/* Marks this backend raised, made or purged, ever (DlockMarkChanges). */
static uint64 mark_changes = 0;

/*
 * mark_check_op is the body of DlockMarkCheck; a StoreOp.  Its result
 * (whether to keep a subtransaction) is unused: it runs in none.
 */
static bool
mark_check_op(void *arg)
{
	MarkCheckOp *m = (MarkCheckOp *) arg;
	Datum		values[4];
	int			round;

	DlockStoreRequireMarks();
	values[0] = ObjectIdGetDatum(m->table_owner);
	values[1] = PointerGetDatum(m->lock_name);
	values[2] = Int64GetDatum(m->token);
	values[3] = TimestampTzGetDatum(m->now);

	/*
	 * Lock the mark, or create it.  An insert that meets a concurrent one of
	 * the same name finds its row on the next round; the rounds are bounded
	 * because a mark, once committed, is only deleted by purge.
	 */
	for (round = 0;; round++)
	{
		bool		isnull;
		int64		mark = 0;
		MarkLockResult direct = MARK_UNSURE;
		bool		locked;
		AttrNumber	att_owner;
		AttrNumber	att_name;
		AttrNumber	att_token;
		Oid			markrelid = DlockStoreMarkTable(&att_owner, &att_name,
													&att_token);

		/*
		 * The common cases directly (a mark to lock, or none yet), the rest
		 * by the statement.
		 */
		if (round == 0)
			direct = DlockMarkLock(markrelid, att_owner, att_name, att_token,
								   m->table_owner, m->lock_name, &mark);
		locked = direct == MARK_LOCKED;
		if (!locked && direct != MARK_ABSENT &&
			DlockStoreExec(STMT_MARK_LOCK, values, SPI_OK_SELECT) == 1)
		{
			mark = DatumGetInt64(DlockStoreResultDatum(1, &isnull));
			Assert(!isnull);
			locked = true;
		}
		if (locked)
		{
			if (m->token < mark)
			{
				m->accepted = false;
				m->mark = mark;
				return false;
			}
			if (m->token > mark)
			{
				mark_changes++;
				if (DlockStoreExec(STMT_MARK_RAISE, values,
								   SPI_OK_UPDATE_RETURNING) != 1)
					elog(ERROR, "dlock: the locked mark of \"%s\" was not raised",
						 text_to_cstring(m->lock_name));
				DlockMarkHintReturned(markrelid, m->table_owner, m->lock_name);
			}
			m->accepted = true;
			return true;
		}
		mark_changes++;
		if (DlockStoreExec(STMT_MARK_INSERT, values, SPI_OK_INSERT_RETURNING) == 1)
		{
			DlockMarkHintReturned(markrelid, m->table_owner, m->lock_name);
			m->accepted = true;
			return true;
		}
		if (round >= 100)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("could not lock the fencing mark of lock \"%s\"",
							text_to_cstring(m->lock_name)),
					 errdetail("The mark was deleted and created again concurrently %d times.",
							   round + 1)));
	}
}

/*
 * DlockMarkCheck applies mode 'seen' to token under lock_name, with the
 * mark of the tables owned by table_owner, in the database of the SQL
 * function fn_oid: returns true, with the mark locked by the transaction
 * and at least token, when token is not lower than the mark (or there was
 * none); otherwise sets *mark and returns false.  The caller decided that
 * the current user may (the file header).  Raises 0A000 when the
 * extension's SQL has no marks (before 1.2).
 */
bool
DlockMarkCheck(Oid fn_oid, text *lock_name, Oid table_owner, int64 token,
			   int64 *mark)
{
	MarkCheckOp m;

	Assert(OidIsValid(table_owner));
	m.lock_name = lock_name;
	m.table_owner = table_owner;
	m.token = token;
	m.now = GetCurrentTimestamp();
	m.accepted = false;
	m.mark = 0;
	DlockStoreRun(fn_oid, mark_check_op, &m, false);
	if (!m.accepted)
		*mark = m.mark;
	return m.accepted;
}

/* Arguments and result of a purge of marks. */
typedef struct MarkPurgeOp
{
	TimestampTz cutoff;
	int64		deleted;		/* out */
} MarkPurgeOp;

/*
 * mark_purge_op is the body of DlockMarkPurge; a StoreOp.  Keeps its
 * subtransaction when it deleted something.
 */
static bool
mark_purge_op(void *arg)
{
	MarkPurgeOp *p = (MarkPurgeOp *) arg;
	Datum		values[1];
	bool		isnull;

	DlockStoreRequireMarks();
	values[0] = TimestampTzGetDatum(p->cutoff);
	DlockStoreExec(STMT_MARK_PURGE, values, SPI_OK_SELECT);
	p->deleted = DatumGetInt64(DlockStoreResultDatum(1, &isnull));
	Assert(!isnull && p->deleted >= 0);
	return p->deleted > 0;
}

/*
 * DlockMarkPurge deletes the marks last raised before cutoff, except those
 * a writer holds locked, and returns how many it deleted.  It runs in a
 * subtransaction of its own (DlockStoreRun), so that nothing stays locked
 * when it deletes nothing.
 */
int64
DlockMarkPurge(Oid fn_oid, TimestampTz cutoff)
{
	MarkPurgeOp p;

	mark_changes++;
	p.cutoff = cutoff;
	p.deleted = 0;
	DlockStoreRun(fn_oid, mark_purge_op, &p, true);
	return p.deleted;
}

/*
 * DlockMarkChanges returns how many marks this backend has raised, made or
 * purged so far: a value that moves whenever the backend itself moved a
 * mark, for the fence's one check per lock in a statement (fence.c).
 */
uint64
DlockMarkChanges(void)
{
	return mark_changes;
}

/* A dlock_fence trigger in mode 'seen' of this database. */
typedef struct SeenFence
{
	Oid			relid;			/* its table */
	Oid			owner;			/* the table's owner */
	DlockTemplatePart *parts;	/* its template, split */
	int			nparts;
} SeenFence;

/*
 * The 'seen' fences of the database, read from pg_trigger by seen_fences,
 * for the dlock_fence function seen_fence_fn; in seen_cxt, a child of
 * TopMemoryContext.  The list is current while seen_built is set and no
 * relcache invalidation came since seen_invals (DlockStoreRelcacheInvals:
 * a trigger created, dropped, enabled or disabled, a table whose owner
 * changed, a table dropped all invalidate the table's entry).  A scan that
 * an error interrupts leaves seen_built unset, so the next call reads
 * pg_trigger again.
 */
static MemoryContext seen_cxt = NULL;
static SeenFence *seen_list = NULL;
static int	seen_count = 0;
static bool seen_built = false;
static uint64 seen_invals = 0;
static Oid	seen_fence_fn = InvalidOid;

/*
 * seen_trigger_args splits the bytea tgargs of a pg_trigger row into its
 * nargs strings (NUL-terminated one after the other), palloc'd.
 */
static char **
seen_trigger_args(Datum tgargs, int nargs)
{
	bytea	   *val = DatumGetByteaPP(tgargs);
	const char *p = VARDATA_ANY(val);
	const char *end = p + VARSIZE_ANY_EXHDR(val);
	char	  **args = palloc0(sizeof(char *) * nargs);
	int			i;

	for (i = 0; i < nargs && p < end; i++)
	{
		args[i] = pnstrdup(p, strnlen(p, end - p));
		p += strlen(args[i]) + 1;
	}
	return args;
}

/*
 * seen_fences makes the list of the database's enabled dlock_fence
 * triggers in mode 'seen' current for fence_fn, the dlock_fence function
 * of the extension's schema: one heap scan of pg_trigger (it has no index
 * on the function), keeping each trigger's table, the table's owner and
 * the split template.  Templates that do not split are left out: their
 * triggers fail on every row.
 */
static void
seen_fences(Oid fence_fn)
{
	Relation	trigrel;
	SysScanDesc scan;
	HeapTuple	tup;
	MemoryContext oldcxt;
	int			cap = 8;

	uint64		invals = DlockStoreRelcacheInvals();

	if (seen_built && seen_invals == invals && seen_fence_fn == fence_fn)
		return;
	if (seen_cxt == NULL)
		seen_cxt = AllocSetContextCreate(TopMemoryContext, "dlock seen fences",
										 ALLOCSET_SMALL_SIZES);
	MemoryContextReset(seen_cxt);
	seen_list = NULL;
	seen_count = 0;
	seen_built = false;
	seen_fence_fn = fence_fn;

	oldcxt = MemoryContextSwitchTo(seen_cxt);
	seen_list = palloc(sizeof(SeenFence) * cap);
	trigrel = table_open(TriggerRelationId, AccessShareLock);
	scan = systable_beginscan(trigrel, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_trigger trig = (Form_pg_trigger) GETSTRUCT(tup);
		bool		isnull;
		Datum		tgargs;
		char	  **args;
		HeapTuple	reltup;
		DlockTemplatePart *parts;
		int			nparts;
		int			errpos;

		if (trig->tgfoid != fence_fn || trig->tgnargs != 3 ||
			trig->tgenabled == TRIGGER_DISABLED)
			continue;
		tgargs = heap_getattr(tup, Anum_pg_trigger_tgargs,
							  RelationGetDescr(trigrel), &isnull);
		if (isnull)
			continue;
		args = seen_trigger_args(tgargs, trig->tgnargs);
		if (args[0] == NULL || args[2] == NULL || strcmp(args[2], "seen") != 0 ||
			DlockTemplateSplit(args[0], &parts, &nparts, &errpos) != DLOCK_TEMPLATE_OK)
			continue;
		reltup = SearchSysCache1(RELOID, ObjectIdGetDatum(trig->tgrelid));
		if (!HeapTupleIsValid(reltup))
			continue;
		if (seen_count == cap)
		{
			cap *= 2;
			seen_list = repalloc(seen_list, sizeof(SeenFence) * cap);
		}
		seen_list[seen_count].relid = trig->tgrelid;
		seen_list[seen_count].owner = ((Form_pg_class) GETSTRUCT(reltup))->relowner;
		seen_list[seen_count].parts = parts;
		seen_list[seen_count].nparts = nparts;
		seen_count++;
		ReleaseSysCache(reltup);
	}
	systable_endscan(scan);
	table_close(trigrel, AccessShareLock);
	MemoryContextSwitchTo(oldcxt);
	/* invalidations that came during the scan leave it stale for next time */
	seen_invals = invals;
	seen_built = true;
}

/*
 * seen_may_write reports whether roleid may write relation relid: INSERT,
 * UPDATE, DELETE or TRUNCATE on the table, or INSERT or UPDATE on one of
 * its columns (false for a relation dropped meanwhile).
 */
static bool
seen_may_write(Oid relid, Oid roleid)
{
	bool		is_missing = false;

	if (pg_class_aclcheck_ext(relid, roleid,
							  ACL_INSERT | ACL_UPDATE | ACL_DELETE | ACL_TRUNCATE,
							  &is_missing) == ACLCHECK_OK)
		return true;
	if (is_missing || !SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		return false;
	return pg_attribute_aclcheck_all(relid, roleid, ACL_INSERT | ACL_UPDATE,
									 ACLMASK_ANY) == ACLCHECK_OK;
}

/*
 * DlockMarkOwners returns how many owners of fenced tables roleid may
 * raise and hold the mark of lock_name for (see the file header), and
 * sets *owners to them (palloc'd, each once): the owners of the tables
 * with an enabled dlock_fence trigger in mode 'seen' whose template can
 * make lock_name and that roleid may write.  fn_oid is the calling SQL
 * function, in the extension's schema, where dlock_fence is too.  Reads
 * pg_trigger when its list is stale; takes no lock beyond the catalog's.
 */
int
DlockMarkOwners(Oid fn_oid, text *lock_name, Oid roleid, Oid **owners)
{
	Oid			nsp = get_func_namespace(fn_oid);
	Oid			fence_fn;
	Oid		   *out;
	int			n = 0;
	int			i;

	fence_fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
							   CStringGetDatum("dlock_fence"),
							   PointerGetDatum(buildoidvector(NULL, 0)),
							   ObjectIdGetDatum(nsp));
	*owners = NULL;
	if (!OidIsValid(fence_fn))
		return 0;
	seen_fences(fence_fn);
	out = palloc(sizeof(Oid) * Max(seen_count, 1));
	for (i = 0; i < seen_count; i++)
	{
		SeenFence  *f = &seen_list[i];
		int			j;

		for (j = 0; j < n; j++)
			if (out[j] == f->owner)
				break;
		if (j < n)
			continue;			/* that owner is in already */
		if (!DlockTemplateMatches(f->parts, f->nparts,
								  VARDATA_ANY(lock_name),
								  VARSIZE_ANY_EXHDR(lock_name)))
			continue;
		if (!seen_may_write(f->relid, roleid))
			continue;
		out[n++] = f->owner;
	}
	*owners = out;
	return n;
}
