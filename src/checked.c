/*-------------------------------------------------------------------------
 *
 * src/checked.c
 *	  What the transaction has checked: the (lock name, token, mode) of
 *	  every dlock_check that passed in the current transaction, so that the
 *	  fence trigger can accept a DELETE, a TRUNCATE, or a write that carries
 *	  no token of its own under a lock the transaction checked (fence.c).
 *
 * The record is backend-local and lives for one transaction.  It is a log
 * of entries in the order they were recorded, with a hash table from the
 * lock name's hash to the newest entry of that hash; each entry points to
 * the entry it shadows (the previous one with the same hash), so a lookup
 * walks that chain comparing names and finds the newest check of a name.
 *
 * Subtransactions: every entry carries the subtransaction that recorded
 * it.  When a subtransaction commits, its entries pass to its parent; when
 * it aborts, they are forgotten.  The entries of a subtransaction S are
 * always the tail of the log: everything recorded after S began was
 * recorded by S or by one of its children, and a child's entries were
 * either passed to S (commit) or removed (abort) when the child ended.  So
 * both events only walk the tail, and an abort truncates the log,
 * restoring each removed entry's shadowed entry as the newest of its hash.
 * At the top-level transaction's end the record is dropped (its memory is
 * the transaction's).
 *
 * Concurrency: none; the record is private to the backend.  A 'seen'
 * check records whose marks (by owner of the fenced tables, mark.c) its
 * transaction holds locked at its token (mark_owners): row and name locks
 * taken by a subtransaction are released when it aborts, at the same moment as its
 * entries are forgotten, and otherwise held until the top-level
 * transaction ends.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "compat.h"
#include "dlock.h"

/* One recorded check. */
typedef struct CheckedEntry
{
	uint64		hash;			/* DlockNameHash of lock_name */
	text	   *lock_name;
	DlockChecked check;
	SubTransactionId subid;		/* the subtransaction that owns it */
	int			shadowed;		/* older entry of the same hash, or -1 */
} CheckedEntry;

/* The hash table's entries: the newest log entry of a name hash. */
typedef struct CheckedHead
{
	uint64		hash;			/* the key */
	int			newest;			/* index into the log */
} CheckedHead;

/* The record of the current transaction; log == NULL when empty. */
static CheckedEntry *checked_log = NULL;
static int	checked_len = 0;
static int	checked_cap = 0;
static HTAB *checked_heads = NULL;

/*
 * checked_forget drops the whole record (its memory goes with the
 * transaction's).
 */
static void
checked_forget(void)
{
	checked_log = NULL;
	checked_len = 0;
	checked_cap = 0;
	checked_heads = NULL;
}

/*
 * DlockCheckedXactEnd drops the record when the top-level transaction
 * ends, however it ends (xact.c calls it).
 */
void
DlockCheckedXactEnd(XactEvent event)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			checked_forget();
			break;
		default:
			break;
	}
}

/*
 * checked_pop removes the newest entry of the log, making the entry it
 * shadowed the newest of its hash again.
 */
static void
checked_pop(void)
{
	CheckedEntry *e;
	CheckedHead *head;
	bool		found;

	Assert(checked_len > 0);
	e = &checked_log[checked_len - 1];
	head = hash_search(checked_heads, &e->hash, HASH_FIND, &found);
	Assert(found && head->newest == checked_len - 1);
	if (e->shadowed >= 0)
		head->newest = e->shadowed;
	else
		hash_search(checked_heads, &e->hash, HASH_REMOVE, &found);
	checked_len--;
}

/*
 * DlockCheckedSubXactEnd passes a committed subtransaction's entries to
 * its parent and forgets an aborted one's (see the file header: they are
 * the tail of the log); xact.c calls it.
 */
void
DlockCheckedSubXactEnd(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid)
{
	int			i;

	if (checked_log == NULL)
		return;
	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			for (i = checked_len - 1; i >= 0 && checked_log[i].subid == mySubid; i--)
				checked_log[i].subid = parentSubid;
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			while (checked_len > 0 && checked_log[checked_len - 1].subid == mySubid)
				checked_pop();
			break;
		default:
			/* the subtransaction has not ended yet (start, pre-commit) */
			return;
	}
	/* no entry belongs to a subtransaction that has ended */
	Assert(checked_len == 0 || checked_log[checked_len - 1].subid != mySubid);
}

/*
 * checked_same_name reports whether entry e is of lock_name.
 */
static bool
checked_same_name(const CheckedEntry *e, text *lock_name)
{
	int			len = VARSIZE_ANY_EXHDR(lock_name);

	return (int) VARSIZE_ANY_EXHDR(e->lock_name) == len &&
		memcmp(VARDATA_ANY(e->lock_name), VARDATA_ANY(lock_name), len) == 0;
}

/*
 * checked_find returns the index of the newest entry for lock_name, or -1.
 */
static int
checked_find(text *lock_name, uint64 hash)
{
	CheckedHead *head;
	int			i;

	if (checked_heads == NULL)
		return -1;
	head = hash_search(checked_heads, &hash, HASH_FIND, NULL);
	for (i = head ? head->newest : -1; i >= 0; i = checked_log[i].shadowed)
	{
		Assert(checked_log[i].hash == hash);
		if (checked_same_name(&checked_log[i], lock_name))
			return i;
	}
	return -1;
}

/*
 * DlockCheckedRecord records that the current (sub)transaction checked
 * lock_name: *check.  A newer record of a name shadows the older ones.
 */
void
DlockCheckedRecord(text *lock_name, const DlockChecked *check)
{
	uint64		hash = DlockNameHash(lock_name);
	MemoryContext oldcxt;
	CheckedEntry *e;
	CheckedHead *head;
	bool		found;

	Assert(IsTransactionState());
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	if (checked_log == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(uint64);
		ctl.entrysize = sizeof(CheckedHead);
		ctl.hcxt = TopTransactionContext;
		checked_heads = hash_create("dlock checked locks", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		checked_cap = 16;
		checked_log = palloc(sizeof(CheckedEntry) * checked_cap);
		checked_len = 0;
	}
	else if (checked_len == checked_cap)
	{
		int			newcap = checked_cap * 2;

		/* grown only once the memory is there (repalloc may raise) */
		checked_log = repalloc(checked_log, sizeof(CheckedEntry) * newcap);
		checked_cap = newcap;
	}

	e = &checked_log[checked_len];
	e->hash = hash;
	e->lock_name = (text *) pg_detoast_datum_copy((struct varlena *) lock_name);
	e->check = *check;
	e->check.mark_owners = NULL;
	if (check->nmark_owners > 0)
	{
		e->check.mark_owners = palloc(sizeof(Oid) * check->nmark_owners);
		memcpy(e->check.mark_owners, check->mark_owners,
			   sizeof(Oid) * check->nmark_owners);
	}
	e->subid = GetCurrentSubTransactionId();
	head = hash_search(checked_heads, &hash, HASH_ENTER, &found);
	e->shadowed = found ? head->newest : -1;
	head->newest = checked_len;
	checked_len++;
	MemoryContextSwitchTo(oldcxt);

	/* subtransactions only grow along the log (see the file header) */
	Assert(checked_len < 2 || checked_log[checked_len - 2].subid <= e->subid);
}

/*
 * DlockCheckedMarkMoved notes that the transaction accepted token under
 * lock_name in mode 'seen' with the mark of table_owner's tables, so that
 * mark may have been raised to it: the checks of that name at a lower
 * token no longer find that mark at their token, and drop table_owner from
 * their mark_owners (which only turns fence.c's shortcut off, so it is
 * right also if the subtransaction that raised the mark aborts).
 */
void
DlockCheckedMarkMoved(text *lock_name, Oid table_owner, int64 token)
{
	int			i;

	if (checked_log == NULL)
		return;
	/* every entry of the name: the chain holds the entries of its hash */
	for (i = checked_find(lock_name, DlockNameHash(lock_name)); i >= 0;
		 i = checked_log[i].shadowed)
	{
		DlockChecked *c = &checked_log[i].check;
		int			j;

		if (!checked_same_name(&checked_log[i], lock_name) || c->token >= token)
			continue;
		for (j = 0; j < c->nmark_owners; j++)
			if (c->mark_owners[j] == table_owner)
			{
				c->mark_owners[j] = c->mark_owners[--c->nmark_owners];
				break;
			}
	}
}

/*
 * DlockCheckedHoldsMark reports whether check (from DlockCheckedLookup)
 * holds the mark of table_owner's tables locked at its token.
 */
bool
DlockCheckedHoldsMark(const DlockChecked *check, Oid table_owner)
{
	int			i;

	for (i = 0; i < check->nmark_owners; i++)
		if (check->mark_owners[i] == table_owner)
			return true;
	return false;
}

/*
 * DlockCheckedLookup sets *check to the newest check of lock_name in the
 * current transaction and returns true, or returns false when there is
 * none.
 */
bool
DlockCheckedLookup(text *lock_name, DlockChecked *check)
{
	int			i;

	if (checked_log == NULL)
		return false;
	i = checked_find(lock_name, DlockNameHash(lock_name));
	if (i < 0)
		return false;
	*check = checked_log[i].check;
	return true;
}
