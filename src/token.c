/*-------------------------------------------------------------------------
 *
 * src/token.c
 *	  Token jumps: keeping fencing tokens increasing across crash,
 *	  failover and restore, and a takeover's draw of a token.  Part of the
 *	  store layer: called only by the store (store_ops.c before a grant and
 *	  after it, store_cache.c when its cache is rebuilt, lease_change.c for
 *	  a takeover's token), as the extension's owner.
 *
 * Owns the register dlock_token_origin (the identity of the issuer), the
 * jumps of dlock_token_seq to max(last value + 1, the clock in
 * microseconds since 2000-01-01), flushed before any token of the new
 * range is handed out, the boot jump of each server start (with preload:
 * its table in this file's shared memory, "dlock token boot"), and the
 * WAL flush of a grant without one.  Why a jump lands above every token
 * issued before, and what it asks of the clock: design.md §7.
 *
 * Concurrency: a backend that finds the origin or the boot jump not done
 * takes dlock's token lock for its database (a session-level advisory lock
 * in class DLOCK_TOKEN_LOCK_CLASS, released before returning, never held
 * across anything that waits for a transaction), re-checks and jumps.  The
 * boot jumps' table is read and written under its spinlock, held only to
 * scan its at most DLOCK_BOOT_DBS entries.  nextval() is not serialized
 * with a jump, and need not be (design.md §7).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/fmgrprotos.h"
#include "utils/rel.h"

#include "compat.h"
#include "dlock.h"

/* field4 of the token lock's tag (the name locks use 0xD10C) */
#define DLOCK_TOKEN_LOCK_CLASS	0xD10D

/* What this backend has checked. */
static struct
{
	bool		checked;		/* the identity matched, as of tli */
	Oid			seqrelid;		/* for this token sequence */
	TimeLineID	tli;
	bool		boot_done;		/* the boot jump covers this database */
}			token_state;

/*
 * token_locktag fills tag with the token lock of the current database.
 */
static void
token_locktag(LOCKTAG *tag)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, 0, 0, DLOCK_TOKEN_LOCK_CLASS);
}

#ifdef USE_ASSERT_CHECKING
/*
 * token_lock_held reports whether this backend holds the token lock.
 */
static bool
token_lock_held(void)
{
	LOCKTAG		tag;

	token_locktag(&tag);
	return DlockLockHeldByMe(&tag, ExclusiveLock);
}
#endif

/*
 * token_identity returns the 63-bit hash of the identity that issues
 * tokens here: system identifier, timeline, database and the token
 * sequence itself (a restore, even in place, recreates it with a new OID).
 */
static int64
token_identity(TimeLineID tli, Oid seqrelid)
{
	struct
	{
		uint64		sysid;
		uint32		tli;
		Oid			dbid;
		Oid			seqrelid;
	}			id;

	memset(&id, 0, sizeof(id));
	id.sysid = GetSystemIdentifier();
	id.tli = tli;
	id.dbid = MyDatabaseId;
	id.seqrelid = seqrelid;
	return (int64) (hash_bytes_extended((const unsigned char *) &id,
										sizeof(id), 0) & PG_INT64_MAX);
}

/*
 * seq_last_value returns the last value of sequence seqrelid, or -1 when
 * it was never called (or reset).  Takes the locks pg_sequence_last_value
 * takes (those of nextval's lookup of the sequence, and a share lock on
 * its buffer).
 */
static int64
seq_last_value(Oid seqrelid)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		d;

	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = ObjectIdGetDatum(seqrelid);
	fcinfo->args[0].isnull = false;
	d = pg_sequence_last_value(fcinfo);
	if (fcinfo->isnull)
		return -1;
	return DatumGetInt64(d);
}

/*
 * seq_set_durably sets the last value of sequence seqrelid to value
 * (is_called true: its next value is value + 1) and flushes the WAL record
 * to disk before returning.  Leaving the sequence "called" matters: a
 * sequence that was never called reads as having handed out nothing.
 */
static void
seq_set_durably(Oid seqrelid, int64 value)
{
	Assert(!RecoveryInProgress());
	DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(seqrelid),
						Int64GetDatum(value), BoolGetDatum(true));
	XLogFlush(XactLastRecEnd);
	/* (another backend may have drawn tokens since: 1.0 SQL during an update) */
	Assert(seq_last_value(seqrelid) >= value);
}

/*
 * next_jump returns where a jump moves the sequence whose last value is
 * last: the server clock in microseconds since 2000-01-01, or last + 1 if
 * that is greater (see the file header).  Raises when tokens are used up.
 */
static int64
next_jump(int64 last)
{
	TimestampTz now = GetCurrentTimestamp();

	if (last >= PG_INT64_MAX - 1)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("fencing tokens are used up"),
				 errdetail("The last token is " INT64_FORMAT ".", last)));
	return Max(last + 1, (int64) now);
}

/* Databases whose token boot jump a server start can record. */
#define DLOCK_BOOT_DBS		64

/* The databases whose boot jump this server start has done. */
typedef struct TokenShared
{
	slock_t		mutex;			/* protects the rest */
	int			nboot_dbs;
	Oid			boot_dbs[DLOCK_BOOT_DBS];
} TokenShared;

/* NULL unless dlock is preloaded. */
static TokenShared *token_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Where this server start stands with the current database's boot jump. */
typedef enum BootState
{
	BOOT_DONE,					/* recorded in boot_dbs */
	BOOT_TODO,					/* not yet, and there is room to record it */
	BOOT_NO_ROOM				/* not recorded, and boot_dbs is full */
} BootState;

/*
 * boot_state returns the BootState of the current database; with record,
 * first records it as done when there is room.  Takes the table's
 * spinlock.
 */
static BootState
boot_state(bool record)
{
	BootState	state = BOOT_NO_ROOM;
	int			i;

	Assert(token_shared != NULL);
	SpinLockAcquire(&token_shared->mutex);
	for (i = 0; i < token_shared->nboot_dbs; i++)
	{
		if (token_shared->boot_dbs[i] == MyDatabaseId)
		{
			state = BOOT_DONE;
			break;
		}
	}
	if (state != BOOT_DONE && token_shared->nboot_dbs < DLOCK_BOOT_DBS)
	{
		state = BOOT_TODO;
		if (record)
		{
			token_shared->boot_dbs[token_shared->nboot_dbs++] = MyDatabaseId;
			state = BOOT_DONE;
		}
	}
	SpinLockRelease(&token_shared->mutex);
	return state;
}

/*
 * token_jump moves the token sequence seqrelid, durably, to next_jump() of
 * its last value (taken as 0 when the sequence reads as never called: a
 * crash may have lost the WAL of its first grants, so that proves
 * nothing).  Called under the token lock.
 */
static void
token_jump(Oid seqrelid)
{
	int64		last = seq_last_value(seqrelid);
	int64		target = next_jump(Max(last, 0)) - 1;

	/* a jump only ever moves the sequence forward */
	Assert(target >= last);
	seq_set_durably(seqrelid, target);
	DlockStatsCount(DLOCK_STAT_TOKEN_JUMPS, 1);
}

/*
 * token_jump_locked does the checks and jumps of DlockTokenPrepare under
 * the token lock and returns whether the boot jump covers this database.
 * A jump is made durable before it is recorded anywhere.
 */
static bool
token_jump_locked(Oid seqrelid, Oid originrelid, int64 identity)
{
	int64		origin;
	BootState	boot;

	Assert(token_lock_held());
	origin = seq_last_value(originrelid);
	boot = token_shared != NULL ? boot_state(false) : BOOT_NO_ROOM;

	if (origin != identity)
	{
		/*
		 * Another issuer (or an unknown one: the register was never set, as
		 * after an update from 1.0) may have gone further.
		 */
		token_jump(seqrelid);
		seq_set_durably(originrelid, identity);
	}
	else if (boot == BOOT_TODO)
		token_jump(seqrelid);	/* the first grant of this server start */
	else
		return boot == BOOT_DONE;

	/* A jump was just made: it covers this start too, if it can be recorded. */
	return token_shared != NULL && boot_state(true) == BOOT_DONE;
}

/*
 * DlockTokenPrepare makes sure the token sequence seqrelid may hand out
 * tokens on this server: the origin register originrelid matches this
 * server's identity, and (with preload) this server start's boot jump was
 * done for this database; otherwise it jumps the sequence forward and
 * records the identity (see the file header).  Must run as the owner of
 * both sequences, on a primary.  Without originrelid (an extension whose
 * SQL predates token jumps) it does nothing.  Takes the token lock only
 * when something is to be checked.
 */
void
DlockTokenPrepare(Oid seqrelid, Oid originrelid)
{
	TimeLineID	tli;
	LOCKTAG		tag;
	volatile bool boot_done = false;

	/* store.c calls this as the extension's owner, on a primary */
	Assert(InLocalUserIdChange());
	Assert(!RecoveryInProgress());
	if (!OidIsValid(originrelid))
	{
		token_state.checked = false;
		return;
	}
	tli = GetWALInsertionTimeLine();
	if (token_state.checked && token_state.seqrelid == seqrelid &&
		token_state.tli == tli)
		return;

	token_state.checked = false;
	token_locktag(&tag);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	PG_TRY();
	{
		boot_done = token_jump_locked(seqrelid, originrelid,
									  token_identity(tli, seqrelid));
	}
	PG_FINALLY();
	{
		LockRelease(&tag, ExclusiveLock, true);
	}
	PG_END_TRY();

	token_state.seqrelid = seqrelid;
	token_state.tli = tli;
	token_state.boot_done = boot_done;
	token_state.checked = true;
}

/*
 * token_jump_past moves the token sequence seqrelid, durably, above
 * floor (a token a lease row already carries) when its last value is not
 * above it, and returns true when it moved it.  That cannot happen while
 * the sequence and the lease table move together; it happens when they
 * were separated: a manual setval, or a copy of the table whose sequence
 * stayed behind (logical replication does not replicate sequences).
 * Tokens of a name must still only grow, so the sequence jumps as in a
 * token jump, to max(floor + 1, the clock), and a WARNING tells the
 * operator.  Takes the token lock.  Must run as the sequence's owner.
 */
static bool
token_jump_past(Oid seqrelid, int64 floor)
{
	LOCKTAG		tag;
	volatile bool jumped = false;

	Assert(InLocalUserIdChange());
	token_locktag(&tag);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	PG_TRY();
	{
		int64		last = seq_last_value(seqrelid);

		if (last <= floor)
		{
			int64		target = next_jump(floor) - 1;

			seq_set_durably(seqrelid, target);
			jumped = true;
			DlockStatsCount(DLOCK_STAT_TOKEN_JUMPS, 1);
			ereport(WARNING,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("dlock's token sequence was behind its lease table"),
					 errdetail("The sequence's last value was " INT64_FORMAT ", but a lease already carries token " INT64_FORMAT "; the sequence jumped to " INT64_FORMAT ".",
							   last, floor, target),
					 errhint("Find out how the sequence was set back (a setval, or a copy of the table without its sequence), and check whether tokens of other names were issued twice.")));
		}
	}
	PG_FINALLY();
	{
		LockRelease(&tag, ExclusiveLock, true);
	}
	PG_END_TRY();
	return jumped;
}

/*
 * token_flush_wal makes the WAL record that covers every token handed out
 * so far durable: it flushes WAL up to the LSN of the token sequence's page
 * (see the file header).  Takes AccessShareLock on the sequence seqrelid
 * (already held by nextval in this transaction) and a brief share lock on
 * its buffer.
 */
static void
token_flush_wal(Oid seqrelid)
{
	Relation	seqrel = relation_open(seqrelid, AccessShareLock);
	Buffer		buf = ReadBuffer(seqrel, 0);
	XLogRecPtr	lsn;

	Assert(seqrel->rd_rel->relkind == RELKIND_SEQUENCE);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, AccessShareLock);

	XLogFlush(lsn);
}

/*
 * DlockTokenDrawAbove draws the token of a takeover from the token
 * sequence seqrelid (nextval), above floor, the token the name's row
 * carries: tokens of a name only grow, since they come from one sequence,
 * drawn after the last grant.  A sequence found behind the row was set
 * back or left behind by a copy: it jumps past the row (token_jump_past),
 * and the token is drawn again.  Must run as the sequence's owner.
 */
int64
DlockTokenDrawAbove(Oid seqrelid, int64 floor)
{
	int64		token = nextval_internal(seqrelid, true);

	if (token <= floor)
	{
		(void) token_jump_past(seqrelid, floor);
		token = nextval_internal(seqrelid, true);
	}
	Assert(token > floor);
	return token;
}

/*
 * DlockTokenMakeDurable is called when a grant drew a token from the
 * sequence seqrelid: it makes the token safe to hand out.  Nothing to do
 * when this server start's boot jump covers the database; otherwise it
 * flushes the sequence's WAL (see the file header).
 */
void
DlockTokenMakeDurable(Oid seqrelid)
{
	if (!(token_state.checked && token_state.boot_done))
		token_flush_wal(seqrelid);
}

/*
 * DlockTokenForget drops what this backend checked (the extension's
 * objects were rebuilt, say); the next grant checks again.
 */
void
DlockTokenForget(void)
{
	token_state.checked = false;
}

/*
 * DlockTokenSetOrigin records, when the extension is created, that this server
 * issues the tokens of the new sequence seqrelid: it sets the register
 * originrelid to this server's identity (and, with preload, records this
 * start's boot jump as done for the database, since nothing was issued
 * before), so that a fresh install counts from 1.  Without it the first
 * grant would find the register unset and jump.  Raises unless both
 * sequences are new (never called): anything else could skip a jump that
 * is needed.  Must run as their owner, on a primary.
 */
void
DlockTokenSetOrigin(Oid seqrelid, Oid originrelid)
{
	if (seq_last_value(seqrelid) >= 0 || seq_last_value(originrelid) >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the token state of extension \"dlock\" is already initialized"),
				 errdetail("Only CREATE EXTENSION dlock initializes it.")));
	seq_set_durably(originrelid,
					token_identity(GetWALInsertionTimeLine(), seqrelid));
	if (token_shared != NULL)
		(void) boot_state(true);
	DlockTokenForget();
}

/*
 * token_shmem_request asks for the boot jumps' table, after chaining to
 * the previous hook.
 */
static void
token_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(TokenShared));
}

/*
 * token_shmem_startup attaches to (or, first, empties) the boot jumps'
 * table, after chaining to the previous hook.  Takes AddinShmemInitLock.
 */
static void
token_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	token_shared = ShmemInitStruct("dlock token boot", sizeof(TokenShared),
								   &found);
	if (!found)
	{
		SpinLockInit(&token_shared->mutex);
		token_shared->nboot_dbs = 0;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * DlockTokenInit installs the hooks of the boot jumps' table when dlock is
 * being preloaded (without preload every grant flushes instead); _PG_init
 * calls it.
 */
void
DlockTokenInit(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = token_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = token_shmem_startup;
}
