/*-------------------------------------------------------------------------
 *
 * src/mark_int.h
 *	  What mark_find.c shares with mark.c: the lock of a mark without SQL
 *	  and the hints of where marks are.  Private to the marks of mode
 *	  'seen'.
 *
 * Concurrency: mark.c's header gives the locking protocol.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_MARK_INT_H
#define DLOCK_MARK_INT_H

/* What DlockMarkLock did. */
typedef enum MarkLockResult
{
	MARK_LOCKED,				/* the mark is locked; its token read */
	MARK_ABSENT,				/* no mark is visible: insert one */
	MARK_UNSURE					/* nothing done: run the SQL statement */
} MarkLockResult;

extern MarkLockResult DlockMarkLock(Oid relid, AttrNumber att_owner,
									AttrNumber att_name, AttrNumber att_token,
									Oid owner, text *lock_name, int64 *token);
extern void DlockMarkHintReturned(Oid relid, Oid owner, text *lock_name);

#endif							/* DLOCK_MARK_INT_H */
