/*-------------------------------------------------------------------------
 *
 * cli/dlock.c
 *	  The dlock command-line tool's main(): the command line (options,
 *	  which command takes which, their values checked), --help and
 *	  --version, and the dispatch to the command.
 *
 * The commands: "dlock run" is in cli/run.c, "dlock status" in
 * cli/status.c, acquire, renew and release in cli/oneshot.c.  The options
 * and exit statuses are a promise to scripts (design.md §9): --help here,
 * docs/cli.md and cli/dlock.1 change only together.  A usage error exits
 * 64 before anything connects.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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
	OPT_CONN | OPT_TTL | OPT_WAIT | OPT_OWNER | OPT_ALL | OPT_SLOTS, 1, 1, DlockCmdAcquire},
	{"renew",
		"dlock renew [--ttl DUR] [--timeout DUR] [-d CONNINFO] NAME TOKEN",
	OPT_CONN | OPT_TTL, 2, 2, DlockCmdRenew},
	{"release",
		"dlock release [--timeout DUR] [-d CONNINFO] NAME TOKEN",
	OPT_CONN, 2, 2, DlockCmdRelease},
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
static void usage_error(const Command *cmd, const char *fmt,...)
			__attribute__((format(printf, 2, 3), noreturn));

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
