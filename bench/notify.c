/*-------------------------------------------------------------------------
 *
 * bench/notify.c
 *	  Lease events: how long after a lease change commits a listener
 *	  receives its event, sent by the notifier (dlock.notify = on) or, for
 *	  comparison, by the committing session itself, as dlock 1.2's first
 *	  design did (a pg_notify in the transaction of the change, with
 *	  dlock.notify off); and a listener that only reads, for the
 *	  throughput runs of bench/workloads/57-notify.sh.
 *
 * Two connections: a listener (LISTEN dlock) and a writer.  A round takes
 * the name nb:I with dlock_acquire and releases it with dlock_release,
 * each call its own transaction, sent without waiting (PQsendQuery) while
 * both sockets are watched, so that whichever answer comes first is read
 * at once: the writer's result (the call returned, so its commit had
 * ended) and the listener's notification of that change (matched by its
 * event and lock name).  For each of the two events of a round:
 *
 *   after_commit = receipt - the writer's call returned
 *   from_call    = receipt - the writer's call was sent
 *
 * after_commit is what a listener waits beyond the commit; with mode
 * "commit" PostgreSQL signals the listener during the commit, so the
 * event can arrive before the call returns (negative values).
 *
 * Usage: notify [--mode notifier|commit] [--rounds N]
 *        notify --drain     (only LISTEN and read, until killed)
 * Prints "key value" lines: n, after_commit_median_ms, after_commit_p99_ms,
 * from_call_median_ms, from_call_p99_ms.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "bench.h"

/*
 * drain reads notifications on a LISTEN dlock connection until it is
 * killed, so that they never pile up in PostgreSQL's queue.
 */
static void
drain(void)
{
	PGconn	   *conn = bench_connect("bench-notify-drain");
	struct pollfd fd;

	bench_exec(conn, "LISTEN dlock");
	for (;;)
	{
		PGnotify   *n;

		fd.fd = PQsocket(conn);
		fd.events = POLLIN;
		fd.revents = 0;
		if (poll(&fd, 1, 1000) < 0 && errno != EINTR)
			bench_die("poll: %s", strerror(errno));
		if (!PQconsumeInput(conn))
			bench_die("connection lost: %s", PQerrorMessage(conn));
		while ((n = PQnotifies(conn)) != NULL)
			PQfreemem(n);
	}
}

/*
 * one_change sends sql on writer, and waits until both its result and the
 * listener's notification whose payload contains want have arrived;
 * stores the delays from the call's return and from its sending to the
 * receipt, in ms.  Returns the value of the result's first column
 * (malloc'd; NULL when SQL NULL).
 */
static char *
one_change(PGconn *writer, PGconn *listener, const char *sql,
		   const char *want, double *after_commit, double *from_call)
{
	double		sent_at = bench_now_us();
	double		deadline = sent_at + BENCH_TIMEOUT_US;
	double		returned_at = 0;
	double		received_at = 0;
	bool		done = false;
	bool		got = false;
	PGresult   *res = NULL;
	char	   *value = NULL;

	bench_send(writer, sql);
	while (!done || !got)
	{
		struct pollfd fds[2];
		int			k = 0;

		if (!done && bench_drain(writer, &done, &returned_at, &res))
			continue;
		if (!got)
		{
			PGnotify   *n;

			if (!PQconsumeInput(listener))
				bench_die("listener lost: %s", PQerrorMessage(listener));
			while ((n = PQnotifies(listener)) != NULL)
			{
				if (!got && strstr(n->extra, want) != NULL)
				{
					got = true;
					received_at = bench_now_us();
				}
				PQfreemem(n);
			}
			if (got)
				continue;
		}
		if (!done)
		{
			fds[k].fd = PQsocket(writer);
			fds[k].events = POLLIN;
			fds[k].revents = 0;
			k++;
		}
		if (!got)
		{
			fds[k].fd = PQsocket(listener);
			fds[k].events = POLLIN;
			fds[k].revents = 0;
			k++;
		}
		if (bench_now_us() > deadline)
			bench_die("no answer or event within %.0f s: %s", BENCH_TIMEOUT_US / 1e6, sql);
		if (poll(fds, k, 1000) < 0 && errno != EINTR)
			bench_die("poll: %s", strerror(errno));
	}
	bench_check_result(writer, res, sql);
	if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
		value = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	*after_commit = (received_at - returned_at) / 1000.0;
	*from_call = (received_at - sent_at) / 1000.0;
	return value;
}

int
main(int argc, char **argv)
{
	const char *mode = "notifier";
	int			rounds = 500;
	PGconn	   *listener;
	PGconn	   *writer;
	double	   *after_commit;
	double	   *from_call;
	int			n = 0;
	int			i;

	bench_prog = "notify";
	for (i = 1; i < argc; i++)
	{
		if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0)
			rounds = bench_arg_int(argv[i], argv[i + 1]), i++;
		else if (i + 1 < argc && strcmp(argv[i], "--mode") == 0)
			mode = argv[++i];
		else if (strcmp(argv[i], "--drain") == 0)
			drain();
		else
			bench_die("usage: notify [--mode notifier|commit] [--rounds N] | notify --drain");
	}
	if (strcmp(mode, "notifier") != 0 && strcmp(mode, "commit") != 0)
		bench_die("--mode must be notifier or commit");
	if (rounds < 1)
		bench_die("--rounds must be at least 1");
	after_commit = malloc(sizeof(double) * rounds * 2);
	from_call = malloc(sizeof(double) * rounds * 2);
	listener = bench_connect("bench-notify-listener");
	writer = bench_connect("bench-notify-writer");
	bench_exec(listener, "LISTEN dlock");
	bench_exec(writer, strcmp(mode, "notifier") == 0 ?
			   "SET dlock.notify = on" : "SET dlock.notify = off");

	for (i = 0; i < rounds; i++)
	{
		char		sql[512];
		char		want[128];
		char	   *token;
		char	   *ok;

		if (strcmp(mode, "notifier") == 0)
			snprintf(sql, sizeof(sql),
					 "SELECT dlock_acquire('nb:%d', '1 min')", i);
		else
			snprintf(sql, sizeof(sql),
					 "SELECT t, pg_notify('dlock', '{\"event\": \"acquired\", \"lock_name\": \"nb:%d\", \"token\": ' || t || ', \"previous_token\": null}')"
					 " FROM (SELECT dlock_acquire('nb:%d', '1 min') AS t) s", i, i);
		snprintf(want, sizeof(want),
				 "\"event\": \"acquired\", \"lock_name\": \"nb:%d\"", i);
		token = one_change(writer, listener, sql, want, &after_commit[n],
						   &from_call[n]);
		n++;
		if (token == NULL)
			bench_die("nb:%d is not free", i);

		if (strcmp(mode, "notifier") == 0)
			snprintf(sql, sizeof(sql),
					 "SELECT dlock_release('nb:%d', %s)", i, token);
		else
			snprintf(sql, sizeof(sql),
					 "SELECT dlock_release('nb:%d', %s), pg_notify('dlock', '{\"event\": \"released\", \"lock_name\": \"nb:%d\", \"token\": %s, \"previous_token\": null}')",
					 i, token, i, token);
		snprintf(want, sizeof(want),
				 "\"event\": \"released\", \"lock_name\": \"nb:%d\"", i);
		ok = one_change(writer, listener, sql, want, &after_commit[n],
						&from_call[n]);
		n++;
		if (ok == NULL || strcmp(ok, "t") != 0)
			bench_die("%s did not return true", sql);
		free(token);
		free(ok);
	}

	printf("n %d\n", n);
	printf("after_commit_median_ms %.3f\n", bench_quantile(after_commit, n, 0.5));
	printf("after_commit_p99_ms %.3f\n", bench_quantile(after_commit, n, 0.99));
	printf("from_call_median_ms %.3f\n", bench_quantile(from_call, n, 0.5));
	printf("from_call_p99_ms %.3f\n", bench_quantile(from_call, n, 0.99));

	PQfinish(listener);
	PQfinish(writer);
	return 0;
}
