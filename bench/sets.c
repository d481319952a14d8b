/*-------------------------------------------------------------------------
 *
 * bench/sets.c
 *	  Many names at once: the array functions against the single calls
 *	  they replace, and a hot set of overlapping names.
 *
 * Three measures, one per subcommand:
 *
 *   renew    One client holds --names leases (default 10000, taken with
 *            dlock_acquire_all in batches of 1000) and renews them all,
 *            alternately with --names single dlock_renew calls (each its
 *            own autocommit statement, a prepared statement, one round
 *            trip each: what a holder without the array function does)
 *            and with one dlock_renew_each call (the arrays' text built
 *            inside the timed part), for --rounds rounds, the order of
 *            the two sides swapped every round.
 *   acquire  One client takes --names names (default 100), alternately
 *            with one dlock_acquire_all call and with BEGIN, --names
 *            single dlock_acquire calls, COMMIT; after each, untimed,
 *            dlock_release_each gives them back.  --rounds rounds (each
 *            side once per round, the order swapped every round), after
 *            one uncounted round that creates the names' rows.
 *   hot      --workers processes (default 8), each with its own
 *            connection, each wanting --per names (default 3) of a pool
 *            of --pool names (default 6): worker w wants the names
 *            w, w+1, ... (mod pool), the odd workers listing them in the
 *            opposite order.  Each loops dlock_acquire_all(its names,
 *            '30 s', wait => --wait-s s) then dlock_release_each, for
 *            --seconds s from a common start.  Counts the cycles that
 *            ended before the deadline, the NULLs (a wait that ran out),
 *            the errors by SQLSTATE (40P01, deadlock, in particular) and
 *            the longest acquire.
 *
 * Every session runs with the synchronous_commit libpq's environment
 * gives it (PGOPTIONS); the clients print what the server says it is.
 * Output: "key value" lines (times in ms).  Any unexpected failure of the
 * renew and acquire measures (a false, a NULL, an error) ends the program
 * with status 1: such a run must not count.
 *
 * Usage: sets renew [--names N] [--rounds N]
 *        sets acquire [--names N] [--rounds N]
 *        sets hot [--workers N] [--pool N] [--per N] [--seconds N] [--wait-s N]
 *
 * Single-threaded; the hot measure forks one process per worker, which
 * report to the parent through a pipe.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* A growing string buffer. */
typedef struct Buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} Buf;

/* buf_add appends the formatted text to b. */
static void
buf_add(Buf *b, const char *fmt,...)
{
	va_list		ap;
	int			n;

	for (;;)
	{
		size_t		room = b->cap - b->len;

		va_start(ap, fmt);
		n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			bench_die("vsnprintf failed");
		if (b->data != NULL && (size_t) n < room)
		{
			b->len += n;
			return;
		}
		b->cap = (b->cap + n + 1) * 2;
		b->data = realloc(b->data, b->cap);
		if (b->data == NULL)
			bench_die("out of memory");
	}
}

/* array_literal fills b with the text array literal {v[0],v[1],...}. */
static void
array_literal(Buf *b, char **v, int n)
{
	int			i;

	b->len = 0;
	buf_add(b, "{");
	for (i = 0; i < n; i++)
		buf_add(b, i ? ",%s" : "%s", v[i]);
	buf_add(b, "}");
}

/*
 * split_array splits the text of a one-dimensional array of bigints or
 * booleans ("{1,2,3}", "{t,f}") in place into at most max elements;
 * returns how many there were.
 */
static int
split_array(char *s, char **out, int max)
{
	int			n = 0;
	char	   *p;

	if (s[0] != '{')
		bench_die("not an array: %.40s", s);
	p = s + 1;
	if (*p == '}')
		return 0;
	for (;;)
	{
		char	   *end = p + strcspn(p, ",}");
		char		c = *end;

		if (n == max)
			bench_die("more than %d elements in an array", max);
		*end = '\0';
		out[n++] = p;
		if (c != ',')
			return n;
		p = end + 1;
	}
}

/*
 * prepared runs the prepared statement stmt with nparams text parameters
 * and returns its result, which must be successful (the caller clears it).
 */
static PGresult *
prepared(PGconn *conn, const char *stmt, int nparams, const char *const *params)
{
	PGresult   *res = PQexecPrepared(conn, stmt, nparams, params, NULL, NULL, 0);

	bench_check_result(conn, res, stmt);
	return res;
}

/* prepare prepares sql as stmt on conn. */
static void
prepare(PGconn *conn, const char *stmt, const char *sql)
{
	PGresult   *res = PQprepare(conn, stmt, sql, 0, NULL);

	bench_check_result(conn, res, sql);
	PQclear(res);
}

/* names makes n lock names PREFIX00001 ... (zero-padded: byte order = i). */
static char **
make_names(const char *prefix, int n)
{
	char	  **v = calloc(n, sizeof(char *));
	int			i;

	if (v == NULL)
		bench_die("out of memory");
	for (i = 0; i < n; i++)
	{
		v[i] = malloc(strlen(prefix) + 16);
		if (v[i] == NULL)
			bench_die("out of memory");
		sprintf(v[i], "%s%05d", prefix, i + 1);
	}
	return v;
}

/*
 * acquire_all takes the n names with dlock_acquire_all (prepared as
 * "all") and stores their tokens (malloc'd strings) in tokens; dies when
 * the call returns NULL.  The array's text is built in b.
 */
static void
acquire_all(PGconn *conn, Buf *b, char **names, int n, char **tokens)
{
	const char *params[1];
	PGresult   *res;
	char	   *copy;
	char	  **parts = calloc(n, sizeof(char *));
	int			got,
				i;

	array_literal(b, names, n);
	params[0] = b->data;
	res = prepared(conn, "all", 1, params);
	if (PQgetisnull(res, 0, 0))
		bench_die("dlock_acquire_all returned NULL: a name of the set is held");
	copy = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	got = split_array(copy, parts, n);
	if (got != n)
		bench_die("dlock_acquire_all returned %d tokens for %d names", got, n);
	for (i = 0; i < n; i++)
		tokens[i] = strdup(parts[i]);
	free(copy);
	free(parts);
}

/*
 * release_each gives back the n leases (dlock_release_each, prepared as
 * "release_each"), frees the tokens, and dies unless every release
 * returned true.
 */
static void
release_each(PGconn *conn, Buf *names_buf, Buf *tokens_buf, char **names,
			 char **tokens, int n)
{
	const char *params[2];
	PGresult   *res;
	char	   *copy;
	char	  **parts = calloc(n, sizeof(char *));
	int			got,
				i;

	array_literal(names_buf, names, n);
	array_literal(tokens_buf, tokens, n);
	params[0] = names_buf->data;
	params[1] = tokens_buf->data;
	res = prepared(conn, "release_each", 2, params);
	copy = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	got = split_array(copy, parts, n);
	for (i = 0; i < got; i++)
		if (strcmp(parts[i], "t") != 0)
			bench_die("dlock_release_each returned false for %s", names[i]);
	if (got != n)
		bench_die("dlock_release_each returned %d results for %d names", got, n);
	for (i = 0; i < n; i++)
	{
		free(tokens[i]);
		tokens[i] = NULL;
	}
	free(copy);
	free(parts);
}

/* print_sync prints the session's synchronous_commit, as the server has it. */
static void
print_sync(PGconn *conn)
{
	char	   *v = bench_value(conn, "SHOW synchronous_commit");

	printf("synchronous_commit %s\n", v ? v : "?");
	free(v);
}

/* median returns the median of the n values in v (which it sorts). */
static double
median(double *v, int n)
{
	qsort(v, n, sizeof(double), bench_cmp_double);
	return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* minmax stores the smallest and largest of the n values in v. */
static void
minmax(const double *v, int n, double *lo, double *hi)
{
	int			i;

	*lo = *hi = v[0];
	for (i = 1; i < n; i++)
	{
		if (v[i] < *lo)
			*lo = v[i];
		if (v[i] > *hi)
			*hi = v[i];
	}
}

/*
 * print_sides prints the median, min and max of two sides' per-round
 * times (a_key, b_key, in ms), the ratio of the medians (b / a) and the
 * range of the per-round ratios.
 */
static void
print_sides(const char *a_key, double *a, const char *b_key, double *b, int rounds)
{
	double	   *ratio = calloc(rounds, sizeof(double));
	double		lo,
				hi,
				ma,
				mb;
	int			i;

	for (i = 0; i < rounds; i++)
		ratio[i] = b[i] / a[i];
	minmax(a, rounds, &lo, &hi);
	printf("%s_min %.3f\n%s_max %.3f\n", a_key, lo, a_key, hi);
	minmax(b, rounds, &lo, &hi);
	printf("%s_min %.3f\n%s_max %.3f\n", b_key, lo, b_key, hi);
	minmax(ratio, rounds, &lo, &hi);
	printf("ratio_min %.3f\nratio_max %.3f\n", lo, hi);
	ma = median(a, rounds);
	mb = median(b, rounds);
	printf("%s_ms %.3f\n%s_ms %.3f\nratio %.3f\n", a_key, ma, b_key, mb, mb / ma);
	free(ratio);
}

/* ---- renew ---------------------------------------------------------- */

static void
run_renew(int n, int rounds)
{
	PGconn	   *conn = bench_connect("bench-sets-renew");
	char	  **names = make_names("renew:", n);
	char	  **tokens = calloc(n, sizeof(char *));
	double	   *singles = calloc(rounds, sizeof(double));
	double	   *each = calloc(rounds, sizeof(double));
	Buf			nb = {0},
				tb = {0};
	int			batch = 1000,
				i,
				r;

	print_sync(conn);
	prepare(conn, "all", "SELECT dlock_acquire_all($1::text[], '1 hour')");
	prepare(conn, "renew", "SELECT dlock_renew($1, $2::bigint, '1 hour')");
	prepare(conn, "renew_each",
			"SELECT dlock_renew_each($1::text[], $2::bigint[], '1 hour')");
	prepare(conn, "release_each",
			"SELECT dlock_release_each($1::text[], $2::bigint[])");

	/* Hold them: new names take lock-table entries, so 1000 at a time. */
	for (i = 0; i < n; i += batch)
		acquire_all(conn, &nb, names + i, (n - i < batch) ? n - i : batch, tokens + i);

	for (r = 0; r < rounds; r++)
	{
		int			side;

		for (side = 0; side < 2; side++)
		{
			bool		do_each = (side == 0) == (r % 2 == 1);
			double		t0 = bench_now_us();

			if (do_each)
			{
				const char *params[2];
				PGresult   *res;
				char	  **parts = calloc(n, sizeof(char *));
				char	   *copy;
				int			got;

				array_literal(&nb, names, n);
				array_literal(&tb, tokens, n);
				params[0] = nb.data;
				params[1] = tb.data;
				res = prepared(conn, "renew_each", 2, params);
				copy = strdup(PQgetvalue(res, 0, 0));
				PQclear(res);
				got = split_array(copy, parts, n);
				each[r] = (bench_now_us() - t0) / 1e3;
				if (got != n)
					bench_die("dlock_renew_each returned %d results for %d names", got, n);
				for (i = 0; i < n; i++)
					if (strcmp(parts[i], "t") != 0)
						bench_die("dlock_renew_each returned false for %s", names[i]);
				free(copy);
				free(parts);
			}
			else
			{
				for (i = 0; i < n; i++)
				{
					const char *params[2] = {names[i], tokens[i]};
					PGresult   *res = prepared(conn, "renew", 2, params);

					if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
						bench_die("dlock_renew returned false for %s", names[i]);
					PQclear(res);
				}
				singles[r] = (bench_now_us() - t0) / 1e3;
			}
		}
	}
	release_each(conn, &nb, &tb, names, tokens, n);
	printf("names %d\nrounds %d\n", n, rounds);
	print_sides("singles", singles, "each", each, rounds);
	PQfinish(conn);
}

/* ---- acquire -------------------------------------------------------- */

static void
run_acquire(int n, int rounds)
{
	PGconn	   *conn = bench_connect("bench-sets-acquire");
	char	  **names = make_names("set:", n);
	char	  **tokens = calloc(n, sizeof(char *));
	double	   *singles = calloc(rounds, sizeof(double));
	double	   *all = calloc(rounds, sizeof(double));
	Buf			nb = {0},
				tb = {0};
	int			i,
				r;

	print_sync(conn);
	prepare(conn, "all", "SELECT dlock_acquire_all($1::text[], '30 s')");
	prepare(conn, "one", "SELECT dlock_acquire($1, '30 s')");
	prepare(conn, "release_each",
			"SELECT dlock_release_each($1::text[], $2::bigint[])");

	/* Round -1 is the uncounted warm-up (it creates the rows). */
	for (r = -1; r < rounds; r++)
	{
		int			side;

		for (side = 0; side < 2; side++)
		{
			bool		do_all = (side == 0) == (r % 2 != 0);
			double		t0 = bench_now_us(),
						t;

			if (do_all)
			{
				acquire_all(conn, &nb, names, n, tokens);
				t = (bench_now_us() - t0) / 1e3;
				if (r >= 0)
					all[r] = t;
			}
			else
			{
				bench_exec(conn, "BEGIN");
				for (i = 0; i < n; i++)
				{
					const char *params[1] = {names[i]};
					PGresult   *res = prepared(conn, "one", 1, params);

					if (PQgetisnull(res, 0, 0))
						bench_die("dlock_acquire returned NULL for %s", names[i]);
					tokens[i] = strdup(PQgetvalue(res, 0, 0));
					PQclear(res);
				}
				bench_exec(conn, "COMMIT");
				t = (bench_now_us() - t0) / 1e3;
				if (r >= 0)
					singles[r] = t;
			}
			release_each(conn, &nb, &tb, names, tokens, n);
		}
	}
	printf("names %d\nrounds %d\n", n, rounds);
	print_sides("singles", singles, "all", all, rounds);
	PQfinish(conn);
}

/* ---- hot ------------------------------------------------------------ */

/* What one worker reports to the parent. */
typedef struct HotResult
{
	long		cycles;			/* grant + release, ended before the deadline */
	long		late;			/* cycles that ended after it */
	long		nulls;			/* dlock_acquire_all returned NULL */
	long		deadlocks;		/* 40P01 */
	long		errors;			/* any other error */
	char		other_state[6]; /* the SQLSTATE of the last other error */
	double		max_acquire_ms; /* longest dlock_acquire_all */
} HotResult;

/*
 * hot_worker is worker w's loop; it writes its HotResult to fd.  It
 * connects and prepares first, says so on ready_fd, and starts when a
 * byte arrives on go_fd.
 */
static void
hot_worker(int w, int pool, int per, int seconds, int wait_s, int ready_fd,
		   int go_fd, int fd)
{
	char		appname[64];
	PGconn	   *conn;
	char	   *names[64];
	char	  **parts = calloc(per, sizeof(char *));
	Buf			nb = {0},
				tb = {0},
				sql = {0};
	HotResult	hr;
	double		deadline;
	char		c = 'r';
	int			k;

	memset(&hr, 0, sizeof(hr));
	snprintf(appname, sizeof(appname), "bench-sets-hot-%d", w);
	conn = bench_connect(appname);
	for (k = 0; k < per; k++)
	{
		int			idx = (w + k) % pool;

		names[(w % 2) ? per - 1 - k : k] = malloc(32);
		sprintf(names[(w % 2) ? per - 1 - k : k], "hot:%d", idx);
	}
	array_literal(&nb, names, per);
	buf_add(&sql, "SELECT dlock_acquire_all($1::text[], '30 s', wait => '%d s')", wait_s);
	prepare(conn, "all", sql.data);
	prepare(conn, "release_each",
			"SELECT dlock_release_each($1::text[], $2::bigint[])");
	if (write(ready_fd, &c, 1) != 1 || read(go_fd, &c, 1) != 1)
		bench_die("worker %d: the start pipe failed", w);
	deadline = bench_now_us() + seconds * 1e6;
	while (bench_now_us() < deadline)
	{
		const char *params[2] = {nb.data, NULL};
		double		t0 = bench_now_us(),
					ms;
		PGresult   *res = PQexecPrepared(conn, "all", 1, params, NULL, NULL, 0);
		char	   *copy;
		int			got;

		ms = (bench_now_us() - t0) / 1e3;
		if (ms > hr.max_acquire_ms)
			hr.max_acquire_ms = ms;
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

			if (state != NULL && strcmp(state, "40P01") == 0)
				hr.deadlocks++;
			else
			{
				hr.errors++;
				snprintf(hr.other_state, sizeof(hr.other_state), "%s", state ? state : "?????");
				if (PQstatus(conn) != CONNECTION_OK)
					bench_die("worker %d: connection lost: %s", w, PQerrorMessage(conn));
			}
			PQclear(res);
			continue;
		}
		if (PQgetisnull(res, 0, 0))
		{
			hr.nulls++;
			PQclear(res);
			continue;
		}
		copy = strdup(PQgetvalue(res, 0, 0));
		PQclear(res);
		got = split_array(copy, parts, per);
		if (got != per)
			bench_die("worker %d: dlock_acquire_all returned %d tokens for %d names", w, got, per);
		array_literal(&tb, parts, per);
		params[1] = tb.data;
		res = PQexecPrepared(conn, "release_each", 2, params, NULL, NULL, 0);
		free(copy);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

			if (state != NULL && strcmp(state, "40P01") == 0)
				hr.deadlocks++;
			else
			{
				hr.errors++;
				snprintf(hr.other_state, sizeof(hr.other_state), "%s", state ? state : "?????");
				if (PQstatus(conn) != CONNECTION_OK)
					bench_die("worker %d: connection lost: %s", w, PQerrorMessage(conn));
			}
		}
		else if (strchr(PQgetvalue(res, 0, 0), 'f') != NULL)
			bench_die("worker %d: dlock_release_each returned %s", w, PQgetvalue(res, 0, 0));
		else if (bench_now_us() < deadline)
			hr.cycles++;
		else
			hr.late++;
		PQclear(res);
	}
	PQfinish(conn);
	if (write(fd, &hr, sizeof(hr)) != sizeof(hr))
		bench_die("worker %d: cannot report", w);
}

static void
run_hot(int workers, int pool, int per, int seconds, int wait_s)
{
	int			ready[2],
				go[2],
				out[2];
	HotResult	sum;
	long		min_cycles = -1,
				max_cycles = 0;
	double		started;
	int			w;
	char		c;

	if (per < 1 || per > 64 || per > pool || workers < 1)
		bench_die("need 1 <= --per <= min(--pool, 64) and --workers >= 1");
	if (pipe(ready) != 0 || pipe(go) != 0 || pipe(out) != 0)
		bench_die("pipe: %s", strerror(errno));
	{
		PGconn	   *conn = bench_connect("bench-sets-hot");

		print_sync(conn);
		PQfinish(conn);
	}
	fflush(stdout);
	for (w = 0; w < workers; w++)
	{
		pid_t		pid = fork();

		if (pid < 0)
			bench_die("fork: %s", strerror(errno));
		if (pid == 0)
		{
			close(ready[0]);
			close(go[1]);
			close(out[0]);
			hot_worker(w, pool, per, seconds, wait_s, ready[1], go[0], out[1]);
			_exit(0);
		}
	}
	close(ready[1]);
	close(go[0]);
	close(out[1]);
	for (w = 0; w < workers; w++)
		if (read(ready[0], &c, 1) != 1)
			bench_die("a worker did not start");
	started = bench_now_us();
	for (w = 0; w < workers; w++)
		if (write(go[1], "g", 1) != 1)
			bench_die("cannot start the workers");
	memset(&sum, 0, sizeof(sum));
	for (w = 0; w < workers; w++)
	{
		HotResult	hr;

		if (read(out[0], &hr, sizeof(hr)) != sizeof(hr))
			bench_die("a worker did not report (see its message above)");
		sum.cycles += hr.cycles;
		sum.late += hr.late;
		sum.nulls += hr.nulls;
		sum.deadlocks += hr.deadlocks;
		sum.errors += hr.errors;
		if (hr.errors)
			memcpy(sum.other_state, hr.other_state, sizeof(sum.other_state));
		if (hr.max_acquire_ms > sum.max_acquire_ms)
			sum.max_acquire_ms = hr.max_acquire_ms;
		if (min_cycles < 0 || hr.cycles < min_cycles)
			min_cycles = hr.cycles;
		if (hr.cycles > max_cycles)
			max_cycles = hr.cycles;
	}
	for (w = 0; w < workers; w++)
	{
		int			status;

		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			bench_die("a worker failed");
	}
	printf("workers %d\npool %d\nper %d\nseconds %d\nwait_s %d\n",
		   workers, pool, per, seconds, wait_s);
	printf("cycles %ld\ncycles_per_s %.1f\nlate %ld\n", sum.cycles,
		   sum.cycles / (double) seconds, sum.late);
	printf("worker_cycles_min %ld\nworker_cycles_max %ld\n", min_cycles, max_cycles);
	printf("nulls %ld\ndeadlocks %ld\nerrors %ld\nerror_state %s\n",
		   sum.nulls, sum.deadlocks, sum.errors,
		   sum.errors ? sum.other_state : "-");
	printf("max_acquire_ms %.1f\nwall_ms %.0f\n", sum.max_acquire_ms,
		   (bench_now_us() - started) / 1e3);
}

int
main(int argc, char **argv)
{
	int			names = -1,
				rounds = 5,
				workers = 8,
				pool = 6,
				per = 3,
				seconds = 5,
				wait_s = 10;
	int			i;

	bench_prog = "sets";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		bench_die("usage: sets renew|acquire|hot [OPTION...]");
	for (i = 2; i < argc; i++)
	{
		if (i + 1 >= argc)
			bench_die("option %s needs a value", argv[i]);
		if (strcmp(argv[i], "--names") == 0)
			names = bench_arg_int(argv[i], argv[i + 1]);
		else if (strcmp(argv[i], "--rounds") == 0)
			rounds = bench_arg_int(argv[i], argv[i + 1]);
		else if (strcmp(argv[i], "--workers") == 0)
			workers = bench_arg_int(argv[i], argv[i + 1]);
		else if (strcmp(argv[i], "--pool") == 0)
			pool = bench_arg_int(argv[i], argv[i + 1]);
		else if (strcmp(argv[i], "--per") == 0)
			per = bench_arg_int(argv[i], argv[i + 1]);
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = bench_arg_int(argv[i], argv[i + 1]);
		else if (strcmp(argv[i], "--wait-s") == 0)
			wait_s = bench_arg_int(argv[i], argv[i + 1]);
		else
			bench_die("unknown option %s", argv[i]);
		i++;
	}
	if (rounds < 1 || seconds < 1 || (names == 0))
		bench_die("--rounds, --seconds and --names need at least 1");
	signal(SIGPIPE, SIG_IGN);
	if (strcmp(argv[1], "renew") == 0)
		run_renew(names < 0 ? 10000 : names, rounds);
	else if (strcmp(argv[1], "acquire") == 0)
		run_acquire(names < 0 ? 100 : names, rounds);
	else if (strcmp(argv[1], "hot") == 0)
		run_hot(workers, pool, per, seconds, wait_s);
	else
		bench_die("unknown measure %s (renew, acquire or hot)", argv[1]);
	return 0;
}
