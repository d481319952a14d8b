/*-------------------------------------------------------------------------
 *
 * src/mark.c
 *	  The marks of fencing mode 'seen': for a database that is not the
 *	  lease store (another service's data, a shard, another cluster), the
 *	  highest token accepted so far for each lock name, kept in the
 *	  extension's table dlock_fence_mark (dumped with the database).  A
 *	  token lower than the mark is rejected; a higher one raises it.  This
 *	  file owns that rule (DlockMarkCheck) and the removal of old marks
 *	  (DlockMarkPurge); fence.c calls them for the trigger and dlock_check.
 *
 * Mode 'seen' needs no lease here: the token was issued by the lease store
 * elsewhere, and this database only knows the tokens it has been shown.  A
 * token of another lock, or one nobody issued, is accepted when it is not
 * lower than the mark; the writers of a fenced table are trusted to carry
 * the tokens their lease store gave them (docs/guarantees.md).
 *
 * Concurrency: why no write with a lower token commits after one with a
 * higher token.
 *
 * Every accepted check holds the lock name's mark row locked FOR NO KEY
 * UPDATE until its transaction ends: it locks the row (STMT_MARK_LOCK, a
 * SELECT ... FOR NO KEY UPDATE with READ COMMITTED rules: it waits for a
 * transaction that holds the row locked or changed it, then reads the
 * newest version), compares, and when its token is higher updates the row
 * it holds (STMT_MARK_RAISE).  A name with no mark yet gets one by INSERT
 * ... ON CONFLICT DO NOTHING, which makes a concurrent inserter of the
 * same name wait for the first one's transaction and then find its row;
 * the loser starts over and locks that row.  An inserted row is the
 * inserter's until it commits, like a locked one.
 *
 * So the accepted writes under one lock name are serialized by the mark's
 * row lock: say W1 with token t1 committed, and W2 with t2 checks.  Either
 * W2 locked the mark after W1's transaction ended, and read a mark >= t1
 * (W1 left it at max(mark, t1)), so W2 passes only if t2 >= t1; or W2
 * locked it first and W1 waited for W2 to end, which contradicts W1
 * committing first unless W2 rolled back.  A writer rejected for a lower
 * token raises an error, which ends the (sub)transaction and its lock.
 * Hence the tokens of the accepted writes, in commit order, never go
 * down; and a stale holder's write after a newer holder's commit is
 * rejected, which is the seed's rule: the resource rejects a token lower
 * than the highest it has seen.
 *
 * The cost is that writers of one lock name wait for each other's
 * transactions.  Writers of one lock are meant to be one holder, and a
 * transaction that has locked the mark re-checks it for free (checked.c
 * records that the mark is locked, fence.c skips the statement).
 *
 * Everything here runs as one store session (store.c: as the extension's
 * owner, statements with a fresh snapshot under READ COMMITTED rules;
 * in a SERIALIZABLE transaction a mark changed concurrently raises 40001).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "dlock.h"
#include "lease_table.h"
#include "store_int.h"

/* Arguments and results of one 'seen' check. */
typedef struct MarkCheckOp
{
	text	   *lock_name;
	int64		token;
	TimestampTz now;
	bool		accepted;		/* out */
	int64		mark;			/* out: the mark when rejected */
} MarkCheckOp;

/*
 * mark_check_op is the body of DlockMarkCheck; a StoreOp.  Its result
 * (whether to keep a subtransaction) is unused: it runs in none.
 */
static bool
mark_check_op(void *arg)
{
	MarkCheckOp *m = (MarkCheckOp *) arg;
	Datum		values[3];
	int			round;

	DlockStoreRequireMarks();
	values[0] = PointerGetDatum(m->lock_name);
	values[1] = Int64GetDatum(m->token);
	values[2] = TimestampTzGetDatum(m->now);

	/*
	 * Lock the mark, or create it.  An insert that meets a concurrent one
	 * of the same name finds its row on the next round; the rounds are
	 * bounded because a mark, once committed, is only deleted by purge.
	 */
	for (round = 0;; round++)
	{
		bool		isnull;
		int64		mark = 0;
		bool		locked;
		AttrNumber	att_name;
		AttrNumber	att_token;
		Oid			markrelid = DlockStoreMarkTable(&att_name, &att_token);

		/* the common case directly, the rest by the statement */
		locked = (round == 0 &&
				  DlockMarkLock(markrelid, att_name, att_token,
								m->lock_name, &mark) == DLOCK_MARK_LOCKED);
		if (!locked &&
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
			if (m->token > mark &&
				DlockStoreExec(STMT_MARK_RAISE, values, SPI_OK_UPDATE) != 1)
				elog(ERROR, "dlock: the locked mark of \"%s\" was not raised",
					 text_to_cstring(m->lock_name));
			m->accepted = true;
			return true;
		}
		if (DlockStoreExec(STMT_MARK_INSERT, values, SPI_OK_INSERT_RETURNING) == 1)
		{
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
 * DlockMarkCheck applies mode 'seen' to token under lock_name, in the
 * database of the SQL function fn_oid: returns true, with the mark locked
 * by the transaction and at least token, when token is not lower than the
 * mark (or there was none); otherwise sets *mark and returns false.
 * Raises 0A000 when the extension's SQL has no marks (before 1.2).
 */
bool
DlockMarkCheck(Oid fn_oid, text *lock_name, int64 token, int64 *mark)
{
	MarkCheckOp m;

	m.lock_name = lock_name;
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

	p.cutoff = cutoff;
	p.deleted = 0;
	DlockStoreRun(fn_oid, mark_purge_op, &p, true);
	return p.deleted;
}
