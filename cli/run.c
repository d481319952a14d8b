/*-------------------------------------------------------------------------
 *
 * cli/run.c
 *	  dlock run: acquire a lease (or a set, or one of N permits), run a
 *	  command under it, renew it while the command runs, release it when
 *	  the command exits, and stop the command when the lease is lost.
 *
 * Process model.  One dlock process, no threads, and once the lease is
 * held its child, the keeper (cli/keeper.c), which starts CMD with
 * DLOCK_NAME and DLOCK_TOKEN in its environment (and the other variables
 * of cli/leases.c, DlockLeasesSetEnv; with --watchdog those of
 * cli/notify.c), owns every process CMD starts, ends them all when told
 * to or when the lease's deadline nears, and exits, with CMD's status,
 * once CMD and all of them have ended.  "CMD" below means that whole
 * tree, and "CMD exited" that the keeper did.  All of them stay in
 * dlock's process group (a terminal's Ctrl-C and Ctrl-Z reach the job).
 * The acquire is one DlockAcquireLease() call (cli/acquire.c), bounded
 * by --timeout; then dlock runs one poll() loop over the self-pipe of its
 * signal handlers (cli/signals.c), the socket of its connection
 * (cli/conn.c, never blocking), the keeper's report pipe and the
 * watchdog's socket, with a timeout taken from the next timer.  Every
 * wake-up does, in this order:
 *
 *   1. reap the keeper (waitpid WNOHANG, on every wake-up, so a lost
 *      SIGCHLD record cannot matter), after reading its last reports;
 *   2. read the monotonic clock and check the lease's local deadline
 *      before trusting anything else (a process that was stopped or
 *      starved learns here that its lease may be gone, before it reads an
 *      answer or sends a query).  CMD, if reaped in step 1, exited before
 *      this clock reading: if the deadline has not passed, it ran under
 *      the lease to its end; if it has, the lease counts as lost.  Then
 *      the keeper's reports (handle_keeper);
 *   3. handle signals: SIGTERM stops CMD's tree (through the keeper), the
 *      lease held and renewed meanwhile; SIGHUP, SIGINT, SIGQUIT, SIGUSR1
 *      and SIGUSR2 are passed on to CMD, except those the kernel sent
 *      (si_code SI_KERNEL: the terminal), which reached the job already.
 *      The watchdog's pings are read;
 *   4. advance the connection: a renew's or release's answer, a finished
 *      reconnect, a failure (a renew's answer counts only if the clock,
 *      read again, is still before the deadline);
 *   5. decide: start CMD, stop it (the watchdog), send the next renew or
 *      the release, reconnect, finish.
 *
 * What a run does next is decided by its phase (the table at Phase); the
 * exit status in one place, exit_status().  The timing rules, and why
 * they keep the lease safe (the deadline, the retries, when CMD starts,
 * what confirms the lease, sets, the watchdog), are in design.md §9.
 *
 * Concurrency: one thread; the keeper shares nothing with dlock but its
 * two pipes.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
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

#define BACKOFF_MIN_MS		50
#define BACKOFF_MAX_MS		1000
#define ATTEMPT_MIN_MS		200
#define MAX_STALE_RENEWS	2	/* renews before CMD that leave < 2T/3 */
#define KILL_MARGIN_MS		100 /* the tree's SIGKILL before the deadline */

/*
 * The phases of a run.  What a run does next is decided by its phase
 * (Run.phase), which only set_phase() changes, checking the transition
 * against this table (legal_next); the exit status is decided in one
 * place, exit_status(), from the final phase.
 *
 *   ACQUIRING   before the loop: the acquire is one DlockAcquireLease()
 *               call (cli/acquire.c), bounded by --timeout: if it gets no
 *               answer in time, it is cancelled on the server and dlock
 *               exits 69.  With --wait it keeps trying when the database
 *               cannot be used (design.md §9, "A waiting acquire"; 75, or
 *               69 when no server ever took the call).  --timeout does not
 *               apply to the renews and the release, which the lease's
 *               deadline bounds (design.md §9).
 *               -> CONFIRMING  granted, but after a wait so long that the
 *                              deadline is no proven bound (design.md §9)
 *               -> STARTING    granted, deadline proven
 *               -> DONE        not acquired (or no database, an error, a
 *                              signal): CMD is never started
 *   CONFIRMING  renewing until a renew proves the deadline; no CMD.
 *               -> STARTING    a renew succeeded
 *               -> RELEASING   a stopping signal (exit 128+S)
 *               -> LOST        a renew returned false, or the give-up time
 *                              passed (exit 75)
 *   STARTING    the deadline is proven; CMD starts as soon as 2T/3 of the
 *               lease is left, meanwhile dlock renews at once.
 *               -> RUNNING     CMD started
 *               -> RELEASING   a stopping signal (exit 128+S); CMD could
 *                              not be started (exit 70); MAX_STALE_RENEWS
 *                              renews left too little (exit 75)
 *               -> LOST        as in CONFIRMING (exit 75)
 *   RUNNING     CMD runs under the lease; renews every T/3.  A SIGTERM
 *               to dlock stops CMD here, as do the keeper when CMD exits
 *               and leaves processes behind: RUNNING until they are gone.
 *               -> EXITED      CMD was reaped
 *               -> STOPPING    the lease was lost: CMD gets SIGTERM; or,
 *                              the lease still held, the keeper reports
 *                              that no renew came by the deadline minus
 *                              the grace (exit 76), or the watchdog
 *                              fired (no more renews; exit 80)
 *   EXITED      CMD was reaped, but the clock has not been read since:
 *               left in the same wake-up (step 2, or within lose()).
 *               -> RELEASING   the deadline has not passed: CMD ran under
 *                              the lease to its end
 *               -> LOST        it has, or the lease is lost (exit 76)
 *   RELEASING   CMD is done, or will never start: release the lease.
 *               -> DONE        released: exit with CMD's status (or why
 *                              CMD never started); or not, but the
 *                              deadline passed (the lease has expired) or a
 *                              stopping signal came (it expires on its
 *                              own): exit 79 if CMD ran (the lease was not
 *                              confirmed, design.md §9), else why CMD
 *                              never started
 *               -> LOST        a release or renew returned false (exit 76,
 *                              or why CMD never started)
 *   STOPPING    CMD is being stopped, after a loss or with the lease
 *               still held (Run.stop): CMD got SIGTERM.  After a loss
 *               nothing more is sent to the database, except for a set
 *               (design.md §9, "Sets") the renews of the members still
 *               held;
 *               with the lease held, renews go on (but not after the
 *               watchdog fired) and the release follows.
 *               -> KILLING     the keeper reports SIGKILL sent
 *               -> RELEASING   CMD exited, leases are left (exit 76 or
 *                              80)
 *               -> LOST        CMD exited (exit 76, 80)
 *   KILLING     CMD's processes got SIGKILL.
 *               -> RELEASING   CMD exited, leases are left (exit 76 or
 *                              80)
 *               -> LOST        CMD exited (exit 76, 80)
 *   LOST, DONE  final: dlock exits.
 *   FAILED      final, from any phase but ACQUIRING and EXITED: poll()
 *               failed; CMD gets SIGTERM, dlock exits 70.
 */
typedef enum Phase
{
	PH_ACQUIRING,
	PH_CONFIRMING,
	PH_STARTING,
	PH_RUNNING,
	PH_EXITED,
	PH_RELEASING,
	PH_STOPPING,
	PH_KILLING,
	PH_LOST,
	PH_DONE,
	PH_FAILED
} Phase;

#define NPHASES		(PH_FAILED + 1)
#define PH(p)		(1u << (p))

static const char *const phase_names[NPHASES] = {
	[PH_ACQUIRING] = "ACQUIRING",
	[PH_CONFIRMING] = "CONFIRMING",
	[PH_STARTING] = "STARTING",
	[PH_RUNNING] = "RUNNING",
	[PH_EXITED] = "EXITED",
	[PH_RELEASING] = "RELEASING",
	[PH_STOPPING] = "STOPPING",
	[PH_KILLING] = "KILLING",
	[PH_LOST] = "LOST",
	[PH_DONE] = "DONE",
	[PH_FAILED] = "FAILED",
};

/* legal_next[p]: the phases p may change to (the table at Phase) */
static const unsigned legal_next[NPHASES] = {
	[PH_ACQUIRING] = PH(PH_CONFIRMING) | PH(PH_STARTING) | PH(PH_DONE),
	[PH_CONFIRMING] = PH(PH_STARTING) | PH(PH_RELEASING) | PH(PH_LOST) |
	PH(PH_FAILED),
	[PH_STARTING] = PH(PH_RUNNING) | PH(PH_RELEASING) | PH(PH_LOST) |
	PH(PH_FAILED),
	[PH_RUNNING] = PH(PH_EXITED) | PH(PH_STOPPING) | PH(PH_FAILED),
	[PH_EXITED] = PH(PH_RELEASING) | PH(PH_LOST),
	[PH_RELEASING] = PH(PH_DONE) | PH(PH_LOST) | PH(PH_FAILED),
	[PH_STOPPING] = PH(PH_KILLING) | PH(PH_RELEASING) | PH(PH_LOST) |
	PH(PH_FAILED),
	[PH_KILLING] = PH(PH_RELEASING) | PH(PH_LOST) | PH(PH_FAILED),
	[PH_LOST] = 0,
	[PH_DONE] = 0,
	[PH_FAILED] = 0,
};

/*
 * The phases in which dlock holds the lease (as far as it knows), and so
 * talks to the database: renews, releases, reconnects.  A set that lost a
 * member while CMD ran holds the others in STOPPING and KILLING too: see
 * holds().
 */
#define PH_HOLDING	(PH(PH_CONFIRMING) | PH(PH_STARTING) | PH(PH_RUNNING) | \
					 PH(PH_EXITED) | PH(PH_RELEASING))
/* The phases in which CMD is being stopped after a loss. */
#define PH_STOPPING_CMD	(PH(PH_STOPPING) | PH(PH_KILLING))
/* The phases in which CMD runs (has been started and not reaped). */
#define PH_CMD_RUNS	(PH(PH_RUNNING) | PH(PH_STOPPING) | PH(PH_KILLING))
/* The final phases: dlock exits. */
#define PH_FINAL	(PH(PH_LOST) | PH(PH_DONE) | PH(PH_FAILED))

#define PHASE_IN(r, set)	((PH((r)->phase) & (set)) != 0)

/*
 * Why CMD is stopped while the lease (or, for a set, some member) is still
 * held: see the table at Phase, and design.md §9.
 */
typedef enum Stop
{
	STOP_NONE,
	STOP_DEADLINE,				/* no renew by deadline - grace (exit 76) */
	STOP_WATCHDOG				/* no WATCHDOG=1 in time (exit 80) */
} Stop;

/* Which call is in flight on the link. */
typedef enum Call
{
	CALL_NONE,
	CALL_RENEW,
	CALL_RELEASE
} Call;

typedef struct Run
{
	const DlockOptions *opt;
	Phase		phase;			/* changed by set_phase() only */
	DlockLink	link;
	char		ttl_text[64];
	char	   *renew_sql;
	char	   *release_sql;

	/*
	 * The leases: one, or the members of a set (each: renewed and released
	 * with the _each functions).  held[i] says whether leases.names[i] is
	 * still held: a member whose renew returned false is lost, and only the
	 * others are renewed and released from then on; lose() clears them all.
	 * sent[] is held[] as it was when the call in flight was sent, which its
	 * answer's elements follow.  The array literals of the held members are
	 * kept until nheld changes.
	 */
	DlockLeases leases;
	bool		each;
	bool	   *held;
	int			nheld;
	bool	   *sent;
	int			nsent;
	bool	   *lost;			/* handle_result: the members an answer lost */
	char	   *held_names;		/* literals of the held members (each) */
	char	   *held_tokens;
	int			literal_nheld;	/* nheld when they were made, or -1 */
	bool		member_lost;	/* a member of a set was lost (exit 76) */
	char		label[1200];	/* 'lease on "a" (token 5)', for messages */

	/*
	 * The lease: in CONFIRMING the deadline is only a give-up time, from
	 * STARTING on a proven lower bound of the lease's expiry.
	 */
	int64_t		deadline;
	int64_t		next_renew;
	int			stale_renews;	/* STARTING: renews that left < 2T/3 */

	/*
	 * The database call in flight, and retries.  Not phases: every phase that
	 * holds the lease talks to the database the same way.  call is not
	 * implied by the phase either: a renew sent while CMD ran may be answered
	 * in RELEASING.  failures counts the attempts that failed since the last
	 * success (for the messages: the first failure, the recovery, why the
	 * deadline passed).
	 */
	Call		call;
	int64_t		sent_at;		/* when the call in flight was sent */
	int64_t		attempt_end;	/* abandon the connect or call at */
	int64_t		retry_at;		/* no new attempt before */
	int64_t		backoff;
	int			failures;

	/*
	 * CMD: child is the keeper (cli/keeper.c), which started CMD (cmd) and
	 * exits once CMD and every process it started have ended: "CMD has
	 * exited" below means that the keeper has.
	 */
	pid_t		child;			/* the keeper: 0 until started */
	pid_t		cmd;
	DlockKeeper keeper;
	int64_t		grace;			/* SIGTERM at deadline - grace, unrenewed */
	int64_t		margin;			/* SIGKILL at deadline - margin, at the latest */
	bool		cmd_exited;		/* CMD itself has (its processes may not) */

	/*
	 * Why CMD is being stopped while the lease is held (STOPPING, KILLING
	 * with every lease held), and whether renews go on meanwhile.
	 */
	Stop		stop;
	bool		renewing;
	bool		told_to_stop;	/* a SIGTERM was passed on as a stop */

	/* --watchdog */
	DlockNotify notify;

	/*
	 * What dlock exits with unless the lease is lost after CMD started (see
	 * exit_status()): CMD's status, shell-style, once it has exited; before
	 * that, why CMD never started (75 until something else is known: 128+S,
	 * 70; in ACQUIRING the acquire's status).
	 */
	int			status;

	/*
	 * A release, sent after CMD exited (RELEASING comes only then), returned
	 * true: the server serving now had the lease live, with our token, when
	 * CMD had ended.  Without it CMD's status is not passed on
	 * (DLOCK_EXIT_UNCONFIRMED, see exit_status()).
	 */
	bool		confirmed;

	/*
	 * A stopping signal that came while no CMD runs to pass it on to.  Not a
	 * phase but an event: received in step 3, acted upon in step 5 (after
	 * step 4 took an answer that may already be there).
	 */
	int			interrupt;
} Run;

static void reap(Run *r);
static void handle_keeper(Run *r, int64_t now);

/*
 * holds reports whether dlock holds leases (as far as it knows) and so
 * talks to the database: in the holding phases, and in STOPPING and
 * KILLING while members of a set are left (a set that lost a member while
 * CMD ran keeps the others until CMD has exited, then releases them).
 */
static bool
holds(const Run *r)
{
	return PHASE_IN(r, PH_HOLDING) ||
		(PHASE_IN(r, PH_STOPPING_CMD) && r->nheld > 0);
}

/*
 * set_phase moves the run to phase to.  It is the only place that changes
 * the phase, and it refuses (aborting dlock, whose CMD then gets SIGTERM
 * on Linux) a transition that the table at Phase does not list: that
 * would be a bug.
 */
static void
set_phase(Run *r, Phase to)
{
	if ((legal_next[r->phase] & PH(to)) == 0)
	{
		DlockError("internal error: illegal phase transition %s -> %s",
				   phase_names[r->phase], phase_names[to]);
		abort();
	}
	r->phase = to;
}

/*
 * exit_status decides, from a final phase, what dlock exits with.  The
 * only place that does.
 */
static int
exit_status(const Run *r)
{
	switch (r->phase)
	{
		case PH_DONE:
			if (r->stop == STOP_WATCHDOG)
				return DLOCK_EXIT_WATCHDOG;
			/* a set that lost a member, or a renew too late: CMD was stopped */
			if ((r->member_lost || r->stop == STOP_DEADLINE) && r->child > 0)
				return DLOCK_EXIT_LOST;
			/* CMD ran, but no release confirmed the lease: its fate unknown */
			if (r->child > 0 && !r->confirmed)
				return DLOCK_EXIT_UNCONFIRMED;
			/* released; or never acquired, or CMD never started */
			return r->status;
		case PH_LOST:
			if (r->stop == STOP_WATCHDOG)
				return DLOCK_EXIT_WATCHDOG;
			/* CMD may have run without the lease; else why it never ran */
			return r->child > 0 ? DLOCK_EXIT_LOST : r->status;
		case PH_FAILED:
			return DLOCK_EXIT_ERROR;
		default:
			break;
	}
	DlockError("internal error: no exit status in phase %s",
			   phase_names[r->phase]);
	abort();
}

/*
 * say prints a message about the lease on stderr.
 */
static void say(const Run *r, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));

static void
say(const Run *r, const char *fmt,...)
{
	va_list		ap;
	char		msg[2048];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	DlockError("%s: %s", r->label, msg);
}

/*
 * status_text describes CMD's exit status for messages.
 */
static const char *
status_text(int status)
{
	static char buf[64];

	if (status > 128 && status < 128 + NSIG)
		snprintf(buf, sizeof(buf), "was killed by %s (status %d)",
				 DlockSignalName(status - 128), status);
	else
		snprintf(buf, sizeof(buf), "exited with status %d", status);
	return buf;
}

/*
 * say_unconfirmed says, when CMD ran and the run ends without a release
 * that returned true (RELEASING -> DONE), that dlock exits
 * DLOCK_EXIT_UNCONFIRMED instead of CMD's status, which it names.
 */
static void
say_unconfirmed(const Run *r)
{
	if (r->child <= 0 || r->member_lost || r->stop != STOP_NONE)
		return;
	say(r, "CMD %s, but no release confirmed that the server serving now still had the lease when CMD ended (a failover may have lost it, and the fence may have rejected CMD's writes): exiting %d instead of CMD's status",
		status_text(r->status), DLOCK_EXIT_UNCONFIRMED);
}

/*
 * stop_child has the keeper stop CMD and every process it started:
 * SIGTERM now, SIGKILL at kill_at (the keeper makes it the deadline at
 * the latest).
 */
static void
stop_child(Run *r, int64_t kill_at)
{
	DlockKeeperSend(&r->keeper, KEEPER_STOP, 0, kill_at);
}

/*
 * kill_after_text describes when the job gets SIGKILL after a stop at now:
 * --kill-after later, or, if that comes first, at the lease's deadline
 * (less the margin: the keeper's bound on every stop).
 */
static const char *
kill_after_text(const Run *r, int64_t now)
{
	static char buf[96];
	char		d[32];
	int64_t		at = r->deadline - r->margin;

	if (at <= now)
		snprintf(buf, sizeof(buf), "SIGKILL at once, its deadline has come");
	else if (at < now + r->opt->kill_after_ms)
	{
		DlockFormatDuration(at - now, d, sizeof(d));
		snprintf(buf, sizeof(buf), "SIGKILL in %s, at the lease's deadline", d);
	}
	else
	{
		DlockFormatDuration(r->opt->kill_after_ms, d, sizeof(d));
		snprintf(buf, sizeof(buf), "SIGKILL in %s", d);
	}
	return buf;
}

/*
 * lose marks the lease (every lease still held, for a set) lost: nothing
 * more is sent to the database, and a running CMD is stopped (STOPPING);
 * a CMD being stopped already is left to that; otherwise the run is over
 * (LOST).  why is one line; detail, when not NULL, is the last error
 * (libpq's, possibly several lines), printed after it.
 */
static void
lose(Run *r, int64_t now, const char *why, const char *detail)
{
	char		rest[1024] = "";
	int			i;

	if (r->member_lost)
		DlockLeasesList(&r->leases, r->held, rest, sizeof(rest));
	DlockLinkDrop(&r->link, NULL);
	r->call = CALL_NONE;
	for (i = 0; i < r->leases.n; i++)
		r->held[i] = false;
	r->nheld = 0;
	reap(r);					/* for the message: is CMD still running? */
	if (r->phase == PH_RUNNING)
	{
		say(r, "lost: %s; stopping CMD (pid %d) and every process it started with SIGTERM, %s",
			why, (int) r->cmd, kill_after_text(r, now));
		stop_child(r, now + r->opt->kill_after_ms);
		set_phase(r, PH_STOPPING);
	}
	else if ((PHASE_IN(r, PH_STOPPING_CMD) || r->phase == PH_LOST) &&
			 r->member_lost)
	{
		/* a set's members left while CMD is (or was just) being stopped */
		say(r, "lost %s too: %s", rest, why);
	}
	else if (PHASE_IN(r, PH_STOPPING_CMD))
	{
		/* CMD was being stopped with the lease held: now it is gone */
		say(r, "lost: %s; CMD is being stopped", why);
	}
	else if (r->phase == PH_LOST)
	{
		/* reap() above found CMD exited after a stop: the run is over */
		say(r, "lost: %s", why);
	}
	else
	{
		if (r->child > 0)
			say(r, "lost: %s; CMD %s", why, status_text(r->status));
		else
			say(r, "lost before CMD could start: %s", why);
		set_phase(r, PH_LOST);
	}
	if (detail && *detail)
		DlockError("last error: %s", detail);
}

/*
 * lose_members marks the members of a set for which lost is true lost
 * (their renew returned false), when others are left: the set counts as
 * lost.  A running CMD is stopped, and the others stay held (renewed)
 * until it has exited, then they are released (STOPPING, then
 * RELEASING); before CMD started, they are released at once and dlock
 * exits 75; after CMD exited, the release goes on for the others, and
 * dlock exits 76.  A lost member is never renewed or released again.
 */
static void
lose_members(Run *r, int64_t now, const bool *lost, const char *why)
{
	char		gone[1024];
	char		rest[1024];
	int			i;

	DlockLeasesList(&r->leases, lost, gone, sizeof(gone));
	for (i = 0; i < r->leases.n; i++)
		if (lost[i] && r->held[i])
		{
			r->held[i] = false;
			r->nheld--;
		}
	r->member_lost = true;
	DlockLeasesList(&r->leases, r->held, rest, sizeof(rest));
	switch (r->phase)
	{
		case PH_RUNNING:
			say(r, "lost %s: %s; the set is lost: stopping CMD (pid %d) and every process it started with SIGTERM, %s; still holding %s until they have exited, then releasing %s",
				gone, why, (int) r->cmd, kill_after_text(r, now), rest,
				r->nheld == 1 ? "it" : "them");
			stop_child(r, now + r->opt->kill_after_ms);
			set_phase(r, PH_STOPPING);
			break;
		case PH_CONFIRMING:
		case PH_STARTING:
			say(r, "lost %s before CMD could start: %s; releasing %s",
				gone, why, rest);
			set_phase(r, PH_RELEASING);
			break;
		default:
			/* RELEASING, or CMD is being stopped already */
			say(r, "lost %s: %s; releasing %s%s", gone, why, rest,
				r->phase == PH_RELEASING ? "" : " once CMD has exited");
			break;
	}
}

/*
 * target returns the time the retries of a renew aim at: the deadline, or
 * while CMD runs unstopped the time the keeper would stop it, the deadline
 * minus the grace (design.md §9).
 */
static int64_t
target(const Run *r)
{
	return r->phase == PH_RUNNING && !r->told_to_stop ?
		r->deadline - r->grace : r->deadline;
}

/*
 * attempt_budget returns when an attempt that starts now is abandoned.
 */
static int64_t
attempt_budget(const Run *r, int64_t now)
{
	int64_t		half = (target(r) - now) / 2;

	return now + (half > ATTEMPT_MIN_MS ? half : ATTEMPT_MIN_MS);
}

/*
 * retry_pause returns how long to wait after an attempt that failed at
 * now before the next one: the backoff (BACKOFF_MIN_MS doubling to
 * BACKOFF_MAX_MS), but never more than a quarter of the time left to the
 * target, and at least BACKOFF_MIN_MS.  So attempts get denser as the
 * target nears, and no stretch at its end longer than a quarter of what
 * is left (or BACKOFF_MIN_MS) goes without one: a database that comes back
 * shortly before the target is asked in time (design.md §9).
 */
static int64_t
retry_pause(const Run *r, int64_t now)
{
	int64_t		cap = (target(r) - now) / 4;

	if (cap < BACKOFF_MIN_MS)
		cap = BACKOFF_MIN_MS;
	return r->backoff < cap ? r->backoff : cap;
}

/*
 * failed records a failed attempt (why) and schedules the next one
 * (retry_pause).
 */
static void
failed(Run *r, int64_t now, const char *why)
{
	char		left[32];

	if (r->failures == 0)
	{
		DlockFormatDuration(r->deadline - now, left, sizeof(left));
		say(r, "could not %s it, retrying for up to %s: %s",
			r->phase == PH_RELEASING ? "release" : "renew", left, why);
	}
	r->failures++;
	r->call = CALL_NONE;
	r->retry_at = now + retry_pause(r, now);
	r->backoff = r->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff * 2;
}

/*
 * succeeded resets the retry state after a successful call.
 */
static void
succeeded(Run *r)
{
	if (r->failures > 0 && r->phase != PH_RELEASING)
		say(r, "renewed again");
	r->failures = 0;
	r->link.errmsg[0] = '\0';	/* not to be reported as a later failure's */
	r->backoff = BACKOFF_MIN_MS;
	r->retry_at = 0;
	r->call = CALL_NONE;
}

/*
 * looks_like_names reports whether a one-name run's CMD has a "--" among
 * its arguments, as "dlock run A B -- CMD" has: its author may have meant
 * a set (which takes --all), for the hint when CMD cannot be found.
 */
static bool
looks_like_names(const DlockOptions *opt)
{
	char	  **a;

	if (opt->all || opt->slots > 0)
		return false;
	for (a = opt->cmd + 1; *a; a++)
		if (strcmp(*a, "--") == 0)
			return true;
	return false;
}

/*
 * exec_cmd executes CMD: called by the keeper in CMD's process (with the
 * dispositions and mask dlock started with back), never returns.
 */
static void
exec_cmd(void *arg)
{
	const DlockOptions *opt = arg;
	int			err;

	if (opt->watchdog_ms > 0)
		DlockNotifySetPid();
	execvp(opt->cmd[0], opt->cmd);
	err = errno;
	DlockError("could not execute \"%s\": %s", opt->cmd[0], strerror(err));
	if ((err == ENOENT || err == EACCES) && looks_like_names(opt))
		DlockError("hint: CMD starts at the argument after NAME; to take several names, give --all (dlock run --all NAME... -- CMD)");
	_exit(err == ENOENT ? 127 : 126);
}

/*
 * start_child starts the keeper, which starts CMD (STARTING -> RUNNING);
 * if it cannot, the lease is released and dlock exits 70 (STARTING ->
 * RELEASING).
 */
static void
start_child(Run *r)
{
	sigset_t	old;
	DlockKeeperSetup setup;
	bool		ok;
	int			err;

	if (!DlockLeasesSetEnv(&r->leases) ||
		(r->opt->watchdog_ms > 0 && !DlockNotifySetEnv(&r->notify)))
	{
		DlockError("could not set the environment of CMD: %s", strerror(errno));
		r->status = DLOCK_EXIT_ERROR;
		set_phase(r, PH_RELEASING);
		return;
	}
	memset(&setup, 0, sizeof(setup));
	setup.exec_cmd = exec_cmd;
	setup.exec_arg = (void *) r->opt;
	setup.cleanup = r->opt->watchdog_ms > 0 ? DlockNotifyCleanup : NULL;
	setup.deadline = r->deadline;
	setup.grace_ms = r->grace;
	setup.margin_ms = r->margin;
	setup.kill_after_ms = r->opt->kill_after_ms;
	setup.close_fd = r->link.conn ? PQsocket(r->link.conn) : -1;
	setup.close_fd2 = r->notify.fd;
	fflush(stdout);
	fflush(stderr);
	DlockSignalsBlock(&old);
	ok = DlockKeeperStart(&r->keeper, &setup);
	err = errno;
	DlockSignalsUnblock(&old);
	if (!ok)
	{
		DlockError("could not start CMD: fork failed: %s", strerror(err));
		r->status = DLOCK_EXIT_ERROR;
		set_phase(r, PH_RELEASING);
		return;
	}
	r->child = r->keeper.pid;
	r->cmd = r->keeper.cmd;
#ifdef __linux__
	if (!r->keeper.contained)
		DlockError("warning: the keeper could not become a child subreaper: processes that CMD's processes leave behind are not stopped with the job");
#endif
	r->notify.last_ping = DlockNow();
	set_phase(r, PH_RUNNING);
}

/*
 * reap collects CMD's exit status, into status, if CMD has exited: the
 * keeper has, once CMD and every process CMD started had ended, with
 * CMD's status.  A CMD that ran under a held lease leaves RUNNING for
 * EXITED: whether the lease was held until then is decided by the caller,
 * from a clock reading taken after reap (see DlockRun's loop).  A CMD that
 * was being stopped ends the run (LOST) after a loss, or goes on to the
 * release (RELEASING) when leases are left: a set's other members, or
 * every lease, when CMD was stopped with the lease held.
 *
 * Should the keeper itself be killed, the processes of the job were
 * reparented to dlock (a child subreaper too): dlock kills them, and
 * counts CMD as failed (70).
 */
static void
reap(Run *r)
{
	int			status;
	pid_t		pid;

	if (!PHASE_IN(r, PH_CMD_RUNS))
		return;
	do
		pid = waitpid(r->child, &status, WNOHANG);
	while (pid < 0 && errno == EINTR);
	if (pid != r->child)
		return;
	/* what the keeper reported before it exited comes first */
	handle_keeper(r, DlockNow());
	DlockKeeperClose(&r->keeper);
	if (WIFEXITED(status))
		r->status = WEXITSTATUS(status);
	else
	{
		DlockError("the keeper of CMD's processes (pid %d) was killed by %s: killing CMD's processes",
				   (int) r->child,
				   WIFSIGNALED(status) ? DlockSignalName(WTERMSIG(status)) : "?");
		DlockTreeEnd(1000);
		r->status = DLOCK_EXIT_ERROR;
	}
	if (r->phase == PH_RUNNING)
		set_phase(r, PH_EXITED);
	else if (r->nheld > 0)
	{
		char		rest[1024];

		/* leases are left: release them now that CMD is done */
		DlockLeasesList(&r->leases, r->held, rest, sizeof(rest));
		if (r->member_lost)
			say(r, "CMD %s after the set was lost; releasing %s",
				status_text(r->status), rest);
		else
			say(r, "CMD %s after it was stopped; releasing %s",
				status_text(r->status), rest);
		set_phase(r, PH_RELEASING);
	}
	else
	{
		say(r, "CMD %s after the lease was lost", status_text(r->status));
		set_phase(r, PH_LOST);
	}
}

/*
 * handle_keeper reads the keeper's reports: a SIGTERM it sent of its own
 * accord because no renew came by the deadline minus the grace (RUNNING
 * -> STOPPING, the lease still held), to the processes CMD left behind,
 * or a SIGKILL (STOPPING -> KILLING).
 */
static void
handle_keeper(Run *r, int64_t now)
{
	int			type,
				a;
	int64_t		b;

	while (DlockKeeperNext(&r->keeper, &type, &a, &b))
	{
		if (type == KEEPER_TERM && a == KEEPER_WHY_DEADLINE)
		{
			char		left[32];

			if (r->phase != PH_RUNNING)
				continue;		/* being stopped already */
			DlockFormatDuration(r->deadline > now ? r->deadline - now : 0,
								left, sizeof(left));
			say(r, "not renewed in time (%s left before its deadline): stopping CMD (pid %d) and every process it started with SIGTERM, SIGKILL at the deadline%s",
				left, (int) r->cmd,
				r->failures > 0 ? "; still trying to renew it, to release it afterwards" : "");
			if (r->failures > 0 && r->link.errmsg[0])
				DlockError("last error: %s", r->link.errmsg);
			r->stop = STOP_DEADLINE;
			set_phase(r, PH_STOPPING);
		}
		else if (type == KEEPER_TERM && a == KEEPER_WHY_LEFTOVER)
			say(r, "CMD (pid %d) exited, leaving %" PRId64 " process%s running: stopping %s with SIGTERM, %s",
				(int) r->cmd, b, b == 1 ? "" : "es", b == 1 ? "it" : "them",
				kill_after_text(r, now));
		else if (type == KEEPER_CMD_EXITED)
			r->cmd_exited = true;
		else if (type == KEEPER_KILL)
		{
			if (a == KEEPER_WHY_DEADLINE && r->phase == PH_RUNNING)
			{
				/*
				 * Stopped with the lease in hand (a SIGTERM to dlock, or what
				 * CMD left behind), and no renew came by the deadline since:
				 * the keeper kills at the deadline.
				 */
				say(r, "not renewed in time: its deadline has come while CMD's processes were being stopped");
				r->stop = STOP_DEADLINE;
				set_phase(r, PH_STOPPING);
			}
			say(r, "%" PRId64 " process%s of CMD still running: sent SIGKILL%s",
				b, b == 1 ? "" : "es",
				a == KEEPER_WHY_DEADLINE ? " at the lease's deadline" : "");
			if (r->phase == PH_STOPPING)
				set_phase(r, PH_KILLING);
		}
	}
}

/*
 * handle_signals reads the signal records: passes signals on to a running
 * CMD (through the keeper; SIGTERM as a stop of CMD's whole tree), or
 * notes a stopping signal when there is no CMD to pass it to.  Returns
 * true when the loop must not sleep (SIGCHLD: CMD is to be reaped at the
 * top of the next pass, which comes at once).
 */
static bool
handle_signals(Run *r, int64_t now)
{
	int			signo,
				code;
	bool		wake_now = false;

	while (DlockSignalNext(&signo, &code))
	{
		if (signo == SIGCHLD)
		{
			wake_now = true;
			continue;
		}
		if (signo == SIGCONT)
		{
			/* a Ctrl-Z and fg: the job gets a full watchdog time again */
			r->notify.last_ping = now;
			continue;
		}
		if (PHASE_IN(r, PH_CMD_RUNS))
		{
#ifdef SI_KERNEL
			/* sent by the terminal to the process group: CMD has it too */
			if (code == SI_KERNEL)
				continue;
#endif
			if (signo == SIGTERM)
			{
				/* told to stop: the whole tree, the lease held meanwhile */
				r->told_to_stop = true;
				stop_child(r, now + r->opt->kill_after_ms);
			}
			else
				DlockKeeperSend(&r->keeper, KEEPER_SIGNAL, signo, 0);
		}
		else if (signo == SIGHUP || signo == SIGINT || signo == SIGQUIT ||
				 signo == SIGTERM)
		{
			if (r->interrupt == 0)
				r->interrupt = signo;
		}
	}
	return wake_now;
}

/*
 * answered_false reads the answer res of the renew or release in flight:
 * one boolean, or for a set one per member sent (dlock_renew_each,
 * dlock_release_each, in the order sent).  Sets lost[i] for each member
 * (index into leases) whose answer is false, and returns how many are, or
 * -1 when res is not such an answer.
 */
static int
answered_false(const Run *r, const PGresult *res, bool *lost)
{
	char	  **elems;
	int			n,
				i,
				k = 0,
				nfalse = 0;

	memset(lost, 0, sizeof(bool) * r->leases.n);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
		PQgetisnull(res, 0, 0))
		return -1;
	if (!r->each)
	{
		if (DlockResultIsTrue(res))
			return 0;
		lost[0] = true;
		return 1;
	}
	n = DlockParseArray(PQgetvalue(res, 0, 0), &elems);
	if (n != r->nsent)
		nfalse = -1;
	for (i = 0; i < r->leases.n && nfalse >= 0; i++)
	{
		if (!r->sent[i])
			continue;
		if (strcmp(elems[k], "f") == 0)
		{
			lost[i] = true;
			nfalse++;
		}
		else if (strcmp(elems[k], "t") != 0)
			nfalse = -1;
		k++;
	}
	free(elems);
	return nfalse;
}

/*
 * handle_result takes the answer of the call in flight.
 */
static void
handle_result(Run *r, int64_t now, PGresult *res)
{
	Call		call = r->call;
	char		why[1200];
	char		gone[1024];
	bool	   *lost = r->lost;
	int			nlost;

	r->call = CALL_NONE;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		/*
		 * An SQL error: try again until the deadline, on this connection, or
		 * on a new one when this server is read-only (a standby, or the old
		 * primary after a failover) or going away: a multi-host conninfo may
		 * lead the new one to the server that serves now.
		 */
		snprintf(why, sizeof(why), "%s", DlockResultError(res));
		if (DlockRetryableError(res))
			DlockLinkDrop(&r->link, why);
		failed(r, now, why);
		return;
	}
	nlost = answered_false(r, res, lost);
	if (nlost < 0)
	{
		snprintf(why, sizeof(why), "unexpected answer from the database: \"%.200s\"",
				 PQgetisnull(res, 0, 0) ? "NULL" : PQgetvalue(res, 0, 0));
		failed(r, now, why);
		return;
	}
	if (call == CALL_RENEW)
	{
		bool		late;

		if (nlost > 0 && nlost == r->nheld)
		{
			if (r->each)
			{
				DlockLeasesList(&r->leases, lost, gone, sizeof(gone));
				snprintf(why, sizeof(why), "dlock_renew_each returned false for %s: %s broken, or expired and taken over",
						 gone, nlost == 1 ? "it was" : "they were");
			}
			else
				snprintf(why, sizeof(why), "dlock_renew returned false: the lease was broken, or it expired and was taken over");
			lose(r, now, why, NULL);
			return;
		}

		/*
		 * The answer counts only if it was read before the deadline, and time
		 * passed since the top of the loop: read the clock again. Once CMD is
		 * done (RELEASING) a late answer is harmless: CMD ran under the lease
		 * to its end.  The keeper gets the new deadline (it stops CMD's tree
		 * by the old one otherwise; if it began to already, it reports so and
		 * CMD is stopped all the same).
		 */
		late = r->phase != PH_RELEASING && DlockNow() >= r->deadline;
		if (!late)
		{
			succeeded(r);
			r->deadline = r->sent_at + r->opt->ttl_ms;
			r->next_renew = r->sent_at + r->opt->ttl_ms / 3;
			if (PHASE_IN(r, PH_CMD_RUNS))
				DlockKeeperSend(&r->keeper, KEEPER_DEADLINE, 0, r->deadline);
		}
		if (late)
		{
			lose(r, now, "the renew's answer was read only after the lease's deadline (was dlock stopped, or starved of CPU?)", NULL);
			return;
		}
		if (nlost > 0)
		{
			/* some members of a set, not all */
			lose_members(r, now, lost, "dlock_renew_each returned false (broken, or expired and taken over)");
			return;
		}
		if (r->phase == PH_CONFIRMING)
			set_phase(r, PH_STARTING);	/* the deadline is proven now */
		if (r->phase == PH_STARTING &&
			r->deadline - now < r->opt->ttl_ms - r->opt->ttl_ms / 3 &&
			++r->stale_renews >= MAX_STALE_RENEWS)
		{
			/*
			 * Renewed, but still too little of the ttl left to start CMD: the
			 * database answers in more than T/3, so every further renew would
			 * be as stale.  Give the lease back.
			 */
			char		took[32];
			char		ttl[32];

			DlockFormatDuration(now - r->sent_at, took, sizeof(took));
			DlockFormatDuration(r->opt->ttl_ms, ttl, sizeof(ttl));
			say(r, "not starting CMD: the database answers too slowly for a ttl of %s (a renew took %s; CMD starts only with 2/3 of the ttl left); releasing it, a longer --ttl helps",
				ttl, took);
			r->status = DLOCK_EXIT_NOT_ACQUIRED;
			set_phase(r, PH_RELEASING);
		}
	}
	else if (call == CALL_RELEASE)
	{
		if (nlost > 0)
		{
			if (r->each)
			{
				DlockLeasesList(&r->leases, lost, gone, sizeof(gone));
				snprintf(why, sizeof(why), "dlock_release_each returned false for %s: %s broken, or expired and taken over, before %s could be released",
						 gone, nlost == 1 ? "it was" : "they were", nlost == 1 ? "it" : "they");
			}
			else
				snprintf(why, sizeof(why), "dlock_release returned false: the lease was broken, or it expired and was taken over, before it could be released");
			lose(r, now, why, NULL);
			return;
		}
		succeeded(r);
		r->confirmed = true;
		set_phase(r, PH_DONE);
	}
}

/*
 * handle_interrupt acts on a stopping signal that came while no CMD ran
 * (step 5).  Before CMD started, the lease is released and dlock exits
 * 128+signal; while releasing, dlock gives up the release (the lease
 * expires on its own) and exits with the status it has.
 */
static void
handle_interrupt(Run *r)
{
	if (r->interrupt == 0)
		return;
	if (r->phase == PH_RELEASING)
	{
		say(r, "not released (interrupted by %s); it ends when it expires",
			DlockSignalName(r->interrupt));
		say_unconfirmed(r);
		set_phase(r, PH_DONE);
	}
	else if (r->phase == PH_CONFIRMING || r->phase == PH_STARTING)
	{
		r->status = 128 + r->interrupt;
		set_phase(r, PH_RELEASING);
	}
	r->interrupt = 0;
}

/*
 * call_params sets values[0] and values[1] to the names and tokens of the
 * leases held, for the next renew or release (array literals for a set,
 * remade only when a member was lost), and notes them as sent.
 */
static void
call_params(Run *r, const char **values)
{
	memcpy(r->sent, r->held, sizeof(bool) * r->leases.n);
	r->nsent = r->nheld;
	if (!r->each)
	{
		values[0] = r->leases.names[0];
		values[1] = r->leases.tokens[0];
		return;
	}
	if (r->literal_nheld != r->nheld)
	{
		free(r->held_names);
		free(r->held_tokens);
		r->held_names = DlockTextArray(r->leases.names, r->held, r->leases.n);
		r->held_tokens = DlockTextArray(r->leases.tokens, r->held, r->leases.n);
		r->literal_nheld = r->nheld;
	}
	values[0] = r->held_names;
	values[1] = r->held_tokens;
}

/*
 * drive_link sends the next call, or reconnects, when it is time.
 */
static void
drive_link(Run *r, int64_t now)
{
	const char *values[3];

	if (!holds(r))
		return;
	if ((r->link.state == DLOCK_LINK_CONNECTING || r->link.state == DLOCK_LINK_BUSY) &&
		now >= r->attempt_end)
	{
		DlockLinkDrop(&r->link, "the database did not answer in time");
		failed(r, now, r->link.errmsg);
	}
	if (now < r->retry_at)
		return;
	if (r->link.state == DLOCK_LINK_DOWN)
	{
		DlockLinkStartConnect(&r->link);
		if (r->link.state == DLOCK_LINK_DOWN)
			failed(r, now, r->link.errmsg);
		else
			r->attempt_end = attempt_budget(r, now);
		return;
	}
	if (r->link.state != DLOCK_LINK_IDLE)
		return;
	if (r->phase == PH_RELEASING)
	{
		call_params(r, values);
		r->sent_at = DlockNow();
		r->call = CALL_RELEASE;
		if (!DlockLinkSend(&r->link, r->release_sql, 2, values))
			failed(r, now, r->link.errmsg);
		else
			r->attempt_end = attempt_budget(r, now);
	}
	else if (r->renewing && now >= r->next_renew)
	{
		call_params(r, values);
		values[2] = r->ttl_text;
		/* the deadline counts from here: take the time before sending */
		r->sent_at = DlockNow();
		r->call = CALL_RENEW;
		if (!DlockLinkSend(&r->link, r->renew_sql, 3, values))
			failed(r, now, r->link.errmsg);
		else
			r->attempt_end = attempt_budget(r, now);
	}
}

/*
 * next_wake returns when the loop must wake up at the latest, or -1 for
 * never (only events).
 */
static int64_t
next_wake(const Run *r)
{
	int64_t		wake = INT64_MAX;

#define EARLIER(t) do { if ((t) < wake) wake = (t); } while (0)
	if (holds(r))
	{
		EARLIER(r->deadline);
		switch (r->link.state)
		{
			case DLOCK_LINK_DOWN:
				EARLIER(r->retry_at);
				break;
			case DLOCK_LINK_CONNECTING:
			case DLOCK_LINK_BUSY:
				EARLIER(r->attempt_end);
				break;
			case DLOCK_LINK_IDLE:
				if (r->phase == PH_RELEASING)
					EARLIER(r->retry_at);
				else if (r->renewing)
					EARLIER(r->next_renew > r->retry_at ? r->next_renew : r->retry_at);
				break;
		}
	}
	if (r->phase == PH_RUNNING && r->notify.fd >= 0 && !r->told_to_stop &&
		!r->cmd_exited)
		EARLIER(DlockNotifyDue(&r->notify));
#undef EARLIER
	return wake == INT64_MAX ? -1 : wake;
}

/*
 * check_deadline is step 2 of every wake-up: has the lease's local
 * deadline passed?  It also settles EXITED: CMD, reaped in step 1, exited
 * before now, so if the deadline has not passed it ran under the lease.
 */
static void
check_deadline(Run *r, int64_t now)
{
	char		late[32];

	if (!holds(r))
		return;
	if (now < r->deadline)
	{
		if (r->phase == PH_EXITED)
			set_phase(r, PH_RELEASING);
		return;
	}
	if (r->phase == PH_CONFIRMING)
	{
		char		held[1024];

		DlockLinkDrop(&r->link, NULL);
		DlockLeasesList(&r->leases, r->held, held, sizeof(held));
		DlockError("acquired %s after waiting, but could not confirm %s with a renew: %s",
				   held, r->nheld == 1 ? "it" : "them",
				   r->link.errmsg[0] ? r->link.errmsg : "no answer in time");
		set_phase(r, PH_LOST);
		return;
	}
	if (r->phase == PH_RELEASING)
	{
		/* CMD finished (or never started) while the lease was held */
		say(r, "not released: %s; %s expired by now",
			r->link.errmsg[0] ? r->link.errmsg : "no answer in time",
			r->nheld == 1 ? "it has" : "they have");
		say_unconfirmed(r);
		set_phase(r, PH_DONE);
		return;
	}
	DlockFormatDuration(now - r->deadline, late, sizeof(late));
	if (r->stop == STOP_WATCHDOG)
		lose(r, now, "not renewed since the watchdog fired, it has expired", NULL);
	else if (r->failures > 0)
		lose(r, now, "no renew succeeded before it expired", r->link.errmsg);
	else if (r->call == CALL_RENEW)
		lose(r, now, "the database did not answer the renew before the lease expired", NULL);
	else
	{
		char		why[200];

		snprintf(why, sizeof(why),
				 "dlock could not renew it in time, its deadline passed %s ago (was dlock stopped, or starved of CPU?)",
				 late);
		lose(r, now, why, NULL);
	}
}

/*
 * check_watchdog stops CMD's tree, with --watchdog, when no WATCHDOG=1 came
 * in time (RUNNING -> STOPPING): no more renews, the release once the
 * tree is gone, exit DLOCK_EXIT_WATCHDOG.
 */
static void
check_watchdog(Run *r, int64_t now)
{
	char		dur[32];

	/* (once CMD has exited, or dlock was told to stop, nothing pings) */
	if (r->phase != PH_RUNNING || r->notify.fd < 0 || r->told_to_stop ||
		r->cmd_exited || now < DlockNotifyDue(&r->notify))
		return;
	DlockFormatDuration(r->notify.timeout_ms, dur, sizeof(dur));
	if (r->notify.triggered)
		say(r, "CMD sent WATCHDOG=trigger: stopping CMD (pid %d) and every process it started with SIGTERM, %s; not renewing the lease any more",
			(int) r->cmd, kill_after_text(r, now));
	else
		say(r, "CMD sent no WATCHDOG=1 for %s%s: stopping CMD (pid %d) and every process it started with SIGTERM, %s; not renewing the lease any more",
			dur, r->notify.pings == 0 ? " (none since it started)" : "",
			(int) r->cmd, kill_after_text(r, now));
	r->stop = STOP_WATCHDOG;
	r->renewing = false;
	stop_child(r, now + r->opt->kill_after_ms);
	set_phase(r, PH_STOPPING);
}

/*
 * decide is step 5 of every wake-up: act on a stopping signal, the
 * watchdog, start CMD when the lease is fresh enough (or renew at once
 * when it is not), and drive the link.
 */
static void
decide(Run *r, int64_t now)
{
	handle_interrupt(r);
	check_watchdog(r, now);
	if (r->phase == PH_STARTING &&
		r->deadline - now >= r->opt->ttl_ms - r->opt->ttl_ms / 3)
		start_child(r);
	else if ((r->phase == PH_CONFIRMING || r->phase == PH_STARTING) &&
			 r->next_renew > now)
		r->next_renew = now;	/* not fresh enough to start CMD: renew */
	drive_link(r, now);
}

/*
 * DlockRun is "dlock run": see the file header and design.md §9.  It
 * returns dlock's exit status.
 */
int
DlockRun(const DlockOptions *opt)
{
	Run			r;
	PGconn	   *conn;
	char		owner[512];
	int64_t		answered_at;
	char		held[1024];
	char		err[1024];
	static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
	size_t		i;

	memset(&r, 0, sizeof(r));
	r.opt = opt;
	r.phase = PH_ACQUIRING;
	r.status = DLOCK_EXIT_NOT_ACQUIRED;
	r.backoff = BACKOFF_MIN_MS;
	r.renewing = true;
	r.notify.fd = -1;
	r.keeper.ctl = r.keeper.report = -1;

	/*
	 * SIGTERM before the deadline, SIGKILL at it less the margin: see
	 * design.md §9, the timing rules (the grace is never less than the
	 * margin, so that SIGTERM never comes after SIGKILL)
	 */
	r.margin = opt->ttl_ms / 20 < KILL_MARGIN_MS ? opt->ttl_ms / 20 : KILL_MARGIN_MS;
	r.grace = opt->kill_after_ms < opt->ttl_ms / 3 ? opt->kill_after_ms : opt->ttl_ms / 3;
	if (r.grace < r.margin)
		r.grace = r.margin;
	r.literal_nheld = -1;
	DlockInterval(opt->ttl_ms, r.ttl_text, sizeof(r.ttl_text));
	DlockLeasesInit(&r.leases, opt);
	if (opt->owner)
		snprintf(owner, sizeof(owner), "%s", opt->owner);
	else
		snprintf(owner, sizeof(owner), "dlock run %s pid %d", DlockHostname(),
				 (int) getpid());

#ifdef __linux__
	/* should the keeper be killed, CMD's processes come to dlock */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif

	/*
	 * Connect before catching signals: a Ctrl-C now just ends dlock.  A
	 * waiting run whose first connection fails goes on with the link down:
	 * DlockAcquireLease keeps trying until --wait runs out.
	 */
	DlockLinkInit(&r.link);
	conn = DlockConnectQuiet(err, sizeof(err));
	if (conn == NULL && opt->wait_ms == 0)
	{
		DlockError("%s", err);
		r.status = DLOCK_EXIT_UNAVAILABLE;
	}
	else if (conn != NULL && !DlockLinkAdopt(&r.link, conn))
	{
		DlockError("%s", r.link.errmsg);
		r.status = DLOCK_EXIT_UNAVAILABLE;
	}
	else
	{
		DlockSignalsInit();
		for (i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
			DlockSignalCatch(forwarded[i], NULL);
		DlockSignalCatch(SIGCHLD, NULL);
		/* (a watchdog starts again after a stop of dlock's process group) */
		if (opt->watchdog_ms > 0)
			DlockSignalCatch(SIGCONT, NULL);
		/* a closed stderr must not kill dlock while it holds a lease */
		DlockSignalIgnore(SIGPIPE);

		/* the watchdog's socket, before anything is held */
		if (opt->watchdog_ms > 0 &&
			!DlockNotifyOpen(&r.notify, opt->watchdog_ms, err, sizeof(err)))
		{
			DlockError("%s", err);
			r.status = DLOCK_EXIT_ERROR;
		}
		else
			r.status = DlockAcquireLease(&r.link, opt, owner, &r.leases,
										 &r.sent_at, &answered_at);
		/* (not idle: DlockAcquireLease said why when it gave up) */
		if (r.status == DLOCK_EXIT_NOT_ACQUIRED &&
			r.link.state == DLOCK_LINK_IDLE)
		{
			char		holder[4096];

			DlockDescribeHolder(&r.link, opt, &r.leases, holder, sizeof(holder));
			DlockError("not acquired: %s", holder);
		}
	}
	if (r.status != DLOCK_EXIT_OK)
	{
		DlockNotifyClose(&r.notify);
		set_phase(&r, PH_DONE);
		return exit_status(&r);
	}

	/*
	 * What is held: one lease, or a set of several, renewed and released with
	 * one call each (design.md §9: every call's arguments are parameters,
	 * here array literals).
	 */
	r.nheld = r.leases.n;
	r.held = DlockAlloc(sizeof(bool) * r.leases.n);
	r.sent = DlockAlloc(sizeof(bool) * r.leases.n);
	r.lost = DlockAlloc(sizeof(bool) * r.leases.n);
	for (i = 0; i < (size_t) r.leases.n; i++)
		r.held[i] = true;
	r.each = r.leases.n > 1;
	if (r.each)
	{
		r.renew_sql = DlockSql("SELECT @extschema@.dlock_renew_each($1::pg_catalog.text[], $2::pg_catalog.int8[], $3::pg_catalog.interval)");
		r.release_sql = DlockSql("SELECT @extschema@.dlock_release_each($1::pg_catalog.text[], $2::pg_catalog.int8[])");
	}
	else
	{
		r.renew_sql = DlockSql("SELECT @extschema@.dlock_renew($1, $2::pg_catalog.int8, $3::pg_catalog.interval)");
		r.release_sql = DlockSql("SELECT @extschema@.dlock_release($1, $2::pg_catalog.int8)");
	}
	DlockLeasesList(&r.leases, NULL, held, sizeof(held));
	snprintf(r.label, sizeof(r.label), "%s %s",
			 r.each ? "leases on" : "lease on", held);

	/*
	 * The lease is ours.  See design.md §9, the timing rules: unless the
	 * answer came only after the deadline counted from the send time, that
	 * deadline is proven; otherwise the answer's arrival plus T is a give-up
	 * time for confirming the lease with a renew.
	 */
	r.status = DLOCK_EXIT_NOT_ACQUIRED;
	if (r.sent_at + opt->ttl_ms > answered_at)
	{
		r.deadline = r.sent_at + opt->ttl_ms;
		set_phase(&r, PH_STARTING);
	}
	else
	{
		r.deadline = answered_at + opt->ttl_ms;
		set_phase(&r, PH_CONFIRMING);
	}
	r.next_renew = r.sent_at + opt->ttl_ms / 3;

	for (;;)
	{
		struct pollfd fds[4];
		int			nfds = 1;
		int			link_fd = -1;
		int64_t		now;
		int64_t		wake;
		int			timeout;
		bool		wake_now;
		PGresult   *res;
		DlockLinkEvent ev;

		/*
		 * 1. Has CMD exited?  Then 2. the clock, before anything else: a
		 * deadline found passed makes the lease lost, also when CMD has
		 * exited (it may have exited after the deadline, while dlock was
		 * stopped).  CMD exited before this clock reading, so if the deadline
		 * has not passed, CMD ran under the lease to its end.
		 */
		reap(&r);
		now = DlockNow();
		check_deadline(&r, now);
		/* (what the keeper did of its own accord) */
		handle_keeper(&r, now);
		/* 3. signals, and the watchdog's pings */
		wake_now = handle_signals(&r, now);
		DlockNotifyRead(&r.notify, now);
		/* 4. the connection */
		if (holds(&r))
		{
			ev = DlockLinkProgress(&r.link, &res);
			if (ev == DLOCK_LINK_RESULT)
			{
				handle_result(&r, now, res);
				PQclear(res);
			}
			else if (ev == DLOCK_LINK_FAILED)
				failed(&r, now, r.link.errmsg);
		}
		/* 5. decide */
		decide(&r, now);
		if (PHASE_IN(&r, PH_FINAL))
			break;

		/* wait */
		fds[0].fd = DlockSignalFd();
		fds[0].events = POLLIN;
		fds[0].revents = 0;
		if (holds(&r) && DlockLinkPollEvents(&r.link))
		{
			link_fd = nfds;
			fds[nfds].fd = PQsocket(r.link.conn);
			fds[nfds].events = DlockLinkPollEvents(&r.link);
			fds[nfds++].revents = 0;
		}
		if (PHASE_IN(&r, PH_CMD_RUNS) && r.keeper.report >= 0)
		{
			fds[nfds].fd = r.keeper.report;
			fds[nfds].events = POLLIN;
			fds[nfds++].revents = 0;
		}
		if (r.notify.fd >= 0 && PHASE_IN(&r, PH_CMD_RUNS))
		{
			fds[nfds].fd = r.notify.fd;
			fds[nfds].events = POLLIN;
			fds[nfds++].revents = 0;
		}
		wake = wake_now ? 0 : next_wake(&r);
		now = DlockNow();
		if (wake < 0)
			timeout = -1;
		else if (wake <= now)
			timeout = 0;
		else
			timeout = wake - now > 60000 ? 60000 : (int) (wake - now);
		if (poll(fds, nfds, timeout) < 0 && errno != EINTR)
		{
			DlockError("poll failed: %s", strerror(errno));
			/* (closing the ctl pipe tells the keeper too) */
			if (PHASE_IN(&r, PH_CMD_RUNS))
				stop_child(&r, DlockNow() + opt->kill_after_ms);
			set_phase(&r, PH_FAILED);
			break;
		}
		if (link_fd > 0)
			r.link.revents = fds[link_fd].revents;
	}
	DlockLinkClose(&r.link);
	DlockKeeperClose(&r.keeper);
	DlockNotifyClose(&r.notify);
	return exit_status(&r);
}
