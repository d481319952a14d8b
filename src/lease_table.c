/*-------------------------------------------------------------------------
 *
 * src/lease_table.c
 *	  Direct access to the lease table (dlock_lease): its one description
 *	  (the columns, found by name), the lookup through its primary key, and
 *	  the primitives the hot paths share (lease_table_int.h): opening the
 *	  table, reading a row into a copy, writing a new version with its
 *	  index entries.  The operations are lease_change.c's (takeover, renew,
 *	  release, break, a set's read) and lease_fence.c's (the fence's read
 *	  and lock); store.c owns the rest (its cache, the owner switch, the
 *	  SQL), token.c the token a takeover draws, lease_room.c where new row
 *	  versions go.
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
 * again on its newest version (FOR NO KEY UPDATE); the 'live' fence holds
 * dlock's name lock (name_lock.c), which a takeover takes without waiting
 * before its row lock, or past its budget and under SERIALIZABLE locks the
 * row FOR KEY SHARE, waiting (40001 under SERIALIZABLE).  A call that changes
 * nothing keeps no lock.  Every update opens the name's fence cache bucket
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
#include "lease_table_int.h"

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
 * DlockSlotHasName reports whether column att_name of the version in slot
 * (a lease row, or a mark: mark_find.c uses it too) is lock_name.
 */
bool
DlockSlotHasName(TupleTableSlot *slot, AttrNumber att_name, text *lock_name)
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
 * DlockLeasePkeyOpen opens the primary key of the lease table rel with
 * lockmode, as the relcache knows it now (REINDEX CONCURRENTLY replaces
 * it).  Raises if there is none, or if it is not on lock_name alone (a
 * damaged install).
 */
Relation
DlockLeasePkeyOpen(const DlockLeaseTable *table, Relation rel, LOCKMODE lockmode)
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
 * DlockLeaseLookup looks lock_name up in the lease table rel through its
 * primary key idx with snapshot, stores the visible version (if any) in
 * slot and returns whether there was one.
 */
bool
DlockLeaseLookup(Relation rel, Relation idx, Snapshot snapshot, text *lock_name,
				 TupleTableSlot *slot)
{
	IndexScanDesc scan;
	ScanKeyData key;
	bool		found;

	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(lock_name));
	scan = DlockIndexBeginScan(rel, idx, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	Assert(IsMVCCSnapshot(snapshot));	/* one visible version per chain */
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

/*
 * DlockLeaseOpen opens the lease table and its primary key (as the relcache
 * knows it now: REINDEX CONCURRENTLY replaces it) for a direct operation,
 * with RowExclusiveLock (kept until the transaction ends, as a statement's
 * would be).  Raises if the table has what direct access would bypass: a
 * trigger, a CHECK constraint or forced row security (none of dlock's own
 * making; only a superuser could add them).
 */
void
DlockLeaseOpen(LeaseAccess *la, const DlockLeaseTable *table)
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
	la->idx = DlockLeasePkeyOpen(table, la->rel, RowExclusiveLock);
	la->slot = table_slot_create(la->rel, NULL);
	la->newslot = MakeSingleTupleTableSlot(RelationGetDescr(la->rel),
										   &TTSOpsVirtual);
}

/*
 * DlockLeaseClose undoes DlockLeaseOpen (on an error, transaction or
 * subtransaction abort releases what DlockLeaseOpen took).
 */
void
DlockLeaseClose(LeaseAccess *la)
{
	ExecDropSingleTupleTableSlot(la->newslot);
	ExecDropSingleTupleTableSlot(la->slot);
	index_close(la->idx, NoLock);
	table_close(la->rel, NoLock);
}

/*
 * DlockLeaseField returns column attnum of the version in slot; every column
 * dlock uses is NOT NULL (DlockLeaseTableDescribe).
 */
Datum
DlockLeaseField(TupleTableSlot *slot, AttrNumber attnum)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, attnum, &isnull);

	Assert(!isnull);
	return d;
}

/*
 * DlockLeaseIsHeap reports whether the lease table rel is stored by the heap
 * table access method, whose pages DlockLeaseMakeRoom and the prune before an
 * update know (a DBA could change it with ALTER TABLE ... SET ACCESS
 * METHOD; then PostgreSQL alone places row versions).
 */
bool
DlockLeaseIsHeap(Relation rel)
{
	return rel->rd_tableam == GetHeapamTableAmRoutine();
}

/*
 * DlockLeaseRowFromSlot copies the TID and the fields of the version in
 * la->slot into *row, notes whether its page looked too full for a new
 * version of the row (read without the buffer lock, as heap_page_prune_opt
 * reads it: a hint), and then copies the version out of the buffer, so the
 * operation keeps no pin on the page (design.md §4: a pin keeps every
 * backend, this one included, from pruning it).  The owner label points
 * into the slot's copy.
 */
void
DlockLeaseRowFromSlot(LeaseAccess *la, LeaseRow *row)
{
	const DlockLeaseTable *t = la->table;
	TupleTableSlot *slot = la->slot;

	Assert(ItemPointerIsValid(&slot->tts_tid));
	row->tid = slot->tts_tid;
	row->tight = false;
	row->need = 0;
	row->infomask = 0;
	row->xmax = InvalidTransactionId;
	if (TTS_IS_BUFFERTUPLE(slot) && DlockLeaseIsHeap(la->rel) &&
		BufferIsValid(((BufferHeapTupleTableSlot *) slot)->buffer))
	{
		BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;

		row->need = MAXALIGN(bslot->base.tuple->t_len) + sizeof(ItemIdData);
		row->tight = PageGetHeapFreeSpace(BufferGetPage(bslot->buffer)) <
			2 * row->need;
		/* who locks or changes the version, for DlockLeaseRowBusy */
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
	row->f.token = DatumGetInt64(DlockLeaseField(slot, t->att_token));
	row->f.owner = (text *) DatumGetPointer(DlockLeaseField(slot, t->att_owner));
	row->f.holder_role = DatumGetObjectId(DlockLeaseField(slot, t->att_holder_role));
	row->f.acquired_at = DatumGetTimestampTz(DlockLeaseField(slot, t->att_acquired_at));
	row->f.renewed_at = DatumGetTimestampTz(DlockLeaseField(slot, t->att_renewed_at));
	row->f.expires_at = DatumGetTimestampTz(DlockLeaseField(slot, t->att_expires_at));
	row->f.released = DatumGetBool(DlockLeaseField(slot, t->att_released));
}

/*
 * DlockLeaseRead looks lock_name up with snapshot and, when a version is
 * visible, stores its TID and fields in *row (the slot keeps the version)
 * and returns true.
 */
bool
DlockLeaseRead(LeaseAccess *la, Snapshot snapshot, text *lock_name, LeaseRow *row)
{
	if (!DlockLeaseLookup(la->rel, la->idx, snapshot, lock_name, la->slot))
		return false;
	DlockLeaseRowFromSlot(la, row);
	return true;
}

/*
 * DlockLeaseRowLive reports whether the lease in row is live at now.
 */
bool
DlockLeaseRowLive(LeaseRow *row, TimestampTz now)
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
 * (DlockLeaseMakeRoomForUpdate; DlockLeaseRowFromSlot copied the version
 * out, so this backend's own pin is not in the way).
 */
static void
lease_make_room_for_update(LeaseAccess *la, LeaseRow *row)
{
	Assert(row->tight && DlockLeaseIsHeap(la->rel));
	DlockLeaseMakeRoomForUpdate(la->rel, &row->tid, row->need);
}

/*
 * lease_publish records, for the fence cache to publish if the transaction
 * commits, what the fence checks of lock_name's row in rel as this
 * transaction's write left it (f).
 */
static void
lease_publish(Relation rel, text *lock_name, const DlockLeaseFields *f)
{
	DlockFenceCached lease;

	lease.token = f->token;
	lease.expires_at = f->expires_at;
	lease.holder = f->holder_role;
	lease.released = f->released;
	DlockFenceCachePublish(rel, lock_name, &lease);
}

/*
 * DlockLeaseWrite replaces the version at row->tid (the one in la->slot) of
 * lock_name's row with row's fields (already changed by the caller),
 * carrying over the lock name and any column dlock does not know, waiting
 * for a concurrent transaction that holds a conflicting lock or changed
 * it.  Returns TM_Ok when it wrote, or TM_Updated / TM_Deleted when a
 * concurrent transaction committed a change first (nothing written: read
 * the row again).  Opens the name's bucket of the fence cache before the
 * update, adds the index entries when the update is not HOT, and makes
 * the change visible to the rest of the transaction
 * (CommandCounterIncrement).
 */
TM_Result
DlockLeaseWrite(LeaseAccess *la, Snapshot snapshot, text *lock_name, LeaseRow *row)
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

	/*
	 * The cache holds what the fence checks of the row (fence_cache.c): open
	 * the name's bucket before the new version can be seen, by anyone
	 * (design.md §12).
	 */
	DlockFenceCacheOpen(lock_name);
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

	if (DlockNeedsIndexInsert(update_indexes))
		lease_insert_index_entries(la, update_indexes);
	/* what the row is now, for the cache to publish if this commits */
	lease_publish(la->rel, lock_name, &row->f);
	CommandCounterIncrement();
	return TM_Ok;
}

/*
 * DlockLeaseInserted tells the fence cache what the INSERT of lock_name's
 * first row, just made in this transaction (store_ops.c, through SPI),
 * left (f: token, expires_at, holder_role and released are read).  The
 * caller holds RowExclusiveLock on the table, from the INSERT.
 */
void
DlockLeaseInserted(const DlockLeaseTable *table, text *lock_name,
				   const DlockLeaseFields *f)
{
	Relation	rel = table_open(table->relid, NoLock);

	Assert(CheckRelationLockedByMe(rel, RowExclusiveLock, true));
	lease_publish(rel, lock_name, f);
	table_close(rel, NoLock);
}
