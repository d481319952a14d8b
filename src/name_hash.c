/*-------------------------------------------------------------------------
 *
 * src/name_hash.c
 *	  DlockNameHash: the 64-bit hash of a lock name that dlock keys its name
 *	  lock (store_ops.c), its wait queues' buckets and any-waiters' name
 *	  sets (wait.c), the fence cache's buckets (fence_cache.c) and the
 *	  record of checks (checked.c) on.  A keyed pseudo-random function,
 *	  SipHash-2-4 (name_hash.h), so that no role can choose two names with
 *	  equal hashes.
 *
 * Why keyed.  With an unkeyed hash (1.2 before issue 22 used
 * hash_bytes_extended with seed 0), a role can search offline for a name
 * whose hash equals that of another role's name: tools/hash-collide.c
 * finds such a pair in about a minute of one core.  A colliding name then
 * took the other name's advisory name lock (so an open transaction that
 * created its own name's first row made the other's first acquire return
 * NULL) and stood in its wait queue.  Under a key that no role can learn,
 * equal hashes of distinct names happen only by chance (one pair in 2^64),
 * and finding a name whose hash equals a given name's needs the key or
 * about 2^64 tries of the server itself; the queues compare whole names
 * anyway (wait.c), and so do the fence cache and checked.c.
 *
 * The key.  128 bits: the first 16 bytes of SHA-256 over the cluster's
 * mock authentication nonce (32 random bytes that initdb writes into
 * pg_control, for SCRAM's mock authentication; PostgreSQL 11 and later,
 * read with GetMockAuthenticationNonce() in 15, 17 and 18 alike) followed
 * by the label "dlock name hash".  No SQL function shows the nonce
 * (pg_control_system() does not); reading it takes the file global/
 * pg_control, so a superuser or a member of pg_read_server_files.  The key
 * is derived, not the nonce used as such, so that the hash values anyone
 * can see (pg_locks shows the name lock's key) reveal nothing about the
 * nonce, which SCRAM's mock authentication relies on.  Each backend
 * derives it once, at its first hash (never in the postmaster: it is only
 * called from SQL functions and the fence trigger, inside a transaction).
 *
 * Hash values are never stored on disk or compared across clusters: the
 * queues, the any-waiters' sets and the fence cache live in shared memory,
 * rebuilt at every start; checked.c's record lives for one transaction;
 * the name lock is a transaction-scoped lock that a prepared transaction
 * keeps through a restart, in the same cluster (a standby made from a base
 * backup has the primary's pg_control, so the same key).  A new cluster
 * (initdb, pg_upgrade) has a new nonce and so new hash values, which
 * nothing carries over.
 *
 * Concurrency: none; the key is backend-local, written once.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_control.h"
#include "common/cryptohash.h"
#include "common/sha2.h"

#include "compat.h"
#include "dlock.h"
#include "name_hash.h"

/* The label that makes dlock's key differ from other uses of the nonce. */
#define NAME_HASH_LABEL		"dlock name hash"

/* This backend's key, derived at the first hash. */
static bool key_ready = false;
static uint64 key0;
static uint64 key1;

/*
 * name_hash_key_init derives the key (see the file header).  Raises when
 * SHA-256 fails (out of memory, or the crypto library's error).
 */
static void
name_hash_key_init(void)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	Assert(IsTransactionState());
	ctx = pg_cryptohash_create(PG_SHA256);
	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) GetMockAuthenticationNonce(),
							 MOCK_AUTH_NONCE_LEN) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) NAME_HASH_LABEL,
							 strlen(NAME_HASH_LABEL)) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
	{
		char	   *reason = pstrdup(pg_cryptohash_error(ctx));

		pg_cryptohash_free(ctx);
		elog(ERROR, "could not derive the key of dlock's name hash: %s",
			 reason);
	}
	pg_cryptohash_free(ctx);
	key0 = sip_load_le(digest);
	key1 = sip_load_le(digest + 8);
	explicit_bzero(digest, sizeof(digest));
	key_ready = true;
}

/*
 * DlockNameHash returns the keyed 64-bit hash of lock_name (see the file
 * header).  The first call of a backend derives the key, and can raise.
 */
uint64
DlockNameHash(text *lock_name)
{
	if (unlikely(!key_ready))
		name_hash_key_init();
	return DlockSipHash24(key0, key1,
						  (const unsigned char *) VARDATA_ANY(lock_name),
						  VARSIZE_ANY_EXHDR(lock_name));
}
