/*-------------------------------------------------------------------------
 *
 * src/name_hash.h
 *	  SipHash-2-4, the keyed pseudo-random function behind DlockNameHash
 *	  (name_hash.c), written from its published description: J.-P.
 *	  Aumasson and D. J. Bernstein, "SipHash: a fast short-input PRF"
 *	  (INDOCRYPT 2012), section 2.
 *
 * Needs only c.h (postgres.h or postgres_fe.h first), so that
 * tools/name-hash-cost.c can check it against the paper's test vectors and
 * time it against hash_bytes_extended outside the server.
 *
 * The function: the 128-bit key is two little-endian 64-bit words k0, k1;
 * the state v0..v3 starts as the key xor the constants of the paper
 * ("somepseudorandomlygeneratedbytes"); the message is taken as
 * little-endian 64-bit words, the last one holding the remaining bytes and,
 * in its top byte, the message length mod 256; each word m is absorbed as
 * v3 ^= m, two SipRounds, v0 ^= m; then v2 ^= 0xff, four SipRounds, and
 * the result is v0 ^ v1 ^ v2 ^ v3.
 *
 * Concurrency: none; pure functions.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_NAME_HASH_H
#define DLOCK_NAME_HASH_H

#include "port/pg_bswap.h"

/*
 * sip_rotl rotates x left by b bits (0 < b < 64).
 */
static inline uint64
sip_rotl(uint64 x, int b)
{
	return (x << b) | (x >> (64 - b));
}

/*
 * sip_load_le returns the 8 bytes at p as a little-endian word.
 */
static inline uint64
sip_load_le(const unsigned char *p)
{
	uint64		w;

	memcpy(&w, p, sizeof(w));
#ifdef WORDS_BIGENDIAN
	w = pg_bswap64(w);
#endif
	return w;
}

/* One SipRound on the state v[0..3]. */
#define SIP_ROUND(v) \
	do { \
		(v)[0] += (v)[1]; (v)[1] = sip_rotl((v)[1], 13); (v)[1] ^= (v)[0]; \
		(v)[0] = sip_rotl((v)[0], 32); \
		(v)[2] += (v)[3]; (v)[3] = sip_rotl((v)[3], 16); (v)[3] ^= (v)[2]; \
		(v)[0] += (v)[3]; (v)[3] = sip_rotl((v)[3], 21); (v)[3] ^= (v)[0]; \
		(v)[2] += (v)[1]; (v)[1] = sip_rotl((v)[1], 17); (v)[1] ^= (v)[2]; \
		(v)[2] = sip_rotl((v)[2], 32); \
	} while (0)

/*
 * DlockSipHash24 returns SipHash-2-4 of the len bytes at data under the
 * key (k0, k1).
 */
static inline uint64
DlockSipHash24(uint64 k0, uint64 k1, const unsigned char *data, size_t len)
{
	uint64		v[4];
	uint64		last;
	size_t		full = len - len % 8;
	size_t		i;

	v[0] = k0 ^ UINT64CONST(0x736f6d6570736575);
	v[1] = k1 ^ UINT64CONST(0x646f72616e646f6d);
	v[2] = k0 ^ UINT64CONST(0x6c7967656e657261);
	v[3] = k1 ^ UINT64CONST(0x7465646279746573);

	for (i = 0; i < full; i += 8)
	{
		uint64		m = sip_load_le(data + i);

		v[3] ^= m;
		SIP_ROUND(v);
		SIP_ROUND(v);
		v[0] ^= m;
	}

	/* the remaining 0..7 bytes, and the length in the top byte */
	last = ((uint64) (len & 0xff)) << 56;
	for (i = 0; i < len % 8; i++)
		last |= ((uint64) data[full + i]) << (8 * i);
	v[3] ^= last;
	SIP_ROUND(v);
	SIP_ROUND(v);
	v[0] ^= last;

	v[2] ^= 0xff;
	SIP_ROUND(v);
	SIP_ROUND(v);
	SIP_ROUND(v);
	SIP_ROUND(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

#endif							/* DLOCK_NAME_HASH_H */
