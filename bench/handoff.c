/*-------------------------------------------------------------------------
 *
 * bench/handoff.c
 *	  Hand-off latency: from the return of a committed dlock_release to the
 *	  return of the dlock_acquire that was waiting for it, compared with
 *	  pg_advisory_unlock handing a session advisory lock to a waiter.
 *
 * One process, three connections: two that take turns as holder and
 * waiter, and a monitor.  A round:
 *
 *   1. the waiter sends its blocking call (PQsendQuery), either
 *      dlock_acquire(name, '10 s', '10 s') or pg_advisory_lock(key);
 *   2. the monitor polls pg_stat_activity until the waiter's backend is
 *      asleep (wait_event_type 'Extension' for dlock, 'Lock' for the
 *      advisory lock), so every round measures a waiter that was really
 *      waiting, and no round can pass for one that never waited;
 *   3. the holder keeps its lock a further random 0..hold-ms ms (uniform),
 *      so that a polling waiter (dlock without preload) is caught at every
 *      point of its backoff, not only right after it fell asleep;
 *   4. the holder sends dlock_release(name, token) (autocommit, so the
 *      release has committed when it returns) or pg_advisory_unlock(key);
 *   5. both answers are awaited together; each call's return is stamped
 *      with CLOCK_MONOTONIC as soon as its answer is read, and the latency
 *      is waiter's return - holder's return.
 *
 * The waiter now holds the lock and becomes the holder of the next round:
 * the roles swap, so each round costs one release and one acquire.
 *
 * The server wakes the waiter before it sends the holder its answer (at
 * commit for dlock, inside pg_advisory_unlock for the advisory lock), so
 * the two answers race to the client, and on a busy or small machine the
 * client often finds both already there when it gets a CPU: the latency
 * it sees then shrinks to the few microseconds between reading one and
 * the other.  So the answers' arrival times are also taken from the
 * kernel (SO_TIMESTAMPNS on TCP connections, see bench.h), which a late
 * client does not shift: "arrival" latency = waiter's answer arrived -
 * holder's answer arrived, the hand-off as an infinitely quick client
 * would see it.  It may be negative: the waiter may answer first.  Also
 * printed: the share of rounds in which the client read both answers in
 * the same pass ("together"), and the time from sending the release to
 * the waiter's return (client clock), which includes the release's own
 * work and commit: an upper bound of the hand-off.  Connect over TCP
 * (PGHOST=127.0.0.1) for the arrival times; on a Unix socket they are
 * missing (printed as -1).
 *
 * dlock and advisory rounds alternate in blocks (--block rounds each) so
 * that any drift in the machine's load hits both alike.  Each kind first
 * runs --warmup rounds that are not counted.  Each block starts with the
 * lock free (the holder takes it) and ends with the lock released.
 *
 * Usage: handoff [--rounds N] [--warmup N] [--block N] [--hold-ms N]
 * Prints "key value" lines: for each kind (dlock, advisory) its n, the
 * median, p90, p95, p99, min, mean and max of the latency and of the time from the
 * release sent, in microseconds, the share of "together" rounds, and the
 * number and statistics of the arrival latencies; then the ratios dlock /
 * advisory of the medians and the p99s of the three.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "bench.h"

#define LOCK_NAME "bench-handoff"
#define ADVISORY_KEY "7340033"

enum kind
{
	KIND_DLOCK,
	KIND_ADVISORY
};

static const char *kind_names[] = {"dlock", "advisory"};

/* One of the two connections that take turns as holder and waiter. */
typedef struct Side
{
	PGconn	   *conn;
	int			pid;
	char		token[32];		/* dlock token it holds, when it holds one */
} Side;

/*
 * wait_until_asleep polls pg_stat_activity on mon until the backend pid
 * waits with wait_event_type wanted, and dies if the waiter's call
 * returns first (it did not wait) or if that takes more than 10 s.
 */
static void
wait_until_asleep(PGconn *mon, Side *waiter, const char *wanted)
{
	char		sql[128];
	double		deadline = bench_now_us() + 10e6;

	snprintf(sql, sizeof(sql),
			 "SELECT wait_event_type FROM pg_catalog.pg_stat_activity WHERE pid = %d",
			 waiter->pid);
	for (;;)
	{
		char	   *type = bench_value(mon, sql);
		bool		asleep = type != NULL && strcmp(type, wanted) == 0;

		free(type);
		if (asleep)
			return;
		if (!PQconsumeInput(waiter->conn))
			bench_die("connection lost: %s", PQerrorMessage(waiter->conn));
		if (!PQisBusy(waiter->conn))
			bench_die("the waiter's call returned before the holder let go: it never waited");
		if (bench_now_us() > deadline)
			bench_die("the waiter (pid %d) did not start waiting within 10 s", waiter->pid);
		bench_sleep_us(100);
	}
}

/* take makes side s take the lock of kind k, which must be free. */
static void
take(enum kind k, Side *s)
{
	if (k == KIND_DLOCK)
	{
		char	   *token = bench_value(s->conn,
										"SELECT dlock_acquire('" LOCK_NAME "', '10 s')");

		if (token == NULL)
			bench_die("the hand-off lease is not free at the start of a block");
		snprintf(s->token, sizeof(s->token), "%s", token);
		free(token);
	}
	else
		bench_exec(s->conn, "SELECT pg_advisory_lock(" ADVISORY_KEY ")");
}

/* let_go makes side s, the holder, release the lock of kind k. */
static void
let_go(enum kind k, Side *s)
{
	char		sql[128];
	char	   *ok;

	if (k == KIND_DLOCK)
		snprintf(sql, sizeof(sql), "SELECT dlock_release('" LOCK_NAME "', %s)", s->token);
	else
		snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock(%s)", ADVISORY_KEY);
	ok = bench_value(s->conn, sql);
	if (ok == NULL || strcmp(ok, "t") != 0)
		bench_die("%s returned %s", sql, ok ? ok : "NULL");
	free(ok);
}

/* What one round measured. */
typedef struct Sample
{
	double		latency_us;		/* waiter's return - holder's return */
	double		from_send_us;	/* waiter's return - release sent */
	double		arrival_us;		/* waiter's answer arrived - holder's, or NAN */
	bool		together;		/* both answers read in the same pass */
} Sample;

/* one_round hands the lock of kind k from holder to waiter once. */
static Sample
one_round(enum kind k, Side *holder, Side *waiter, PGconn *mon, int hold_ms)
{
	char		release_sql[128];
	const char *sql[2];
	PGconn	   *conns[2];
	double		done_at[2];
	PGresult   *res[2];
	int			pass[2];
	double		arrived_at[2];
	double		sent_at;
	Sample		sample;

	if (k == KIND_DLOCK)
	{
		snprintf(release_sql, sizeof(release_sql),
				 "SELECT dlock_release('" LOCK_NAME "', %s)", holder->token);
		sql[1] = "SELECT dlock_acquire('" LOCK_NAME "', '10 s', '10 s')";
	}
	else
	{
		snprintf(release_sql, sizeof(release_sql),
				 "SELECT pg_advisory_unlock(%s)", ADVISORY_KEY);
		sql[1] = "SELECT pg_advisory_lock(" ADVISORY_KEY ")";
	}
	sql[0] = release_sql;
	conns[0] = holder->conn;
	conns[1] = waiter->conn;

	bench_send(waiter->conn, sql[1]);
	wait_until_asleep(mon, waiter, k == KIND_DLOCK ? "Extension" : "Lock");
	bench_sleep_us(drand48() * hold_ms * 1000.0);
	sent_at = bench_now_us();
	bench_send(holder->conn, sql[0]);
	bench_await(2, conns, sql, done_at, res, pass, arrived_at);

	if (PQntuples(res[0]) != 1 || strcmp(PQgetvalue(res[0], 0, 0), "t") != 0)
		bench_die("%s did not return true", sql[0]);
	if (k == KIND_DLOCK)
	{
		if (PQntuples(res[1]) != 1 || PQgetisnull(res[1], 0, 0))
			bench_die("the waiting dlock_acquire returned NULL");
		snprintf(waiter->token, sizeof(waiter->token), "%s", PQgetvalue(res[1], 0, 0));
	}
	PQclear(res[0]);
	PQclear(res[1]);
	sample.latency_us = done_at[1] - done_at[0];
	sample.from_send_us = done_at[1] - sent_at;
	sample.together = pass[0] == pass[1];
	sample.arrival_us = arrived_at[1] - arrived_at[0];	/* NAN if either is */
	return sample;
}

/*
 * report prints, under the prefix kind, the statistics of the n values in
 * v (which it sorts), and returns their median and p99.
 */
static void
report(const char *kind, double *v, int n, double *median, double *p99)
{
	double		sum = 0;
	int			i;

	for (i = 0; i < n; i++)
		sum += v[i];
	*median = bench_quantile(v, n, 0.5);
	*p99 = bench_quantile(v, n, 0.99);
	printf("%s_median_us %.1f\n", kind, *median);
	printf("%s_p90_us %.1f\n", kind, bench_quantile(v, n, 0.90));
	printf("%s_p95_us %.1f\n", kind, bench_quantile(v, n, 0.95));
	printf("%s_p99_us %.1f\n", kind, *p99);
	printf("%s_min_us %.1f\n", kind, v[0]);
	printf("%s_mean_us %.1f\n", kind, sum / n);
	printf("%s_max_us %.1f\n", kind, v[n - 1]);
}

int
main(int argc, char **argv)
{
	int			rounds = 500;
	int			warmup = 50;
	int			block = 25;
	int			hold_ms = 50;
	double	   *lat[2];
	double	   *from_send[2];
	double	   *arrival[2];
	int			narrival[2] = {0, 0};
	int			together[2] = {0, 0};
	int			done[2] = {0, 0};
	int			counted[2] = {0, 0};
	Side		sides[2];
	Side	   *holder[2];
	PGconn	   *mon;
	double		median[2],
				p99[2],
				send_median[2],
				send_p99[2],
				arrival_median[2],
				arrival_p99[2];
	int			i,
				k;

	bench_prog = "handoff";
	for (i = 1; i < argc; i++)
	{
		if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0)
			rounds = bench_arg_int(argv[i], argv[i + 1]), i++;
		else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0)
			warmup = bench_arg_int(argv[i], argv[i + 1]), i++;
		else if (i + 1 < argc && strcmp(argv[i], "--block") == 0)
			block = bench_arg_int(argv[i], argv[i + 1]), i++;
		else if (i + 1 < argc && strcmp(argv[i], "--hold-ms") == 0)
			hold_ms = bench_arg_int(argv[i], argv[i + 1]), i++;
		else
			bench_die("usage: handoff [--rounds N] [--warmup N] [--block N] [--hold-ms N]");
	}
	if (rounds < 1 || block < 1)
		bench_die("--rounds and --block must be at least 1");
	srand48((long) bench_now_us());

	for (i = 0; i < 2; i++)
	{
		sides[i].conn = bench_connect(i == 0 ? "bench-handoff-a" : "bench-handoff-b");
		sides[i].pid = PQbackendPID(sides[i].conn);
		sides[i].token[0] = '\0';
		lat[i] = malloc(sizeof(double) * rounds);
		from_send[i] = malloc(sizeof(double) * rounds);
		arrival[i] = malloc(sizeof(double) * rounds);
		bench_rx_timestamps(sides[i].conn);
	}
	mon = bench_connect("bench-handoff-monitor");
	/* Warm the plans, caches and the lease row of both sessions. */
	for (i = 0; i < 2; i++)
	{
		take(KIND_DLOCK, &sides[i]);
		let_go(KIND_DLOCK, &sides[i]);
	}

	/* Alternate blocks: dlock, advisory, dlock, ... until both are done. */
	for (k = KIND_DLOCK; done[KIND_DLOCK] < warmup + rounds ||
		 done[KIND_ADVISORY] < warmup + rounds; k = 1 - k)
	{
		int			j;

		if (done[k] >= warmup + rounds)
			continue;
		holder[0] = &sides[0];
		holder[1] = &sides[1];
		take(k, holder[0]);
		for (j = 0; j < block && done[k] < warmup + rounds; j++)
		{
			Sample		sample = one_round(k, holder[0], holder[1], mon, hold_ms);
			Side	   *t;

			if (done[k]++ >= warmup)
			{
				lat[k][counted[k]] = sample.latency_us;
				from_send[k][counted[k]++] = sample.from_send_us;
				together[k] += sample.together;
				if (!isnan(sample.arrival_us))
					arrival[k][narrival[k]++] = sample.arrival_us;
			}
			t = holder[0];
			holder[0] = holder[1];
			holder[1] = t;
		}
		let_go(k, holder[0]);
	}

	for (k = KIND_DLOCK; k <= KIND_ADVISORY; k++)
	{
		char		prefix[64];

		printf("%s_n %d\n", kind_names[k], counted[k]);
		report(kind_names[k], lat[k], counted[k], &median[k], &p99[k]);
		snprintf(prefix, sizeof(prefix), "%s_from_send", kind_names[k]);
		report(prefix, from_send[k], counted[k], &send_median[k], &send_p99[k]);
		printf("%s_together_pct %.0f\n", kind_names[k], 100.0 * together[k] / counted[k]);
		snprintf(prefix, sizeof(prefix), "%s_arrival", kind_names[k]);
		printf("%s_n %d\n", prefix, narrival[k]);
		if (narrival[k] > 0)
			report(prefix, arrival[k], narrival[k], &arrival_median[k], &arrival_p99[k]);
		else
		{
			printf("%s_median_us -1\n%s_p99_us -1\n", prefix, prefix);
			arrival_median[k] = arrival_p99[k] = NAN;
		}
	}
	printf("ratio_median %.2f\n", median[KIND_DLOCK] / median[KIND_ADVISORY]);
	printf("ratio_p99 %.2f\n", p99[KIND_DLOCK] / p99[KIND_ADVISORY]);
	printf("ratio_from_send_median %.2f\n", send_median[KIND_DLOCK] / send_median[KIND_ADVISORY]);
	printf("ratio_from_send_p99 %.2f\n", send_p99[KIND_DLOCK] / send_p99[KIND_ADVISORY]);
	printf("ratio_arrival_median %.2f\n", arrival_median[KIND_DLOCK] / arrival_median[KIND_ADVISORY]);
	printf("ratio_arrival_p99 %.2f\n", arrival_p99[KIND_DLOCK] / arrival_p99[KIND_ADVISORY]);

	for (i = 0; i < 2; i++)
		PQfinish(sides[i].conn);
	PQfinish(mon);
	return 0;
}
