/*-------------------------------------------------------------------------
 *
 * src/lease_table.c
 *	  Direct access to the lease table (dlock_lease): its one description
 *	  (the columns, found by name), the lookup through its primary key, and
 *	  the hot paths that read and change a lease row without SQL: taking
 *	  over an ended lease, renew, release and break, a set acquire's read
 *	  of the held leases among its names, the 'latest' fence's read
 *	  (through the fence cache when it can) and the 'live' fence's lock.
 *	  store.c owns the rest (its cache, the owner switch, the SQL), token.c
 *	  the token a takeover draws, lease_room.c where new row versions go.
 *
 * The operations keep the SQL statements' semantics: a fresh snapshot for
 * every read, READ COMMITTED rules for a concurrently changed row, index
 * entries of an update that is not HOT through the executor's routine
 * (their functions run restricted: store_restricted.c).  What direct
 * access would bypass (triggers, CHECK constraints, forced row security)
 * makes them refuse.  Everything but the fence's read and lock runs as the
 * lease table's owner.  The full argument is design.md §14.
 *
 * Concurrency: every operation opens the table and its primary key with
 * RowExclusiveLock (the 'latest' fence's read: AccessShareLock; the 'live'
 * fence's lock: RowShareLock, index AccessShareLock) until the transaction
 * ends.  A takeover locks the version it checked FOR UPDATE without
 * waiting (a lock it cannot have means "held"); renew, release and break
 * update in place, may wait for a concurrent change of the row and decide
 * again on its newest version (FOR NO KEY UPDATE); the 'live' fence locks
 * FOR KEY SHARE, waiting (40001 under SERIALIZABLE).  A call that changes
 * nothing keeps no lock.  A takeover opens the name's fence cache bucket
 * before it writes (design.md §12).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/freespace.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "dlock.h"
#include "fence_cache.h"
#include "lease_room.h"
#include "lease_table.h"

/* Whether the current code runs as the lease table's owner (store_begin). */
#define LEASE_AS_OWNER(table) \
	(InLocalUserIdChange() && GetUserId() == (table)->owner)

/* An open lease table, its index and slots, for one direct operation. */
typedef struct LeaseAccess
{
	const DlockLeaseTable *table;
	Relation	rel;
	Relation	idx;
	TupleTableSlot *slot;		/* the row as read (and locked) */
	TupleTableSlot *newslot;	/* the new version */
	bool		want_xmax;		/* lease_row_from_slot reads the xmax
								 * (DlockLeaseFindHeld only) */
} LeaseAccess;

/* A row as read: its TID and its fields. */
typedef struct LeaseRow
{
	ItemPointerData tid;
	DlockLeaseFields f;
	Size		need;			/* space a new version takes on a page */
	bool		tight;			/* its page looked too full for it */
	uint16		infomask;		/* the version's t_infomask and raw xmax, */
	TransactionId xmax;			/* read under the buffer lock (0: unknown) */
} LeaseRow;

/*
 * lease_column returns the number of column attname of the lease table
 * described by desc, checking that it has type typid and is NOT NULL; 0
 * when it does not.
 */
static AttrNumber
lease_column(TupleDesc desc, const char *attname, Oid typid)
{
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || strcmp(NameStr(att->attname), attname) != 0)
			continue;
		if (att->atttypid != typid || !att->attnotnull)
			return 0;
		return att->attnum;
	}
	return 0;
}

/*
 * DlockLeaseTableDescribe fills in where the columns of the lease table
 * rel are (table->relid and table->owner are the caller's), looking each
 * up by name.  Raises unless every column dlock uses is there, with its
 * type and NOT NULL (a damaged or hand-altered install); other columns are
 * allowed.
 */
void
DlockLeaseTableDescribe(DlockLeaseTable *table, Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	table->att_lock_name = lease_column(desc, "lock_name", TEXTOID);
	table->att_token = lease_column(desc, "token", INT8OID);
	table->att_owner = lease_column(desc, "owner", TEXTOID);
	table->att_holder_role = lease_column(desc, "holder_role", REGROLEOID);
	table->att_acquired_at = lease_column(desc, "acquired_at", TIMESTAMPTZOID);
	table->att_renewed_at = lease_column(desc, "renewed_at", TIMESTAMPTZOID);
	table->att_expires_at = lease_column(desc, "expires_at", TIMESTAMPTZOID);
	table->att_released = lease_column(desc, "released", BOOLOID);

	if (table->att_lock_name == 0 || table->att_token == 0 ||
		table->att_owner == 0 || table->att_holder_role == 0 ||
		table->att_acquired_at == 0 || table->att_renewed_at == 0 ||
		table->att_expires_at == 0 || table->att_released == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table of extension \"dlock\" has unexpected columns"),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));
}

/*
 * lease_pkey_open opens the primary key of the lease table rel with
 * lockmode, as the relcache knows it now (REINDEX CONCURRENTLY replaces
 * it).  Raises if there is none, or if it is not on lock_name alone (a
 * damaged install).
 */
static Relation
lease_pkey_open(const DlockLeaseTable *table, Relation rel, LOCKMODE lockmode)
{
	Oid			pkey = DlockPrimaryKeyIndex(rel);
	Relation	idx;

	if (!OidIsValid(pkey))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table index of extension \"dlock\" is missing"),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));
	idx = index_open(pkey, lockmode);
	if (IndexRelationGetNumberOfKeyAttributes(idx) != 1 ||
		idx->rd_index->indkey.values[0] != table->att_lock_name)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table index of extension \"dlock\" is not on lock_name"),
				 errhint("Reinstall the extension with DROP EXTENSION dlock and CREATE EXTENSION dlock.")));
	return idx;
}

/*
 * lease_lookup looks lock_name up in the lease table rel through its
 * primary key idx with snapshot, stores the visible version (if any) in
 * slot and returns whether there was one.  With root, also sets *root to
 * the TID the index entry points at (the root of the version's HOT chain).
 */
static bool
lease_lookup(Relation rel, Relation idx, Snapshot snapshot, text *lock_name,
			 TupleTableSlot *slot, ItemPointer root)
{
	IndexScanDesc scan;
	ScanKeyData key;
	bool		found;

	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(lock_name));
	scan = DlockIndexBeginScan(rel, idx, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);

	/*
	 * As index_getnext_slot, keeping the TID the index entry points at: the
	 * root of the row's HOT chain (index_fetch_heap moves xs_heaptid to the
	 * version it found, which may be a heap-only tuple).
	 */
	Assert(IsMVCCSnapshot(snapshot));	/* one visible version per chain */
	found = false;
	for (;;)
	{
		ItemPointer tid = index_getnext_tid(scan, ForwardScanDirection);
		ItemPointerData entry;

		if (tid == NULL)
			break;
		entry = *tid;
		if (index_fetch_heap(scan, slot))
		{
			found = true;
			if (root != NULL)
				*root = entry;
			break;
		}
	}
	index_endscan(scan);
	return found;
}

/*
 * lease_open opens the lease table and its primary key (as the relcache
 * knows it now: REINDEX CONCURRENTLY replaces it) for a direct operation,
 * with RowExclusiveLock (kept until the transaction ends, as a statement's
 * would be).  Raises if the table has what direct access would bypass: a
 * trigger, a CHECK constraint or forced row security (none of dlock's own
 * making; only a superuser could add them).
 */
static void
lease_open(LeaseAccess *la, const DlockLeaseTable *table)
{
	TupleConstr *constr;

	/* direct access changes leases as the owner */
	Assert(LEASE_AS_OWNER(table));
	Assert(table->att_lock_name > 0 && table->att_released > 0);
	la->table = table;
	la->want_xmax = false;
	la->rel = table_open(table->relid, RowExclusiveLock);
	constr = la->rel->rd_att->constr;
	if (la->rel->trigdesc != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table of extension \"dlock\" has triggers"),
				 errdetail("The functions of extension dlock change the table directly, so its triggers would not fire."),
				 errhint("Drop the triggers that were added to table dlock_lease.")));
	if (constr != NULL && constr->num_check > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table of extension \"dlock\" has check constraints"),
				 errdetail("The functions of extension dlock change the table directly, so its check constraints would not be checked."),
				 errhint("Drop the check constraints that were added to table dlock_lease.")));
	if (la->rel->rd_rel->relforcerowsecurity)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease table of extension \"dlock\" has forced row-level security"),
				 errdetail("The functions of extension dlock change the table directly, so its row-level security policies would not apply."),
				 errhint("Use ALTER TABLE dlock_lease NO FORCE ROW LEVEL SECURITY.")));
	la->idx = lease_pkey_open(table, la->rel, RowExclusiveLock);
	la->slot = table_slot_create(la->rel, NULL);
	la->newslot = MakeSingleTupleTableSlot(RelationGetDescr(la->rel),
										   &TTSOpsVirtual);
}

/*
 * lease_close undoes lease_open (on an error, transaction or
 * subtransaction abort releases what lease_open took).
 */
static void
lease_close(LeaseAccess *la)
{
	ExecDropSingleTupleTableSlot(la->newslot);
	ExecDropSingleTupleTableSlot(la->slot);
	index_close(la->idx, NoLock);
	table_close(la->rel, NoLock);
}

/*
 * lease_field returns column attnum of the version in slot; every column
 * dlock uses is NOT NULL (DlockLeaseTableDescribe).
 */
static inline Datum
lease_field(TupleTableSlot *slot, AttrNumber attnum)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, attnum, &isnull);

	Assert(!isnull);
	return d;
}

/*
 * lease_is_heap reports whether the lease table rel is stored by the heap
 * table access method, whose pages lease_make_room and the prune before an
 * update know (a DBA could change it with ALTER TABLE ... SET ACCESS
 * METHOD; then PostgreSQL alone places row versions).
 */
static inline bool
lease_is_heap(Relation rel)
{
	return rel->rd_tableam == GetHeapamTableAmRoutine();
}

/*
 * lease_row_from_slot copies the TID and the fields of the version in
 * la->slot into *row, notes whether its page looked too full for a new
 * version of the row (read without the buffer lock, as heap_page_prune_opt
 * reads it: a hint), and then copies the version out of the buffer, so the
 * operation keeps no pin on the page (design.md §4: a pin keeps every
 * backend, this one included, from pruning it).  The owner label points
 * into the slot's copy.
 */
static void
lease_row_from_slot(LeaseAccess *la, LeaseRow *row)
{
	const DlockLeaseTable *t = la->table;
	TupleTableSlot *slot = la->slot;

	Assert(ItemPointerIsValid(&slot->tts_tid));
	row->tid = slot->tts_tid;
	row->tight = false;
	row->need = 0;
	row->infomask = 0;
	row->xmax = InvalidTransactionId;
	if (TTS_IS_BUFFERTUPLE(slot) && lease_is_heap(la->rel) &&
		BufferIsValid(((BufferHeapTupleTableSlot *) slot)->buffer))
	{
		BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;

		row->need = MAXALIGN(bslot->base.tuple->t_len) + sizeof(ItemIdData);
		row->tight = PageGetHeapFreeSpace(BufferGetPage(bslot->buffer)) <
			2 * row->need;
		/* who locks or changes the version, for lease_row_busy */
		if (la->want_xmax)
		{
			LockBuffer(bslot->buffer, BUFFER_LOCK_SHARE);
			row->infomask = bslot->base.tuple->t_data->t_infomask;
			row->xmax = HeapTupleHeaderGetRawXmax(bslot->base.tuple->t_data);
			LockBuffer(bslot->buffer, BUFFER_LOCK_UNLOCK);
		}
		ExecMaterializeSlot(slot);
		Assert(!BufferIsValid(bslot->buffer));
	}
	row->f.token = DatumGetInt64(lease_field(slot, t->att_token));
	row->f.owner = (text *) DatumGetPointer(lease_field(slot, t->att_owner));
	row->f.holder_role = DatumGetObjectId(lease_field(slot, t->att_holder_role));
	row->f.acquired_at = DatumGetTimestampTz(lease_field(slot, t->att_acquired_at));
	row->f.renewed_at = DatumGetTimestampTz(lease_field(slot, t->att_renewed_at));
	row->f.expires_at = DatumGetTimestampTz(lease_field(slot, t->att_expires_at));
	row->f.released = DatumGetBool(lease_field(slot, t->att_released));
}

/*
 * lease_read looks lock_name up with snapshot and, when a version is
 * visible, stores its TID and fields in *row (the slot keeps the version)
 * and returns true.
 */
static bool
lease_read(LeaseAccess *la, Snapshot snapshot, text *lock_name, LeaseRow *row)
{
	if (!lease_lookup(la->rel, la->idx, snapshot, lock_name, la->slot, NULL))
		return false;
	lease_row_from_slot(la, row);
	return true;
}

/*
 * lease_row_live reports whether the lease in row is live at now.
 */
static inline bool
lease_row_live(LeaseRow *row, TimestampTz now)
{
	return !row->f.released && row->f.expires_at > now;
}

/*
 * lease_insert_index_entries adds the entries of the new version in
 * la->newslot to every index of the lease table that takes inserts (an
 * update that was not HOT needs them): the primary key, and any index a
 * DBA added or REINDEX CONCURRENTLY is building.  Uses the executor's own
 * routine, with its unique checks, so expression and partial indexes are
 * handled as an UPDATE statement would; their functions run restricted
 * (DlockRestrictedBegin).  Rare: HOT updates need none.
 */
static void
lease_insert_index_entries(LeaseAccess *la, DlockUpdateIndexes update_indexes)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext oldcontext;
	ResultRelInfo *rri;
	DlockRestricted restricted;

	Assert(LEASE_AS_OWNER(la->table));
	/* everything below lives in the executor state's memory, freed with it */
	oldcontext = MemoryContextSwitchTo(estate->es_query_cxt);
	rri = makeNode(ResultRelInfo);
	/* no range table entry: the executor then assumes no updated columns */
	InitResultRelInfo(rri, la->rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);
	DlockRestrictedBegin(&restricted);
	DlockInsertIndexTuples(rri, la->newslot, estate, update_indexes);
	DlockRestrictedEnd(&restricted);
	ExecCloseIndices(rri);
	MemoryContextSwitchTo(oldcontext);
	FreeExecutorState(estate);
}

/*
 * lease_make_room_for_update runs before the update of the version at
 * row->tid when its page looked too full for the new one: prunes that page
 * if it can, and makes room elsewhere when it still has none
 * (DlockLeaseMakeRoomForUpdate; lease_row_from_slot copied the version
 * out, so this backend's own pin is not in the way).
 */
static void
lease_make_room_for_update(LeaseAccess *la, LeaseRow *row)
{
	Assert(row->tight && lease_is_heap(la->rel));
	DlockLeaseMakeRoomForUpdate(la->rel, &row->tid, row->need);
}

/*
 * lease_write replaces the version at row->tid (the one in la->slot) of
 * lock_name's row with row's fields (already changed by the caller),
 * carrying over the lock name and any column dlock does not know, waiting
 * for a concurrent transaction that holds a conflicting lock or changed
 * it.  Returns TM_Ok when it wrote, or TM_Updated / TM_Deleted when a
 * concurrent transaction committed a change first (nothing written: read
 * the row again).  Adds the index entries when the update is not HOT (and
 * then opens the name's bucket of the fence cache), and makes the change
 * visible to the rest of the transaction (CommandCounterIncrement).
 */
static TM_Result
lease_write(LeaseAccess *la, Snapshot snapshot, text *lock_name, LeaseRow *row)
{
	const DlockLeaseTable *t = la->table;
	TupleTableSlot *newslot = la->newslot;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	DlockUpdateIndexes update_indexes;
	TM_Result	res;
	int			natts = RelationGetDescr(la->rel)->natts;

	Assert(ItemPointerIsValid(&row->tid));
	Assert(ItemPointerEquals(&row->tid, &la->slot->tts_tid));
	Assert(snapshot != NULL && IsMVCCSnapshot(snapshot));

	/* the old version's columns, then dlock's fields over them */
	ExecClearTuple(newslot);
	slot_getallattrs(la->slot);
	memcpy(newslot->tts_values, la->slot->tts_values, natts * sizeof(Datum));
	memcpy(newslot->tts_isnull, la->slot->tts_isnull, natts * sizeof(bool));
	newslot->tts_values[t->att_token - 1] = Int64GetDatum(row->f.token);
	newslot->tts_values[t->att_owner - 1] = PointerGetDatum(row->f.owner);
	newslot->tts_values[t->att_holder_role - 1] = ObjectIdGetDatum(row->f.holder_role);
	newslot->tts_values[t->att_acquired_at - 1] = TimestampTzGetDatum(row->f.acquired_at);
	newslot->tts_values[t->att_renewed_at - 1] = TimestampTzGetDatum(row->f.renewed_at);
	newslot->tts_values[t->att_expires_at - 1] = TimestampTzGetDatum(row->f.expires_at);
	newslot->tts_values[t->att_released - 1] = BoolGetDatum(row->f.released);
	Assert(!newslot->tts_isnull[t->att_lock_name - 1]);
	ExecStoreVirtualTuple(newslot);

	if (row->tight)
		lease_make_room_for_update(la, row);
	res = table_tuple_update(la->rel, &row->tid, newslot,
							 GetCurrentCommandId(true), snapshot,
							 InvalidSnapshot, true, &tmfd, &lockmode,
							 &update_indexes);
	switch (res)
	{
		case TM_Ok:
			break;
		case TM_Updated:
		case TM_Deleted:
			return res;
		default:
			elog(ERROR, "unexpected result %d updating a dlock lease row", (int) res);
	}

	/*
	 * Not HOT: the row's HOT chain, whose root the fence cache may hold,
	 * moves (fence_cache.c); open the name's bucket before the new version
	 * can be seen (here: before the CommandCounterIncrement).
	 */
	if (DlockNeedsIndexInsert(update_indexes))
	{
		DlockFenceCacheOpen(lock_name);
		lease_insert_index_entries(la, update_indexes);
	}
	CommandCounterIncrement();
	return TM_Ok;
}

/*
 * lease_new_row_size estimates the space a name's first row takes on a
 * page (with its line pointer): the header, the two texts and at most 64
 * bytes for the other columns and their alignment.  A hint for
 * lease_make_room; the insert checks the real size.
 */
static Size
lease_new_row_size(text *lock_name, text *owner)
{
	return MAXALIGN(SizeofHeapTupleHeader) +
		MAXALIGN(VARSIZE_ANY(lock_name) + VARSIZE_ANY(owner) + 64) +
		sizeof(ItemIdData);
}

/*
 * lease_owner_copy returns a copy of a row's owner label for a lease
 * event's log line, in CurTransactionContext: the operation may run in
 * SPI's memory, which its store session frees, and a set acquire's
 * attempt that is rolled back frees its copies with its subtransaction.
 */
static text *
lease_owner_copy(text *owner)
{
	MemoryContext old = MemoryContextSwitchTo(CurTransactionContext);
	text	   *copy = DatumGetTextPCopy(PointerGetDatum(owner));

	MemoryContextSwitchTo(old);
	return copy;
}

/* Takeover attempts that meet a concurrent committed change before giving up. */
#define TAKE_TRIES	3

/*
 * DlockLeaseTake takes over the ended lease of lock_name, if it has one,
 * for holder (labelled owner) from now until expires: locks the version it
 * read FOR UPDATE without waiting (an open transaction's lock means held),
 * draws a token from the sequence seqrelid and writes the new lease.  Sets
 * *token and *prev (the lease it replaced; its owner label only when a
 * lease event wants it), or *held_until when a live lease holds the name.
 */
DlockTakeResult
DlockLeaseTake(const DlockLeaseTable *table, Oid seqrelid, text *lock_name,
			   text *owner, Oid holder, TimestampTz now, TimestampTz expires,
			   int64 *token, TimestampTz *held_until, DlockPrevLease *prev)
{
	LeaseAccess la;
	DlockTakeResult result = DLOCK_TAKE_HELD;
	int			try;

	lease_open(&la, table);
	for (try = 0; try < TAKE_TRIES; try++)
	{
		Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
		LeaseRow	row;
		TM_FailureData tmfd;
		TM_Result	res;

		if (!lease_read(&la, snapshot, lock_name, &row))
		{
			/*
			 * The caller inserts the name's first row: room for it.  Pruning
			 * while the snapshot is registered: this backend's xmin then
			 * keeps what it can see.
			 */
			if (lease_is_heap(la.rel))
				DlockLeaseMakeRoom(la.rel, lease_new_row_size(lock_name, owner));
			UnregisterSnapshot(snapshot);
			result = DLOCK_TAKE_NO_ROW;
			break;
		}
		if (lease_row_live(&row, now))
		{
			UnregisterSnapshot(snapshot);
			*held_until = row.f.expires_at;
			result = DLOCK_TAKE_HELD;
			break;
		}

		/* FOR UPDATE: conflicts with every row lock, FOR KEY SHARE included */
		res = table_tuple_lock(la.rel, &row.tid, snapshot, la.slot,
							   GetCurrentCommandId(true), LockTupleExclusive,
							   LockWaitSkip, 0, &tmfd);
		if (res == TM_WouldBlock)
		{
			UnregisterSnapshot(snapshot);
			result = DLOCK_TAKE_HELD;	/* an open transaction is changing it */
			break;
		}
		if (res == TM_Updated || res == TM_Deleted)
		{
			UnregisterSnapshot(snapshot);
			continue;			/* changed since the read: read again */
		}
		if (res != TM_Ok)
			elog(ERROR, "unexpected result %d locking a dlock lease row", (int) res);

		/*
		 * Locked the version that was read (TM_Ok: not changed since), so
		 * it is still ended.  Take it.
		 */
		lease_row_from_slot(&la, &row);
		Assert(!lease_row_live(&row, now));
		prev->kind = row.f.released ? DLOCK_GRANT_AFTER_RELEASE :
			DLOCK_GRANT_TAKEOVER;
		prev->token = row.f.token;
		prev->ended_at = row.f.expires_at;
		prev->owner = NULL;
		if (row.f.owner != NULL && !row.f.released && DlockEventsWantOwner())
			prev->owner = lease_owner_copy(row.f.owner);
		/* tokens of a name only grow (token.c) */
		*token = DlockTokenDrawAbove(seqrelid, row.f.token);
		Assert(*token > row.f.token);

		/* the token changes: the fence cache must not answer meanwhile */
		DlockFenceCacheOpen(lock_name);
		row.f.token = *token;
		row.f.owner = owner;
		row.f.holder_role = holder;
		row.f.acquired_at = now;
		row.f.renewed_at = now;
		row.f.expires_at = expires;
		row.f.released = false;
		if (lease_write(&la, snapshot, lock_name, &row) != TM_Ok)
			elog(ERROR, "dlock lease row changed while locked");
		UnregisterSnapshot(snapshot);
		result = DLOCK_TAKE_GRANTED;
		break;
	}
	lease_close(&la);
	return result;
}

/*
 * lease_row_busy reports whether the version lease_read found (row) is
 * locked or being changed by another transaction that is still in
 * progress (its xmax, read under the buffer's share lock by
 * lease_row_from_slot).  A hint for a read that must not write: a
 * MultiXact xmax counts as not busy (its members may include this
 * transaction), and the attempt that follows decides for certain.
 */
static bool
lease_row_busy(const LeaseRow *row)
{
	if ((row->infomask & (HEAP_XMAX_INVALID | HEAP_XMAX_IS_MULTI)) != 0 ||
		!TransactionIdIsNormal(row->xmax) ||
		TransactionIdIsCurrentTransactionId(row->xmax))
		return false;
	return TransactionIdIsInProgress(row->xmax);
}

/*
 * DlockLeaseFindHeld reads the leases of the n names, in order, with one
 * fresh snapshot and no lock, and returns the index of the first that is
 * held: live at now (setting *held_until to its expiry), or locked or
 * being changed by another open transaction (setting *held_until to 0);
 * -1 when none is.  A read only: a set acquire (store_ops.c) asks first,
 * so that an attempt that would be refused by a lease that is plainly held
 * writes nothing; rows changed after the read are decided by the attempt
 * itself.
 */
int
DlockLeaseFindHeld(const DlockLeaseTable *table, text **names, int n,
				   TimestampTz now, TimestampTz *held_until)
{
	LeaseAccess la;
	Snapshot	snapshot;
	int			found = -1;
	int			i;

	lease_open(&la, table);
	la.want_xmax = true;
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	for (i = 0; i < n; i++)
	{
		LeaseRow	row;

		if (!lease_read(&la, snapshot, names[i], &row))
			continue;
		if (lease_row_live(&row, now))
		{
			*held_until = row.f.expires_at;
			found = i;
			break;
		}
		if (lease_row_busy(&row))
		{
			*held_until = 0;
			found = i;
			break;
		}
	}
	UnregisterSnapshot(snapshot);
	lease_close(&la);
	return found;
}

/*
 * DlockLeaseChange is the body of renew, release and break (c->kind says
 * which): it reads the row, and when its lease qualifies (live, and held
 * by c's token unless breaking) writes the change, waiting for a
 * concurrent transaction that changes the same row and then deciding
 * again on the row's newest version.  Renew and release decide in this
 * order: a token that is not the row's current token changes nothing
 * (DLOCK_STORE_NOT_HELD, whoever asks: a holder whose lease was taken
 * over, by any role, learns that it lost it); the current token named by
 * a caller who may not act for the row's holder role (DlockMayActFor:
 * that role, a member of it, a superuser) changes nothing and locks
 * nothing (DLOCK_STORE_DENIED: the caller raises 42501); an ended lease
 * changes nothing.  Sets c->outcome and c->holder (the row's holder role,
 * when the token was current); returns whether it changed the lease.
 */
bool
DlockLeaseChange(const DlockLeaseTable *table, DlockLeaseChangeOp *c)
{
	LeaseAccess la;
	bool		changed = false;

	c->holder = InvalidOid;
	lease_open(&la, table);
	for (;;)
	{
		Snapshot	snapshot;
		LeaseRow	row;
		TM_Result	res;

		CHECK_FOR_INTERRUPTS();
		snapshot = RegisterSnapshot(GetLatestSnapshot());
		if (!lease_read(&la, snapshot, c->lock_name, &row))
		{
			UnregisterSnapshot(snapshot);
			c->outcome = DLOCK_STORE_NO_LEASE;
			break;
		}
		if (c->kind != DLOCK_CHANGE_BREAK)
		{
			if (row.f.token != c->token)
			{
				UnregisterSnapshot(snapshot);
				c->outcome = DLOCK_STORE_NOT_HELD;
				break;
			}
			c->holder = row.f.holder_role;
			/* checked before anything is written or locked */
			Assert(OidIsValid(c->caller));
			if (!DlockMayActFor(c->caller, row.f.holder_role))
			{
				UnregisterSnapshot(snapshot);
				c->outcome = DLOCK_STORE_DENIED;
				break;
			}
		}
		if (!lease_row_live(&row, c->now))
		{
			UnregisterSnapshot(snapshot);
			c->outcome = DLOCK_STORE_NOT_HELD;
			break;
		}

		Assert(lease_row_live(&row, c->now));
		Assert(c->kind == DLOCK_CHANGE_BREAK || row.f.token == c->token);
		if (c->kind == DLOCK_CHANGE_RENEW)
		{
			row.f.renewed_at = c->now;
			row.f.expires_at = c->expires;
		}
		else
		{
			if (c->kind == DLOCK_CHANGE_BREAK)
			{
				c->found_token = row.f.token;
				c->found_expires = row.f.expires_at;
				c->found_owner = NULL;
				if (row.f.owner != NULL && DlockEventsWantOwner())
					c->found_owner = lease_owner_copy(row.f.owner);
			}
			row.f.released = true;
			row.f.expires_at = c->now;
		}
		res = lease_write(&la, snapshot, c->lock_name, &row);
		UnregisterSnapshot(snapshot);
		if (res == TM_Ok)
		{
			c->outcome = DLOCK_STORE_DONE;
			changed = true;
			break;
		}
		/* a concurrent change committed first: decide on the newest version */
	}
	lease_close(&la);
	return changed;
}

/*
 * slot_has_name reports whether column att_name of the version in slot (a
 * lease row or a mark) is lock_name.
 */
static bool
slot_has_name(TupleTableSlot *slot, AttrNumber att_name, text *lock_name)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, att_name, &isnull);
	text	   *name;

	if (isnull)
		return false;
	name = DatumGetTextPP(d);
	return VARSIZE_ANY_EXHDR(name) == VARSIZE_ANY_EXHDR(lock_name) &&
		memcmp(VARDATA_ANY(name), VARDATA_ANY(lock_name),
			   VARSIZE_ANY_EXHDR(lock_name)) == 0;
}

/*
 * lease_slot_has_name reports whether the version in slot is the row of
 * lock_name (the recheck an executor does on a row version it followed an
 * update to; dlock never changes a row's lock_name).
 */
static inline bool
lease_slot_has_name(const DlockLeaseTable *table, TupleTableSlot *slot,
					text *lock_name)
{
	return slot_has_name(slot, table->att_lock_name, lock_name);
}

/*
 * lease_fence_fields copies what the fence reads of the lease row in slot
 * into *lease.
 */
static void
lease_fence_fields(const DlockLeaseTable *table, TupleTableSlot *slot,
				   DlockFenceLease *lease)
{
	lease->token = DatumGetInt64(lease_field(slot, table->att_token));
	lease->expires_at = DatumGetTimestampTz(lease_field(slot, table->att_expires_at));
	lease->released = DatumGetBool(lease_field(slot, table->att_released));
	lease->state_read = true;
}

/*
 * DlockLeaseFenceRead reads the lease of lock_name into *lease for the
 * 'latest' fence: from the fence cache when it knows the name
 * (fence_cache.c; then only found and token are set, and state_read is
 * false), otherwise straight from the primary key index and the heap, with
 * a fresh snapshot and no row lock, without SPI's per-statement executor
 * setup, and then offers the token to the cache.  The same MVCC read as
 * lease_read.  Takes AccessShareLock on the table (and on the index when
 * it reads it), kept until the transaction ends; the table's lock is what
 * makes its relfilenode, part of the cache's key, current.  Runs as the
 * caller (opening a relation checks no privilege); the lookup evaluates no
 * user-defined function.
 */
void
DlockLeaseFenceRead(const DlockLeaseTable *table, text *lock_name,
					DlockFenceLease *lease)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	TupleTableSlot *slot;
	DlockFenceCacheTicket ticket;
	ItemPointerData root;

	Assert(OidIsValid(table->relid) && table->att_token > 0);
	rel = table_open(table->relid, AccessShareLock);
	lease->state_read = false;
	lease->released = false;
	lease->expires_at = 0;
	if (DlockFenceCacheGet(rel, lock_name, &lease->token, &root, &ticket))
	{
		lease->found = true;
		table_close(rel, NoLock);
		return;
	}

	idx = lease_pkey_open(table, rel, AccessShareLock);
	/* taken after the ticket (fence_cache.c: a fill needs that order) */
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);

	lease->found = lease_lookup(rel, idx, snap, lock_name, slot, &root);
	if (lease->found)
		lease_fence_fields(table, slot, lease);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	if (lease->found)
		DlockFenceCacheFill(&ticket, lock_name, lease->token, &root);
}

/*
 * lease_fetch_hint fetches, with snapshot, the visible version of the HOT
 * chain whose root is at *root into slot, and returns whether there was one
 * and it is lock_name's row: what lease_lookup would find, without the
 * B-tree descent.  The fence cache's root (fence_cache.c) is a hint, and
 * this checks it; it always points into the table (a page holding a live
 * row's root is never truncated, and a non-HOT update or a delete of the
 * row opens the name's bucket until its transaction has ended).
 */
static bool
lease_fetch_hint(const DlockLeaseTable *table, Relation rel,
				 Snapshot snapshot, ItemPointer root, text *lock_name,
				 TupleTableSlot *slot)
{
	IndexFetchTableData *fetch = table_index_fetch_begin(rel);
	ItemPointerData tid = *root;
	bool		call_again = false;
	bool		all_dead = false;
	bool		found;

	found = table_index_fetch_tuple(fetch, &tid, snapshot, slot, &call_again,
									&all_dead);
	table_index_fetch_end(fetch);
	return found && lease_slot_has_name(table, slot, lock_name);
}

/*
 * DlockLeaseFenceLock reads the lease of lock_name into *lease for the
 * 'live' fence and locks its row FOR KEY SHARE until the transaction ends,
 * as SELECT ... FOR KEY SHARE would, without SPI: the version visible to a
 * fresh snapshot, found through the root of its HOT chain that the fence
 * cache keeps (checked: lease_fetch_hint) or else through the primary key
 * (then offered to the cache), then table_tuple_lock on that version,
 * waiting for a transaction that holds a conflicting lock (a takeover's
 * FOR UPDATE) or changed the row.  READ COMMITTED rules, also under
 * REPEATABLE READ: when the row was changed concurrently, the lock follows
 * it to its newest version (TUPLE_LOCK_FLAG_FIND_LAST_VERSION), which is
 * then the lease read (a deleted row: no lease).  A SERIALIZABLE
 * transaction keeps its rules, as the SQL statement did: a concurrent
 * update or delete raises 40001 (the messages and codes of ExecLockRows);
 * it always goes through the index, whose predicate locks SSI needs.
 * Takes RowShareLock on the table (before the cache lookup: it keeps VACUUM
 * from truncating the table under the hint) and AccessShareLock on its
 * index, kept until the transaction ends.  Runs as the caller (locking a
 * row directly checks no privilege), so the holder-role rule is applied
 * here, to the session's role (GetOuterUserId: the role SET ROLE made
 * current, not the owner of a SECURITY DEFINER function or of the table a
 * foreign key's cascade writes, which runs as that owner): only the
 * holder keeps its lease from being taken over past its expiry.  When the
 * visible version carries the writer's token but that role may not act
 * for its holder role (DlockMayActFor), nothing is locked, the lease is
 * returned as read, and lease->denied is set (the fence raises 42501).  A
 * version the lock follows an update to (a takeover that was in flight)
 * is checked the same way after it is locked: then the lock is held, and
 * the 42501 that ends the (sub)transaction releases it, as the 55T01 of a
 * token that is not current does.  The lookup evaluates no user-defined
 * function.
 */
void
DlockLeaseFenceLock(const DlockLeaseTable *table, text *lock_name, int64 token,
					DlockFenceLease *lease)
{
	Relation	rel;
	Relation	idx = NULL;
	Snapshot	snap;
	TupleTableSlot *slot;
	int			lockflags = TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS;
	DlockFenceCacheTicket ticket;
	ItemPointerData root;
	int64		cached_token;
	bool		hinted;
	bool		seen;
	Oid			actor = GetOuterUserId();

	Assert(OidIsValid(table->relid) && table->att_token > 0);
	rel = table_open(table->relid, RowShareLock);
	if (!IsolationIsSerializable())
		lockflags |= TUPLE_LOCK_FLAG_FIND_LAST_VERSION;
	hinted = !IsolationIsSerializable() &&
		DlockFenceCacheGet(rel, lock_name, &cached_token, &root, &ticket);
	if (IsolationIsSerializable())
		ticket.bucket = -1;
	/* taken after the ticket (fence_cache.c: a fill needs that order) */
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);

	lease->found = false;
	lease->state_read = false;
	lease->released = false;
	lease->expires_at = 0;
	seen = hinted &&
		lease_fetch_hint(table, rel, snap, &root, lock_name, slot);
	if (!seen)
	{
		idx = lease_pkey_open(table, rel, AccessShareLock);
		seen = lease_lookup(rel, idx, snap, lock_name, slot, &root);
		if (seen && !hinted)
			DlockFenceCacheFill(&ticket, lock_name,
								DatumGetInt64(lease_field(slot, table->att_token)),
								&root);
	}
	if (seen &&
		DatumGetInt64(lease_field(slot, table->att_token)) == token)
	{
		Oid			holder = DatumGetObjectId(lease_field(slot, table->att_holder_role));

		if (!DlockMayActFor(actor, holder))
		{
			/* the holder-role rule: not locked, not to be taken over */
			lease->found = true;
			lease_fence_fields(table, slot, lease);
			lease->denied = true;
			lease->holder = holder;
			seen = false;
		}
	}
	if (seen)
	{
		ItemPointerData tid = slot->tts_tid;
		TM_FailureData tmfd;
		TM_Result	res;

		res = table_tuple_lock(rel, &tid, snap, slot,
							   GetCurrentCommandId(true), LockTupleKeyShare,
							   LockWaitBlock, lockflags, &tmfd);
		switch (res)
		{
			case TM_Ok:
				/* locked; the newest version when it followed an update */
				lease->found = !tmfd.traversed ||
					lease_slot_has_name(table, slot, lock_name);
				break;
			case TM_SelfModified:
				/* changed by a later command of this transaction: skipped */
				break;
			case TM_Updated:
			case TM_Deleted:
				if (IsolationIsSerializable())
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not serialize access due to concurrent update")));
				if (res == TM_Updated)
					elog(ERROR, "unexpected result %d locking a dlock lease row", (int) res);
				break;			/* deleted (purged) meanwhile: no lease */
			default:
				elog(ERROR, "unexpected result %d locking a dlock lease row", (int) res);
		}
		if (lease->found)
		{
			lease_fence_fields(table, slot, lease);
			if (lease->token == token)
			{
				Oid			holder = DatumGetObjectId(lease_field(slot, table->att_holder_role));

				/* a takeover the lock waited for may have another holder */
				if (!DlockMayActFor(actor, holder))
				{
					lease->denied = true;
					lease->holder = holder;
				}
			}
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	if (idx != NULL)
		index_close(idx, NoLock);
	table_close(rel, NoLock);
}
