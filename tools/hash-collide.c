/*-------------------------------------------------------------------------
 *
 * tools/hash-collide.c
 *	  Finds two distinct lock names with equal 64-bit hashes under the
 *	  unkeyed hash that dlock 1.2 before issue 22 keyed its wait queues and
 *	  its name lock on: hash_bytes_extended(name, len, 0) of PostgreSQL's
 *	  common library (linked, not copied).  test/t/061_hostile_wait.pl uses
 *	  the pair it found to show what such a pair did to the old code.
 *
 *	    cc -O2 -pthread -I"$(pg_config --includedir-server)" \
 *	       tools/hash-collide.c -L"$(pg_config --pkglibdir)" \
 *	       -lpgcommon -lpgport -o /tmp/hash-collide
 *	    /tmp/hash-collide [SEED [THREADS [DP_BITS]]]
 *
 * Method: Pollard's rho with distinguished points (van Oorschot and
 * Wiener, "Parallel collision search with cryptanalytic applications",
 * 1999).  The walk is x -> f(x) = hash(name(x)), where name(x) is "k"
 * followed by the 16 lowercase hex digits of x (17 bytes).  Each thread
 * walks from random starts until it meets a distinguished point (a value
 * whose low DP_BITS bits are zero) and records (point, start, length) in a
 * table shared by the threads.  When two trails from different starts
 * reach the same point, they merged: walking both again from their starts,
 * aligned on the distance to the point, finds the step where they first
 * meet, and the two values just before it, a != b, have f(a) == f(b): the
 * names name(a) and name(b) collide.  With a 64-bit hash that takes about
 * sqrt(pi * 2^64 / 2), some 5.4e9 hash evaluations.
 *
 * It prints the pair, both hashes (checked equal again) and how long it
 * took, and exits 0 when they are equal and the names differ.  The output
 * is the same for the same SEED, DP_BITS and THREADS = 1 (the defaults: 7,
 * 12 and 1), and with more threads depends on which thread finds first.
 * The pair in test/t/061_hostile_wait.pl, kde711f4de8a79002 and
 * kd2c563948cfd8172 (hash e1584ece00d7fe11), came from the defaults in
 * 46 s of one core (2.4e9 steps: a lucky draw) on 2026-12-02.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <pthread.h>
#include <time.h>

#include "common/hashfn.h"

#define NAME_LEN	17			/* "k" and 16 hex digits */
/*
 * Slots of the shared table (open addressing): 2^22, 96 MiB.  A search with
 * DP_BITS = 12 expects some 1.3 million points; a table three quarters full
 * stops the search (exit 1): take a larger DP_BITS then.
 */
#define TABLE_BITS	22

/* One distinguished point reached: the trail that reached it. */
typedef struct Point
{
	uint64		point;			/* 0 with start 0: empty */
	uint64		start;
	uint64		length;
} Point;

static Point *table;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int found = 0;
static uint64 found_a;
static uint64 found_b;
static uint64 seed;
static int	dp_bits;
static uint64 steps_total;		/* under table_lock */
static uint64 npoints;			/* under table_lock */

/*
 * name_of writes name(x) into buf (NAME_LEN bytes, not terminated).
 */
static void
name_of(uint64 x, char *buf)
{
	static const char hex[] = "0123456789abcdef";
	int			i;

	buf[0] = 'k';
	for (i = 0; i < 16; i++)
		buf[1 + i] = hex[(x >> (60 - 4 * i)) & 0xf];
}

/*
 * step returns f(x), the hash of name(x).
 */
static inline uint64
step(uint64 x)
{
	char		buf[NAME_LEN];

	name_of(x, buf);
	return hash_bytes_extended((const unsigned char *) buf, NAME_LEN, 0);
}

/*
 * splitmix returns the next value of a splitmix64 sequence in *state (the
 * random starts).
 */
static uint64
splitmix(uint64 *state)
{
	uint64		z = (*state += UINT64CONST(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64CONST(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64CONST(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/*
 * locate walks the trails from a (la steps to the point) and b (lb steps)
 * and, unless one start lies on the other's trail, stores the colliding
 * pair in found_a and found_b and returns true.
 */
static bool
locate(uint64 a, uint64 la, uint64 b, uint64 lb)
{
	while (la > lb)
	{
		a = step(a);
		la--;
	}
	while (lb > la)
	{
		b = step(b);
		lb--;
	}
	if (a == b)
		return false;			/* one trail contains the other's start */
	for (;;)
	{
		uint64		fa = step(a);
		uint64		fb = step(b);

		if (fa == fb)
		{
			found_a = a;
			found_b = b;
			return true;
		}
		a = fa;
		b = fb;
	}
}

/*
 * walker is a thread: trails from random starts until a pair is found.
 */
static void *
walker(void *arg)
{
	uint64		state = seed * 1000003 + (uint64) (intptr_t) arg;
	uint64		mask = (UINT64CONST(1) << dp_bits) - 1;
	uint64		max_length = UINT64CONST(40) << dp_bits;

	while (!found)
	{
		uint64		start = splitmix(&state);
		uint64		x = start;
		uint64		length = 0;
		Point	   *p;

		do
		{
			x = step(x);
			length++;
		} while ((x & mask) != 0 && length < max_length && !found);
		if ((x & mask) != 0)
			continue;			/* a cycle without a distinguished point */

		pthread_mutex_lock(&table_lock);
		steps_total += length;
		p = &table[(x >> dp_bits) & ((UINT64CONST(1) << TABLE_BITS) - 1)];
		while (p->length != 0 && p->point != x)
			p = (p == &table[(UINT64CONST(1) << TABLE_BITS) - 1]) ? table : p + 1;
		if (p->length == 0)
		{
			if (++npoints > (UINT64CONST(3) << (TABLE_BITS - 2)))
			{
				fprintf(stderr, "hash-collide: the table is full; take a larger DP_BITS\n");
				exit(1);
			}
			p->point = x;
			p->start = start;
			p->length = length;
			pthread_mutex_unlock(&table_lock);
			continue;
		}
		pthread_mutex_unlock(&table_lock);
		if (p->start != start && locate(p->start, p->length, start, length))
		{
			pthread_mutex_lock(&table_lock);
			found = 1;
			pthread_mutex_unlock(&table_lock);
		}
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	int			nthreads;
	pthread_t  *threads;
	struct timespec t0;
	struct timespec t1;
	char		na[NAME_LEN + 1];
	char		nb[NAME_LEN + 1];
	uint64		ha;
	uint64		hb;
	int			i;

	seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 7;
	nthreads = argc > 2 ? atoi(argv[2]) : 1;
	dp_bits = argc > 3 ? atoi(argv[3]) : 12;
	if (nthreads < 1 || dp_bits < 8 || dp_bits > 40)
	{
		fprintf(stderr, "usage: %s [SEED [THREADS [DP_BITS]]]\n", argv[0]);
		return 2;
	}
	table = calloc((size_t) 1 << TABLE_BITS, sizeof(Point));
	threads = calloc(nthreads, sizeof(pthread_t));
	if (table == NULL || threads == NULL)
		return 1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < nthreads; i++)
		pthread_create(&threads[i], NULL, walker, (void *) (intptr_t) i);
	for (i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	name_of(found_a, na);
	name_of(found_b, nb);
	na[NAME_LEN] = nb[NAME_LEN] = '\0';
	ha = hash_bytes_extended((const unsigned char *) na, NAME_LEN, 0);
	hb = hash_bytes_extended((const unsigned char *) nb, NAME_LEN, 0);
	printf("name_a %s\nname_b %s\nhash_a %016llx\nhash_b %016llx\n",
		   na, nb, (unsigned long long) ha, (unsigned long long) hb);
	printf("seconds %.1f\nsteps_to_points %llu\nthreads %d\ndp_bits %d\nseed %llu\n",
		   (double) (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
		   (unsigned long long) steps_total, nthreads, dp_bits,
		   (unsigned long long) seed);
	return (ha == hb && strcmp(na, nb) != 0) ? 0 : 1;
}
