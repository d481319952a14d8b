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
 * is the extension's schema, quoted by libpq (PQescapeIdentifier).  Every
 * session first pins its search_path, as PostgreSQL's client programs do,
 * and learns the extension's schema (pin_sql): a connection is ready only
 * then, and every statement names its objects' schemas (design.md §9).
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

/*
 * The extension's schema: schema_option is --schema (NULL when not
 * given); schema_prefix is it quoted, and a dot ("dlock".), or the schema
 * the first session found (pin_find_sql), NULL until it is known.
 */
static const char *schema_option = NULL;
static char *schema_prefix = NULL;

/* The longest wait for the answer to pin_sql (--timeout). */
static int64_t pin_timeout_ms;

/*
 * The first statement of every session: its search_path pinned to
 * pg_catalog alone, as PostgreSQL's client programs do right after
 * connecting (ALWAYS_SECURE_SEARCH_PATH_SQL), so that no object another
 * role can create in a schema of the search_path (a function, operator or
 * view named like one dlock calls) is ever found instead of the one
 * meant.  Until the extension's schema is known (no --schema), the same
 * statement reads it first: the schema of extension dlock if it is among
 * the schemas that the session's search_path had (current_schemas(), which
 * leaves out the schemas the role may not use), that is, where dlock found
 * the functions by their bare names before it pinned the search_path; NULL
 * otherwise, and the calls then fail as before, "does not exist".  OFFSET
 * 0 keeps the read in a subquery, evaluated before set_config().
 */
static const char pin_sql[] =
"SELECT pg_catalog.set_config('search_path', '', false)";
static const char pin_find_sql[] =
"SELECT s.nspname, pg_catalog.set_config('search_path', '', false)"
" FROM (SELECT (SELECT n.nspname FROM pg_catalog.pg_extension e"
" JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace"
" WHERE e.extname OPERATOR(pg_catalog.=) 'dlock'"
" AND n.nspname OPERATOR(pg_catalog.=) ANY (pg_catalog.current_schemas(true)))"
" OFFSET 0) s(nspname)";

/* How long a cancelled query may take to answer before it is abandoned. */
#define CANCEL_GRACE_MS 10000

/* The longest wait for the server to take a cancel request. */
#define CANCEL_MAX_MS 5000

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

	schema_option = opt->schema;
	pin_timeout_ms = opt->timeout_ms;
}

/*
 * pin_query returns the first statement of a new session: pin_find_sql
 * while the extension's schema is not known, else pin_sql.
 */
static const char *
pin_query(void)
{
	return schema_prefix == NULL && schema_option == NULL ? pin_find_sql : pin_sql;
}

/*
 * pin_result takes the answer res (NULL: none) of pin_query() on conn:
 * the extension's schema, when it was read, becomes schema_prefix, quoted
 * by libpq, as does --schema on the first session.  Returns false with
 * the reason in err when the search_path could not be pinned.
 */
static bool
pin_result(PGconn *conn, const PGresult *res, char *err, size_t len)
{
	const char *schema = schema_option;
	char	   *quoted;

	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK ||
		PQntuples(res) != 1)
	{
		snprintf(err, len, "could not set the search_path: %s",
				 res ? DlockResultError(res) : PQerrorMessage(conn));
		DlockTrim(err);
		return false;
	}
	if (schema_prefix != NULL)
		return true;
	if (schema == NULL && PQnfields(res) == 2 && !PQgetisnull(res, 0, 0))
		schema = PQgetvalue(res, 0, 0);
	if (schema == NULL)
		return true;			/* not found: the calls say "does not exist" */
	quoted = PQescapeIdentifier(conn, schema, strlen(schema));
	if (quoted == NULL)
	{
		snprintf(err, len, "could not quote the schema \"%s\": %s",
				 schema, PQerrorMessage(conn));
		DlockTrim(err);
		return false;
	}
	schema_prefix = DlockAlloc(strlen(quoted) + 2);
	snprintf(schema_prefix, strlen(quoted) + 2, "%s.", quoted);
	PQfreemem(quoted);
	return true;
}

/*
 * pin_blocking sends pin_query() on conn, a new connection in blocking
 * mode, and waits for its answer, for at most --timeout.  Returns false
 * with the reason in err when it could not pin the search_path.
 */
static bool
pin_blocking(PGconn *conn, char *err, size_t len)
{
	int64_t		end = DlockNow() + pin_timeout_ms;
	PGresult   *last = NULL;
	PGresult   *res;
	bool		ok;

	if (!PQsendQuery(conn, pin_query()))
		return pin_result(conn, NULL, err, len);
	for (;;)
	{
		struct pollfd pfd;
		int64_t		left;

		while (!PQisBusy(conn))
		{
			res = PQgetResult(conn);
			if (res == NULL)
			{
				ok = pin_result(conn, last, err, len);
				PQclear(last);
				return ok;
			}
			PQclear(last);
			last = res;
		}
		left = end - DlockNow();
		if (left <= 0)
		{
			char		bound[32];

			DlockFormatDuration(pin_timeout_ms, bound, sizeof(bound));
			snprintf(err, len, "could not set the search_path: no answer from the database within %s (--timeout)",
					 bound);
			PQclear(last);
			return false;
		}
		pfd.fd = PQsocket(conn);
		pfd.events = POLLIN;
		pfd.revents = 0;
		if ((poll(&pfd, 1, left > 60000 ? 60000 : (int) left) < 0 &&
			 errno != EINTR) || !PQconsumeInput(conn))
		{
			PQclear(last);
			return pin_result(conn, NULL, err, len);
		}
	}
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
 * turn, and target_session_attrs is libpq's business), then pins its
 * search_path (bounded by --timeout).  Returns the connection, or NULL
 * with the reason (libpq's message), trimmed, in err.
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
	if (!pin_blocking(conn, err, len))
	{
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/*
 * DlockSql returns sql with "@extschema@." replaced by the extension's
 * schema, quoted, and a dot, or by nothing while the schema is not known
 * (malloc'd).  Called once a session has pinned its search_path: the
 * first one found the schema.
 */
char *
DlockSql(const char *sql)
{
	const char *marker = "@extschema@.";
	const char *prefix = schema_prefix ? schema_prefix : "";
	size_t		mlen = strlen(marker);
	size_t		plen = strlen(prefix);
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
			memcpy(w, prefix, plen);
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
 * DlockLinkStartConnect starts a new connection without waiting (it is
 * ready once DlockLinkProgress reports DLOCK_LINK_CONNECTED: connected,
 * its search_path pinned).  On an immediate failure the link stays down
 * with the reason in errmsg.
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
			if (link->pinning)
				return POLLIN | (link->flushing ? POLLOUT : 0);
			return link->connect_poll == PGRES_POLLING_READING ? POLLIN : POLLOUT;
		case DLOCK_LINK_BUSY:
			return POLLIN | (link->flushing ? POLLOUT : 0);
		default:
			return 0;
	}
}

/*
 * link_collect does what is ready for the statement in flight on the link
 * (revents: poll()'s result for its socket) without waiting: sends what
 * is left of it, reads what has come.  Returns DLOCK_LINK_RESULT with its
 * (last) result in *result once it is complete, DLOCK_LINK_FAILED when the
 * connection is lost (the link is then down), else DLOCK_LINK_NOTHING.
 */
static DlockLinkEvent
link_collect(DlockLink *link, short revents, PGresult **result)
{
	PGresult   *res;

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
		/* the statement is complete */
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
		*result = res;
		return DLOCK_LINK_RESULT;
	}
	if (PQstatus(link->conn) == CONNECTION_BAD)
	{
		DlockLinkDrop(link, PQerrorMessage(link->conn));
		return DLOCK_LINK_FAILED;
	}
	return DLOCK_LINK_NOTHING;
}

/*
 * link_pin sends pin_query() on the link's new connection, now in
 * non-blocking mode; the link stays connecting until its answer
 * (DlockLinkProgress).  Returns false when it could not (the link is then
 * down, the reason in errmsg).
 */
static bool
link_pin(DlockLink *link)
{
	int			rc;

	if (!PQsendQuery(link->conn, pin_query()) ||
		(rc = PQflush(link->conn)) < 0)
	{
		DlockLinkDrop(link, PQerrorMessage(link->conn));
		return false;
	}
	link->flushing = (rc == 1);
	link->pinning = true;
	return true;
}

/*
 * DlockLinkProgress does what is ready on the link without waiting, using
 * link->revents (which it clears), and reports what happened.  A new
 * connection is CONNECTED once its search_path is pinned (pin_sql).  On
 * DLOCK_LINK_RESULT, *result is the query's (last) result, which the
 * caller must PQclear; an SQL error is such a result (the link stays
 * idle).  A lost connection is DLOCK_LINK_FAILED (the link is down).
 */
DlockLinkEvent
DlockLinkProgress(DlockLink *link, PGresult **result)
{
	short		revents = link->revents;
	DlockLinkEvent ev;

	link->revents = 0;
	*result = NULL;
	switch (link->state)
	{
		case DLOCK_LINK_CONNECTING:
			if (link->pinning)
			{
				PGresult   *res = NULL;
				char		err[sizeof(link->errmsg)];

				ev = link_collect(link, revents, &res);
				if (ev != DLOCK_LINK_RESULT)
					return ev;
				link->pinning = false;
				if (!pin_result(link->conn, res, err, sizeof(err)))
				{
					PQclear(res);
					DlockLinkDrop(link, err);
					return DLOCK_LINK_FAILED;
				}
				PQclear(res);
				link->state = DLOCK_LINK_IDLE;
				return DLOCK_LINK_CONNECTED;
			}
			else
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
					if (!link_pin(link))
						return DLOCK_LINK_FAILED;
					return DLOCK_LINK_NOTHING;
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
			ev = link_collect(link, revents, result);
			if (ev == DLOCK_LINK_RESULT)
				link->state = DLOCK_LINK_IDLE;
			return ev;

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
	link->pinning = false;
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
