/*-------------------------------------------------------------------------
 *
 * cli/conn.c
 *	  The database side of the dlock command-line tool: connection
 *	  parameters, a libpq connection driven without blocking ("link"), and
 *	  the SQL text of the calls.
 *
 * A DlockLink is one connection in one of four states (down, connecting,
 * idle, busy) that the caller advances from its own poll() loop:
 * DlockLinkPollEvents() says what to wait for on PQsocket(), the caller
 * stores poll()'s revents in link->revents, and DlockLinkProgress() does
 * the work that is ready without ever waiting (PQconnectPoll, PQflush,
 * PQconsumeInput; the connection is in non-blocking mode).  So a database
 * that hangs can never block the caller: cli/run.c bounds every attempt by
 * the lease's local deadline, and DlockLinkExec() (one-shot commands and
 * the acquire of dlock run) by --timeout.  The one blocking call is the
 * first connection (PQconnectdbParams, bounded by connect_timeout), made
 * before any lease is held.  The cancel request DlockLinkCancel() sends
 * (after a signal, or when --timeout ran out) is blocking in libpq 15
 * (PQcancel, no time limit of its own), so a child process sends it, and
 * dlock waits for that child for a bounded time only.
 *
 * Every call passes its arguments as parameters (PQsendQueryParams): no
 * SQL text is ever built from user input.  The only text spliced into SQL
 * is --schema, quoted as an identifier.
 *
 * Concurrency: none; the caller's single thread owns the link.  The cancel
 * helper shares nothing with dlock but the pipe it reports through; dlock
 * kills it (SIGKILL) if it runs past its bound and always reaps it before
 * going on, so it never outlives the call (nor dlock, on Linux).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "dlock_cli.h"

/* Connection parameters for PQconnectdbParams / PQconnectStartParams. */
static const char *conn_keywords[5];
static const char *conn_values[5];

/* "schema". with the quotes, or "" when --schema was not given */
static const char *schema_prefix = "";

/* How long a cancelled query may take to answer before it is abandoned. */
#define CANCEL_GRACE_MS 10000

/* The longest wait for the server to take a cancel request. */
#define CANCEL_MAX_MS 5000

/*
 * quote_ident returns name quoted as an SQL identifier: in double quotes,
 * with every double quote doubled (malloc'd).
 */
static char *
quote_ident(const char *name)
{
	size_t		n = strlen(name);
	char	   *out = malloc(2 * n + 4);
	char	   *w = out;

	if (out == NULL)
	{
		DlockError("out of memory");
		exit(DLOCK_EXIT_ERROR);
	}
	*w++ = '"';
	for (; *name; name++)
	{
		if (*name == '"')
			*w++ = '"';
		*w++ = *name;
	}
	*w++ = '"';
	*w++ = '.';
	*w = '\0';
	return out;
}

/*
 * DlockConnInit prepares the connection parameters: -d (a conninfo
 * string, a URI or a database name, expanded by libpq) overrides the
 * environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGSERVICE, ...), which
 * libpq reads for whatever is not given.  Unless PGCONNECT_TIMEOUT or -d
 * says otherwise, the first connection gives up after 10 seconds.  The
 * session shows up as application_name "dlock" unless PGAPPNAME or -d
 * names it.  For --json the client encoding is UTF8, whatever
 * PGCLIENTENCODING or -d say: JSON text is UTF-8 (cli/status.c sets it
 * back to SQL_ASCII for a SQL_ASCII database).
 */
void
DlockConnInit(const DlockOptions *opt)
{
	int			n = 0;

	if (getenv("PGCONNECT_TIMEOUT") == NULL)
	{
		conn_keywords[n] = "connect_timeout";
		conn_values[n++] = "10";
	}
	conn_keywords[n] = "fallback_application_name";
	conn_values[n++] = "dlock";
	if (opt->conninfo)
	{
		/* last, so that its settings override the ones above */
		conn_keywords[n] = "dbname";
		conn_values[n++] = opt->conninfo;
	}
	if (opt->json)
	{
		/* after -d, so that it wins over a client_encoding given there */
		conn_keywords[n] = "client_encoding";
		conn_values[n++] = "UTF8";
	}
	conn_keywords[n] = NULL;
	conn_values[n] = NULL;

	if (opt->schema)
		schema_prefix = quote_ident(opt->schema);
}

/*
 * notice_processor prints the server's notices (and a FATAL message the
 * server sends an idle connection before closing it, such as "terminating
 * connection due to administrator command") as dlock's messages.
 */
static void
notice_processor(void *arg, const char *message)
{
	char		buf[1024];

	(void) arg;
	snprintf(buf, sizeof(buf), "%s", message);
	DlockTrim(buf);
	DlockError("server: %s", buf);
}

/*
 * DlockConnectQuiet opens a connection and waits for it (bounded by
 * connect_timeout; libpq tries every host of a multi-host conninfo in
 * turn, and target_session_attrs is libpq's business).  Returns the
 * connection, or NULL with libpq's message, trimmed, in err.
 */
PGconn *
DlockConnectQuiet(char *err, size_t len)
{
	PGconn	   *conn = PQconnectdbParams(conn_keywords, conn_values, 1);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		snprintf(err, len, "%s", conn ? PQerrorMessage(conn) : "out of memory");
		DlockTrim(err);
		PQfinish(conn);
		return NULL;
	}
	PQsetNoticeProcessor(conn, notice_processor, NULL);
	return conn;
}

/*
 * DlockConnectBlocking opens a connection and waits for it (bounded by
 * connect_timeout).  Returns the connection, or NULL after printing
 * libpq's message ("dlock: <message>") when it could not connect.
 */
PGconn *
DlockConnectBlocking(void)
{
	char		msg[1024];
	PGconn	   *conn = DlockConnectQuiet(msg, sizeof(msg));

	if (conn == NULL)
		DlockError("%s", msg);
	return conn;
}

/*
 * DlockSql returns sql with "@extschema@." replaced by the quoted --schema
 * and a dot, or by nothing (malloc'd).
 */
char *
DlockSql(const char *sql)
{
	const char *marker = "@extschema@.";
	size_t		mlen = strlen(marker);
	size_t		plen = strlen(schema_prefix);
	size_t		len = strlen(sql) + 1;
	const char *p;
	char	   *out;
	char	   *w;

	for (p = strstr(sql, marker); p; p = strstr(p + mlen, marker))
		len += plen;
	out = malloc(len);
	if (out == NULL)
	{
		DlockError("out of memory");
		exit(DLOCK_EXIT_ERROR);
	}
	w = out;
	while (*sql)
	{
		if (strncmp(sql, marker, mlen) == 0)
		{
			memcpy(w, schema_prefix, plen);
			w += plen;
			sql += mlen;
		}
		else
			*w++ = *sql++;
	}
	*w = '\0';
	return out;
}

/*
 * DlockInterval writes ms as the text of an SQL interval parameter.
 */
void
DlockInterval(int64_t ms, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRId64 " milliseconds", ms);
}

/*
 * DlockLinkInit sets up an unconnected link.
 */
void
DlockLinkInit(DlockLink *link)
{
	memset(link, 0, sizeof(*link));
	link->state = DLOCK_LINK_DOWN;
}

/*
 * set_error stores text as the link's last error, trimmed.
 */
static void
set_error(DlockLink *link, const char *text)
{
	snprintf(link->errmsg, sizeof(link->errmsg), "%s",
			 text && *text ? text : "unknown error");
	DlockTrim(link->errmsg);
}

/*
 * DlockLinkAdopt makes an established connection the link's, in
 * non-blocking mode.  Returns false (the link is down) if it cannot.
 */
bool
DlockLinkAdopt(DlockLink *link, PGconn *conn)
{
	DlockLinkInit(link);
	link->conn = conn;
	if (PQsetnonblocking(conn, 1) != 0)
	{
		DlockLinkDrop(link, PQerrorMessage(conn));
		return false;
	}
	link->state = DLOCK_LINK_IDLE;
	return true;
}

/*
 * DlockLinkStartConnect starts a new connection without waiting.  On an
 * immediate failure the link stays down with the reason in errmsg.
 */
void
DlockLinkStartConnect(DlockLink *link)
{
	DlockLinkDrop(link, NULL);
	link->conn = PQconnectStartParams(conn_keywords, conn_values, 1);
	if (link->conn == NULL)
	{
		set_error(link, "out of memory");
		return;
	}
	if (PQstatus(link->conn) == CONNECTION_BAD)
	{
		DlockLinkDrop(link, PQerrorMessage(link->conn));
		return;
	}
	PQsetNoticeProcessor(link->conn, notice_processor, NULL);
	link->state = DLOCK_LINK_CONNECTING;
	link->connect_poll = PGRES_POLLING_WRITING;
}

/*
 * DlockLinkSend sends a query on an idle link.  Returns false when it
 * could not (the link is then down, the reason in errmsg).
 */
bool
DlockLinkSend(DlockLink *link, const char *sql, int nparams,
			  const char *const *values)
{
	int			rc;

	if (link->state != DLOCK_LINK_IDLE)
	{
		set_error(link, "not connected");
		return false;
	}
	if (!PQsendQueryParams(link->conn, sql, nparams, NULL, values, NULL, NULL, 0))
	{
		DlockLinkDrop(link, PQerrorMessage(link->conn));
		return false;
	}
	rc = PQflush(link->conn);
	if (rc < 0)
	{
		DlockLinkDrop(link, PQerrorMessage(link->conn));
		return false;
	}
	link->flushing = (rc == 1);
	link->revents = 0;
	link->state = DLOCK_LINK_BUSY;
	return true;
}

/*
 * DlockLinkPollEvents returns the poll() events to wait for on the link's
 * socket, or 0 when there is nothing to wait for.
 */
short
DlockLinkPollEvents(const DlockLink *link)
{
	switch (link->state)
	{
		case DLOCK_LINK_CONNECTING:
			return link->connect_poll == PGRES_POLLING_READING ? POLLIN : POLLOUT;
		case DLOCK_LINK_BUSY:
			return POLLIN | (link->flushing ? POLLOUT : 0);
		default:
			return 0;
	}
}

/*
 * DlockLinkProgress does what is ready on the link without waiting, using
 * link->revents (which it clears), and reports what happened.  On
 * DLOCK_LINK_RESULT, *result is the query's (last) result, which the
 * caller must PQclear; an SQL error is such a result (the link stays
 * idle).  A lost connection is DLOCK_LINK_FAILED (the link is down).
 */
DlockLinkEvent
DlockLinkProgress(DlockLink *link, PGresult **result)
{
	short		revents = link->revents;
	PGresult   *res;

	link->revents = 0;
	*result = NULL;
	switch (link->state)
	{
		case DLOCK_LINK_CONNECTING:
			{
				PostgresPollingStatusType st;

				if (revents == 0)
					return DLOCK_LINK_NOTHING;
				st = PQconnectPoll(link->conn);
				if (st == PGRES_POLLING_OK)
				{
					if (PQsetnonblocking(link->conn, 1) != 0)
					{
						DlockLinkDrop(link, PQerrorMessage(link->conn));
						return DLOCK_LINK_FAILED;
					}
					link->state = DLOCK_LINK_IDLE;
					return DLOCK_LINK_CONNECTED;
				}
				if (st == PGRES_POLLING_FAILED)
				{
					DlockLinkDrop(link, PQerrorMessage(link->conn));
					return DLOCK_LINK_FAILED;
				}
				link->connect_poll = st;
				return DLOCK_LINK_NOTHING;
			}

		case DLOCK_LINK_BUSY:
			if (link->flushing && (revents & (POLLOUT | POLLERR | POLLHUP)))
			{
				int			rc = PQflush(link->conn);

				if (rc < 0)
				{
					DlockLinkDrop(link, PQerrorMessage(link->conn));
					return DLOCK_LINK_FAILED;
				}
				link->flushing = (rc == 1);
			}
			if (revents & (POLLIN | POLLERR | POLLHUP))
			{
				if (!PQconsumeInput(link->conn))
				{
					DlockLinkDrop(link, PQerrorMessage(link->conn));
					return DLOCK_LINK_FAILED;
				}
			}
			while (!PQisBusy(link->conn))
			{
				res = PQgetResult(link->conn);
				if (res != NULL)
				{
					PQclear(link->pending);
					link->pending = res;
					continue;
				}
				/* the query is complete */
				res = link->pending;
				link->pending = NULL;
				if (PQstatus(link->conn) == CONNECTION_BAD || res == NULL)
				{
					/* e.g. "server closed the connection unexpectedly" */
					DlockLinkDrop(link, res ? PQresultErrorMessage(res)
								  : PQerrorMessage(link->conn));
					PQclear(res);
					return DLOCK_LINK_FAILED;
				}
				link->state = DLOCK_LINK_IDLE;
				*result = res;
				return DLOCK_LINK_RESULT;
			}
			if (PQstatus(link->conn) == CONNECTION_BAD)
			{
				DlockLinkDrop(link, PQerrorMessage(link->conn));
				return DLOCK_LINK_FAILED;
			}
			return DLOCK_LINK_NOTHING;

		default:
			return DLOCK_LINK_NOTHING;
	}
}

/*
 * DlockLinkDrop closes the link's connection (if any) and leaves it down.
 * why, when not NULL, becomes its last error.  A query in flight is
 * abandoned: the server may still run it, which for renew and release
 * with the link's own token can only touch that token's lease.
 */
void
DlockLinkDrop(DlockLink *link, const char *why)
{
	if (why)
		set_error(link, why);
	PQclear(link->pending);
	link->pending = NULL;
	if (link->conn)
		PQfinish(link->conn);
	link->conn = NULL;
	link->state = DLOCK_LINK_DOWN;
	link->flushing = false;
	link->revents = 0;
}

/*
 * DlockLinkClose closes the link, if it is open.
 */
void
DlockLinkClose(DlockLink *link)
{
	DlockLinkDrop(link, NULL);
}

/*
 * DlockLinkCancel asks the server to cancel the query in flight, waiting
 * at most bound_ms for the request to be taken, and writes what became of
 * it into outcome, as a clause ("the call was cancelled on the server",
 * ...).  Returns true when the server took the request.
 *
 * PQcancel opens a connection of its own and waits until the server
 * closes it, with no time limit (libpq 15 has no non-blocking cancel): a
 * stopped server, or a network that drops packets, would hold it for
 * minutes or for ever.  So a child process calls it and reports through a
 * pipe; a child still busy at the bound is killed.  Either way it is
 * reaped before this returns.  The child has dlock's original signal
 * dispositions and mask (a terminal's Ctrl-C ends it as it would end
 * dlock) and, on Linux, dies with dlock.
 */
bool
DlockLinkCancel(DlockLink *link, int64_t bound_ms, char *outcome, size_t len)
{
	PGcancel   *cancel;
	int			fds[2];
	sigset_t	old;
	pid_t		parent = getpid();
	pid_t		pid;
	char		reply[256];
	size_t		got = 0;
	bool		finished = false;
	int64_t		end;
	int			status;
	char		bound[32];

	if (link->conn == NULL || link->state != DLOCK_LINK_BUSY)
	{
		snprintf(outcome, len, "no call was in flight");
		return false;
	}
	cancel = PQgetCancel(link->conn);
	if (cancel == NULL)
	{
		snprintf(outcome, len, "the call could not be cancelled (libpq gave no cancel key): it may still be running on the server");
		return false;
	}
	if (pipe(fds) != 0)
	{
		snprintf(outcome, len, "the call could not be cancelled (pipe: %s): it may still be running on the server",
				 strerror(errno));
		PQfreeCancel(cancel);
		return false;
	}
	fflush(stdout);
	fflush(stderr);
	DlockSignalsBlock(&old);
	pid = fork();
	if (pid == 0)
	{
		char		msg[sizeof(reply)];
		ssize_t		rc;

#ifdef __linux__
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
#endif
		(void) parent;
		DlockSignalsRestoreInChild();
		close(fds[0]);
		/* the reply: "1", or "0" and libpq's message */
		msg[0] = '0';
		msg[1] = '\0';
		if (PQcancel(cancel, msg + 1, sizeof(msg) - 1))
			msg[0] = '1';
		rc = write(fds[1], msg, strlen(msg));
		(void) rc;
		_exit(0);
	}
	DlockSignalsUnblock(&old);
	close(fds[1]);
	if (pid < 0)
	{
		snprintf(outcome, len, "the call could not be cancelled (fork: %s): it may still be running on the server",
				 strerror(errno));
		close(fds[0]);
		PQfreeCancel(cancel);
		return false;
	}

	end = DlockNow() + bound_ms;
	for (;;)
	{
		struct pollfd pfd;
		int64_t		left = end - DlockNow();
		ssize_t		n;

		if (left <= 0)
			break;
		pfd.fd = fds[0];
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, left > 60000 ? 60000 : (int) left) <= 0)
			continue;			/* EINTR, or time to look at the clock */
		n = read(fds[0], reply + got, sizeof(reply) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || got + n >= sizeof(reply) - 1)
		{
			/* end of file: the child is done */
			if (n > 0)
				got += n;
			finished = true;
			break;
		}
		got += n;
	}
	reply[got] = '\0';
	if (!finished)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	close(fds[0]);
	PQfreeCancel(cancel);

	DlockTrim(reply);
	DlockFormatDuration(bound_ms, bound, sizeof(bound));
	if (!finished)
		snprintf(outcome, len, "the server did not take the cancel request within %s: the call may still be running there",
				 bound);
	else if (reply[0] == '1')
	{
		snprintf(outcome, len, "the call was cancelled on the server");
		return true;
	}
	else if (reply[0] == '0')
		snprintf(outcome, len, "the cancel request failed (%s): the call may still be running on the server",
				 reply[1] ? reply + 1 : "unknown error");
	else
		snprintf(outcome, len, "the cancel request was not sent (its process ended early): the call may still be running on the server");
	return false;
}

/*
 * DlockLinkExec sends a query on an idle link and waits for its result
 * (for one-shot commands and the acquire of dlock run), for at most
 * timeout_ms.  While it waits, SIGINT, SIGTERM, SIGHUP or SIGQUIT cancels
 * the query: the first such signal's number is stored in *signo, and the
 * result (a cancellation error, or the query's own result if it finished
 * first) is still awaited, for at most CANCEL_GRACE_MS and never past
 * timeout_ms.  When no result came in time, the query is cancelled on the
 * server (unless a signal did that already), the link is dropped and
 * link->timed_out is set.  Returns the result, or NULL when there is none
 * (the reason, one line, is in link->errmsg).
 *
 * Each cancel request is waited for at most the shorter of timeout_ms and
 * CANCEL_MAX_MS, so the call returns at most about twice timeout_ms (or
 * timeout_ms + 5 s) after it was sent.
 */
PGresult *
DlockLinkExec(DlockLink *link, const char *sql, int nparams,
			  const char *const *values, int64_t timeout_ms, int *signo)
{
	int64_t		cancel_bound = timeout_ms < CANCEL_MAX_MS ? timeout_ms : CANCEL_MAX_MS;
	int64_t		give_up;

	*signo = 0;
	link->timed_out = false;
	give_up = DlockNow() + timeout_ms;
	if (!DlockLinkSend(link, sql, nparams, values))
		return NULL;
	for (;;)
	{
		struct pollfd fds[2];
		int64_t		left;
		int			nfds = 1;
		int			s,
					code;
		PGresult   *res;
		DlockLinkEvent ev;

		left = give_up - DlockNow();
		if (left <= 0)
		{
			char		bound[32];
			char		outcome[512];
			char		msg[sizeof(link->errmsg)];

			DlockFormatDuration(timeout_ms, bound, sizeof(bound));
			if (*signo == 0)
			{
				DlockLinkCancel(link, cancel_bound, outcome, sizeof(outcome));
				snprintf(msg, sizeof(msg), "no answer from the database within %s (--timeout); %s",
						 bound, outcome);
			}
			else
				snprintf(msg, sizeof(msg), "no answer from the database to the cancelled call");
			link->timed_out = true;
			DlockLinkDrop(link, msg);
			return NULL;
		}

		fds[0].fd = DlockSignalFd();
		fds[0].events = POLLIN;
		fds[0].revents = 0;
		if (DlockLinkPollEvents(link))
		{
			fds[1].fd = PQsocket(link->conn);
			fds[1].events = DlockLinkPollEvents(link);
			fds[1].revents = 0;
			nfds = 2;
		}
		if (poll(fds, nfds, left > 60000 ? 60000 : (int) left) < 0 && errno != EINTR)
		{
			DlockLinkDrop(link, strerror(errno));
			return NULL;
		}
		while (DlockSignalNext(&s, &code))
		{
			if ((s == SIGINT || s == SIGTERM || s == SIGHUP || s == SIGQUIT) &&
				*signo == 0)
			{
				char		outcome[512];
				int64_t		grace_end;

				*signo = s;
				DlockLinkCancel(link, cancel_bound, outcome, sizeof(outcome));
				grace_end = DlockNow() + CANCEL_GRACE_MS;
				if (grace_end < give_up)
					give_up = grace_end;
			}
		}
		if (nfds == 2)
			link->revents = fds[1].revents;
		ev = DlockLinkProgress(link, &res);
		if (ev == DLOCK_LINK_RESULT)
			return res;
		if (ev == DLOCK_LINK_FAILED)
			return NULL;
	}
}

/*
 * DlockResultError returns the error of a failed result as
 * "message (SQLSTATE xxxxx)" followed by its DETAIL and HINT lines, in a
 * static buffer.
 */
const char *
DlockResultError(const PGresult *res)
{
	static char buf[2048];
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
	size_t		n;

	if (msg == NULL)
	{
		snprintf(buf, sizeof(buf), "%s", PQresultErrorMessage(res));
		DlockTrim(buf);
		return buf;
	}
	n = snprintf(buf, sizeof(buf), "%s", msg);
	if (state && n < sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - n, " (SQLSTATE %s)", state);
	if (detail && n < sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - n, "\nDETAIL:  %s", detail);
	if (hint && n < sizeof(buf))
		snprintf(buf + n, sizeof(buf) - n, "\nHINT:  %s", hint);
	return buf;
}

/*
 * DlockRetryableError reports whether the failed result res is an error
 * that another connection may not get: the server is read-only (25006: a
 * hot standby, or a read-only session, as the old primary after a
 * failover, or a standby a multi-host conninfo led to), it is shutting
 * down or starting up (57P01, 57P02, 57P03), or the connection failed
 * (class 08).  The caller then drops the connection and tries again on a
 * new one, which a multi-host conninfo may lead to another server.
 */
bool
DlockRetryableError(const PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (state == NULL)
		return false;
	return strcmp(state, "25006") == 0 || strcmp(state, "57P01") == 0 ||
		strcmp(state, "57P02") == 0 || strcmp(state, "57P03") == 0 ||
		strncmp(state, "08", 2) == 0;
}

/*
 * DlockResultIsTrue reports whether a one-row boolean result is true.
 */
bool
DlockResultIsTrue(const PGresult *res)
{
	return PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		!PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
}
