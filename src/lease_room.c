/*-------------------------------------------------------------------------
 *
 * src/lease_room.c
 *	  Where new versions of lease rows go: when a row's page is full, or
 *	  before a name's first row, this backend's insertion target of the
 *	  lease table is pointed at a page with room, pruning pages and adding
 *	  new ones one at a time (design.md §14 says why and why it is safe).
 *
 * Only for the heap access method (the caller checks), and only while the
 * table has at most ROOM_MAX_PAGES pages; a larger one is left to
 * PostgreSQL.  The insertion target and the free space map are hints that
 * heap_update and heap_insert check under the page's lock.
 *
 * Concurrency: the caller holds a lock on the table (so VACUUM cannot
 * truncate it meanwhile).  Buffers are locked one at a time, share, to
 * read a page's free space, never across a wait.  The relation extension
 * lock is taken, waiting, only to add pages, holding no buffer lock and
 * no LWLock, and released before returning; while it is held only the new
 * page and the free space map's pages are locked.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "storage/bufmgr.h"
#include "storage/freespace.h"
#include "storage/lmgr.h"
#include "utils/rel.h"

#include "lease_room.h"

/*
 * The largest lease table (in pages) whose new row versions dlock places
 * itself when their page is full (DlockLeaseMakeRoom); a larger one is
 * left to PostgreSQL.  The pages it reads then are at most this many.
 */
#define ROOM_MAX_PAGES	32

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
 * DlockLeaseMakeRoom points this backend's insertion target of the lease
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
void
DlockLeaseMakeRoom(Relation rel, Size need)
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
 * DlockLeaseMakeRoomForUpdate runs before the update of the version at tid
 * of the lease table rel (heap) when its page looked too full for a new
 * version of need bytes: prunes that page if it can (heap_page_prune_opt;
 * the caller holds no pin on it), and when it still has no room, makes
 * room elsewhere (DlockLeaseMakeRoom).
 */
void
DlockLeaseMakeRoomForUpdate(Relation rel, ItemPointer tid, Size need)
{
	Buffer		buf;
	Size		free;

	buf = ReadBuffer(rel, ItemPointerGetBlockNumber(tid));
	heap_page_prune_opt(rel, buf);
	/* without the lock, as before: a hint */
	free = PageGetHeapFreeSpace(BufferGetPage(buf));
	ReleaseBuffer(buf);
	if (free < need)
		DlockLeaseMakeRoom(rel, need);
}
