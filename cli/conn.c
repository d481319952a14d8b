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
 * the lease's local deadline.  The one blocking call is the first
 * connection (PQconnectdbParams), made before any lease is held, and the
 * cancel request DlockLinkCancel() sends while a one-shot command waits.
 *
 * Every call passes its arguments as parameters (PQsendQueryParams): no
 * SQL text is ever built from user input.  The only text spliced into SQL
 * is --schema, quoted as an identifier.
 *
 * Concurrency: none; the caller's single thread owns the link.
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

#include "dlock_cli.h"

/* Connection parameters for PQconnectdbParams / PQconnectStartParams. */
static const char *conn_keywords[4];
static const char *conn_values[4];

/* "schema". with the quotes, or "" when --schema was not given */
static const char *schema_prefix = "";

/* How long a cancelled query may take to answer before it is abandoned. */
#define CANCEL_GRACE_MS 10000

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
 * names it.
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
 * DlockConnectBlocking opens a connection and waits for it (bounded by
 * connect_timeout).  Returns the connection, or NULL after printing
 * libpq's message ("dlock: <message>") when it could not connect.
 */
PGconn *
DlockConnectBlocking(void)
{
	PGconn	   *conn = PQconnectdbParams(conn_keywords, conn_values, 1);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		char		msg[1024];

		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(conn));
		DlockTrim(msg);
		DlockError("%s", msg);
		PQfinish(conn);
		return NULL;
	}
	PQsetNoticeProcessor(conn, notice_processor, NULL);
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
 * DlockLinkCancel asks the server to cancel the query in flight (a
 * blocking request on a separate connection).  Failures are ignored: the
 * caller keeps waiting for the answer for a bounded time.
 */
void
DlockLinkCancel(DlockLink *link)
{
	PGcancel   *cancel;
	char		errbuf[256];

	if (link->conn == NULL || link->state != DLOCK_LINK_BUSY)
		return;
	cancel = PQgetCancel(link->conn);
	if (cancel == NULL)
		return;
	(void) PQcancel(cancel, errbuf, sizeof(errbuf));
	PQfreeCancel(cancel);
}

/*
 * DlockLinkExec sends a query on an idle link and waits for its result
 * (for one-shot commands and the acquire of dlock run).  While it waits,
 * SIGINT, SIGTERM, SIGHUP or SIGQUIT cancels the query: the first such
 * signal's number is stored in *signo, and the result (a cancellation
 * error, or the query's own result if it finished first) is still
 * awaited, for at most CANCEL_GRACE_MS.  Returns the result, or NULL when
 * the connection failed (the reason is in link->errmsg).
 */
PGresult *
DlockLinkExec(DlockLink *link, const char *sql, int nparams,
			  const char *const *values, int *signo)
{
	int64_t		cancelled_at = -1;

	*signo = 0;
	if (!DlockLinkSend(link, sql, nparams, values))
		return NULL;
	for (;;)
	{
		struct pollfd fds[2];
		int			timeout = -1;
		int			nfds = 1;
		int			s,
					code;
		PGresult   *res;
		DlockLinkEvent ev;

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
		if (cancelled_at >= 0)
		{
			int64_t		left = cancelled_at + CANCEL_GRACE_MS - DlockNow();

			if (left <= 0)
			{
				DlockLinkDrop(link, "the server did not answer the cancel request");
				return NULL;
			}
			timeout = (int) left;
		}
		if (poll(fds, nfds, timeout) < 0 && errno != EINTR)
		{
			DlockLinkDrop(link, strerror(errno));
			return NULL;
		}
		while (DlockSignalNext(&s, &code))
		{
			if ((s == SIGINT || s == SIGTERM || s == SIGHUP || s == SIGQUIT) &&
				*signo == 0)
			{
				*signo = s;
				DlockLinkCancel(link);
				cancelled_at = DlockNow();
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
 * DlockResultIsTrue reports whether a one-row boolean result is true.
 */
bool
DlockResultIsTrue(const PGresult *res)
{
	return PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		!PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
}
