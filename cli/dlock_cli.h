/*-------------------------------------------------------------------------
 *
 * cli/dlock_cli.h
 *	  Declarations shared by the files of the dlock command-line tool.
 *
 * The tool is one single-threaded process.  Asynchronous events (signals,
 * the child's exit, database answers) reach it through one poll() loop:
 * signal handlers only write a record into a self-pipe (cli/signals.c);
 * everything else runs in the main flow.  Nothing here is shared between
 * threads.  dlock run adds one process, the keeper (cli/keeper.c), which
 * talks to dlock through two pipes only.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/types.h>

#include "libpq-fe.h"

/*
 * Exit statuses.  The sysexits.h values, spelled out here because
 * docs/cli.md, the manual page and --help promise them.
 */
#define DLOCK_EXIT_OK			0
#define DLOCK_EXIT_NO			1	/* renew/release: the token holds no live
									 * lease; status NAME: not live; status
									 * --stats: no statistics */
#define DLOCK_EXIT_USAGE		64	/* EX_USAGE */
#define DLOCK_EXIT_UNAVAILABLE	69	/* EX_UNAVAILABLE: no database, or no
									 * answer within --timeout */
#define DLOCK_EXIT_ERROR		70	/* EX_SOFTWARE: the database reported an
									 * error, or a system call failed */
#define DLOCK_EXIT_NOT_ACQUIRED 75	/* EX_TEMPFAIL: CMD was not started */
#define DLOCK_EXIT_LOST			76	/* EX_PROTOCOL: the lease was lost */
#define DLOCK_EXIT_UNCONFIRMED	79	/* run: CMD ended, but no release
									 * confirmed the lease (no sysexits value:
									 * none means this) */
#define DLOCK_EXIT_WATCHDOG		80	/* run --watchdog: CMD sent no WATCHDOG=1
									 * in time and was stopped */

/* Defaults of the options. */
#define DLOCK_DEFAULT_TTL_MS		30000
#define DLOCK_DEFAULT_KILL_AFTER_MS 10000
#define DLOCK_DEFAULT_TIMEOUT_MS	30000	/* plus --wait */

/*
 * The most names of --all, and the most permits of --slots: the limit of
 * dlock_acquire_all and dlock_acquire_any (docs/sql-reference.md).
 */
#define DLOCK_MAX_SET_NAMES			10000

/* Everything the command line says. */
typedef struct DlockOptions
{
	const char *command;		/* "run", "acquire", ... */
	const char *conninfo;		/* -d: conninfo, URI or database name */
	const char *schema;			/* --schema, or NULL: search_path */
	const char *owner;			/* --owner, or NULL: a default label */
	int64_t		ttl_ms;
	int64_t		wait_ms;
	int64_t		kill_after_ms;
	int64_t		watchdog_ms;	/* run --watchdog: 0 when not asked for */
	int64_t		timeout_ms;		/* --timeout: the longest wait for an answer */
	const char *name;			/* NAME (the first one, with --all) */
	const char **names;			/* run, acquire: every NAME, in order */
	int			nnames;
	bool		all;			/* --all: the names are a set */
	int			slots;			/* --slots N: one of N permits; else 0 */
	int64_t		token;			/* TOKEN of renew and release */
	bool		waiters;		/* status --waiters: the waiting sessions */
	bool		stats;			/* status --stats: the database's counters */
	bool		json;			/* status --json: JSON instead of a table */
	char	  **cmd;			/* run: CMD [ARG...], NULL-terminated */
} DlockOptions;

/*
 * The leases of run and acquire (cli/leases.c): what is asked for (NAME,
 * the names of --all, or the permits NAME:1 ... NAME:N of --slots N), and
 * what is held once acquired, in the order given: one lease, or every
 * member of a set.
 */
typedef struct DlockLeases
{
	int			nwant;
	char	  **want;			/* the names asked for */
	char	   *want_array;		/* want as an array literal (--all, --slots) */
	int			n;				/* held: 0 before the acquire, then 1 or nwant */
	char	  **names;			/* held: points into want */
	char	  **tokens;			/* held: the tokens, decimal text */
	int			slot;			/* --slots: the number of the permit held */
} DlockLeases;

/* One database connection, driven without blocking (cli/conn.c). */
typedef enum DlockLinkState
{
	DLOCK_LINK_DOWN,			/* no connection */
	DLOCK_LINK_CONNECTING,		/* PQconnectPoll, then pinning the
								 * search_path, in progress */
	DLOCK_LINK_IDLE,			/* connected, no query in flight */
	DLOCK_LINK_BUSY				/* a query is in flight */
} DlockLinkState;

/* What DlockLinkProgress reports. */
typedef enum DlockLinkEvent
{
	DLOCK_LINK_NOTHING,			/* nothing new yet */
	DLOCK_LINK_CONNECTED,		/* CONNECTING -> IDLE */
	DLOCK_LINK_RESULT,			/* BUSY -> IDLE, *result is set */
	DLOCK_LINK_FAILED			/* -> DOWN; the message is in errmsg */
} DlockLinkEvent;

typedef struct DlockLink
{
	PGconn	   *conn;
	DlockLinkState state;
	PostgresPollingStatusType connect_poll; /* CONNECTING: what to wait for */
	bool		pinning;		/* CONNECTING: connected, pin_sql in flight
								 * (cli/conn.c) */
	bool		flushing;		/* BUSY, pinning: the statement is not fully
								 * sent yet */
	PGresult   *pending;		/* BUSY: result collected so far */
	short		revents;		/* poll() result for the socket */
	bool		timed_out;		/* DlockLinkExec got no answer in time */
	char		errmsg[1024];	/* the last failure, one line */
} DlockLink;

/*
 * The keeper of dlock run (cli/keeper.c): the process between dlock and
 * CMD that owns CMD's whole process tree.
 */
typedef struct DlockKeeperSetup
{
	void		(*exec_cmd) (void *arg);	/* in CMD's process; must not
											 * return */
	void	   *exec_arg;
	void		(*cleanup) (void);	/* in the keeper, after dlock's death */
	int64_t		deadline;		/* the lease's local deadline (DlockNow) */
	int64_t		grace_ms;		/* SIGTERM this long before the deadline */
	int64_t		margin_ms;		/* SIGKILL this long before the deadline */
	int64_t		kill_after_ms;	/* --kill-after */
	int			close_fd;		/* dlock's descriptors the keeper must not */
	int			close_fd2;		/* hold, or -1 */
} DlockKeeperSetup;

typedef struct DlockKeeper
{
	pid_t		pid;			/* the keeper */
	pid_t		cmd;			/* CMD */
	bool		contained;		/* the keeper is a child subreaper */
	int			ctl;			/* write end: dlock -> keeper */
	int			report;			/* read end: keeper -> dlock */
} DlockKeeper;

/* Messages: dlock -> keeper, keeper -> dlock (cli/keeper.c's header). */
#define KEEPER_DEADLINE		1	/* b: the new deadline */
#define KEEPER_SIGNAL		2	/* a: a signal for CMD */
#define KEEPER_STOP			3	/* SIGTERM the tree; b: SIGKILL time */
#define KEEPER_STARTED		4	/* a: CMD's pid, or -errno; b: 1 when the
								 * keeper is a subreaper */
#define KEEPER_TERM			5	/* a: why (below); b: how many processes */
#define KEEPER_KILL			6	/* a: why (KEEPER_WHY_DEADLINE, or 0: the time
								 * a stop gave); b: how many got it */
#define KEEPER_CMD_EXITED	7	/* a: CMD's status (its processes may remain) */

#define KEEPER_WHY_DEADLINE	1	/* no renew by the deadline - grace */
#define KEEPER_WHY_LEFTOVER	2	/* CMD exited, its processes had not */

/* The watchdog of dlock run --watchdog (cli/notify.c). */
typedef struct DlockNotify
{
	int			fd;				/* the socket, or -1 */
	int64_t		timeout_ms;		/* WATCHDOG_USEC, in ms */
	int64_t		last_ping;		/* the last WATCHDOG=1 (or CMD's start) */
	int64_t		pings;
	bool		triggered;		/* WATCHDOG=trigger */
} DlockNotify;

/* util.c */
extern const char *dlock_progname;
extern void *DlockAlloc(size_t size);
extern char *DlockStrdup(const char *text);
extern int64_t DlockNow(void);
extern bool DlockParseDuration(const char *text, int64_t *ms);
extern void DlockFormatDuration(int64_t ms, char *buf, size_t len);
extern void DlockErrorV(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
extern void DlockError(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void DlockTrim(char *text);
extern const char *DlockHostname(void);

/* signals.c */
extern void DlockSignalsInit(void);
extern bool DlockSignalCatch(int signo,
							 void (*fn) (int, siginfo_t *, void *));
extern void DlockSignalIgnore(int signo);
extern void DlockSignalNotify(int signo, int code);
extern int	DlockSignalFd(void);
extern bool DlockSignalNext(int *signo, int *code);
extern const char *DlockSignalName(int signo);
extern void DlockSignalsBlock(sigset_t *old);
extern void DlockSignalsUnblock(const sigset_t *old);
extern void DlockSignalsRestoreInChild(void);
extern void DlockSignalsReinit(void);

/* keeper.c */
extern bool DlockKeeperStart(DlockKeeper *kp, const DlockKeeperSetup *setup);
extern void DlockKeeperSend(DlockKeeper *kp, int type, int a, int64_t b);
extern bool DlockKeeperNext(DlockKeeper *kp, int *type, int *a, int64_t *b);
extern void DlockKeeperClose(DlockKeeper *kp);
extern int	DlockTreeSignal(pid_t root, pid_t only, int sig);
extern void DlockTreeEnd(int64_t bound_ms);

/* notify.c */
extern bool DlockNotifyOpen(DlockNotify *n, int64_t timeout_ms, char *err,
							size_t len);
extern bool DlockNotifySetEnv(const DlockNotify *n);
extern void DlockNotifySetPid(void);
extern void DlockNotifyRead(DlockNotify *n, int64_t now);
extern int64_t DlockNotifyDue(const DlockNotify *n);
extern void DlockNotifyClose(DlockNotify *n);
extern void DlockNotifyCleanup(void);

/* conn.c */
extern void DlockConnInit(const DlockOptions *opt);
extern PGconn *DlockConnectQuiet(char *err, size_t len);
extern void DlockLinkInit(DlockLink *link);
extern bool DlockLinkAdopt(DlockLink *link, PGconn *conn);
extern void DlockLinkStartConnect(DlockLink *link);
extern bool DlockLinkSend(DlockLink *link, const char *sql, int nparams,
						  const char *const *values);
extern short DlockLinkPollEvents(const DlockLink *link);
extern DlockLinkEvent DlockLinkProgress(DlockLink *link, PGresult **result);
extern void DlockLinkDrop(DlockLink *link, const char *why);
extern void DlockLinkClose(DlockLink *link);
extern PGresult *DlockLinkExec(DlockLink *link, const char *sql, int nparams,
							   const char *const *values, int64_t timeout_ms,
							   int *signo);
extern bool DlockLinkCancel(DlockLink *link, int64_t bound_ms, char *outcome,
							size_t len);
extern const char *DlockResultError(const PGresult *res);
extern bool DlockResultIsTrue(const PGresult *res);
extern bool DlockRetryableError(const PGresult *res);
extern char *DlockSql(const char *fmt);
extern void DlockInterval(int64_t ms, char *buf, size_t len);

/* leases.c */
extern void DlockLeasesInit(DlockLeases *l, const DlockOptions *opt);
extern bool DlockLeasesTake(DlockLeases *l, const DlockOptions *opt,
							const PGresult *res);
extern void DlockLeasesWanted(const DlockLeases *l, const DlockOptions *opt,
							  char *buf, size_t len);
extern void DlockLeasesList(const DlockLeases *l, const bool *only,
							char *buf, size_t len);
extern char *DlockTextArray(char *const *elems, const bool *only, int n);
extern int	DlockParseArray(const char *text, char ***elems);
extern bool DlockLeasesSetEnv(const DlockLeases *l);

/* oneshot.c */
extern const char *dlock_needs_1_2;
extern void DlockConnectOrExit(DlockLink *link, bool keep_trying);
extern int	DlockCallFailed(DlockLink *link, const PGresult *res,
							const char *what, const char *unknown);
extern bool DlockInterrupted(const DlockLink *link, const PGresult *res,
							 int signo, const char *why);
extern int	DlockCmdAcquire(const DlockOptions *opt);
extern int	DlockCmdRenew(const DlockOptions *opt);
extern int	DlockCmdRelease(const DlockOptions *opt);

/* acquire.c */
extern int	DlockAcquireLease(DlockLink *link, const DlockOptions *opt,
							  const char *owner, DlockLeases *l,
							  int64_t *sent_at, int64_t *answered_at);
extern void DlockDescribeHolder(DlockLink *link, const DlockOptions *opt,
								const DlockLeases *l, char *buf, size_t len);
extern void DlockReleaseQuietly(DlockLink *link, const DlockOptions *opt,
								const DlockLeases *l);

/* run.c */
extern int	DlockRun(const DlockOptions *opt);

/* status.c */
extern int	DlockStatus(const DlockOptions *opt);

#endif							/* DLOCK_CLI_H */
