/*-------------------------------------------------------------------------
 *
 * src/wait_wake.c
 *	  The wake-ups at a transaction's end: the names a transaction changed
 *	  (DlockWakeAtXactEnd), the any-slots its pre-commit pass matched, and
 *	  at its end (DlockWaitXactEnd, called by xact.c) the heads of its
 *	  names' queues, the matched any-slots' bits and the late any-slots'
 *	  rings (design.md §15).
 *
 * Concurrency: the pre-commit pass and the wake-up scan the slots under
 * the dlock LWLock held shared (after the commit is visible, and after a
 * memory barrier, it reads bucket_waiters and db_waiters); rings are
 * written under their slot's spinlock; latches are set after the LWLock
 * is released.  Nothing after the commit can fail.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "compat.h"
#include "dlock.h"
#include "wait_int.h"

static PendingWake *pending = NULL;
static int	npending = 0;
static int	pending_cap = 0;
static bool pending_sorted = true;
static AnyMatch *matches = NULL;
static int	nmatches = 0;
static int	matches_cap = 0;
static int *match_pos = NULL;
static int	nmatch_pos = 0;
static int	match_pos_cap = 0;
static uint64 matched_below = 0;	/* slots the pass saw had lower tickets */
static bool wake_active = false;	/* DlockWaitXactEnd has work: set at first
									 * use */
static int *wake_list = NULL;

/*
 * cmp_pending orders PendingWake by hash, then name (length, then bytes);
 * a qsort comparator.
 */
static int
cmp_pending(const void *a, const void *b)
{
	const PendingWake *x = (const PendingWake *) a;
	const PendingWake *y = (const PendingWake *) b;
	int			lx;
	int			ly;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	lx = VARSIZE_ANY_EXHDR(x->name);
	ly = VARSIZE_ANY_EXHDR(y->name);
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return memcmp(VARDATA_ANY(x->name), VARDATA_ANY(y->name), lx);
}

/*
 * pending_sort sorts the pending names and drops duplicates.  Allocates
 * nothing and cannot raise (the end-of-transaction callback calls it).
 */
static void
pending_sort(void)
{
	int			i;
	int			k = 0;

	if (pending_sorted)
		return;
	qsort(pending, npending, sizeof(PendingWake), cmp_pending);
	for (i = 0; i < npending; i++)
		if (k == 0 || cmp_pending(&pending[k - 1], &pending[i]) != 0)
			pending[k++] = pending[i];
	npending = k;
	pending_sorted = true;
}

/*
 * pending_first returns the index of the first pending name whose hash is
 * not below hash (npending when there is none).  The pending names are
 * sorted.
 */
static int
pending_first(uint64 hash)
{
	int			lo = 0;
	int			hi = npending;

	Assert(pending_sorted);
	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (pending[mid].hash < hash)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * pending_find returns the index of the pending name (hash, its namelen
 * bytes at name), or -1.  The pending names are sorted.
 */
static int
pending_find(uint64 hash, const char *name, int namelen)
{
	int			lo;

	for (lo = pending_first(hash); lo < npending && pending[lo].hash == hash; lo++)
		if (DlockWaitSameBytes(VARDATA_ANY(pending[lo].name),
							   VARSIZE_ANY_EXHDR(pending[lo].name), name, namelen))
			return lo;
	return -1;
}

/*
 * pending_has_hash reports whether a pending name has the hash.  The
 * pending names are sorted.
 */
static bool
pending_has_hash(uint64 hash)
{
	int			lo = pending_first(hash);

	return lo < npending && pending[lo].hash == hash;
}

/*
 * pending_busy reports whether the current database (or another of its
 * class) and some bucket of the pending names count a waiter, after a
 * memory barrier (design.md §15).
 */
static bool
pending_busy(void)
{
	int			i;

	pg_memory_barrier();
	if (pg_atomic_read_u32(DB_WAITERS()) == 0)
		return false;
	for (i = 0; i < npending; i++)
		if (pg_atomic_read_u32(BUCKET_OF(pending[i].hash)) != 0)
			return true;
	return false;
}

/*
 * match_add_pos records position j of the any-slot being matched.
 */
static void
match_add_pos(int j)
{
	if (nmatch_pos == match_pos_cap)
	{
		match_pos_cap = Max(64, match_pos_cap * 2);
		match_pos = match_pos == NULL ?
			MemoryContextAlloc(TopTransactionContext, sizeof(int) * match_pos_cap) :
			repalloc(match_pos, sizeof(int) * match_pos_cap);
	}
	match_pos[nmatch_pos++] = j;
}

/*
 * wake_match_any is the pre-commit pass (design.md §15): records
 * the any-slots of this database waiting for some of the pending names,
 * and where their changed bits are.  May raise (it runs where an error
 * still aborts the transaction).
 */
static void
wake_match_any(void)
{
	dsa_area   *area;
	int			i;

	matched_below = 0;
	nmatches = 0;
	nmatch_pos = 0;
	if (npending == 0)
		return;
	pending_sort();
	if (!pending_busy())
		return;					/* slots that join now are late */
	area = DlockAnyArea();
	LWLockAcquire(DlockWaitShmem->lock, LW_SHARED);
	matched_below = DlockWaitShmem->next_ticket;
	for (i = 0; i < DlockWaitShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockWaitShmem->slots[i];
		uint64	   *hashes;
		int			first = nmatch_pos;
		int			j;

		if (!w->in_use || !w->any || w->dboid != MyDatabaseId)
			continue;
		Assert(DsaPointerIsValid(w->any_set) && w->any_nhashes > 0);
		hashes = (uint64 *) dsa_get_address(area, w->any_set);
		/* a binary search of each of the shorter list in the longer */
		if (npending <= w->any_nhashes)
		{
			for (j = 0; j < npending; j++)
			{
				int			pos = DlockWaitFindU64(hashes, w->any_nhashes,
												   pending[j].hash);

				if (pos >= 0 && (nmatch_pos == first ||
								 match_pos[nmatch_pos - 1] != pos))
					match_add_pos(pos);
			}
		}
		else
		{
			for (j = 0; j < w->any_nhashes; j++)
				if (pending_has_hash(hashes[j]))
					match_add_pos(j);
		}
		if (nmatch_pos == first)
			continue;
		if (nmatches == matches_cap)
		{
			matches_cap = Max(16, matches_cap * 2);
			matches = matches == NULL ?
				MemoryContextAlloc(TopTransactionContext,
								   sizeof(AnyMatch) * matches_cap) :
				repalloc(matches, sizeof(AnyMatch) * matches_cap);
		}
		matches[nmatches].procno = i;
		matches[nmatches].ticket = w->ticket;
		matches[nmatches].changed = (pg_atomic_uint32 *) (hashes + w->any_nhashes);
		matches[nmatches].first = first;
		matches[nmatches].count = nmatch_pos - first;
		nmatches++;
	}
	LWLockRelease(DlockWaitShmem->lock);
}

/*
 * hand_late hands the any-slot w (which joined after the pre-commit pass,
 * or any any-slot at an abort) the pending hashes of the buckets it marks,
 * in its ring; with rescan, a rescan when they do not fit, else what
 * fits.  Returns whether it handed anything (then wake it).  Caller holds
 * the dlock LWLock shared.  Cannot raise.
 */
static bool
hand_late(DlockWaiter *w, bool rescan)
{
	uint64		hand[DLOCK_ANY_RING];
	int			nhand = 0;
	bool		overflow = false;
	int			i;

	for (i = 0; i < npending; i++)
	{
		if (!ANY_MARKS(w, BUCKET_NO(pending[i].hash)))
			continue;
		if (nhand == DLOCK_ANY_RING)
		{
			overflow = true;
			break;
		}
		hand[nhand++] = pending[i].hash;
	}
	if (nhand == 0)
		return false;
	SpinLockAcquire(&w->any_mutex);
	if (rescan && (overflow || w->any_nring + nhand > DLOCK_ANY_RING))
		w->any_rescan = true;
	else
	{
		nhand = Min(nhand, DLOCK_ANY_RING - w->any_nring);
		memcpy(&w->any_ring[w->any_nring], hand, sizeof(uint64) * nhand);
		w->any_nring += nhand;
	}
	SpinLockRelease(&w->any_mutex);
	return nhand > 0;
}

/* How a transaction ended, for wake_pending. */
typedef enum WakeEnd
{
	WAKE_COMMIT,
	WAKE_ABORT,
	WAKE_PREPARE
} WakeEnd;

/*
 * wake_pending wakes, at the end of the transaction, the heads of the
 * pending names' queues and the any-slots waiting for them (see the file
 * header: at a commit, through the pre-commit pass's matches and the rings
 * of late slots; at an abort, through the rings only, without a rescan; at
 * PREPARE, none).  Allocates nothing and cannot raise.
 */
static void
wake_pending(WakeEnd end)
{
	int			nwake = 0;
	int			i;

	if (npending == 0)
		return;
	Assert(wake_list != NULL);
	pending_sort();
	if (!pending_busy())
		return;
	for (i = 0; i < npending; i++)
		pending[i].head = -1;

	LWLockAcquire(DlockWaitShmem->lock, LW_SHARED);
	for (i = 0; i < DlockWaitShmem->nslots; i++)
	{
		DlockWaiter *w = &DlockWaitShmem->slots[i];

		if (!w->in_use || w->dboid != MyDatabaseId)
			continue;
		if (!w->any)
		{
			int			p = pending_find(w->hash, w->name, w->namelen);

			if (p >= 0 && (pending[p].head < 0 ||
						   w->ticket < pending[p].head_ticket))
			{
				pending[p].head = i;
				pending[p].head_ticket = w->ticket;
			}
		}
		else if (end == WAKE_COMMIT && w->ticket >= matched_below)
		{
			if (hand_late(w, true))
				wake_list[nwake++] = i;
		}
		else if (end == WAKE_ABORT && hand_late(w, false))
			wake_list[nwake++] = i;
	}
	if (end == WAKE_COMMIT)
	{
		for (i = 0; i < nmatches; i++)
		{
			AnyMatch   *m = &matches[i];
			DlockWaiter *w = &DlockWaitShmem->slots[m->procno];
			int			k;

			/* the same wait as at pre-commit: its set is still allocated */
			if (!w->in_use || w->ticket != m->ticket)
				continue;
			for (k = m->first; k < m->first + m->count; k++)
				pg_atomic_fetch_or_u32(&m->changed[match_pos[k] / 32],
									   (uint32) 1 << (match_pos[k] % 32));
			wake_list[nwake++] = m->procno;
		}
	}
	LWLockRelease(DlockWaitShmem->lock);

	for (i = 0; i < npending; i++)
		if (pending[i].head >= 0)
			wake_list[nwake++] = pending[i].head;
	/* each slot is one queue's head, a matched or a late any-slot, or none */
	Assert(nwake <= DlockWaitShmem->nslots);
	for (i = 0; i < nwake; i++)
		SetLatch(DlockProcLatch(wake_list[i]));
}

/*
 * wake_forget forgets what the ended transaction was to wake (its memory
 * went with TopTransactionContext).
 */
static void
wake_forget(void)
{
	pending = NULL;
	npending = 0;
	pending_cap = 0;
	pending_sorted = true;
	matches = NULL;
	nmatches = 0;
	matches_cap = 0;
	match_pos = NULL;
	nmatch_pos = 0;
	match_pos_cap = 0;
	matched_below = 0;
}

/*
 * DlockWaitXactEnd runs the pre-commit pass, and wakes when the
 * transaction ends either way (design.md §15); xact.c calls it.
 * Does nothing until this backend first changed a lease with preload.
 */
void
DlockWaitXactEnd(XactEvent event)
{
	if (!wake_active)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			wake_match_any();
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			wake_pending(WAKE_COMMIT);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wake_pending(WAKE_ABORT);
			break;
		case XACT_EVENT_PREPARE:
			wake_pending(WAKE_PREPARE);
			break;
		default:
			return;
	}
	wake_forget();
}

/*
 * DlockWakeAtXactEnd arranges for the waiters of lock_name in the current
 * database to be woken when the current transaction ends (it changed the
 * name's lease).  Does nothing without preload.
 */
void
DlockWakeAtXactEnd(text *lock_name)
{
	uint64		hash;
	MemoryContext oldcontext;

	Assert(IsTransactionState());
	if (DlockWaitShmem == NULL)
		return;
	if (!wake_active)
	{
		wake_list = MemoryContextAlloc(TopMemoryContext,
									   sizeof(int) * DlockWaitShmem->nslots);
		wake_active = true;
	}
	hash = DlockNameHash(lock_name);
	if (npending > 0 && pending[npending - 1].hash == hash &&
		DlockWaitSameName(pending[npending - 1].name, lock_name))
		return;					/* the same name again */
	if (npending == pending_cap)
	{
		/* full: drop duplicates first, and grow only if that is not enough */
		if (pending != NULL)
			pending_sort();
		if (pending == NULL || npending * 2 > pending_cap)
		{
			pending_cap = Max(16, pending_cap * 2);
			pending = pending == NULL ?
				MemoryContextAlloc(TopTransactionContext,
								   sizeof(PendingWake) * pending_cap) :
				repalloc(pending, sizeof(PendingWake) * pending_cap);
		}
	}
	oldcontext = MemoryContextSwitchTo(TopTransactionContext);
	pending[npending].hash = hash;
	pending[npending].name = DatumGetTextPCopy(PointerGetDatum(lock_name));
	pending[npending].head = -1;
	pending[npending].head_ticket = 0;
	MemoryContextSwitchTo(oldcontext);
	npending++;
	pending_sorted = false;
}
