/*-------------------------------------------------------------------------
 *
 * src/store_ops.c
 *	  The lease store's operations: acquire, renew, release, break, purge
 *	  and the token state's initialization, each run as one store session
 *	  (store.c: the cache made current, the switch to the lease table's
 *	  owner) on the direct access of lease_table.c and the SQL statements
 *	  of store.c.
 *
 * Concurrency: the locking protocol is in store.c's header (the name lock
 * that every grant takes and a 'live' fence holds, tokens) and
 * lease_table.c's (the row locks of the direct operations).  This file
 * takes dlock's name lock (name_lock.c, ExclusiveLock without waiting)
 * before it inserts a name's first row, and nothing else of its own.  Before inserting a name's first
 * row, and before a purge deletes rows, it opens the fence cache
 * (fence_cache.c: DlockFenceCacheOpen, DlockFenceCacheOpenAll), which
 * stays open until the transaction ends; every update of a row opens it
 * in lease_table.c.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"
#include "lease_table.h"
#include "store_int.h"

/* Arguments and results of one acquire attempt. */
typedef struct AcquireOp
{
	text	   *lock_name;
	text	   *owner;
	Oid			holder;
	TimestampTz now;
	TimestampTz expires;
	int64		token;			/* out: the new token */
	TimestampTz held_until;		/* out: see DlockStoreTryAcquire */
	DlockPrevLease prev;		/* out: the lease the grant replaced */
} AcquireOp;

/*
 * acquire_op is the body of DlockStoreTryAcquire; a StoreOp.
 */
static bool
acquire_op(void *arg)
{
	AcquireOp  *a = (AcquireOp *) arg;
	Datum		values[5];		/* STMT_INSERT's parameters */
	int			round;

	values[0] = PointerGetDatum(a->lock_name);
	values[1] = TimestampTzGetDatum(a->now);
	values[2] = TimestampTzGetDatum(a->expires);
	values[3] = PointerGetDatum(a->owner);
	values[4] = ObjectIdGetDatum(a->holder);

	DlockTokenPrepare(DlockStoreTokenSeq(), DlockStoreTokenOrigin());

	/*
	 * A row can appear between the probe and the insert (another session
	 * created and committed it); the second round then decides on the row.
	 */
	for (round = 0; round < 2; round++)
	{
		bool		isnull;
		DlockLeaseFields f;
		LOCKTAG		tag;

		switch (DlockLeaseTake(DlockStoreTable(), DlockStoreTokenSeq(),
							   a->lock_name, a->owner, a->holder, a->now,
							   a->expires, &a->token, &a->held_until,
							   &a->prev))
		{
			case DLOCK_TAKE_GRANTED:
				DlockTokenMakeDurable(DlockStoreTokenSeq());
				return true;
			case DLOCK_TAKE_HELD:
				return false;
			case DLOCK_TAKE_NO_ROW:
				break;
		}

		if (!DlockNameLockTryGrant(&tag, a->lock_name))
			return false;		/* being created, or purged under a 'live'
								 * write */

		/* the name's first row appears: the fence cache must not answer */
		DlockFenceCacheOpen(a->lock_name);
		if (DlockStoreExec(STMT_INSERT, values, SPI_OK_INSERT_RETURNING) == 1)
		{
			a->token = DatumGetInt64(DlockStoreResultDatum(1, &isnull));
			Assert(!isnull && a->token > 0);
			memset(&f, 0, sizeof(f));
			f.token = a->token;
			f.owner = a->owner;
			f.holder_role = a->holder;
			f.acquired_at = f.renewed_at = a->now;
			f.expires_at = a->expires;
			f.released = false;
			DlockLeaseInserted(DlockStoreTable(), a->lock_name, &f);
			a->prev.kind = DLOCK_GRANT_NEW;
			a->prev.token = 0;
			a->prev.owner = NULL;
			a->prev.ended_at = 0;
			DlockTokenMakeDurable(DlockStoreTokenSeq());
			return true;
		}
		DlockNameLockUndoGrant(&tag);
	}
	return false;
}

/*
 * DlockStoreTryAcquire makes one attempt to grant the lease on lock_name to
 * holder, from now until expires.  On success it stores the new token in
 * *token and the lease it replaced in *prev, and returns true.  Otherwise it returns false, keeping no lock,
 * and sets *held_until to the expiry of the live lease that holds the
 * name, or to 0 when an open transaction is changing the name's lease (its
 * row is locked, or its first row is being inserted).  Never waits for
 * another transaction (see the protocol above); a grant keeps dlock's name
 * lock when it inserted the name's first row.  A granted token is safe to
 * hand out when this returns (token.c: a boot jump, or a WAL flush).
 */
bool
DlockStoreTryAcquire(Oid fn_oid, text *lock_name, text *owner, Oid holder,
					 TimestampTz now, TimestampTz expires,
					 int64 *token, TimestampTz *held_until,
					 DlockPrevLease *prev)
{
	AcquireOp	a;
	bool		granted;

	a.lock_name = lock_name;
	a.owner = owner;
	a.holder = holder;
	a.now = now;
	a.expires = expires;
	a.token = 0;
	a.held_until = 0;

	granted = DlockStoreRun(fn_oid, acquire_op, &a, false);
	*token = a.token;
	*held_until = a.held_until;
	if (granted)
		*prev = a.prev;
	return granted;
}


/* What an all-or-nothing acquire of a sorted set needs. */
typedef struct AcquireAllOp
{
	AcquireOp	one;			/* the name being taken, and the shared fields */
	text	  **names;			/* in canonical order */
	int			nnames;
	int64	   *tokens;			/* out, in the order of names */
	DlockPrevLease *prevs;		/* out, in the order of names */
	int			refused;		/* out: index of the name that refused */
} AcquireAllOp;

/*
 * acquire_all_op takes the names of an AcquireAllOp one by one, in their
 * (canonical) order, and stops at the first that refuses; a StoreOp run in
 * a subtransaction of its own, which is rolled back then (DlockStoreRun),
 * so that a refused set keeps no lease, row lock or name lock.
 */
static bool
acquire_all_op(void *arg)
{
	AcquireAllOp *a = (AcquireAllOp *) arg;
	int			i;

	for (i = 0; i < a->nnames; i++)
	{
		CHECK_FOR_INTERRUPTS();
		a->one.lock_name = a->names[i];
		a->one.token = 0;
		a->one.held_until = 0;
		if (!acquire_op(&a->one))
		{
			a->refused = i;
			return false;
		}
		a->tokens[i] = a->one.token;
		a->prevs[i] = a->one.prev;
	}
	return true;
}

/*
 * find_held_op finds the first name of an AcquireAllOp whose lease is
 * plainly held (DlockLeaseFindHeld), setting refused and one.held_until; a
 * StoreOp that returns whether there is one.  It writes nothing.
 */
static bool
find_held_op(void *arg)
{
	AcquireAllOp *a = (AcquireAllOp *) arg;

	a->refused = DlockLeaseFindHeld(DlockStoreTable(), a->names, a->nnames,
									a->one.now, &a->one.held_until);
	return a->refused >= 0;
}

/*
 * DlockStoreTryAcquireAll makes one attempt to grant the leases on all n
 * names (distinct, in canonical order: the byte order of the lease table's
 * "C" key) to holder, from now until expires.  On success it stores the
 * new tokens in tokens[] and the leases they replaced in prevs[] (in the
 * order of names) and returns true.
 * Otherwise it returns false having kept none of them, sets *refused to
 * the index of the first name that was held and *held_until as
 * DlockStoreTryAcquire does for it: a name whose lease is plainly held
 * (live, its row locked by another open transaction, or its name lock
 * held by one: an open 'live' write or grant) is found by a
 * read before anything is written, so that a set waiting for it does not
 * write at every retry; otherwise the attempt runs in a subtransaction,
 * rolled back at the first name that refuses.
 * Never waits for another transaction.  Taking the names in one order is
 * what keeps sets from blocking each other (src/lease_set.c's header).
 */
bool
DlockStoreTryAcquireAll(Oid fn_oid, text **names, int n, text *owner,
						Oid holder, TimestampTz now, TimestampTz expires,
						int64 *tokens, DlockPrevLease *prevs,
						TimestampTz *held_until, int *refused)
{
	AcquireAllOp a;
	bool		granted;

	Assert(n > 0);
	a.one.owner = owner;
	a.one.holder = holder;
	a.one.now = now;
	a.one.expires = expires;
	a.names = names;
	a.nnames = n;
	a.tokens = tokens;
	a.prevs = prevs;
	a.refused = -1;

	/* a lease that is plainly held refuses the set before anything is written */
	if (DlockStoreRun(fn_oid, find_held_op, &a, false))
	{
		Assert(a.refused >= 0 && a.refused < n);
		*held_until = a.one.held_until;
		*refused = a.refused;
		return false;
	}
	granted = DlockStoreRun(fn_oid, acquire_all_op, &a, true);
	Assert(granted == (a.refused < 0));
	*held_until = granted ? 0 : a.one.held_until;
	*refused = a.refused;
	return granted;
}

/*
 * change_op is DlockLeaseChange (lease_table.c) as a StoreOp.
 */
static bool
change_op(void *arg)
{
	return DlockLeaseChange(DlockStoreTable(), (DlockLeaseChangeOp *) arg);
}

/* What a change of many leases needs (renew or release, element by element). */
typedef struct ChangeEachOp
{
	DlockLeaseChangeKind kind;
	DlockStoreItem *items;
	int			nitems;
	TimestampTz now;
	TimestampTz expires;		/* renew only */
	Oid			caller;			/* the calling role (before the owner switch) */
} ChangeEachOp;

/*
 * change_each_op changes the leases of a ChangeEachOp in the order of its
 * items (lease_set.c passes them in byte order of the names), one
 * DlockLeaseChange each, setting each item's outcome and holder; a
 * StoreOp.  It stops at the first item the caller may not change
 * (DLOCK_STORE_DENIED, for which the caller raises 42501, undoing the
 * items changed before it); the items after it are left
 * DLOCK_STORE_NO_LEASE.
 */
static bool
change_each_op(void *arg)
{
	ChangeEachOp *e = (ChangeEachOp *) arg;
	bool		changed = false;
	int			i;

	for (i = 0; i < e->nitems; i++)
	{
		e->items[i].outcome = DLOCK_STORE_NO_LEASE;
		e->items[i].holder = InvalidOid;
	}
	for (i = 0; i < e->nitems; i++)
	{
		DlockLeaseChangeOp c;

		CHECK_FOR_INTERRUPTS();
		c.kind = e->kind;
		c.lock_name = e->items[i].lock_name;
		c.token = e->items[i].token;
		c.now = e->now;
		c.expires = e->expires;
		c.caller = e->caller;
		if (DlockLeaseChange(DlockStoreTable(), &c))
		{
			changed = true;
			if (e->kind == DLOCK_CHANGE_RELEASE)
				DlockEventRelease(c.lock_name, c.token);
		}
		e->items[i].outcome = c.outcome;
		e->items[i].holder = c.holder;
		if (c.outcome == DLOCK_STORE_DENIED)
			break;
	}
	return changed;
}

/*
 * DlockStoreRenewEach moves, for each of the n items, the expiry of the
 * live lease (lock_name, token) to expires and its renewed_at to now, in
 * one store session, and sets the item's outcome (DLOCK_STORE_DONE when it
 * did; otherwise DLOCK_STORE_NOT_HELD, DLOCK_STORE_NO_LEASE, or
 * DLOCK_STORE_DENIED when the token is current but the calling role may
 * not act for the lease's holder role, after which it stops) and holder
 * (the row's holder role).  The caller raises 42501 for a denied item: the
 * error undoes the updates.  May wait for a concurrent change of one of
 * the rows.
 */
void
DlockStoreRenewEach(Oid fn_oid, DlockStoreItem *items, int n, TimestampTz now,
					TimestampTz expires)
{
	ChangeEachOp e;

	e.kind = DLOCK_CHANGE_RENEW;
	e.items = items;
	e.nitems = n;
	e.now = now;
	e.expires = expires;
	e.caller = GetUserId();
	(void) DlockStoreRun(fn_oid, change_each_op, &e, false);
}

/*
 * DlockStoreReleaseEach ends, for each of the n items, the live lease
 * (lock_name, token) at now; the rows keep their tokens.  Results as for
 * DlockStoreRenewEach.
 */
void
DlockStoreReleaseEach(Oid fn_oid, DlockStoreItem *items, int n, TimestampTz now)
{
	ChangeEachOp e;

	e.kind = DLOCK_CHANGE_RELEASE;
	e.items = items;
	e.nitems = n;
	e.now = now;
	e.expires = 0;
	e.caller = GetUserId();
	(void) DlockStoreRun(fn_oid, change_each_op, &e, false);
}

/*
 * DlockStoreRenew and DlockStoreRelease are DlockStoreRenewEach and
 * DlockStoreReleaseEach for one lease: they return its outcome and set
 * *holder.
 */
DlockStoreOutcome
DlockStoreRenew(Oid fn_oid, text *lock_name, int64 token, TimestampTz now,
				TimestampTz expires, Oid *holder)
{
	DlockStoreItem item;

	item.lock_name = lock_name;
	item.token = token;
	DlockStoreRenewEach(fn_oid, &item, 1, now, expires);
	*holder = item.holder;
	return item.outcome;
}

DlockStoreOutcome
DlockStoreRelease(Oid fn_oid, text *lock_name, int64 token, TimestampTz now,
				  Oid *holder)
{
	DlockStoreItem item;

	item.lock_name = lock_name;
	item.token = token;
	DlockStoreReleaseEach(fn_oid, &item, 1, now);
	*holder = item.holder;
	return item.outcome;
}

/*
 * DlockStoreBreak ends whatever live lease holds lock_name, at now.
 * Returns true when there was one, and then sets *token, *expires and
 * *owner to what the lease was (*owner only when a lease event wants it,
 * otherwise NULL).  May wait for a concurrent transaction that is
 * changing the row.
 */
bool
DlockStoreBreak(Oid fn_oid, text *lock_name, TimestampTz now, int64 *token,
				TimestampTz *expires, text **owner)
{
	DlockLeaseChangeOp c;

	c.kind = DLOCK_CHANGE_BREAK;
	c.lock_name = lock_name;
	c.token = 0;
	c.now = now;
	c.expires = 0;
	c.caller = InvalidOid;		/* EXECUTE on dlock_break is the permission */
	if (!DlockStoreRun(fn_oid, change_op, &c, false))
		return false;
	*token = c.found_token;
	*expires = c.found_expires;
	*owner = c.found_owner;
	return true;
}

/* Arguments and result of a purge. */
typedef struct PurgeOp
{
	TimestampTz cutoff;
	int64		deleted;		/* out */
} PurgeOp;

/*
 * purge_events records a lease event for each row the last STMT_PURGE
 * deleted (its third and fourth columns: their names and tokens).
 */
static void
purge_events(void)
{
	bool		isnull;
	Datum		names;
	Datum		tokens;
	Datum	   *name_elems;
	Datum	   *token_elems;
	int			nnames;
	int			ntokens;
	int			i;

	names = DlockStoreResultDatum(3, &isnull);
	if (isnull)
		return;					/* nothing deleted */
	tokens = DlockStoreResultDatum(4, &isnull);
	Assert(!isnull);
	deconstruct_array(DatumGetArrayTypeP(names), TEXTOID, -1, false,
					  TYPALIGN_INT, &name_elems, NULL, &nnames);
	deconstruct_array(DatumGetArrayTypeP(tokens), INT8OID, sizeof(int64),
					  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &token_elems, NULL,
					  &ntokens);
	Assert(nnames == ntokens);
	for (i = 0; i < nnames && i < ntokens; i++)
		DlockEventPurge(DatumGetTextPP(name_elems[i]),
						DatumGetInt64(token_elems[i]));
}

/*
 * purge_op deletes, batch by batch in name order, the rows whose lease
 * ended before the cutoff; a StoreOp.  Skips rows an open transaction has
 * locked (an acquire taking the name over, say), so it never waits.
 */
static bool
purge_op(void *arg)
{
	PurgeOp    *p = (PurgeOp *) arg;
	Datum		values[2];
	text	   *last = cstring_to_text("");

	p->deleted = 0;
	values[0] = TimestampTzGetDatum(p->cutoff);
	/* rows disappear, names unknown beforehand: every name is changing */
	DlockFenceCacheOpenAll();
	for (;;)
	{
		bool		isnull;
		Datum		d;

		CHECK_FOR_INTERRUPTS();
		values[1] = PointerGetDatum(last);
		DlockStoreExec(STMT_PURGE, values, SPI_OK_SELECT);
		p->deleted += DatumGetInt64(DlockStoreResultDatum(1, &isnull));
		if (DlockEventsWanted(false))
			purge_events();
		d = DlockStoreResultDatum(2, &isnull);
		if (isnull)
			break;
		/* copy out of SPI's result memory before the next statement */
		last = DatumGetTextPCopy(d);
	}
	return p->deleted > 0;
}

/*
 * DlockStorePurge deletes the rows whose lease ended (expired, released or
 * broken) before cutoff and returns how many.  Their names then count as
 * never acquired.  Deletes in batches of DLOCK_PURGE_BATCH rows, skipping
 * rows locked by an open transaction.  Runs in a subtransaction.
 */
int64
DlockStorePurge(Oid fn_oid, TimestampTz cutoff)
{
	PurgeOp		p;

	p.cutoff = cutoff;
	(void) DlockStoreRun(fn_oid, purge_op, &p, true);
	return p.deleted;
}

/* A StoreOp: DlockTokenSetOrigin on the cached sequences. */
static bool
token_init_op(void *arg)
{
	DlockTokenSetOrigin(DlockStoreTokenSeq(), DlockStoreTokenOrigin());
	return true;
}

/*
 * DlockStoreTokenInit records, as the extension's owner, that this server
 * issues the tokens of the extension whose SQL function fn_oid is (see
 * DlockTokenSetOrigin).
 */
void
DlockStoreTokenInit(Oid fn_oid)
{
	(void) DlockStoreRun(fn_oid, token_init_op, NULL, false);
}
