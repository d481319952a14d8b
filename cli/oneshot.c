/*-------------------------------------------------------------------------
 *
 * cli/oneshot.c
 *	  The one-shot commands of the dlock command-line tool, acquire, renew
 *	  and release, and what every one-shot command (status too, in
 *	  cli/status.c) shares: connecting, and reporting a failed or
 *	  interrupted call.
 *
 * Process model: one process, no threads, no children (except the
 * short-lived process that sends a cancel request, see cli/conn.c).  A
 * one-shot command connects (blocking, bounded by connect_timeout, with
 * the default signal dispositions: a Ctrl-C while connecting just ends
 * dlock), then catches SIGHUP, SIGINT, SIGQUIT and SIGTERM into the
 * self-pipe of cli/signals.c and runs its one call with DlockLinkExec():
 * such a signal cancels the call on the server (so that a waiting acquire
 * leaves no waiter behind), a lease granted anyway is released, and dlock
 * exits 128+signal.  A call that gets no answer within --timeout (default
 * 30s plus --wait) is cancelled on the server too, and dlock exits 69;
 * after an acquire it cannot know whether the lease was granted, and says
 * so (such a lease ends when its ttl runs out).  A waiting acquire
 * (--wait) keeps trying through lost connections and read-only servers
 * (cli/acquire.c); its first connection may fail too.
 *
 * Every call passes its arguments as query parameters (design.md §9).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock_cli.h"

/*
 * What the call that failed needed of version 1.2 ("--all and --slots"),
 * or NULL: the hint of DlockCallFailed names it.
 */
const char *dlock_needs_1_2 = NULL;

/*
 * DlockConnectOrExit opens the connection of a one-shot command, exiting
 * 69 with libpq's message when the database cannot be reached, and then
 * catches the stopping signals (see the header).  With keep_trying (a
 * waiting acquire), a failed connection leaves the link down instead,
 * for DlockAcquireLease to try again.
 */
void
DlockConnectOrExit(DlockLink *link, bool keep_trying)
{
	char		err[1024];
	PGconn	   *conn = DlockConnectQuiet(err, sizeof(err));

	DlockLinkInit(link);
	if (conn == NULL && !keep_trying)
	{
		DlockError("%s", err);
		exit(DLOCK_EXIT_UNAVAILABLE);
	}
	if (conn != NULL && !DlockLinkAdopt(link, conn))
	{
		DlockError("%s", link->errmsg);
		exit(DLOCK_EXIT_UNAVAILABLE);
	}
	DlockSignalsInit();
	DlockSignalCatch(SIGHUP, NULL);
	DlockSignalCatch(SIGINT, NULL);
	DlockSignalCatch(SIGQUIT, NULL);
	DlockSignalCatch(SIGTERM, NULL);
}

/*
 * DlockCallFailed reports a failed call (res NULL: the connection was
 * lost, or no answer came within --timeout) and returns the exit status:
 * 69 for a lost connection or a timeout, 70 for an SQL error, with a hint
 * when the extension's functions or views cannot be found (naming version
 * 1.2 when dlock_needs_1_2 says the call needed it).  unknown, when not
 * NULL, is added to the message of a timeout: what the call may have
 * done.
 */
int
DlockCallFailed(DlockLink *link, const PGresult *res, const char *what,
				const char *unknown)
{
	const char *state;
	char		needs[200] = "";

	if (res == NULL && link->timed_out)
	{
		DlockError("%s: %s%s%s", what, link->errmsg, unknown ? "; " : "",
				   unknown ? unknown : "");
		return DLOCK_EXIT_UNAVAILABLE;
	}
	if (res == NULL)
	{
		DlockError("%s: lost the connection to the database: %s", what, link->errmsg);
		return DLOCK_EXIT_UNAVAILABLE;
	}
	DlockError("%s: %s", what, DlockResultError(res));
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (dlock_needs_1_2)
		snprintf(needs, sizeof(needs), ", in version 1.2 or later (%s need it)",
				 dlock_needs_1_2);
	if (state && (strcmp(state, "42883") == 0 || strcmp(state, "42P01") == 0 ||
				  strcmp(state, "3F000") == 0))
		DlockError("is the dlock extension installed in database \"%s\"%s?  "
				   "CREATE EXTENSION dlock installs it%s; --schema names its schema "
				   "when that is not on the search_path",
				   link->conn ? PQdb(link->conn) : "?", needs,
				   dlock_needs_1_2 ? ", ALTER EXTENSION dlock UPDATE updates it" : "");
	return DLOCK_EXIT_ERROR;
}

/*
 * DlockInterrupted reports whether a signal (signo, 0 for none) ended a call
 * whose result is res: no result, or the server's "canceling statement
 * due to user request" (57014).  A call that was answered before the
 * cancel arrived was not interrupted.  If it was, it says so (why: "while
 * trying to renew \"x\"") and adds the reason there was no result, if
 * any.
 */
bool
DlockInterrupted(const DlockLink *link, const PGresult *res, int signo, const char *why)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (signo == 0)
		return false;
	if (res && (state == NULL || strcmp(state, "57014") != 0))
		return false;
	if (res == NULL)
		DlockError("interrupted by %s %s; %s", DlockSignalName(signo), why, link->errmsg);
	else
		DlockError("interrupted by %s %s", DlockSignalName(signo), why);
	return true;
}

/*
 * DlockCmdAcquire is "dlock acquire": prints the token; with --all or --slots
 * one line "TOKEN NAME" per lease taken, in the order given.
 */
int
DlockCmdAcquire(const DlockOptions *opt)
{
	DlockLink	link;
	DlockLeases leases;
	char		owner[512];
	int64_t		sent_at,
				answered_at;
	int			rc;
	int			i;
	bool		ok = true;

	if (opt->owner)
		snprintf(owner, sizeof(owner), "%s", opt->owner);
	else
		snprintf(owner, sizeof(owner), "dlock acquire %s ppid %d",
				 DlockHostname(), (int) getppid());
	DlockLeasesInit(&leases, opt);
	DlockConnectOrExit(&link, opt->wait_ms > 0);
	/* a reader gone from stdout must not kill dlock before it can release */
	DlockSignalIgnore(SIGPIPE);
	rc = DlockAcquireLease(&link, opt, owner, &leases, &sent_at, &answered_at);
	/* (not idle: DlockAcquireLease said why when it gave up) */
	if (rc == DLOCK_EXIT_NOT_ACQUIRED && link.state == DLOCK_LINK_IDLE)
	{
		char		holder[4096];

		DlockDescribeHolder(&link, opt, &leases, holder, sizeof(holder));
		DlockError("not acquired: %s", holder);
	}
	if (rc != DLOCK_EXIT_OK)
	{
		DlockLinkClose(&link);
		return rc;
	}
	if (leases.want_array == NULL)
		ok = printf("%s\n", leases.tokens[0]) >= 0;
	else
		for (i = 0; i < leases.n && ok; i++)
			ok = printf("%s %s\n", leases.tokens[i], leases.names[i]) >= 0;
	if (!ok || fflush(stdout) != 0)
	{
		/* nobody would know the tokens: give the leases back */
		DlockError("could not write the %s: %s",
				   leases.want_array ? "tokens" : "token", strerror(errno));
		DlockReleaseQuietly(&link, opt, &leases);
		DlockLinkClose(&link);
		return DLOCK_EXIT_ERROR;
	}
	DlockLinkClose(&link);
	return DLOCK_EXIT_OK;
}

/*
 * bool_call runs renew or release with (NAME, TOKEN[, ttl]) and maps the
 * answer to the exit status: 0 true, 1 false.  unknown says what the call
 * may have done when it got no answer within --timeout.
 */
static int
bool_call(const DlockOptions *opt, const char *sql, int nparams, const char *what,
		  const char *unknown)
{
	DlockLink	link;
	char		token[32];
	char		ttl[64];
	const char *values[3];
	char		whatname[600];
	char		why[600];
	int			signo;
	int			rc;
	PGresult   *res;

	snprintf(token, sizeof(token), "%" PRId64, opt->token);
	DlockInterval(opt->ttl_ms, ttl, sizeof(ttl));
	values[0] = opt->name;
	values[1] = token;
	values[2] = ttl;
	snprintf(whatname, sizeof(whatname), "could not %s \"%s\"", what, opt->name);
	snprintf(why, sizeof(why), "while trying to %s \"%s\"", what, opt->name);
	DlockConnectOrExit(&link, false);
	res = DlockLinkExec(&link, DlockSql(sql), nparams, values, opt->timeout_ms, &signo);
	if (DlockInterrupted(&link, res, signo, why))
		rc = 128 + signo;
	else if (res == NULL)
		rc = DlockCallFailed(&link, NULL, whatname, unknown);
	else if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		rc = DlockCallFailed(&link, res, whatname, NULL);
	else if (DlockResultIsTrue(res))
		rc = DLOCK_EXIT_OK;
	else
	{
		DlockError("token %s does not hold a live lease on \"%s\" (it expired, was released or broken, or was taken over)",
				   token, opt->name);
		rc = DLOCK_EXIT_NO;
	}
	PQclear(res);
	DlockLinkClose(&link);
	return rc;
}

/*
 * DlockCmdRenew is "dlock renew": exits 0 when the lease was renewed, 1
 * when TOKEN holds no live lease on NAME.
 */
int
DlockCmdRenew(const DlockOptions *opt)
{
	return bool_call(opt, "SELECT @extschema@.dlock_renew($1, $2::pg_catalog.int8, $3::pg_catalog.interval)",
					 3, "renew", "the lease may or may not have been renewed");
}

/*
 * DlockCmdRelease is "dlock release": exits 0 when the lease was
 * released, 1 when TOKEN holds no live lease on NAME.
 */
int
DlockCmdRelease(const DlockOptions *opt)
{
	return bool_call(opt, "SELECT @extschema@.dlock_release($1, $2::pg_catalog.int8)",
					 2, "release", "the lease may or may not have been released (if not, it ends when its ttl runs out)");
}
