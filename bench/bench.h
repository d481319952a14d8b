/*-------------------------------------------------------------------------
 *
 * bench/bench.h
 *	  Helpers shared by the benchmark clients: libpq connections, queries
 *	  that must succeed, waiting for asynchronous results on several
 *	  connections at once, a monotonic clock and percentiles.
 *
 * The clients are ordinary libpq programs, not part of the extension.
 * They connect with libpq's environment variables (PGHOST, PGPORT,
 * PGUSER, PGDATABASE), which bench/run sets for its throwaway cluster.
 * Everything is single-threaded: one process, one monotonic clock
 * (CLOCK_MONOTONIC), so timestamps taken on different connections are
 * comparable.  Any failure ends the program with a message and status 1.
 *
 * A client that cannot run at once when an answer arrives (a small or
 * busy machine) reads it late, so the kernel's receive timestamps are
 * also offered: on a TCP connection with SO_TIMESTAMPNS, the time the
 * answer's first bytes reached the socket, peeked (MSG_PEEK) before libpq
 * reads them.  They are CLOCK_REALTIME, one clock for all sockets, so
 * only differences between them are used.  Unix sockets give none.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include "libpq-fe.h"

/* How long any single wait for the server may take before we give up. */
#define BENCH_TIMEOUT_US (60 * 1000000.0)

/* The program name for messages; each client sets it in main(). */
static const char *bench_prog = "bench";

/* bench_die prints "PROG: MESSAGE" to stderr and exits with status 1. */
static inline void
bench_die(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", bench_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* bench_now_us returns the monotonic clock in microseconds. */
static inline double
bench_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* bench_sleep_us sleeps for us microseconds (monotonic clock). */
static inline void
bench_sleep_us(double us)
{
	struct timespec ts;

	if (us <= 0)
		return;
	ts.tv_sec = (time_t) (us / 1e6);
	ts.tv_nsec = (long) ((us - ts.tv_sec * 1e6) * 1e3);
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/*
 * bench_connect opens a connection from libpq's environment variables,
 * with application_name NAME so it can be told apart in pg_stat_activity.
 */
static inline PGconn *
bench_connect(const char *name)
{
	const char *keys[] = {"application_name", NULL};
	const char *values[] = {name, NULL};
	PGconn	   *conn = PQconnectdbParams(keys, values, 1);

	if (PQstatus(conn) != CONNECTION_OK)
		bench_die("cannot connect: %s", PQerrorMessage(conn));
	return conn;
}

/*
 * bench_rx_timestamps asks the kernel to timestamp what arrives on conn's
 * socket (SO_TIMESTAMPNS).  Only TCP sockets deliver the stamps.
 */
static inline void
bench_rx_timestamps(PGconn *conn)
{
	int			on = 1;

	if (setsockopt(PQsocket(conn), SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) != 0)
		bench_die("setsockopt(SO_TIMESTAMPNS): %s", strerror(errno));
}

/*
 * bench_rx_stamp peeks at the first byte waiting on socket fd, without
 * consuming it or waiting, and stores its kernel receive time (realtime,
 * microseconds) in *at.  Returns 1 when it did, 0 when nothing is
 * waiting, -1 when something is but the socket gives no timestamp.
 */
static inline int
bench_rx_stamp(int fd, double *at)
{
	char		byte;
	struct iovec iov = {&byte, 1};
	union
	{
		char		buf[CMSG_SPACE(sizeof(struct timespec))];
		struct cmsghdr align;
	}			ctl;
	struct msghdr msg;
	struct cmsghdr *c;

	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof(ctl.buf);
	if (recvmsg(fd, &msg, MSG_PEEK | MSG_DONTWAIT) <= 0)
		return 0;
	for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
	{
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS)
		{
			struct timespec ts;

			memcpy(&ts, CMSG_DATA(c), sizeof(ts));
			*at = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
			return 1;
		}
	}
	return -1;
}

/* bench_check_result dies unless res is a successful result of sql. */
static inline void
bench_check_result(PGconn *conn, PGresult *res, const char *sql)
{
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
		bench_die("query failed: %s\n  %s", sql,
				  res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
}

/*
 * bench_value runs sql (which must return one row and one column) and
 * returns its value as a malloc'd string, or NULL when it is SQL NULL.
 */
static inline char *
bench_value(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);
	char	   *v = NULL;

	bench_check_result(conn, res, sql);
	if (PQntuples(res) != 1 || PQnfields(res) != 1)
		bench_die("expected one value from: %s", sql);
	if (!PQgetisnull(res, 0, 0))
		v = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

/* bench_exec runs sql, which must succeed; its result is discarded. */
static inline void
bench_exec(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	bench_check_result(conn, res, sql);
	PQclear(res);
}

/* bench_send sends sql without waiting for its result. */
static inline void
bench_send(PGconn *conn, const char *sql)
{
	if (!PQsendQuery(conn, sql))
		bench_die("cannot send: %s\n  %s", sql, PQerrorMessage(conn));
}

/*
 * bench_drain reads what has arrived on conn.  When the whole answer to
 * the query in flight has arrived (the final NULL of PQgetResult) it sets
 * *done, stamps *done_at with the monotonic clock and keeps the last
 * result in *res (the caller clears it).  Returns *done.
 */
static inline bool
bench_drain(PGconn *conn, bool *done, double *done_at, PGresult **res)
{
	if (*done)
		return true;
	if (!PQconsumeInput(conn))
		bench_die("connection lost: %s", PQerrorMessage(conn));
	while (!PQisBusy(conn))
	{
		PGresult   *r = PQgetResult(conn);

		if (r == NULL)
		{
			*done_at = bench_now_us();
			*done = true;
			return true;
		}
		if (*res)
			PQclear(*res);
		*res = r;
	}
	return false;
}

/*
 * bench_await waits until the queries in flight on all n connections
 * have returned, and stores for each the monotonic time its call returned
 * (done_at[i]) and its result (res[i], checked against sql[i]; the caller
 * clears it).  Each connection's return is stamped as soon as it is read,
 * whatever the order in which they arrive.  When pass is not NULL,
 * pass[i] is the number of the pass over the sockets (0, 1, ...) that
 * read connection i's answer: answers read in the same pass had both
 * arrived before the process got round to reading either.  When
 * arrived_at is not NULL, arrived_at[i] is the kernel's receive time of
 * connection i's answer (bench_rx_stamp), or NAN when there is none.
 */
static inline void
bench_await(int n, PGconn **conns, const char **sql, double *done_at,
			PGresult **res, int *pass, double *arrived_at)
{
	bool		done[n];
	bool		stamped[n];
	struct pollfd fds[n];
	double		deadline = bench_now_us() + BENCH_TIMEOUT_US;
	int			npass;
	int			i;

	for (i = 0; i < n; i++)
	{
		done[i] = false;
		stamped[i] = arrived_at == NULL;
		res[i] = NULL;
		if (arrived_at != NULL)
			arrived_at[i] = NAN;
	}
	for (npass = 0;; npass++)
	{
		int			k = 0;

		for (i = 0; i < n; i++)
		{
			bool		was_done = done[i];

			/*
			 * Peek at the answer's timestamp before libpq reads it; until
			 * something has arrived there is nothing for libpq to read.
			 */
			if (!done[i] && !stamped[i])
				stamped[i] = bench_rx_stamp(PQsocket(conns[i]), &arrived_at[i]) != 0;
			if (stamped[i] && bench_drain(conns[i], &done[i], &done_at[i], &res[i]))
			{
				if (!was_done && pass != NULL)
					pass[i] = npass;
				continue;
			}
			fds[k].fd = PQsocket(conns[i]);
			fds[k].events = POLLIN;
			fds[k].revents = 0;
			k++;
		}
		if (k == 0)
			break;
		if (bench_now_us() > deadline)
			bench_die("no answer within %.0f s", BENCH_TIMEOUT_US / 1e6);
		if (poll(fds, k, 1000) < 0 && errno != EINTR)
			bench_die("poll: %s", strerror(errno));
	}
	for (i = 0; i < n; i++)
		bench_check_result(conns[i], res[i], sql[i]);
}

/* bench_cmp_double orders doubles for qsort. */
static inline int
bench_cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/*
 * bench_quantile returns the p-quantile (0 < p <= 1, nearest rank) of the
 * n values in v, which it sorts.
 */
static inline double
bench_quantile(double *v, int n, double p)
{
	int			rank;

	qsort(v, n, sizeof(double), bench_cmp_double);
	rank = (int) (p * n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

/* bench_arg_int parses a positive integer option value. */
static inline int
bench_arg_int(const char *opt, const char *s)
{
	char	   *end;
	long		v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v < 0 || v > 1000000)
		bench_die("bad value for %s: %s", opt, s);
	return (int) v;
}

#endif							/* DLOCK_BENCH_H */
