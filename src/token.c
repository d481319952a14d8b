/*-------------------------------------------------------------------------
 *
 * src/token.c
 *	  Token epochs: keeping fencing tokens increasing across crash,
 *	  failover and restore.  Part of the store layer; store.c calls it,
 *	  as the extension's owner, before it draws a token.
 *
 * Tokens come from the sequence dlock_token_seq (store.c).  A sequence
 * alone only moves forward while its WAL survives: a crash loses the
 * unflushed tail of WAL, a promoted asynchronous standby never saw the
 * primary's last records, and a restore brings back an older state.  In
 * each case the sequence would hand out again tokens the old server
 * already handed out.  So tokens carry an epoch: a token is
 *
 *     bits 62..47  generation  (DLOCK_GENERATION_SHIFT)
 *     bits 46..0   the count within the generation
 *
 * and the sequence jumps forward, durably, before the first token whenever
 * what was issued before may be unknown to this server:
 *
 * - The origin: dlock_token_origin (a sequence used as a durable register,
 *   because sequences are non-transactional and WAL-logged) holds a 63-bit
 *   hash of the identity of the server and database that last issued
 *   tokens: system identifier, timeline, database OID.  When the identity
 *   differs (after a promotion the timeline does; after a restore into
 *   another cluster or database the system identifier or the database OID
 *   does), the next token starts the next generation: it is greater than
 *   every token the old server could have issued, whatever it issued after
 *   this server's copy of its state was taken, as long as the old server
 *   stayed within its generation (2^47 tokens, or 2^15 boot jumps).
 *
 * - The boot jump (only with shared_preload_libraries = 'dlock'): at the
 *   first grant of each server start (crash restarts included), in each
 *   database, the sequence moves to the next multiple of 2^32 at least 2^31
 *   above its recovered value (DLOCK_BOOT_*).  A crash can only lose the
 *   WAL of tokens handed out after the last flush, far fewer than 2^31, so
 *   every token after the restart is greater than every token before it,
 *   and grants need not flush WAL themselves.  Shared memory records, per
 *   server start, the databases whose jump is done (DlockShared.boot_dbs).
 *   Without preload, or when that table is full, there is no boot jump and
 *   store.c flushes the sequence's WAL before handing out each token.
 *
 * A jump is setval() on the sequence (non-transactional, WAL-logged)
 * followed by an XLogFlush of that record, before any token of the new
 * range is handed out, and only then is the origin updated: a crash in
 * between leaves the old origin, and the next server jumps once more.
 * Jumps are idempotent in direction: they only ever move forward.
 *
 * Concurrency: a backend that finds the origin or the boot jump not done
 * takes dlock's token lock for its database (a session-level advisory lock
 * in class DLOCK_TOKEN_LOCK_CLASS, released before returning, never held
 * across anything that waits for a transaction), re-checks and jumps.  The
 * shared boot_dbs table is read and written under DlockShmem->lock
 * (exclusive to add a database).  A backend caches that its identity was
 * checked, for its current timeline; a promotion changes the timeline and
 * so forces a check.  nextval() is not serialized with a jump: a jump runs
 * before the first grant of its kind in each backend, and a backend that
 * granted earlier in the same server life and identity needs none.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "utils/fmgrprotos.h"

#include "dlock.h"

/* The generation: the bits above the count.  2^16 generations. */
#define DLOCK_GENERATION_SHIFT	47

/* The boot jump: to a multiple of 2^32, at least 2^31 ahead. */
#define DLOCK_BOOT_SHIFT		32
#define DLOCK_BOOT_MARGIN		(INT64CONST(1) << 31)

/* field4 of the token lock's tag (the name locks use 0xD10C) */
#define DLOCK_TOKEN_LOCK_CLASS	0xD10D

/* What this backend has checked. */
static struct
{
	bool		checked;		/* the identity matched, as of tli */
	Oid			seqrelid;		/* for this token sequence */
	TimeLineID	tli;
	bool		boot_done;		/* the boot jump covers this database */
} token_state;

/*
 * token_identity returns the 63-bit hash of the identity that issues
 * tokens here: system identifier, timeline and database.
 */
static int64
token_identity(TimeLineID tli)
{
	struct
	{
		uint64		sysid;
		uint32		tli;
		Oid			dbid;
	}			id;

	memset(&id, 0, sizeof(id));
	id.sysid = GetSystemIdentifier();
	id.tli = tli;
	id.dbid = MyDatabaseId;
	return (int64) (hash_bytes_extended((const unsigned char *) &id,
										sizeof(id), 0) & PG_INT64_MAX);
}

/*
 * seq_last_value returns the last value of sequence seqrelid, or -1 when
 * it was never called (or reset).  Takes the locks pg_sequence_last_value
 * takes: AccessShareLock on the sequence and a share lock on its buffer.
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
 * seq_set_durably sets sequence seqrelid so that its next value is next
 * (is_called false) or its last value is value (is_called true), and
 * flushes the WAL record to disk before returning.
 */
static void
seq_set_durably(Oid seqrelid, int64 value, bool is_called)
{
	DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(seqrelid),
						Int64GetDatum(value), BoolGetDatum(is_called));
	XLogFlush(XactLastRecEnd);
}

/*
 * next_generation returns the first token of the generation after that of
 * last.  Raises when the token space is used up.
 */
static int64
next_generation(int64 last)
{
	int64		gen = (last >> DLOCK_GENERATION_SHIFT) + 1;

	if (gen >= (INT64CONST(1) << (63 - DLOCK_GENERATION_SHIFT)))
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("fencing tokens are used up"),
				 errdetail("The last token is " INT64_FORMAT ", in the last generation.", last)));
	return gen << DLOCK_GENERATION_SHIFT;
}

/*
 * next_boot returns the next multiple of 2^32 at least DLOCK_BOOT_MARGIN
 * above last.
 */
static int64
next_boot(int64 last)
{
	int64		step = INT64CONST(1) << DLOCK_BOOT_SHIFT;

	if (last > PG_INT64_MAX - DLOCK_BOOT_MARGIN - step)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("fencing tokens are used up"),
				 errdetail("The last token is " INT64_FORMAT ".", last)));
	return ((last + DLOCK_BOOT_MARGIN) / step + 1) * step;
}

/*
 * boot_db_done reports whether this server start's boot jump was done for
 * the current database; with claim, records that it is now done, and
 * returns false when the shared table has no room (then nothing is
 * recorded and grants keep flushing).  Takes DlockShmem->lock.
 */
static bool
boot_db_done(bool claim)
{
	bool		done = false;
	int			i;

	LWLockAcquire(DlockShmem->lock, claim ? LW_EXCLUSIVE : LW_SHARED);
	for (i = 0; i < DlockShmem->nboot_dbs; i++)
	{
		if (DlockShmem->boot_dbs[i] == MyDatabaseId)
		{
			done = true;
			break;
		}
	}
	if (!done && claim && DlockShmem->nboot_dbs < DLOCK_BOOT_DBS)
	{
		DlockShmem->boot_dbs[DlockShmem->nboot_dbs++] = MyDatabaseId;
		done = true;
	}
	LWLockRelease(DlockShmem->lock);
	return done;
}

/*
 * token_jump_locked does the checks and jumps of DlockTokenPrepare under
 * the token lock and returns whether the boot jump covers this database.
 */
static bool
token_jump_locked(Oid seqrelid, Oid originrelid, int64 identity)
{
	int64		origin = seq_last_value(originrelid);
	int64		last = seq_last_value(seqrelid);
	bool		boot_done = DlockShmem != NULL && boot_db_done(false);

	if (origin != identity)
	{
		/* Another issuer (or an unknown one) may have gone further. */
		if (last >= 0)
			seq_set_durably(seqrelid, next_generation(last), false);
		seq_set_durably(originrelid, identity, true);
		if (DlockShmem != NULL && !boot_done)
			boot_done = boot_db_done(true);
	}
	else if (DlockShmem != NULL && !boot_done)
	{
		/*
		 * Claim the slot first: with no room, grants keep flushing and no
		 * jump is needed.
		 */
		if (boot_db_done(true))
		{
			if (last >= 0)
				seq_set_durably(seqrelid, next_boot(last), false);
			boot_done = true;
		}
	}
	return boot_done;
}

/*
 * DlockTokenPrepare makes sure the token sequence seqrelid may hand out
 * tokens on this server: the origin register originrelid matches this
 * server's identity, and (with preload) this server start's boot jump was
 * done for this database; otherwise it jumps the sequence forward and
 * records the identity (see the file header).  Must run as the owner of
 * both sequences, on a primary.  Without originrelid (an extension whose
 * SQL predates token epochs) it does nothing.  Takes the token lock only
 * when something is to be checked.
 */
void
DlockTokenPrepare(Oid seqrelid, Oid originrelid)
{
	TimeLineID	tli;
	LOCKTAG		tag;
	volatile bool boot_done = false;

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
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, DLOCK_TOKEN_LOCK_CLASS);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	PG_TRY();
	{
		boot_done = token_jump_locked(seqrelid, originrelid,
									  token_identity(tli));
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
 * DlockTokenNeedsFlush reports whether a token just drawn must have its
 * sequence WAL flushed before it is handed out: always, unless this
 * server start's boot jump covers the database (see the file header).
 */
bool
DlockTokenNeedsFlush(void)
{
	return !(token_state.checked && token_state.boot_done);
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
