/*-------------------------------------------------------------------------
 *
 * tools/name-hash-cost.c
 *	  Checks dlock's SipHash-2-4 (src/name_hash.h) against the 64 test
 *	  vectors of the SipHash paper (key 00 01 .. 0f, messages 00 01 .. of
 *	  0 to 63 bytes), then times it against hash_bytes_extended, the
 *	  unkeyed hash DlockNameHash used before (PostgreSQL's common library,
 *	  linked), on lock names of typical lengths.
 *
 *	    cc -O2 -I"$(pg_config --includedir-server)" tools/name-hash-cost.c \
 *	       -L"$(pg_config --pkglibdir)" -lpgcommon -lpgport \
 *	       -o /tmp/name-hash-cost
 *	    /tmp/name-hash-cost [ROUNDS]
 *
 * Exits 1 when a vector does not match.  Prints one line per length: the
 * nanoseconds per hash of each function (the best of five runs of ROUNDS
 * hashes of distinct names, default 10^7).  test/t/061_hostile_wait.pl
 * builds it and runs it with a small ROUNDS for the vectors; bench/README.md
 * has the figures.  DlockNameHash adds a function call and a varlena
 * header read to what this measures.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <time.h>

#include "common/hashfn.h"

#include "../src/name_hash.h"

/* The outputs for messages of 0 .. 63 bytes (the paper's appendix). */
static const uint64 vectors[64] = {
	UINT64CONST(0x726fdb47dd0e0e31), UINT64CONST(0x74f839c593dc67fd),
	UINT64CONST(0x0d6c8009d9a94f5a), UINT64CONST(0x85676696d7fb7e2d),
	UINT64CONST(0xcf2794e0277187b7), UINT64CONST(0x18765564cd99a68d),
	UINT64CONST(0xcbc9466e58fee3ce), UINT64CONST(0xab0200f58b01d137),
	UINT64CONST(0x93f5f5799a932462), UINT64CONST(0x9e0082df0ba9e4b0),
	UINT64CONST(0x7a5dbbc594ddb9f3), UINT64CONST(0xf4b32f46226bada7),
	UINT64CONST(0x751e8fbc860ee5fb), UINT64CONST(0x14ea5627c0843d90),
	UINT64CONST(0xf723ca908e7af2ee), UINT64CONST(0xa129ca6149be45e5),
	UINT64CONST(0x3f2acc7f57c29bdb), UINT64CONST(0x699ae9f52cbe4794),
	UINT64CONST(0x4bc1b3f0968dd39c), UINT64CONST(0xbb6dc91da77961bd),
	UINT64CONST(0xbed65cf21aa2ee98), UINT64CONST(0xd0f2cbb02e3b67c7),
	UINT64CONST(0x93536795e3a33e88), UINT64CONST(0xa80c038ccd5ccec8),
	UINT64CONST(0xb8ad50c6f649af94), UINT64CONST(0xbce192de8a85b8ea),
	UINT64CONST(0x17d835b85bbb15f3), UINT64CONST(0x2f2e6163076bcfad),
	UINT64CONST(0xde4daaaca71dc9a5), UINT64CONST(0xa6a2506687956571),
	UINT64CONST(0xad87a3535c49ef28), UINT64CONST(0x32d892fad841c342),
	UINT64CONST(0x7127512f72f27cce), UINT64CONST(0xa7f32346f95978e3),
	UINT64CONST(0x12e0b01abb051238), UINT64CONST(0x15e034d40fa197ae),
	UINT64CONST(0x314dffbe0815a3b4), UINT64CONST(0x027990f029623981),
	UINT64CONST(0xcadcd4e59ef40c4d), UINT64CONST(0x9abfd8766a33735c),
	UINT64CONST(0x0e3ea96b5304a7d0), UINT64CONST(0xad0c42d6fc585992),
	UINT64CONST(0x187306c89bc215a9), UINT64CONST(0xd4a60abcf3792b95),
	UINT64CONST(0xf935451de4f21df2), UINT64CONST(0xa9538f0419755787),
	UINT64CONST(0xdb9acddff56ca510), UINT64CONST(0xd06c98cd5c0975eb),
	UINT64CONST(0xe612a3cb9ecba951), UINT64CONST(0xc766e62cfcadaf96),
	UINT64CONST(0xee64435a9752fe72), UINT64CONST(0xa192d576b245165a),
	UINT64CONST(0x0a8787bf8ecb74b2), UINT64CONST(0x81b3e73d20b49b6f),
	UINT64CONST(0x7fa8220ba3b2ecea), UINT64CONST(0x245731c13ca42499),
	UINT64CONST(0xb78dbfaf3a8d83bd), UINT64CONST(0xea1ad565322a1a0b),
	UINT64CONST(0x60e61c23a3795013), UINT64CONST(0x6606d7e446282b93),
	UINT64CONST(0x6ca4ecb15c5f91e1), UINT64CONST(0x9f626da15c9625f3),
	UINT64CONST(0xe51b38608ef25f57), UINT64CONST(0x958a324ceb064572),
};

/*
 * now_ns returns a monotonic clock in nanoseconds.
 */
static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/*
 * time_one returns the nanoseconds per hash of the function (siphash or
 * not) over rounds names of len bytes, the best of five runs; *sink keeps
 * the results alive.
 */
static double
time_one(bool siphash, int len, long rounds, uint64 *sink)
{
	unsigned char name[64];
	double		best = 0;
	int			run;

	/* a lock name like "job:report:0000000042", padded with letters */
	for (int i = 0; i < len; i++)
		name[i] = (unsigned char) ('a' + i % 26);
	for (run = 0; run < 5; run++)
	{
		double		t0 = now_ns();
		double		t;

		for (long r = 0; r < rounds; r++)
		{
			/* a different name each time: its last 8 bytes are the counter */
			memcpy(name + len - 8, &r, 8);
			if (siphash)
				*sink += DlockSipHash24(UINT64CONST(0x0706050403020100),
										UINT64CONST(0x0f0e0d0c0b0a0908),
										name, len);
			else
				*sink += hash_bytes_extended(name, len, 0);
		}
		t = (now_ns() - t0) / rounds;
		if (run == 0 || t < best)
			best = t;
	}
	return best;
}

int
main(int argc, char **argv)
{
	static const int lengths[] = {8, 16, 24, 32, 48, 64};
	unsigned char key[16];
	unsigned char msg[64];
	uint64		k0;
	uint64		k1;
	uint64		sink = 0;
	long		rounds = argc > 1 ? atol(argv[1]) : 10000000;
	int			bad = 0;
	int			i;

	for (i = 0; i < 16; i++)
		key[i] = (unsigned char) i;
	for (i = 0; i < 64; i++)
		msg[i] = (unsigned char) i;
	k0 = sip_load_le(key);
	k1 = sip_load_le(key + 8);
	for (i = 0; i < 64; i++)
		if (DlockSipHash24(k0, k1, msg, i) != vectors[i])
		{
			fprintf(stderr, "vector %d: got %016llx, want %016llx\n", i,
					(unsigned long long) DlockSipHash24(k0, k1, msg, i),
					(unsigned long long) vectors[i]);
			bad++;
		}
	printf("vectors %s\n", bad == 0 ? "ok" : "FAILED");
	if (bad != 0)
		return 1;
	if (rounds < 1)
		rounds = 1;

	printf("%-6s %14s %14s\n", "bytes", "siphash24_ns", "hash_bytes_ns");
	for (i = 0; i < (int) lengthof(lengths); i++)
	{
		double		s = time_one(true, lengths[i], rounds, &sink);
		double		h = time_one(false, lengths[i], rounds, &sink);

		printf("%-6d %14.1f %14.1f\n", lengths[i], s, h);
	}
	/* print the sink so that no loop is optimised away */
	printf("sink %016llx\n", (unsigned long long) sink);
	return 0;
}
