/*-------------------------------------------------------------------------
 *
 * bench/idle_cpu.c
 *	  CPU burnt by waiters: --waiters sessions (default 10) wait --wait-s
 *	  seconds (default 2) for a lease that stays held, and the CPU time of
 *	  their server processes is read before and after from /proc.
 *
 * A holder takes the lease for a minute.  Each waiter first calls
 * dlock_acquire once without waiting (it returns NULL), which warms its
 * plans and caches, so the measurement covers the wait and not a first
 * call.  Then the CPU time of each waiter's backend (PQbackendPID) is
 * read, all waiters send dlock_acquire(name, '1 min', '<wait-s> s') at
 * once, and when all have returned NULL the CPU time is read again.
 * For scale, the on-CPU time of one more call without waiting is also
 * measured in each waiter beforehand: what a waiting call costs anyway.
 *
 * Two readings per backend:
 *   - utime + stime from /proc/<pid>/stat, in clock ticks (sysconf
 *     _SC_CLK_TCK, what `getconf CLK_TCK` prints): what ps and top show,
 *     but each reading is rounded down to a tick (10 ms at 100 Hz);
 *   - the first field of /proc/<pid>/schedstat, the time on a CPU in
 *     nanoseconds, when the kernel provides it.
 * The server must run on this machine (a Unix socket or localhost).
 *
 * Usage: idle_cpu [--waiters N] [--wait-s N]
 * Prints "key value" lines: waiters, wall time, ticks, clk_tck, CPU ms
 * for all waiters and per waiter (from the ticks), and the same from
 * schedstat (-1 when /proc/<pid>/schedstat is missing), and the on-CPU
 * time per waiter of a call that does not wait.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <unistd.h>

#include "bench.h"

#define LOCK_NAME "bench-idle"

/* stat_ticks returns utime + stime of process pid, in clock ticks. */
static long long
stat_ticks(int pid)
{
	char		path[64];
	char		buf[4096];
	FILE	   *f;
	size_t		len;
	char	   *p;
	unsigned long long utime,
				stime;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (f == NULL)
		bench_die("cannot open %s: %s (is the server on this machine?)", path, strerror(errno));
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* The command name may hold spaces and parentheses: skip to the last ')'. */
	p = strrchr(buf, ')');
	/* Fields 3 to 15 follow: state ... utime (14) stime (15). */
	if (p == NULL ||
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			   &utime, &stime) != 2)
		bench_die("cannot parse %s", path);
	return (long long) (utime + stime);
}

/* sched_ns returns the on-CPU time of process pid in ns, or -1. */
static long long
sched_ns(int pid)
{
	char		path[64];
	FILE	   *f;
	long long	ns;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	if (fscanf(f, "%lld", &ns) != 1)
		ns = -1;
	fclose(f);
	return ns;
}

int
main(int argc, char **argv)
{
	int			nwaiters = 10;
	int			wait_s = 2;
	long		clk_tck = sysconf(_SC_CLK_TCK);
	PGconn	   *holder;
	char	   *held;
	char	   *ok;
	char		sql[256];
	char		wait_sql[256];
	long long	ticks = 0;
	long long	ns = 0;
	bool		have_ns = true;
	long long	call_ns = 0;
	bool		have_call_ns = true;
	double		started,
				wall_us;
	int			i;

	bench_prog = "idle_cpu";
	for (i = 1; i < argc; i++)
	{
		if (i + 1 < argc && strcmp(argv[i], "--waiters") == 0)
			nwaiters = bench_arg_int(argv[i], argv[i + 1]), i++;
		else if (i + 1 < argc && strcmp(argv[i], "--wait-s") == 0)
			wait_s = bench_arg_int(argv[i], argv[i + 1]), i++;
		else
			bench_die("usage: idle_cpu [--waiters N] [--wait-s N]");
	}
	if (nwaiters < 1 || wait_s < 1)
		bench_die("--waiters and --wait-s must be at least 1");

	{
		PGconn	   *conns[nwaiters];
		const char *sqls[nwaiters];
		double		done_at[nwaiters];
		PGresult   *res[nwaiters];
		int			pids[nwaiters];
		long long	ticks0[nwaiters];
		long long	ns0[nwaiters];

		holder = bench_connect("bench-idle-holder");
		held = bench_value(holder, "SELECT dlock_acquire('" LOCK_NAME "', '1 min')");
		if (held == NULL)
			bench_die("the idle lease is not free");

		snprintf(wait_sql, sizeof(wait_sql),
				 "SELECT dlock_acquire('" LOCK_NAME "', '1 min', '%d s')", wait_s);
		for (i = 0; i < nwaiters; i++)
		{
			char	   *v;

			conns[i] = bench_connect("bench-idle-waiter");
			pids[i] = PQbackendPID(conns[i]);
			sqls[i] = wait_sql;
			v = bench_value(conns[i], "SELECT dlock_acquire('" LOCK_NAME "', '1 min')");
			if (v != NULL)
				bench_die("a waiter took the held lease");
		}

		for (i = 0; i < nwaiters; i++)
		{
			long long	before = sched_ns(pids[i]);
			char	   *v = bench_value(conns[i], "SELECT dlock_acquire('" LOCK_NAME "', '1 min')");
			long long	after = sched_ns(pids[i]);

			if (v != NULL)
				bench_die("a waiter took the held lease");
			if (before < 0 || after < 0)
				have_call_ns = false;
			else
				call_ns += after - before;
		}

		for (i = 0; i < nwaiters; i++)
		{
			ticks0[i] = stat_ticks(pids[i]);
			ns0[i] = sched_ns(pids[i]);
		}
		started = bench_now_us();
		for (i = 0; i < nwaiters; i++)
			bench_send(conns[i], wait_sql);
		bench_await(nwaiters, conns, sqls, done_at, res, NULL, NULL);
		wall_us = bench_now_us() - started;
		for (i = 0; i < nwaiters; i++)
		{
			long long	n1 = sched_ns(pids[i]);

			ticks += stat_ticks(pids[i]) - ticks0[i];
			if (n1 < 0 || ns0[i] < 0)
				have_ns = false;
			else
				ns += n1 - ns0[i];
			if (PQntuples(res[i]) != 1 || !PQgetisnull(res[i], 0, 0))
				bench_die("a waiter took the held lease");
			PQclear(res[i]);
			PQfinish(conns[i]);
		}
	}

	snprintf(sql, sizeof(sql), "SELECT dlock_release('" LOCK_NAME "', %s)", held);
	ok = bench_value(holder, sql);
	if (ok == NULL || strcmp(ok, "t") != 0)
		bench_die("%s did not return true", sql);
	PQfinish(holder);

	printf("waiters %d\n", nwaiters);
	printf("wall_ms %.0f\n", wall_us / 1000.0);
	printf("ticks %lld\n", ticks);
	printf("clk_tck %ld\n", clk_tck);
	printf("cpu_ms %.1f\n", ticks * 1000.0 / clk_tck);
	printf("cpu_ms_per_waiter %.2f\n", ticks * 1000.0 / clk_tck / nwaiters);
	printf("sched_ms %.2f\n", have_ns ? ns / 1e6 : -1.0);
	printf("sched_ms_per_waiter %.3f\n", have_ns ? ns / 1e6 / nwaiters : -1.0);
	printf("call_sched_ms_per_waiter %.3f\n", have_call_ns ? call_ns / 1e6 / nwaiters : -1.0);
	free(held);
	free(ok);
	return 0;
}
