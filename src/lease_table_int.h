/*-------------------------------------------------------------------------
 *
 * src/lease_table_int.h
 *	  What the files of direct access share (lease_table.c,
 *	  lease_change.c, lease_fence.c): an open lease table, a row as read,
 *	  and the primitives that open, read and write it.  Private to them.
 *
 * Concurrency: lease_table.c's header.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_LEASE_TABLE_INT_H
#define DLOCK_LEASE_TABLE_INT_H

#include "access/tableam.h"
#include "executor/tuptable.h"
#include "utils/snapshot.h"

#include "compat.h"
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
	bool		want_xmax;		/* DlockLeaseRowFromSlot reads the xmax
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



extern Relation DlockLeasePkeyOpen(const DlockLeaseTable *table, Relation rel,
								   LOCKMODE lockmode);
extern bool DlockLeaseLookup(Relation rel, Relation idx, Snapshot snapshot,
							 text *lock_name, TupleTableSlot *slot);
extern void DlockLeaseOpen(LeaseAccess *la, const DlockLeaseTable *table);
extern void DlockLeaseClose(LeaseAccess *la);
extern Datum DlockLeaseField(TupleTableSlot *slot, AttrNumber attnum);
extern bool DlockLeaseIsHeap(Relation rel);
extern void DlockLeaseRowFromSlot(LeaseAccess *la, LeaseRow *row);
extern bool DlockLeaseRead(LeaseAccess *la, Snapshot snapshot, text *lock_name,
						   LeaseRow *row);
extern bool DlockLeaseRowLive(LeaseRow *row, TimestampTz now);
extern TM_Result DlockLeaseWrite(LeaseAccess *la, Snapshot snapshot,
								 text *lock_name, LeaseRow *row);
extern bool DlockLeaseRowBusy(const LeaseRow *row);

#endif							/* DLOCK_LEASE_TABLE_INT_H */
