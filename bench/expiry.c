/*-------------------------------------------------------------------------
 *
 * bench/expiry.c
 *	  Expiry wake-up error: how long after a lease's expiry the acquire
 *	  that was waiting for it takes the lease, by the server clock.
 *
 * Two connections.  A round:
 *
 *   1. the holder takes the lease with ttl --ttl-ms (default 200 ms) and
 *      does not release it; it reads the lease's expires_at from
 *      dlock_leases;
 *   2. the waiter calls dlock_acquire(name, '10 s', '10 s') at once, which
 *      returns when the lease has expired;
 *   3. the waiter reads its new lease's acquired_at from dlock_leases and
 *      releases it.
 *
 * The error is acquired_at - the old expires_at: both are the server
 * clock (clock_timestamp() at the call), so no client clock is involved.
 * A negative error would mean a lease granted before the old one expired.
 * Rounds in which the waiter's call was sent later than half the ttl
 * after the holder's grant (a stalled client) are not counted, and their
 * number is printed.
 *
 * Usage: expiry [--rounds N] [--ttl-ms N]
 * Prints "key value" lines: n, skipped, median, min and max in ms.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "bench.h"

#define LOCK_NAME "bench-expiry"

/*
 * lease_time_us returns column (expires_at or acquired_at) of the lease
 * that token holds on LOCK_NAME, in microseconds since the Unix epoch.
 */
static long long
lease_time_us(PGconn *conn, const char *column, const char *token)
{
	char		sql[256];
	char	   *v;
	long long	us;

	snprintf(sql, sizeof(sql),
			 "SELECT (extract(epoch FROM %s) * 1000000)::int8 FROM dlock_leases"
			 " WHERE lock_name = '" LOCK_NAME "' AND token = %s",
			 column, token);
	v = bench_value(conn, sql);
	if (v == NULL)
		bench_die("no %s for token %s", column, token);
	us = atoll(v);
	free(v);
	return us;
}

int
main(int argc, char **argv)
{
	int			rounds = 30;
	int			ttl_ms = 200;
	PGconn	   *holder;
	PGconn	   *waiter;
	double	   *err;
	int			n = 0;
	int			skipped = 0;
	double		median,
				min,
				max;
	int			i;

	bench_prog = "expiry";
	for (i = 1; i < argc; i++)
	{
		if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0)
			rounds = bench_arg_int(argv[i], argv[i + 1]), i++;
		else if (i + 1 < argc && strcmp(argv[i], "--ttl-ms") == 0)
			ttl_ms = bench_arg_int(argv[i], argv[i + 1]), i++;
		else
			bench_die("usage: expiry [--rounds N] [--ttl-ms N]");
	}
	if (rounds < 1 || ttl_ms < 1)
		bench_die("--rounds and --ttl-ms must be at least 1");
	err = malloc(sizeof(double) * rounds);
	holder = bench_connect("bench-expiry-holder");
	waiter = bench_connect("bench-expiry-waiter");

	for (i = 0; i < rounds; i++)
	{
		char		sql[256];
		char	   *held;
		char	   *token;
		char	   *ok;
		double		granted_at;
		double		asked_at;
		long long	expires_at;
		long long	acquired_at;

		snprintf(sql, sizeof(sql),
				 "SELECT dlock_acquire('" LOCK_NAME "', '%d ms')", ttl_ms);
		held = bench_value(holder, sql);
		granted_at = bench_now_us();
		if (held == NULL)
			bench_die("the expiry lease is not free at the start of a round");
		/* Read now: the waiter's takeover replaces the row. */
		expires_at = lease_time_us(holder, "expires_at", held);

		asked_at = bench_now_us();
		token = bench_value(waiter,
							"SELECT dlock_acquire('" LOCK_NAME "', '10 s', '10 s')");
		if (token == NULL)
			bench_die("the waiting dlock_acquire returned NULL");
		acquired_at = lease_time_us(waiter, "acquired_at", token);

		snprintf(sql, sizeof(sql),
				 "SELECT dlock_release('" LOCK_NAME "', %s)", token);
		ok = bench_value(waiter, sql);
		if (ok == NULL || strcmp(ok, "t") != 0)
			bench_die("%s did not return true", sql);

		if (asked_at - granted_at > ttl_ms * 1000.0 / 2)
			skipped++;
		else
			err[n++] = (acquired_at - expires_at) / 1000.0;
		free(held);
		free(token);
		free(ok);
	}
	if (n == 0)
		bench_die("every round was skipped (the client stalled)");

	median = bench_quantile(err, n, 0.5);
	min = err[0];
	max = err[n - 1];
	printf("n %d\n", n);
	printf("skipped %d\n", skipped);
	printf("median_ms %.2f\n", median);
	printf("min_ms %.2f\n", min);
	printf("max_ms %.2f\n", max);

	PQfinish(holder);
	PQfinish(waiter);
	return 0;
}
