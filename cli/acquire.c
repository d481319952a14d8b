/*-------------------------------------------------------------------------
 *
 * cli/acquire.c
 *	  Taking leases, for "dlock acquire" (cli/oneshot.c) and "dlock run"
 *	  (cli/run.c): the acquire call and its retries (DlockAcquireLease),
 *	  who holds what was refused (DlockDescribeHolder), and giving back
 *	  what an interrupted acquire got (DlockReleaseQuietly).
 *
 * One call takes what the command line asks for: dlock_acquire(NAME, ...);
 * with --all, dlock_acquire_all over the names; with --slots,
 * dlock_acquire_any over the permits NAME:1 ... NAME:N (cli/leases.c).
 * It runs with DlockLinkExec() (cli/conn.c): bounded by --timeout, and
 * cancelled on the server by SIGHUP, SIGINT, SIGQUIT or SIGTERM, after
 * which a lease granted anyway is released.  A waiting acquire (--wait)
 * keeps trying through lost connections and read-only servers until
 * --wait or --timeout runs out; its rules (when it gives up, 75 or 69,
 * what a call lost with its connection may have left behind) are in
 * design.md §9 and at DlockAcquireLease.
 *
 * Concurrency: none; the caller's single thread owns the link.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock_cli.h"

/*
 * DlockReleaseQuietly releases the leases of l after an interrupted acquire
 * (one call: dlock_release, or dlock_release_each for a set), ignoring
 * the outcome, unless no answer comes within --timeout: that is reported
 * (the leases then end with their ttl).
 */
void
DlockReleaseQuietly(DlockLink *link, const DlockOptions *opt, const DlockLeases *l)
{
	const char *values[2];
	char	   *tokens = NULL;
	int			signo;
	PGresult   *res;

	if (link->state != DLOCK_LINK_IDLE || l->n == 0)
		return;
	if (l->n == 1)
	{
		values[0] = l->names[0];
		values[1] = l->tokens[0];
		res = DlockLinkExec(link, DlockSql("SELECT @extschema@.dlock_release($1, $2::pg_catalog.int8)"),
							2, values, opt->timeout_ms, &signo);
	}
	else
	{
		values[0] = DlockTextArray(l->names, NULL, l->n);
		values[1] = tokens = DlockTextArray(l->tokens, NULL, l->n);
		res = DlockLinkExec(link, DlockSql("SELECT @extschema@.dlock_release_each($1::pg_catalog.text[], $2::pg_catalog.int8[])"),
							2, values, opt->timeout_ms, &signo);
		free((void *) values[0]);
		free(tokens);
	}
	if (res == NULL && link->timed_out && signo == 0)
	{
		char		ttl[32];
		char		held[1024];

		DlockFormatDuration(opt->ttl_ms, ttl, sizeof(ttl));
		DlockLeasesList(l, NULL, held, sizeof(held));
		DlockError("could not release %s: %s; %s when %s ttl (%s) runs out",
				   held, link->errmsg, l->n == 1 ? "it ends" : "they end",
				   l->n == 1 ? "its" : "their", ttl);
	}
	PQclear(res);
}

/* The pauses between the attempts of a waiting acquire: 100 ms doubling */
#define ACQUIRE_BACKOFF_MIN_MS	100
#define ACQUIRE_BACKOFF_MAX_MS	1000

/*
 * The retries of a waiting acquire (DlockAcquireLease): when the last
 * attempt may start, when the whole acquire gives up, and what the
 * attempts so far found.
 */
typedef struct AcquireRetry
{
	int64_t		wait_end;		/* start + --wait: no attempt starts later */
	int64_t		give_up;		/* start + --timeout */
	int64_t		backoff;		/* the next pause */
	bool		reached;		/* a server took an acquire (it waited) */
	bool		failing;		/* an attempt failed (the first one is
								 * reported) */
	bool		orphan_noted;	/* the message about a lost grant was given */
	char		lasterr[1024];	/* the last attempt's failure */
} AcquireRetry;

/*
 * acquire_pause waits until the time until (of DlockNow()), or returns at
 * once when until has passed, unless a stopping signal (SIGHUP, SIGINT,
 * SIGQUIT, SIGTERM) has come or comes first: then it returns that signal's
 * number; else 0.  Other signals are read and ignored, as DlockLinkExec
 * does during the call.
 */
static int
acquire_pause(int64_t until)
{
	for (;;)
	{
		struct pollfd pfd;
		int64_t		left;
		int			s,
					code;

		while (DlockSignalNext(&s, &code))
			if (s == SIGINT || s == SIGTERM || s == SIGHUP || s == SIGQUIT)
				return s;
		left = until - DlockNow();
		if (left <= 0)
			return 0;
		pfd.fd = DlockSignalFd();
		pfd.events = POLLIN;
		pfd.revents = 0;
		(void) poll(&pfd, 1, left > 60000 ? 60000 : (int) left);
	}
}

/*
 * acquire_failed records a failed attempt of a waiting acquire (err: why;
 * orphan: a call the server had taken lost its connection, so the server
 * may have granted the lease without dlock learning its token) and waits
 * for the next one.  Returns 0 to try again; or, when --wait or --timeout
 * has run out, the exit status after saying why: 75 when a server took
 * one of the acquires (the lease was held then), 69 when none did; or
 * 128+signal when a stopping signal came.
 */
static int
acquire_failed(AcquireRetry *st, const DlockOptions *opt, const char *wanted,
			   const char *err, bool orphan)
{
	int64_t		now = DlockNow();
	int64_t		until;
	char		left[32];
	char		ttl[32];
	char		waited[32];
	int			s;

	snprintf(st->lasterr, sizeof(st->lasterr), "%s", err);
	DlockFormatDuration(opt->ttl_ms, ttl, sizeof(ttl));
	if (!st->failing)
	{
		DlockFormatDuration(st->wait_end > now ? st->wait_end - now : 0, left, sizeof(left));
		DlockError("could not acquire %s: %s; trying again until --wait runs out (%s left)",
				   wanted, err, left);
	}
	if (orphan && !st->orphan_noted)
	{
		DlockError("the lost call may have been granted %s without dlock learning %s: %s then %s when %s ttl (%s) runs out, and the next acquire waits for %s",
				   opt->all ? "the leases" : "the lease",
				   opt->all ? "their tokens" : "its token",
				   opt->all ? "they" : "it", opt->all ? "end" : "ends",
				   opt->all ? "their" : "its", ttl, opt->all ? "them" : "it");
		st->orphan_noted = true;
	}
	st->failing = true;
	if (now >= st->wait_end || now >= st->give_up)
	{
		DlockFormatDuration(opt->wait_ms, waited, sizeof(waited));
		if (st->reached)
		{
			DlockError("not acquired: --wait (%s) ran out while the database could not be used (last error: %s); %s held when last asked",
					   waited, st->lasterr, wanted);
			return DLOCK_EXIT_NOT_ACQUIRED;
		}
		if (now < st->wait_end)
			DlockFormatDuration(opt->timeout_ms, waited, sizeof(waited));
		DlockError("could not acquire %s: no usable database within --%s (%s); last error: %s",
				   wanted, now >= st->wait_end ? "wait" : "timeout", waited,
				   st->lasterr);
		return DLOCK_EXIT_UNAVAILABLE;
	}
	until = now + st->backoff;
	if (until > st->wait_end)
		until = st->wait_end;
	if (until > st->give_up)
		until = st->give_up;
	st->backoff = st->backoff * 2 > ACQUIRE_BACKOFF_MAX_MS ?
		ACQUIRE_BACKOFF_MAX_MS : st->backoff * 2;
	s = acquire_pause(until);
	if (s != 0)
	{
		DlockError("interrupted by %s while acquiring %s", DlockSignalName(s), wanted);
		return 128 + s;
	}
	return 0;
}

/*
 * DlockAcquireLease takes what opt asks for in one call:
 * dlock_acquire(NAME, --ttl, --wait, owner), with --all
 * dlock_acquire_all(the names, ...), with --slots dlock_acquire_any(the
 * permits, ...).  Returns 0 with the leases in *l (set up by
 * DlockLeasesInit) and the time the call was sent (*sent_at) and answered
 * (*answered_at); 75 when not acquired (held; for a set, one of its
 * names; for --slots, every permit); 69 or 70 on failure (reported; 69
 * also when no answer came within --timeout); 128+signal when a signal
 * interrupted it (leases granted meanwhile are released again).
 *
 * Without --wait the link must be idle and there is one call.  A waiting
 * acquire (--wait) keeps trying when the database cannot be used: the
 * link is down (the caller's first connection failed), the connection is
 * lost during the call, or the server is read-only or going away
 * (DlockRetryableError): it reconnects (each connection bounded by
 * connect_timeout, through every host of the conninfo) and calls again
 * with the wait that is left, pausing 100 ms doubling to 1 s between
 * attempts, until --wait runs out (one last attempt then, without
 * waiting) or --timeout, counted from the start, does.  A call whose
 * connection was lost may have been granted on the server: that lease
 * keeps a token dlock never learns and ends with its ttl; the next call
 * gets a new token, so nothing ever acts on the lost one.  On giving up
 * it returns 75 when a server took one of the calls (the lease was held
 * then), 69 when none did; the link is then down, and the message given.
 */
int
DlockAcquireLease(DlockLink *link, const DlockOptions *opt, const char *owner,
				  DlockLeases *l, int64_t *sent_at, int64_t *answered_at)
{
	char		ttl[64];
	char		wait[64];
	const char *values[4];
	const char *call;
	char	   *sql = NULL;
	const char *state;
	int			signo;
	PGresult   *res;
	char		wanted[1024];
	char		what[1200];
	char		unknown[300];
	char		ttlfmt[32];
	bool		keep_trying = opt->wait_ms > 0;
	AcquireRetry st;
	int			rc;

	DlockInterval(opt->ttl_ms, ttl, sizeof(ttl));
	values[0] = l->want_array ? l->want_array : opt->name;
	values[1] = ttl;
	values[2] = wait;
	values[3] = owner;
	if (opt->all)
		call = "SELECT @extschema@.dlock_acquire_all($1::pg_catalog.text[], $2::pg_catalog.interval, $3::pg_catalog.interval, $4)";
	else if (opt->slots > 0)
		call = "SELECT lock_name, token FROM @extschema@.dlock_acquire_any($1::pg_catalog.text[], $2::pg_catalog.interval, $3::pg_catalog.interval, $4)";
	else
		call = "SELECT @extschema@.dlock_acquire($1, $2::pg_catalog.interval, $3::pg_catalog.interval, $4)";
	dlock_needs_1_2 = l->want_array ? "--all and --slots" : NULL;
	DlockLeasesWanted(l, opt, wanted, sizeof(wanted));
	snprintf(what, sizeof(what), "could not acquire %s", wanted);
	DlockFormatDuration(opt->ttl_ms, ttlfmt, sizeof(ttlfmt));
	snprintf(unknown, sizeof(unknown),
			 "the %s may have been granted all the same, without dlock learning %s: %s then %s when %s ttl (%s) runs out",
			 opt->all ? "leases" : "lease", opt->all ? "their tokens" : "its token",
			 opt->all ? "they" : "it", opt->all ? "end" : "ends",
			 opt->all ? "their" : "its", ttlfmt);

	memset(&st, 0, sizeof(st));
	*sent_at = DlockNow();
	st.wait_end = *sent_at + opt->wait_ms;
	st.give_up = *sent_at + opt->timeout_ms;
	st.backoff = ACQUIRE_BACKOFF_MIN_MS;
	for (;;)
	{
		int64_t		wait_left;

		if (link->state != DLOCK_LINK_IDLE)
		{
			char		err[1024];
			PGconn	   *conn = DlockConnectQuiet(err, sizeof(err));
			int			s = acquire_pause(0);	/* a signal meanwhile? */

			if (conn != NULL && !DlockLinkAdopt(link, conn))
			{
				snprintf(err, sizeof(err), "%s", link->errmsg);
				conn = NULL;
			}
			if (s != 0)
			{
				DlockLinkDrop(link, NULL);
				DlockError("interrupted by %s while acquiring %s", DlockSignalName(s), wanted);
				return 128 + s;
			}
			if (conn == NULL)
			{
				if ((rc = acquire_failed(&st, opt, wanted, err, false)) != 0)
					return rc;
				continue;
			}
		}

		/* the wait that is left (none for the last attempt) */
		wait_left = st.wait_end - DlockNow();
		DlockInterval(wait_left > 0 ? wait_left : 0, wait, sizeof(wait));
		*sent_at = DlockNow();
		if (st.failing && *sent_at >= st.give_up)
		{
			/* a slow reconnect used up --timeout */
			DlockLinkDrop(link, NULL);
			if ((rc = acquire_failed(&st, opt, wanted, "--timeout ran out while reconnecting", false)) != 0)
				return rc;
			continue;
		}
		/* (the first session found the extension's schema: cli/conn.c) */
		if (sql == NULL)
			sql = DlockSql(call);
		res = DlockLinkExec(link, sql, 4, values,
							st.failing ? st.give_up - *sent_at : opt->timeout_ms,
							&signo);
		*answered_at = DlockNow();
		if (signo && res == NULL && link->timed_out)
			DlockError("interrupted by %s while acquiring %s; %s, so %s",
					   DlockSignalName(signo), wanted, link->errmsg, unknown);
		else if (signo)
			DlockError("interrupted by %s while acquiring %s", DlockSignalName(signo), wanted);
		if (res == NULL)
		{
			char		err[1100];

			if (signo)
				return 128 + signo;
			if (link->timed_out || !keep_trying)
				return DlockCallFailed(link, NULL, what, unknown);
			/* lost during the call: a server had taken it */
			st.reached = true;
			snprintf(err, sizeof(err), "lost the connection to the database: %s", link->errmsg);
			if ((rc = acquire_failed(&st, opt, wanted, err, true)) != 0)
				return rc;
			continue;
		}
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			if (signo && state && strcmp(state, "57014") == 0)
				rc = 128 + signo;
			else if (keep_trying && !signo && DlockRetryableError(res))
			{
				char		err[2048];

				/*
				 * Read-only, or going away: try another connection.  A
				 * backend terminated during the call (57P01, 57P02) had taken
				 * it; its transaction is rolled back.
				 */
				if (state && strncmp(state, "57P0", 4) == 0 && strcmp(state, "57P03") != 0)
					st.reached = true;
				snprintf(err, sizeof(err), "%s", DlockResultError(res));
				PQclear(res);
				DlockLinkDrop(link, NULL);
				if ((rc = acquire_failed(&st, opt, wanted, err, false)) != 0)
					return rc;
				continue;
			}
			else
				rc = DlockCallFailed(link, res, what, NULL);
			PQclear(res);
			return rc;
		}
		break;
	}
	/* not acquired: NULL, or no row (dlock_acquire_any) */
	if (PQntuples(res) == 0 || (PQntuples(res) == 1 && PQgetisnull(res, 0, 0)))
	{
		PQclear(res);
		return signo ? 128 + signo : DLOCK_EXIT_NOT_ACQUIRED;
	}
	if (!DlockLeasesTake(l, opt, res))
	{
		DlockError("%s: unexpected answer from the database (%d rows, \"%s\")",
				   what, PQntuples(res), PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
		PQclear(res);
		return DLOCK_EXIT_ERROR;
	}
	PQclear(res);
	if (signo)
	{
		DlockReleaseQuietly(link, opt, l);
		return 128 + signo;
	}
	return DLOCK_EXIT_OK;
}

/*
 * DlockDescribeHolder writes who holds what opt asks for, for the message
 * of a refused acquire: 'held by "owner" (token 42, role app, expires in
 * 29.8s)'; for --all and --slots the holders of the live leases among the
 * names (the first three, in the order given, and how many more), or a
 * shorter text when that cannot be read (the leases may have ended
 * meanwhile; a call that gets no answer within --timeout is cancelled,
 * and the text says so).
 */
void
DlockDescribeHolder(DlockLink *link, const DlockOptions *opt,
					const DlockLeases *l, char *buf, size_t len)
{
	const char *values[1];
	char		waited[64] = "";
	char		left[32];
	char		wanted[1024];
	int			signo;
	int			i;
	size_t		n;
	PGresult   *res = NULL;

	if (opt->wait_ms > 0)
	{
		DlockFormatDuration(opt->wait_ms, left, sizeof(left));
		snprintf(waited, sizeof(waited), " after waiting %s", left);
	}
	if (l->want_array == NULL)
	{
		values[0] = opt->name;
		snprintf(buf, len, "\"%s\" is %sheld%s", opt->name,
				 opt->wait_ms > 0 ? "still " : "", waited);
		if (link->state == DLOCK_LINK_IDLE)
			res = DlockLinkExec(link,
								DlockSql("SELECT owner, token, holder_role,"
										 " (pg_catalog.date_part('epoch', expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8"
										 " FROM @extschema@.dlock_leases WHERE lock_name OPERATOR(pg_catalog.=) $1 AND live"),
								1, values, opt->timeout_ms, &signo);
	}
	else
	{
		values[0] = l->want_array;
		DlockLeasesWanted(l, opt, wanted, sizeof(wanted));
		if (opt->slots > 0)
			snprintf(buf, len, "all %d permits of \"%s\" are %sheld%s",
					 opt->slots, opt->name, opt->wait_ms > 0 ? "still " : "", waited);
		else
			snprintf(buf, len, "not %s are free%s", wanted, waited);
		if (link->state == DLOCK_LINK_IDLE)
			res = DlockLinkExec(link,
								DlockSql("SELECT l.owner, l.token, l.holder_role,"
										 " (pg_catalog.date_part('epoch', l.expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8,"
										 " l.lock_name, pg_catalog.count(*) OVER ()"
										 " FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS w(lock_name, i)"
										 " JOIN @extschema@.dlock_leases l ON l.lock_name OPERATOR(pg_catalog.=) w.lock_name"
										 " WHERE l.live ORDER BY w.i LIMIT 3"),
								1, values, opt->timeout_ms, &signo);
	}
	n = strlen(buf);
	if (res == NULL && link->timed_out)
		snprintf(buf + n, len - n, " (%s could not be read: %s)",
				 l->want_array ? "the holders" : "its holder", link->errmsg);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		PQclear(res);
		return;
	}
	if (l->want_array == NULL && PQntuples(res) == 1)
	{
		DlockFormatDuration(strtoll(PQgetvalue(res, 0, 3), NULL, 10), left, sizeof(left));
		snprintf(buf + n, len - n, " by \"%s\" (token %s, role %s, expires in %s)",
				 PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
				 PQgetisnull(res, 0, 2) ? "?" : PQgetvalue(res, 0, 2), left);
	}
	else if (l->want_array && PQntuples(res) == 0)
		snprintf(buf + n, len - n, " (none of them is held now)");
	else if (l->want_array)
	{
		for (i = 0; i < PQntuples(res); i++)
		{
			n = strlen(buf);
			DlockFormatDuration(strtoll(PQgetvalue(res, i, 3), NULL, 10), left, sizeof(left));
			snprintf(buf + n, len - n, "%s\"%s\" is held by \"%s\" (token %s, role %s, expires in %s)",
					 i == 0 ? ": " : "; ", PQgetvalue(res, i, 4),
					 PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
					 PQgetisnull(res, i, 2) ? "?" : PQgetvalue(res, i, 2), left);
		}
		i = atoi(PQgetvalue(res, 0, 5)) - PQntuples(res);
		n = strlen(buf);
		if (i > 0)
			snprintf(buf + n, len - n, "; and %d more", i);
	}
	PQclear(res);
}
