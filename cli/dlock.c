/*-------------------------------------------------------------------------
 *
 * cli/dlock.c
 *	  The dlock command-line tool: command line, help, and the one-shot
 *	  commands acquire, renew and release, and what every one-shot command
 *	  shares (connecting, reporting a failed or interrupted call).  "dlock
 *	  run" is in cli/run.c, "dlock status" in cli/status.c, the leases of
 *	  --all and --slots in cli/leases.c.
 *
 * Process model: one process, no threads, no children (except CMD of
 * dlock run, and the short-lived process that sends a cancel request, see
 * cli/conn.c).  A one-shot command connects (blocking, bounded by
 * connect_timeout, with the default signal dispositions: a Ctrl-C while
 * connecting just ends dlock), then catches SIGHUP, SIGINT, SIGQUIT and
 * SIGTERM into the self-pipe of cli/signals.c and runs its one call with
 * DlockLinkExec(): such a signal cancels the call on the server (so that a
 * waiting acquire leaves no waiter behind), a lease granted anyway is
 * released, and dlock exits 128+signal.  A call that gets no answer within
 * --timeout (default 30s plus --wait) is cancelled on the server too, and
 * dlock exits 69; after an acquire it cannot know whether the lease was
 * granted, and says so (such a lease ends when its ttl runs out).  A
 * waiting acquire (--wait, also dlock run's) keeps trying through lost
 * connections and read-only servers until --wait or --timeout runs out
 * (DlockAcquireLease); its first connection may fail too.
 *
 * Every call passes its arguments as query parameters; see cli/conn.c.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock_cli.h"

#ifndef DLOCK_VERSION
#define DLOCK_VERSION "unknown"
#endif

/* Options, as bits: which command accepts which. */
#define OPT_TTL			(1 << 0)
#define OPT_WAIT		(1 << 1)
#define OPT_OWNER		(1 << 2)
#define OPT_KILL_AFTER	(1 << 3)
#define OPT_DBNAME		(1 << 4)
#define OPT_SCHEMA		(1 << 5)
#define OPT_TIMEOUT		(1 << 6)
#define OPT_ALL			(1 << 7)
#define OPT_SLOTS		(1 << 8)
#define OPT_WAITERS		(1 << 9)
#define OPT_STATS		(1 << 10)
#define OPT_JSON		(1 << 11)
#define OPT_WATCHDOG	(1 << 12)
/* the options of every command, which may also precede the command name */
#define OPT_CONN		(OPT_DBNAME | OPT_SCHEMA | OPT_TIMEOUT)

typedef struct OptionDef
{
	const char *long_name;
	char		short_name;
	unsigned	bit;
	bool		has_value;		/* false: a flag (--all) */
} OptionDef;

static const OptionDef option_defs[] = {
	{"ttl", 0, OPT_TTL, true},
	{"wait", 0, OPT_WAIT, true},
	{"owner", 0, OPT_OWNER, true},
	{"kill-after", 0, OPT_KILL_AFTER, true},
	{"watchdog", 0, OPT_WATCHDOG, true},
	{"dbname", 'd', OPT_DBNAME, true},
	{"schema", 0, OPT_SCHEMA, true},
	{"timeout", 0, OPT_TIMEOUT, true},
	{"all", 0, OPT_ALL, false},
	{"slots", 0, OPT_SLOTS, true},
	{"waiters", 0, OPT_WAITERS, false},
	{"stats", 0, OPT_STATS, false},
	{"json", 0, OPT_JSON, false},
};

typedef struct Command
{
	const char *name;
	const char *synopsis;
	unsigned	options;
	int			min_args;		/* positional arguments (CMD not counted) */
	int			max_args;		/* (with --all: any number of NAMEs) */
	int			(*fn) (const DlockOptions *opt);
} Command;

static int	cmd_acquire(const DlockOptions *opt);
static int	cmd_renew(const DlockOptions *opt);
static int	cmd_release(const DlockOptions *opt);

/*
 * What the call that failed needed of version 1.2 ("--all and --slots"),
 * or NULL: the hint of DlockCallFailed names it.
 */
const char *dlock_needs_1_2 = NULL;

static const Command commands[] = {
	{"run",
		"dlock run [--ttl DUR] [--wait DUR] [--owner TEXT] [--kill-after DUR] [--watchdog DUR] [--timeout DUR] [-d CONNINFO] NAME -- CMD [ARG...]\n"
		"       dlock run [OPTION]... --slots N NAME -- CMD [ARG...]\n"
		"       dlock run [OPTION]... --all NAME... -- CMD [ARG...]",
		OPT_CONN | OPT_TTL | OPT_WAIT | OPT_OWNER | OPT_KILL_AFTER | OPT_WATCHDOG | OPT_ALL | OPT_SLOTS,
	1, 1, DlockRun},
	{"acquire",
		"dlock acquire [--ttl DUR] [--wait DUR] [--owner TEXT] [--timeout DUR] [-d CONNINFO] NAME\n"
		"       dlock acquire [OPTION]... --slots N NAME\n"
		"       dlock acquire [OPTION]... --all NAME...",
	OPT_CONN | OPT_TTL | OPT_WAIT | OPT_OWNER | OPT_ALL | OPT_SLOTS, 1, 1, cmd_acquire},
	{"renew",
		"dlock renew [--ttl DUR] [--timeout DUR] [-d CONNINFO] NAME TOKEN",
	OPT_CONN | OPT_TTL, 2, 2, cmd_renew},
	{"release",
		"dlock release [--timeout DUR] [-d CONNINFO] NAME TOKEN",
	OPT_CONN, 2, 2, cmd_release},
	{"status",
		"dlock status [--json] [--timeout DUR] [-d CONNINFO] [NAME]\n"
		"       dlock status [OPTION]... --waiters [NAME]\n"
		"       dlock status [OPTION]... --stats",
	OPT_CONN | OPT_WAITERS | OPT_STATS | OPT_JSON, 0, 1, DlockStatus},
};

#define NCOMMANDS ((int) (sizeof(commands) / sizeof(commands[0])))

static const char help_text[] =
"dlock runs a command under a lease of the dlock PostgreSQL extension, so\n"
"that it runs on one machine at a time, and acquires, renews, releases and\n"
"lists leases.\n"
"\n"
"Usage:\n"
"  dlock run [OPTION]... NAME [--] CMD [ARG]...\n"
"  dlock run [OPTION]... --slots N NAME -- CMD [ARG]...\n"
"  dlock run [OPTION]... --all NAME... -- CMD [ARG]...\n"
"  dlock acquire [OPTION]... NAME\n"
"  dlock acquire [OPTION]... --slots N NAME\n"
"  dlock acquire [OPTION]... --all NAME...\n"
"  dlock renew [OPTION]... NAME TOKEN\n"
"  dlock release [OPTION]... NAME TOKEN\n"
"  dlock status [OPTION]... [NAME]\n"
"  dlock status [OPTION]... --waiters [NAME]\n"
"  dlock status [OPTION]... --stats\n"
"  dlock --help | --version\n"
"\n"
"Commands:\n"
"  run      Acquire the lease NAME, run CMD with DLOCK_NAME and DLOCK_TOKEN\n"
"           (its fencing token) in its environment, renew the lease every\n"
"           ttl/3 while CMD runs, release it once CMD and every process it\n"
"           started have exited, and exit with CMD's status.  If the lease\n"
"           is lost, CMD and every process it started get SIGTERM, then\n"
"           SIGKILL after --kill-after, and dlock exits 76.  SIGTERM sent to\n"
"           dlock stops them the same way, the lease held meanwhile; SIGHUP,\n"
"           SIGINT, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to CMD.\n"
"           Options go before \"--\" (or before CMD); everything after \"--\"\n"
"           is CMD.\n"
"           With --slots N: one of the N permits NAME:1 ... NAME:N, the first\n"
"           free one.  With --all: every NAME or none, renewed together; if\n"
"           one of them is lost, CMD is stopped as for a lost lease (exit\n"
"           76) and the others are released once CMD has exited.  With\n"
"           either, the names end at \"--\", which is then required.\n"
"  acquire  Acquire the lease NAME and print its fencing token; with --slots\n"
"           or --all, print one line \"TOKEN NAME\" per lease taken.\n"
"  renew    Extend the lease (NAME, TOKEN) to expire --ttl from now.\n"
"  release  End the lease (NAME, TOKEN).\n"
"  status   Print the leases (or NAME's) as a table: name, token, holder\n"
"           (owner label), role, when it expires (or ended), whether live.\n"
"           With --waiters, the sessions of this database waiting for a\n"
"           lease (or for NAME), in queue order: pid, name, kind (acquire,\n"
"           all, any), position in the queue, how long it has waited, how\n"
"           long it may still wait, role.  With --stats, this database's\n"
"           counters (dlock_stats): leases granted, refused, waited for,\n"
"           renewed, released, fence decisions...  With --json, JSON.\n"
"\n"
"Options:\n"
"  -d, --dbname=CONNINFO   the database: a connection string (\"host=db1\n"
"                          dbname=app\"), a URI (postgresql://db1/app) or a\n"
"                          database name; what it leaves out comes from the\n"
"                          PG* environment variables, as for psql\n"
"      --schema=SCHEMA     the schema of the dlock extension (default: the\n"
"                          functions are found on the search_path)\n"
"      --ttl=DUR           lease time-to-live (run, acquire, renew; default 30s)\n"
"      --wait=DUR          wait up to DUR for a held lease to be released or\n"
"                          to expire, reconnecting meanwhile when the database\n"
"                          cannot be used (run, acquire; default 0: do not\n"
"                          wait)\n"
"      --owner=TEXT        the owner label shown by status and dlock_leases\n"
"                          (run, acquire; default \"dlock run HOST pid PID\",\n"
"                          \"dlock acquire HOST ppid PPID\")\n"
"      --kill-after=DUR    run: SIGKILL what is left of CMD's processes DUR\n"
"                          after their SIGTERM (default 10s; 0: at once); if\n"
"                          the lease is not renewed, SIGTERM comes\n"
"                          min(DUR, ttl/3) before its deadline and SIGKILL at\n"
"                          the deadline\n"
"      --watchdog=DUR      run: give CMD NOTIFY_SOCKET and WATCHDOG_USEC as\n"
"                          systemd does; if no WATCHDOG=1 comes for DUR, stop\n"
"                          renewing, stop CMD's processes, release, exit 80\n"
"      --timeout=DUR       give up on a call (run: the acquire) that gets no\n"
"                          answer within DUR: cancel it on the server, exit 69\n"
"                          (default 30s plus --wait)\n"
"      --slots=N           run, acquire: take one of the N permits NAME:1 ...\n"
"                          NAME:N (a semaphore), the first free one, or wait\n"
"                          for any to be free (N from 1 to 10000)\n"
"      --all               run, acquire: the NAMEs are a set, taken all or none\n"
"                          (at most 10000; run: \"--\" ends them)\n"
"      --waiters           status: the waiting sessions instead of the leases\n"
"                          (queues exist only with dlock in\n"
"                          shared_preload_libraries)\n"
"      --stats             status: this database's counters since the server\n"
"                          started (kept only with dlock in\n"
"                          shared_preload_libraries)\n"
"      --json              status: print JSON instead of a table: an array of\n"
"                          objects, one per lease or waiter; --stats: one\n"
"                          object with every counter\n"
"      --help              show this help, then exit\n"
"  -V, --version           show the version, then exit\n"
"\n"
"Durations: a number and a unit, ms, s, m, h or d (500ms, 30s, 2m, 1h, 1.5s),\n"
"several in a row (1m30s), or a bare number of seconds.\n"
"\n"
"How dlock run decides that the lease is lost: it keeps the lease's\n"
"deadline on the local monotonic clock, counted from the moment the last\n"
"successful acquire or renew was sent, plus the ttl.  A renew that fails is\n"
"retried on a new connection until that deadline, the pauses between attempts\n"
"never longer than a quarter of the time left.  The lease is lost when a\n"
"renew returns false (the lease was broken with dlock_break, or it expired\n"
"and another client took it), or when the deadline passes first (the\n"
"database stayed unreachable, or dlock was stopped or starved).  A lost\n"
"lease is never renewed or released again, so a newer holder's lease is\n"
"never touched.  A set (--all) is renewed with one call, and is lost when\n"
"one of its leases is.  dlock exits with CMD's status only when the release\n"
"after CMD exited returned true; when it got no answer in time, only errors\n"
"(a read-only server, after a failover) or a signal, it exits 79.  With\n"
"--wait, a lost connection or a read-only server is retried until --wait runs\n"
"out.  CMD starts only with at least 2/3 of the ttl left.\n"
"\n"
"What dlock run stops: CMD and every process it started (on Linux, also\n"
"daemons that double-fork and call setsid: a keeper process, a child\n"
"subreaper, adopts them), when the lease is lost, when no renew succeeded\n"
"by min(--kill-after, ttl/3) before the deadline (SIGKILL at the\n"
"deadline, so the job is gone before the lease can expire), when dlock\n"
"gets SIGTERM, when CMD exits and leaves processes behind, and when dlock\n"
"itself is killed (then SIGKILL within 0.5s).  Signals sent by a terminal\n"
"(Ctrl-C, Ctrl-Z) reach the job directly, as it runs in dlock's process\n"
"group, and are not passed on a second time.\n"
"\n"
"Exit status:\n"
"  0        success\n"
"  N        run: CMD's exit status, once the release confirmed the lease\n"
"           (128+S when signal S killed CMD; 127 when CMD was not found, 126\n"
"           when it could not be executed)\n"
"  1        renew, release: TOKEN does not hold a live lease on NAME (it\n"
"           expired, was released or broken, or was taken over);\n"
"           status NAME: NAME has no live lease; status --stats: no\n"
"           statistics for this database (dlock is not preloaded, or\n"
"           nothing used it here since the server started)\n"
"  64       usage error (CMD not started)\n"
"  69       the database could not be reached, or the connection was lost\n"
"           during a one-shot command, or a call got no answer within\n"
"           --timeout, or (--wait) no server took the acquire before --wait\n"
"           ran out (run: CMD not started)\n"
"  70       the database reported an error (extension not installed,\n"
"           permission denied, ttl above dlock.max_ttl, a standby without\n"
"           --wait...), or a system call failed (run: CMD not started)\n"
"  75       not acquired: the lease is held (--all: one of them; --slots:\n"
"           every permit), and --wait ran out, or (run) it was lost again,\n"
"           or the database answered too slowly for the ttl, before CMD\n"
"           could start; CMD not started, nothing held\n"
"  76       run: the lease (--all: one of the set) was lost while CMD ran,\n"
"           or before dlock could release it, or could not be renewed in\n"
"           time; CMD was stopped\n"
"  79       run: CMD ended, but no release confirmed the lease (no answer\n"
"           before its deadline, a read-only server, a signal): its fate is\n"
"           unknown, CMD's writes may have been fenced off; CMD's status is\n"
"           on stderr\n"
"  80       run --watchdog: CMD sent no WATCHDOG=1 in time (or\n"
"           WATCHDOG=trigger) and was stopped\n"
"  128+S    interrupted by signal S during a call, which is cancelled on\n"
"           the server (run: before CMD started)\n"
"\n"
"Environment:\n"
"  PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGPASSFILE, PGSERVICE,\n"
"  PGOPTIONS, PGAPPNAME, PGSSLMODE, ...: libpq's, for what -d leaves out.\n"
"  PGCONNECT_TIMEOUT: seconds to wait for a connection (default here: 10).\n"
"  CMD gets DLOCK_NAME (NAME) and DLOCK_TOKEN (the fencing token); carry\n"
"  the token in every write to tables fenced by the dlock_fence trigger.\n"
"  With --slots, DLOCK_NAME is the permit taken (NAME:K) and DLOCK_SLOT is\n"
"  K.  DLOCK_NAMES and DLOCK_TOKENS list every lease held, one per line,\n"
"  in the order given; a set of several (--all) has no DLOCK_NAME and\n"
"  DLOCK_TOKEN.\n"
"\n"
"Examples:\n"
"  */5 * * * * dlock run --ttl 2m nightly-report -- /usr/local/bin/report\n"
"  dlock run --wait 10m -d \"host=db1 dbname=app\" schema-migration -- ./migrate.sh\n"
"  dlock run --slots 4 --wait 1h backup -- ./backup.sh     # at most 4 at once\n"
"  dlock run --all account:7 account:42 -- ./transfer.sh   # both or neither\n"
"  token=$(dlock acquire --ttl 1m deploy) && ... && dlock release deploy \"$token\"\n"
"  dlock status\n"
"  dlock status --waiters deploy                          # who waits, how long\n"
"  dlock status --stats --json | jq .waits\n";

/*
 * usage_error prints "dlock: <message>", the synopsis of cmd (or of every
 * command when cmd is NULL) and a pointer to --help, and exits 64.
 */
static void
usage_error(const Command *cmd, const char *fmt,...) __attribute__((format(printf, 2, 3), noreturn));

static void
usage_error(const Command *cmd, const char *fmt,...)
{
	va_list		ap;
	int			i;

	va_start(ap, fmt);
	DlockErrorV(fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "Usage: %s\n", cmd->synopsis);
	else
		for (i = 0; i < NCOMMANDS; i++)
			fprintf(stderr, "%s %s\n", i == 0 ? "Usage:" : "      ", commands[i].synopsis);
	fprintf(stderr, "Try \"dlock --help\" for more information.\n");
	exit(DLOCK_EXIT_USAGE);
}

/*
 * parse_duration parses the value of option name into *ms, or fails with a
 * usage error.
 */
static void
parse_duration(const Command *cmd, const char *name, const char *value, int64_t *ms)
{
	if (!DlockParseDuration(value, ms))
		usage_error(cmd, "invalid duration \"%s\" for --%s (examples: 500ms, 30s, 2m, 1h)",
					value, name);
}

/*
 * parse_slots parses the value of --slots: a number of permits from 1 to
 * DLOCK_MAX_SET_NAMES, or fails with a usage error.
 */
static int
parse_slots(const Command *cmd, const char *value)
{
	const char *p;

	for (p = value; isdigit((unsigned char) *p); p++)
		;
	if (p == value || *p != '\0' || p - value > 5 || atoi(value) < 1 ||
		atoi(value) > DLOCK_MAX_SET_NAMES)
		usage_error(cmd, "invalid value \"%s\" for --slots: the number of permits, from 1 to %d",
					value, DLOCK_MAX_SET_NAMES);
	return atoi(value);
}

/*
 * parse_option parses the option at argv[i] (and its value, which may be
 * the next argument) for cmd (NULL: before the command name) and returns
 * the index of the next argument.
 */
static int
parse_option(int argc, char **argv, int i, const Command *cmd, DlockOptions *opt)
{
	const char *arg = argv[i];
	const char *value = NULL;
	const OptionDef *def = NULL;
	size_t		k;

	if (strcmp(arg, "--help") == 0)
	{
		fputs(help_text, stdout);
		exit(DLOCK_EXIT_OK);
	}
	if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0)
	{
		printf("dlock %s (libpq %d.%d)\n", DLOCK_VERSION,
			   PQlibVersion() / 10000, PQlibVersion() % 10000);
		exit(DLOCK_EXIT_OK);
	}
	if (arg[1] == '-')
	{
		const char *eq = strchr(arg + 2, '=');
		size_t		len = eq ? (size_t) (eq - (arg + 2)) : strlen(arg + 2);

		for (k = 0; k < sizeof(option_defs) / sizeof(option_defs[0]); k++)
			if (strlen(option_defs[k].long_name) == len &&
				strncmp(option_defs[k].long_name, arg + 2, len) == 0)
				def = &option_defs[k];
		if (def == NULL)
			usage_error(cmd, "unknown option \"%.*s\"", (int) len + 2, arg);
		if (eq && !def->has_value)
			usage_error(cmd, "option --%s takes no value", def->long_name);
		if (eq)
			value = eq + 1;
	}
	else
	{
		for (k = 0; k < sizeof(option_defs) / sizeof(option_defs[0]); k++)
			if (option_defs[k].short_name && option_defs[k].short_name == arg[1])
				def = &option_defs[k];
		if (def == NULL)
			usage_error(cmd, "unknown option \"-%c\"", arg[1]);
		if (arg[2] != '\0' && def->has_value)
			value = arg + 2;
		else if (arg[2] != '\0')
			usage_error(cmd, "option -%c takes no value", arg[1]);
	}
	if (((cmd ? cmd->options : OPT_CONN) & def->bit) == 0)
	{
		if (cmd)
			usage_error(cmd, "option --%s does not apply to dlock %s",
						def->long_name, cmd->name);
		usage_error(cmd, "option --%s must follow the command", def->long_name);
	}
	if (value == NULL && def->has_value)
	{
		if (i + 1 >= argc)
			usage_error(cmd, "option --%s needs a value", def->long_name);
		value = argv[++i];
	}
	switch (def->bit)
	{
		case OPT_TTL:
			parse_duration(cmd, def->long_name, value, &opt->ttl_ms);
			if (opt->ttl_ms <= 0)
				usage_error(cmd, "--ttl must be at least 1ms");
			break;
		case OPT_WAIT:
			parse_duration(cmd, def->long_name, value, &opt->wait_ms);
			break;
		case OPT_KILL_AFTER:
			parse_duration(cmd, def->long_name, value, &opt->kill_after_ms);
			break;
		case OPT_WATCHDOG:
			parse_duration(cmd, def->long_name, value, &opt->watchdog_ms);
			if (opt->watchdog_ms <= 0)
				usage_error(cmd, "--watchdog must be at least 1ms");
			break;
		case OPT_TIMEOUT:
			parse_duration(cmd, def->long_name, value, &opt->timeout_ms);
			if (opt->timeout_ms <= 0)
				usage_error(cmd, "--timeout must be at least 1ms");
			break;
		case OPT_OWNER:
			opt->owner = value;
			break;
		case OPT_DBNAME:
			opt->conninfo = value;
			break;
		case OPT_SCHEMA:
			if (*value == '\0')
				usage_error(cmd, "--schema must not be empty");
			opt->schema = value;
			break;
		case OPT_ALL:
			opt->all = true;
			break;
		case OPT_SLOTS:
			opt->slots = parse_slots(cmd, value);
			break;
		case OPT_WAITERS:
			opt->waiters = true;
			break;
		case OPT_STATS:
			opt->stats = true;
			break;
		case OPT_JSON:
			opt->json = true;
			break;
	}
	return i + 1;
}

/*
 * parse_token parses TOKEN: a positive decimal bigint.
 */
static int64_t
parse_token(const Command *cmd, const char *text)
{
	char	   *end;
	long long	v;

	errno = 0;
	if (!isdigit((unsigned char) text[0]))
		usage_error(cmd, "invalid TOKEN \"%s\": a token is a positive integer", text);
	v = strtoll(text, &end, 10);
	if (errno != 0 || *end != '\0' || v <= 0)
		usage_error(cmd, "invalid TOKEN \"%s\": a token is a positive integer", text);
	return (int64_t) v;
}

/*
 * name_ptr_cmp orders pointers to names by strcmp(); a qsort comparator.
 */
static int
name_ptr_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/*
 * check_names refuses (usage error) what a run or an acquire cannot take:
 * an empty NAME; and with --all or --slots, --all with --slots, several
 * names with --slots, more than DLOCK_MAX_SET_NAMES names, a name given
 * twice, or a newline in a name (DLOCK_NAMES and dlock acquire's output
 * have one lease per line).  Duplicates are found in a sorted copy.
 */
static void
check_names(const Command *cmd, const DlockOptions *opt)
{
	const char **sorted;
	int			i;

	for (i = 0; i < opt->nnames; i++)
		if (opt->names[i][0] == '\0')
			usage_error(cmd, "NAME must not be empty");
	if (!opt->all && opt->slots == 0)
		return;
	if (opt->all && opt->slots > 0)
		usage_error(cmd, "--all and --slots cannot be combined");
	if (opt->slots > 0 && opt->nnames > 1)
		usage_error(cmd, "--slots takes one NAME, not %d (the permits are NAME:1 ... NAME:N)",
					opt->nnames);
	if (opt->nnames > DLOCK_MAX_SET_NAMES)
		usage_error(cmd, "too many names (%d): --all takes at most %d",
					opt->nnames, DLOCK_MAX_SET_NAMES);
	for (i = 0; i < opt->nnames; i++)
		if (strchr(opt->names[i], '\n'))
			usage_error(cmd, "NAME must not contain a newline with --%s (DLOCK_NAMES and the output of acquire have one lease per line)",
						opt->all ? "all" : "slots");
	sorted = DlockAlloc(sizeof(char *) * opt->nnames);
	memcpy(sorted, opt->names, sizeof(char *) * opt->nnames);
	qsort(sorted, opt->nnames, sizeof(char *), name_ptr_cmp);
	for (i = 1; i < opt->nnames; i++)
		if (strcmp(sorted[i - 1], sorted[i]) == 0)
			usage_error(cmd, "NAME \"%s\" is given twice", sorted[i]);
	free(sorted);
}

/*
 * parse_args fills *opt from the command line and returns the command.
 *
 * Options may come anywhere before "--" (for run: before NAME's "--" or
 * before CMD); -d, --schema and --timeout may also come before the command
 * name.
 * For run, the first argument that is not an option is NAME, and CMD
 * starts at the next one (or after "--"): CMD's own options are never
 * read as dlock's.  Once --all or --slots has been read, though, every
 * argument up to "--" is a NAME, and "--" is required (docs/cli.md,
 * "Sets and permits"): so a command line that was valid before these
 * options existed keeps its meaning.
 */
static const Command *
parse_args(int argc, char **argv, DlockOptions *opt)
{
	const Command *cmd = NULL;
	const char **pos = DlockAlloc(sizeof(char *) * (argc + 1));
	int			npos = 0;
	bool		opts_done = false;
	int			i = 1;
	int			k;

	while (i < argc)
	{
		const char *arg = argv[i];
		bool		is_run = cmd && cmd->fn == DlockRun;
		bool		set = opt->all || opt->slots > 0;

		/* "--" ends the options, and for run the names (NAME, or a set's) */
		if (strcmp(arg, "--") == 0 && (!opts_done || (is_run && set && npos >= 1)))
		{
			opts_done = true;
			i++;
			if (is_run && npos >= 1)
			{
				opt->cmd = &argv[i];
				break;
			}
			continue;
		}
		if (!opts_done && arg[0] == '-' && arg[1] != '\0')
		{
			i = parse_option(argc, argv, i, cmd, opt);
			continue;
		}
		if (cmd == NULL)
		{
			if (strcmp(arg, "help") == 0)
			{
				fputs(help_text, stdout);
				exit(DLOCK_EXIT_OK);
			}
			for (k = 0; k < NCOMMANDS; k++)
				if (strcmp(commands[k].name, arg) == 0)
					cmd = &commands[k];
			if (cmd == NULL)
				usage_error(NULL, "unknown command \"%s\"", arg);
			opt->command = cmd->name;
			i++;
			continue;
		}
		if (is_run && npos == 1 && !set)
		{
			opt->cmd = &argv[i];
			break;
		}
		if (npos == cmd->max_args && !(set && (cmd->options & OPT_ALL)))
			usage_error(cmd, "too many arguments (\"%s\")%s", arg,
						(cmd->options & OPT_ALL) ? "; several names need --all" : "");
		pos[npos++] = arg;
		i++;
	}

	if (cmd == NULL)
		usage_error(NULL, "no command given");
	if (npos < cmd->min_args)
		usage_error(cmd, "missing %s", npos == 0 ? "NAME" : "TOKEN");
	opt->name = pos[0];
	opt->names = pos;
	opt->nnames = npos;
	/* first, as what it read as more names may have been meant as CMD */
	if (cmd->fn == DlockRun && opt->cmd == NULL && (opt->all || opt->slots > 0))
		usage_error(cmd, "missing \"--\" and CMD after the names (with --%s, \"--\" ends the names)",
					opt->all && opt->slots == 0 ? "all" : "slots");
	check_names(cmd, opt);
	if (opt->waiters && opt->stats)
		usage_error(cmd, "--waiters and --stats cannot be combined");
	if (opt->stats && npos > 0)
		usage_error(cmd, "--stats takes no NAME: it shows the counters of the whole database");
	if (cmd->max_args == 2)
		opt->token = parse_token(cmd, pos[1]);
	if (cmd->fn == DlockRun && (opt->cmd == NULL || opt->cmd[0] == NULL))
		usage_error(cmd, "missing CMD after %s",
					(opt->all || opt->slots > 0) ? "\"--\"" : "NAME");
	/* a waiting acquire is never cut short by the default */
	if (opt->timeout_ms < 0)
		opt->timeout_ms = DLOCK_DEFAULT_TIMEOUT_MS + opt->wait_ms;
	return cmd;
}

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
 * release_quietly releases the leases of l after an interrupted acquire
 * (one call: dlock_release, or dlock_release_each for a set), ignoring
 * the outcome, unless no answer comes within --timeout: that is reported
 * (the leases then end with their ttl).
 */
static void
release_quietly(DlockLink *link, const DlockOptions *opt, const DlockLeases *l)
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
	const char *sql;
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
		sql = "SELECT @extschema@.dlock_acquire_all($1::pg_catalog.text[], $2::pg_catalog.interval, $3::pg_catalog.interval, $4)";
	else if (opt->slots > 0)
		sql = "SELECT lock_name, token FROM @extschema@.dlock_acquire_any($1::pg_catalog.text[], $2::pg_catalog.interval, $3::pg_catalog.interval, $4)";
	else
		sql = "SELECT @extschema@.dlock_acquire($1, $2::pg_catalog.interval, $3::pg_catalog.interval, $4)";
	sql = DlockSql(sql);
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
				 * backend terminated during the call (57P01, 57P02) had
				 * taken it; its transaction is rolled back.
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
		release_quietly(link, opt, l);
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

/*
 * cmd_acquire is "dlock acquire": prints the token; with --all or --slots
 * one line "TOKEN NAME" per lease taken, in the order given.
 */
static int
cmd_acquire(const DlockOptions *opt)
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
		release_quietly(&link, opt, &leases);
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

static int
cmd_renew(const DlockOptions *opt)
{
	return bool_call(opt, "SELECT @extschema@.dlock_renew($1, $2::pg_catalog.int8, $3::pg_catalog.interval)",
					 3, "renew", "the lease may or may not have been renewed");
}

static int
cmd_release(const DlockOptions *opt)
{
	return bool_call(opt, "SELECT @extschema@.dlock_release($1, $2::pg_catalog.int8)",
					 2, "release", "the lease may or may not have been released (if not, it ends when its ttl runs out)");
}

/*
 * keep_std_fds_open makes sure that file descriptors 0, 1 and 2 are open,
 * so that no socket or pipe of dlock's becomes one of them: started with
 * stdout closed, dlock acquire wrote its token into the database
 * connection (and exited 0, the lease held by a token nobody knew).  A
 * closed one becomes /dev/null opened the wrong way round (stdin for
 * writing, stdout and stderr for reading), so that using it still fails
 * with EBADF, as if it were closed, in dlock and in CMD.
 */
static void
keep_std_fds_open(void)
{
	int			fd;

	for (fd = 0; fd <= 2; fd++)
	{
		int			nfd;

		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		/* the lower ones are open: open() returns fd */
		nfd = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
		if (nfd >= 0 && nfd != fd)
			close(nfd);
	}
}

int
main(int argc, char **argv)
{
	DlockOptions opt;
	const Command *cmd;

	keep_std_fds_open();
	memset(&opt, 0, sizeof(opt));
	opt.ttl_ms = DLOCK_DEFAULT_TTL_MS;
	opt.wait_ms = 0;
	opt.kill_after_ms = DLOCK_DEFAULT_KILL_AFTER_MS;
	opt.timeout_ms = -1;		/* not given: see parse_args */

	cmd = parse_args(argc, argv, &opt);
	DlockConnInit(&opt);
	return cmd->fn(&opt);
}
