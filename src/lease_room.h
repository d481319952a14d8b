/*-------------------------------------------------------------------------
 *
 * src/lease_room.h
 *	  Where new versions of lease rows go (lease_room.c), as
 *	  lease_table.c calls it.
 *
 * Concurrency: lease_room.c's header (the relation extension lock, buffer
 * locks one at a time).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_LEASE_ROOM_H
#define DLOCK_LEASE_ROOM_H

#include "storage/itemptr.h"
#include "utils/relcache.h"

extern void DlockLeaseMakeRoom(Relation rel, Size need);
extern void DlockLeaseMakeRoomForUpdate(Relation rel, ItemPointer tid,
										Size need);

#endif							/* DLOCK_LEASE_ROOM_H */
