/*-------------------------------------------------------------------------
 *
 * src/lease_table.c
 *	  Direct access to the lease table (dlock_lease): its one description
 *	  (the columns, found by name), the lookup through its primary key, and
 *	  the hot paths that read and change a lease row without SQL: taking
 *	  over an ended lease, renew, release and break, a set acquire's read
 *	  of the held leases among its names, the 'latest' fence's read
 *	  (through the fence cache when it can) and the 'live' fence's lock; and the common case of fencing mode 'seen', locking a mark of
 *	  dlock_fence_mark (DlockMarkLock, for mark.c).  store.c owns the rest
 *	  (its cache, the switch to the table's owner, the SQL statements).
 *
 * Direct access: the hot paths read the row through the primary key index
 * and change it with table_tuple_lock and table_tuple_update, without
 * SPI's per-statement executor setup.  They keep the SQL statements'
 * semantics exactly: a fresh snapshot for every read, FOR UPDATE SKIP
 * LOCKED for a takeover, NO KEY UPDATE (waiting) for renew, release and
 * break, and READ COMMITTED rules when the row was changed concurrently
 * (read its newest version again and recheck).  The primary key comes from
 * the relcache at each operation (REINDEX CONCURRENTLY replaces it); an
 * update that is not HOT gets its entries in every index through the
 * executor's own routine, unique checks included.  What direct access
 * would bypass (triggers, CHECK constraints, forced row security: none of
 * dlock's making) makes the operations refuse.
 *
 * Where new row versions go (design.md §4).  Every takeover, renew and
 * release writes a new version of its row.  A HOT update keeps it on the
 * row's page while the page has room, and pruning (heap_page_prune_opt, on
 * every read of a page that is filling up) gives back the room of dead
 * versions; but it cannot remove a version while a transaction that began
 * before it died is still open (on a busy machine a backend preempted, or
 * waiting for its commit's WAL flush, holds the horizon back for
 * milliseconds, in which the pages of hot rows fill up), nor while another
 * backend has the page pinned.  A version that does not fit goes where
 * heap_update finds room: the backend's insertion target, a page the free
 * space map knows (it does not learn of room that pruning made), or a new
 * page; and when several backends extend the table at once, PostgreSQL 15
 * adds 20 pages per backend waiting for the extension lock (16 and later:
 * as many pages again per waiting backend), and the first inserts of new
 * names at once do the same.  So the table of 100 hot names of bench/README.md's size
 * measure ended anywhere between 100 KB and 1.3 MB.  Now:
 *
 * - An operation copies the version it read out of the buffer
 *   (lease_row_from_slot) and keeps no pin on its page, which would keep
 *   everyone, itself included, from pruning it.
 *
 * - When the page looked too full for the new version, the update first
 *   prunes it if it can (lease_make_room_for_update).  When it still has no
 *   room, and before a name's first row is inserted, lease_make_room points
 *   the backend's insertion target at a page with room: the target itself,
 *   or the first page with room after each page of the table was pruned if
 *   it could be (their free space is recorded in the free space map), with
 *   a second page with room as a spare for the backends that meet a full
 *   target; pages it adds for them are new, one at a time.  It adds pages
 *   only if none were added since it looked, and records them in the free
 *   space map before releasing the extension lock, so that on 15 a
 *   backend that waited for the lock in PostgreSQL's own extension finds
 *   them and adds none (16 and later add their pages without asking the
 *   free space map again: under heavy contention there the table can
 *   still grow by the pages of such waits).  Only while the table has at most ROOM_MAX_PAGES pages (a larger
 *   one is left to PostgreSQL), and only for the heap access method.
 *
 * Why this is safe: the insertion target and the free space map are hints,
 * which heap_update and heap_insert check under the page's lock (a page
 * without room is passed over, and the free space map corrected).
 * heap_page_prune_opt is what every scan calls on the pages it reads; it
 * prunes only with a cleanup lock, which it does not wait for and cannot
 * get while any other pin on the page exists, this backend's own included;
 * and every pointer into a page is backed by a pin (a slot's), so no
 * pointer this backend holds can be moved under it.  A page is added as
 * PostgreSQL's allocator and index access methods add one (the relation
 * extension lock, then ReadBuffer of P_NEW) and left zeroed, as
 * PostgreSQL 15 leaves the pages it adds in bulk: the first version put
 * there initializes it, in that version's WAL record, and VACUUM knows new
 * pages.  The extension lock is taken holding no buffer lock and no
 * LWLock; while it is held only the new page and pages of the free space
 * map are locked, and no other heavyweight lock is taken (PostgreSQL's own
 * rules for that lock).  An update may wait for it while holding row
 * locks, as heap_update itself does.
 *
 * The table is described once (DlockLeaseTable): the number of each
 * column dlock uses is looked up by name when store.c builds its cache,
 * and checked against the expected type and NOT NULL.  Columns a later
 * version adds are allowed; an update copies them from the version it
 * replaces.  New versions are built from named fields (DlockLeaseFields).
 *
 * Everything here but the fence's read and lock runs as the lease table's
 * owner (store.c's store_begin switches to it with
 * SECURITY_LOCAL_USERID_CHANGE).  Index entries of an
 * update that is not HOT may evaluate functions of an expression or
 * partial index a DBA added: they run as a security-restricted operation
 * with a pinned search_path (DlockRestrictedBegin), as PostgreSQL runs
 * index functions during REINDEX or VACUUM, so the caller's search_path
 * cannot choose which functions run as the owner.
 *
 * Concurrency (the direct operations' part of the locking protocol, which
 * store.c's header gives in full):
 *
 * - Every operation opens the table and its primary key with
 *   RowExclusiveLock (the 'latest' fence's read: AccessShareLock; the
 *   'live' fence's lock: RowShareLock on the table, AccessShareLock on the
 *   index), kept until the transaction ends, as a statement's would be.
 *   So the table cannot be truncated (by VACUUM) under lease_make_room.
 *
 * - lease_make_room takes the table's relation extension lock to add a
 *   page (waiting for it, as heap_update may), and releases it before it
 *   returns; it holds no buffer lock then.  Buffers are locked one at a
 *   time, share, to read a page's free space, never across a wait.
 *
 * - Acquire never waits for another transaction.  A row that is locked by
 *   an open transaction (an uncommitted acquire, renew, release or break,
 *   or a 'live' fenced writer) counts as held: the takeover reads the row
 *   and, when its lease ended, locks that version FOR UPDATE without
 *   waiting (LockWaitSkip); a lock it cannot have means "held" (a live
 *   lease it read reports its expiry, which a waiter can sleep until).
 *   FOR UPDATE (not NO KEY UPDATE) conflicts with every row lock,
 *   including FOR KEY SHARE.  Only the version that was checked is ever
 *   locked; if it changed since the read, the takeover reads again.
 *
 * - Renew, release and break read the row and, when it qualifies, update
 *   that version in place of an UPDATE statement: they may wait for a
 *   concurrent transaction that changed or locked the same row (its
 *   outcome decides theirs: if it committed a change, they read the newest
 *   version and decide again, as READ COMMITTED rules would), and take FOR
 *   NO KEY UPDATE, which does not conflict with the FOR KEY SHARE lock a
 *   fenced writer holds.
 *
 * - A call that changes nothing keeps no lock: the takeover locks a row
 *   version only once it has checked that its lease ended, and then always
 *   takes it; renew, release and break lock only by updating.  So a failed
 *   attempt of a waiting acquire, or a refused call inside a transaction
 *   block, leaves nothing that could block the lease's holder until the
 *   caller's transaction ends, and needs no subtransaction.  (An acquire
 *   that finds the name has no row yet may keep dlock's name lock, see
 *   store.c and store_ops.c, only when it inserted the row.)
 *
 * - The 'latest' fence reads the lease of a name with a fresh snapshot and
 *   no row lock, or takes its token from the fence cache (fence_cache.c).
 *   A takeover opens the name's bucket of the cache before it writes the
 *   new token (DlockFenceCacheOpen), so the cache cannot answer for the
 *   name until the takeover's transaction has ended.
 *
 * - The 'live' fence locks the row it finds FOR KEY SHARE, waiting, and
 *   follows a concurrently changed row to its newest version as READ
 *   COMMITTED does (a SERIALIZABLE transaction gets 40001 instead), as the
 *   SQL statement SELECT ... FOR KEY SHARE did before (DlockLeaseFenceLock).
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
 * The largest lease table (in pages) whose new row versions dlock places
 * itself when their page is full (lease_make_room); a larger one is left to
 * PostgreSQL.  The pages it reads then are at most this many.
 */
#define ROOM_MAX_PAGES	32

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
 * DlockRestrictedBegin makes the code that follows a security-restricted
 * operation with search_path pinned to pg_catalog, pg_temp, as PostgreSQL
 * runs index functions during REINDEX, VACUUM or CREATE INDEX: so an
 * expression or partial index evaluates its functions as the current user
 * (the table's owner here) without the caller's search_path choosing them,
 * and cannot change the session (SET ROLE, temporary tables, GUC changes
 * outlive it).  Pair with DlockRestrictedEnd; on an error, transaction or
 * subtransaction abort restores the context and the settings.
 */
void
DlockRestrictedBegin(DlockRestricted *saved)
{
	GetUserIdAndSecContext(&saved->save_userid, &saved->save_sec_context);
	SetUserIdAndSecContext(saved->save_userid,
						   saved->save_sec_context | SECURITY_RESTRICTED_OPERATION);
	saved->save_nestlevel = NewGUCNestLevel();
	DlockRestrictSearchPath();
}

/*
 * DlockRestrictedEnd undoes DlockRestrictedBegin: rolls back every
 * setting changed since (the search_path included) and restores the
 * security context.
 */
void
DlockRestrictedEnd(DlockRestricted *saved)
{
	Assert(InSecurityRestrictedOperation());
	AtEOXact_GUC(false, saved->save_nestlevel);
	SetUserIdAndSecContext(saved->save_userid, saved->save_sec_context);
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
 * lease_page_free returns the free space for a new row version on page blk
 * of the lease table rel (a new, zeroed page: all of it), read under a
 * share lock; with prune, first prunes the page if it can
 * (heap_page_prune_opt: only without waiting, when no one else has the
 * page pinned).  Holds no pin or lock on return.
 */
static Size
lease_page_free(Relation rel, BlockNumber blk, bool prune)
{
	Buffer		buf = ReadBuffer(rel, blk);
	Page		page = BufferGetPage(buf);
	Size		free;

	if (prune)
		heap_page_prune_opt(rel, buf);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	free = PageIsNew(page) ? BLCKSZ - SizeOfPageHeaderData :
		PageGetHeapFreeSpace(page);
	UnlockReleaseBuffer(buf);
	return free;
}

/*
 * lease_add_page adds an empty page to the lease table rel, whose relation
 * extension lock the caller holds, records it in the free space map and
 * returns its number.  The page stays zeroed, as the pages PostgreSQL 15
 * adds in bulk: the first row version put there initializes it.
 */
static BlockNumber
lease_add_page(Relation rel)
{
	Buffer		buf = ReadBufferExtended(rel, MAIN_FORKNUM, P_NEW,
										 RBM_ZERO_AND_LOCK, NULL);
	BlockNumber blk = BufferGetBlockNumber(buf);

	UnlockReleaseBuffer(buf);
	RecordPageWithFreeSpace(rel, blk, BLCKSZ - SizeOfPageHeaderData);
	FreeSpaceMapVacuumRange(rel, blk, blk + 1);
	return blk;
}

/*
 * lease_make_room points this backend's insertion target of the lease
 * table rel (RelationSetTargetBlock, which heap_update and heap_insert try
 * first) at a page with room for a row version of need bytes outside the
 * page it is on: the target itself if it has room; else the first page
 * that has room once it is pruned (every page is, and its free space is
 * recorded in the free space map), and it makes sure a second page has
 * room too, a spare that PostgreSQL finds in the free space map when the
 * target fills up first; pages it adds for them are new.  Does nothing for
 * a table of more than ROOM_MAX_PAGES pages.  Pages are added under the
 * relation extension lock, only if no backend added one since the scan,
 * and recorded in the free space map before the lock is released, so a
 * backend that waited for the lock (PostgreSQL's own extension) finds them
 * and adds none on 15.  Takes no lock but that one, and that one holding no
 * buffer lock (design.md §4; the argument is in the header).
 */
static void
lease_make_room(Relation rel, Size need)
{
	Size		want;
	BlockNumber blk = RelationGetTargetBlock(rel);
	BlockNumber nblocks;
	BlockNumber room = InvalidBlockNumber;
	int			rooms = 0;

	/* what heap_update and heap_insert ask of a page that is not the row's */
	want = MAXALIGN(need) +
		RelationGetTargetPageFreeSpace(rel, HEAP_DEFAULT_FILLFACTOR);
	if (BlockNumberIsValid(blk) && lease_page_free(rel, blk, false) >= want)
		return;
	/* the table cannot shrink while this backend holds a lock on it */
	nblocks = RelationGetNumberOfBlocks(rel);
	if (nblocks > ROOM_MAX_PAGES)
		return;
	for (blk = 0; blk < nblocks; blk++)
	{
		Size		free = lease_page_free(rel, blk, true);

		RecordPageWithFreeSpace(rel, blk, free);
		if (free < want)
			continue;
		if (rooms++ == 0)
			room = blk;
	}
	if (nblocks > 0)
		FreeSpaceMapVacuumRange(rel, 0, nblocks);
	if (rooms < 2)
	{
		LockRelationForExtension(rel, ExclusiveLock);
		if (RelationGetNumberOfBlocks(rel) == nblocks)
		{
			for (; rooms < 2; rooms++)
			{
				blk = lease_add_page(rel);
				if (!BlockNumberIsValid(room))
					room = blk;
			}
		}
		else if (!BlockNumberIsValid(room))
			room = GetPageWithFreeSpace(rel, want); /* another backend's */
		UnlockRelationForExtension(rel, ExclusiveLock);
	}
	if (BlockNumberIsValid(room))
		RelationSetTargetBlock(rel, room);
}

/*
 * lease_make_room_for_update runs before the update of the version at
 * row->tid when its page looked too full for the new one: prunes that page
 * if it can (heap_page_prune_opt; lease_row_from_slot copied the version
 * out, so this backend's own pin is not in the way), and when it still has
 * no room, makes room elsewhere (lease_make_room).
 */
static void
lease_make_room_for_update(LeaseAccess *la, LeaseRow *row)
{
	Buffer		buf;
	Size		free;

	Assert(row->tight && lease_is_heap(la->rel));
	buf = ReadBuffer(la->rel, ItemPointerGetBlockNumber(&row->tid));
	heap_page_prune_opt(la->rel, buf);
	/* without the lock, as before: a hint */
	free = PageGetHeapFreeSpace(BufferGetPage(buf));
	ReleaseBuffer(buf);
	if (free < row->need)
		lease_make_room(la->rel, row->need);
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
				lease_make_room(la.rel, lease_new_row_size(lock_name, owner));
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
		*token = nextval_internal(seqrelid, true);

		/*
		 * Tokens of a name only grow: they come from one sequence, drawn
		 * after the last grant.  A sequence found behind the row was set
		 * back or left behind by a copy: it jumps past the row, and the
		 * token is drawn again (DlockTokenJumpPast).
		 */
		if (*token <= row.f.token)
		{
			(void) DlockTokenJumpPast(seqrelid, row.f.token);
			*token = nextval_internal(seqrelid, true);
		}
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

/*
 * DlockMarkLock is the common case of mode 'seen' (mark.c) without SPI:
 * it looks the mark of (owner, lock_name) up in the mark table relid
 * (whose primary key is on columns att_owner, a regrole, and att_name,
 * text in the "C" collation) with a fresh snapshot, locks the visible
 * version FOR NO KEY UPDATE, waiting, and following a concurrently changed
 * row to its newest version as READ COMMITTED does, sets *token to that
 * version's column att_token, and returns DLOCK_MARK_LOCKED.  Anything
 * else (no row, a row deleted or changed in a way it does not follow, a
 * SERIALIZABLE transaction, which needs SSI's predicate locks of the SQL
 * statement) returns DLOCK_MARK_UNSURE and locks nothing new: the caller
 * then runs the SQL statement, which handles every case.  Takes
 * RowShareLock on the table and AccessShareLock on its index, kept until
 * the transaction ends.  Evaluates no user-defined function.
 */
DlockMarkLockResult
DlockMarkLock(Oid relid, AttrNumber att_owner, AttrNumber att_name,
			  AttrNumber att_token, Oid owner, text *lock_name, int64 *token)
{
	Relation	rel;
	Relation	idx;
	Oid			pkey;
	Snapshot	snap;
	TupleTableSlot *slot;
	IndexScanDesc scan;
	ScanKeyData keys[2];
	bool		found;
	DlockMarkLockResult result = DLOCK_MARK_UNSURE;

	if (IsolationIsSerializable())
		return DLOCK_MARK_UNSURE;
	rel = table_open(relid, RowShareLock);
	pkey = DlockPrimaryKeyIndex(rel);
	if (!OidIsValid(pkey))
	{
		table_close(rel, NoLock);
		return DLOCK_MARK_UNSURE;
	}
	idx = index_open(pkey, AccessShareLock);
	if (IndexRelationGetNumberOfKeyAttributes(idx) != 2 ||
		idx->rd_index->indkey.values[0] != att_owner ||
		idx->rd_index->indkey.values[1] != att_name)
	{
		index_close(idx, NoLock);
		table_close(rel, NoLock);
		return DLOCK_MARK_UNSURE;
	}
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_OIDEQ, ObjectIdGetDatum(owner));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(lock_name));
	scan = DlockIndexBeginScan(rel, idx, snap, 2, 0);
	index_rescan(scan, keys, 2, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	/* no index page stays pinned while the lock below waits */
	index_endscan(scan);
	if (found)
	{
		ItemPointerData tid = slot->tts_tid;
		TM_FailureData tmfd;

		if (table_tuple_lock(rel, &tid, snap, slot, GetCurrentCommandId(true),
							 LockTupleNoKeyExclusive, LockWaitBlock,
							 TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS |
							 TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
							 &tmfd) == TM_Ok)
		{
			bool		isnull;
			Datum		d = slot_getattr(slot, att_owner, &isnull);

			/* the newest version is still the mark of (owner, lock_name) */
			if (!isnull && DatumGetObjectId(d) == owner &&
				slot_has_name(slot, att_name, lock_name))
			{
				d = slot_getattr(slot, att_token, &isnull);
				Assert(!isnull);
				*token = DatumGetInt64(d);
				result = DLOCK_MARK_LOCKED;
			}
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	return result;
}
