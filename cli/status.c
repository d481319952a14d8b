/*-------------------------------------------------------------------------
 *
 * cli/status.c
 *	  "dlock status": the leases (the view dlock_leases), with --waiters
 *	  the sessions waiting for leases (dlock_waiters), with --stats the
 *	  current database's counters (dlock_stats); each printed as a table
 *	  with aligned columns or, with --json, as JSON.
 *
 * Each is one query on one connection, made by the rules of the one-shot
 * commands (cli/oneshot.c: --timeout, signals, exit statuses).  Durations
 * (how long a lease has left, how long a waiter has waited and may still
 * wait) are computed by the server against its clock_timestamp(), so the
 * client's clock plays no part; JSON carries them as milliseconds, next to
 * the timestamps in ISO 8601 as to_json() writes them.  JSON strings are
 * written by json_string() below: quotes, backslashes and control
 * characters escaped, and valid UTF-8.  For that the connection asks for
 * client encoding UTF8 (cli/conn.c), except from a SQL_ASCII database,
 * whose text the server would refuse to send as UTF8 when it is not:
 * there the client encoding is SQL_ASCII, the bytes come as they are, and
 * a byte that is not UTF-8 becomes U+FFFD.  Tables show control characters
 * escaped, so that a row is one line.
 *
 * Concurrency: none; one thread, one connection.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock_cli.h"

/*
 * Type OIDs of result columns (the server's catalog/pg_type_d.h, which a
 * client program does not include): the ones written as JSON numbers or
 * booleans.
 */
#define TYPE_BOOL	16
#define TYPE_INT8	20
#define TYPE_INT2	21
#define TYPE_INT4	23
#define TYPE_OID	26

/* How a value is written in JSON. */
typedef enum JsonKind
{
	JSON_STRING,				/* escaped, in double quotes */
	JSON_LITERAL,				/* as it is: a number, true or false */
	JSON_BOOL					/* PostgreSQL's t or f: true or false */
} JsonKind;

/* A table of text cells, printed with aligned columns. */
typedef struct StatusTable
{
	int			ncols;
	const char *const *headers;
	unsigned	right;			/* bit c set: column c is right-aligned */
	int			nrows;
	char	  **cells;			/* row r, column c at r * ncols + c */
} StatusTable;

/* A timestamptz column as ISO 8601 text ("infinity" as it is). */
#define ISO(col) "pg_catalog.to_json(" col ") OPERATOR(pg_catalog.#>>) '{}' AS " col

/* Milliseconds from a to b, on the server's clock. */
#define MS(a, b) \
	"(pg_catalog.date_part('epoch', " b " OPERATOR(pg_catalog.-) " a ")" \
	" OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8"

/*
 * The leases: every column of dlock_leases, and expires_in_ms (negative
 * for a lease that ended).  The columns the table shows are numbered
 * below.
 */
static const char leases_sql[] =
"SELECT lock_name, token, owner, holder_role, " ISO("acquired_at") ", "
ISO("renewed_at") ", " ISO("expires_at") ", released, live, "
MS("pg_catalog.clock_timestamp()", "expires_at") " AS expires_in_ms"
" FROM @extschema@.dlock_leases"
" WHERE $1::pg_catalog.text IS NULL OR lock_name OPERATOR(pg_catalog.=) $1"
" ORDER BY lock_name";

#define LEASE_NAME		0
#define LEASE_TOKEN		1
#define LEASE_OWNER		2
#define LEASE_ROLE		3
#define LEASE_RELEASED	7
#define LEASE_LIVE		8
#define LEASE_LEFT_MS	9

/*
 * The waiters of the current database: every column of dlock_waiters,
 * waiting_ms, and wait_left_ms (NULL when it waits forever), with the
 * view's attempts last (the table leaves it out; --json shows it), in the
 * view's order: by name (byte by byte), then place in the queue
 * (position is NULL for kind 'any', which is not FIFO: last).
 */
static const char waiters_sql[] =
"SELECT w.pid, w.database, w.role, w.lock_name, w.kind, w.names, "
ISO("waiting_since") ", " ISO("wait_until") ", w.position, "
MS("w.waiting_since", "pg_catalog.clock_timestamp()") " AS waiting_ms,"
" CASE WHEN pg_catalog.isfinite(w.wait_until) THEN "
MS("pg_catalog.clock_timestamp()", "w.wait_until") " END AS wait_left_ms,"
" w.attempts"
" FROM @extschema@.dlock_waiters w"
" WHERE $1::pg_catalog.text IS NULL OR w.lock_name OPERATOR(pg_catalog.=) $1"
" ORDER BY w.lock_name COLLATE pg_catalog.\"C\", w.position NULLS LAST, w.waiting_since, w.pid";

#define WAITER_PID		0
#define WAITER_ROLE		2
#define WAITER_NAME		3
#define WAITER_KIND		4
#define WAITER_POSITION 8
#define WAITER_WAITING	9
#define WAITER_LEFT		10

/*
 * The current database's row of dlock_stats, one row per column, in the
 * view's order: the column's name, its value as text (timestamps in ISO
 * 8601, through to_json()), and its type (from the view's row type), so
 * that every column, also one added later, is shown and typed without
 * dlock knowing it.  No rows when the view has none for this database.
 */
static const char stats_sql[] =
"SELECT a.attname, j.value OPERATOR(pg_catalog.#>>) '{}', a.atttypid"
" FROM @extschema@.dlock_stats s"
" CROSS JOIN pg_catalog.json_each(pg_catalog.to_json(s)) j"
" JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) pg_catalog.pg_typeof(s)"
" JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) t.typrelid"
" AND a.attname OPERATOR(pg_catalog.=) j.key"
" WHERE s.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d"
" WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())"
" ORDER BY a.attnum";

/*
 * Why dlock_stats has no row for the current database: whether dlock is in
 * shared_preload_libraries (NULL when the role may not read that
 * setting: superusers and members of pg_read_all_settings may), and
 * dlock.track_stats (the library is loaded by then).
 */
static const char no_stats_sql[] =
"SELECT (SELECT 'dlock' OPERATOR(pg_catalog.=) ANY ("
"SELECT pg_catalog.regexp_replace(pg_catalog.btrim(l, ' \"'), '^.*/|\\.so$', '', 'g')"
" FROM pg_catalog.regexp_split_to_table(s.setting, ',') l)"
" FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'shared_preload_libraries'),"
" pg_catalog.current_setting('dlock.track_stats', true)";

/*
 * display_text returns text with control characters escaped (\n, \t,
 * \xNN), so that one row is one line of the table (malloc'd).
 */
static char *
display_text(const char *text)
{
	char	   *out = DlockAlloc(strlen(text) * 4 + 1);
	char	   *w = out;

	for (; *text; text++)
	{
		unsigned char c = (unsigned char) *text;

		if (c == '\n')
			w += sprintf(w, "\\n");
		else if (c == '\t')
			w += sprintf(w, "\\t");
		else if (c < 0x20 || c == 0x7f)
			w += sprintf(w, "\\x%02x", c);
		else
			*w++ = (char) c;
	}
	*w = '\0';
	return out;
}

/*
 * display_width returns the number of characters of UTF-8 text (each
 * counted as one column).
 */
static int
display_width(const char *text)
{
	int			n = 0;

	for (; *text; text++)
		if (((unsigned char) *text & 0xC0) != 0x80)
			n++;
	return n;
}

/*
 * table_init sets up t for nrows rows of ncols columns under headers;
 * bit c of right makes column c right-aligned (numbers).
 */
static void
table_init(StatusTable *t, int ncols, const char *const *headers,
		   unsigned right, int nrows)
{
	t->ncols = ncols;
	t->headers = headers;
	t->right = right;
	t->nrows = nrows;
	t->cells = DlockAlloc(sizeof(char *) * ((size_t) nrows * ncols + 1));
}

/*
 * table_set puts text, its control characters escaped, into the cell at
 * row, col of t.
 */
static void
table_set(StatusTable *t, int row, int col, const char *text)
{
	t->cells[row * t->ncols + col] = display_text(text);
}

/*
 * table_print prints t: the headers, then one line per row, columns
 * separated by two spaces and padded to the widest cell (the last one
 * not padded).
 */
static void
table_print(const StatusTable *t)
{
	int		   *width = DlockAlloc(sizeof(int) * t->ncols);
	int			row,
				col;

	for (col = 0; col < t->ncols; col++)
	{
		width[col] = display_width(t->headers[col]);
		for (row = 0; row < t->nrows; row++)
			if (display_width(t->cells[row * t->ncols + col]) > width[col])
				width[col] = display_width(t->cells[row * t->ncols + col]);
	}
	for (row = -1; row < t->nrows; row++)
	{
		for (col = 0; col < t->ncols; col++)
		{
			const char *cell = row < 0 ? t->headers[col] : t->cells[row * t->ncols + col];
			int			pad = width[col] - display_width(cell);

			if (t->right & (1u << col))
				printf("%*s%s", pad, "", cell);
			else if (col == t->ncols - 1)
				printf("%s", cell);
			else
				printf("%s%*s", cell, pad, "");
			if (col < t->ncols - 1)
				fputs("  ", stdout);
		}
		putchar('\n');
	}
	free(width);
}

/*
 * utf8_length returns the length of the valid UTF-8 sequence that starts
 * at p (1 for ASCII, 2 to 4), or 0 when p does not start one: a stray
 * continuation byte, a sequence cut short, an overlong encoding, a
 * surrogate, or a code point above U+10FFFF.
 */
static int
utf8_length(const unsigned char *p)
{
	unsigned	c = p[0];
	unsigned	cp;
	int			len;
	int			i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
	{
		len = 2;
		cp = c & 0x1F;
	}
	else if (c >= 0xE0 && c <= 0xEF)
	{
		len = 3;
		cp = c & 0x0F;
	}
	else if (c >= 0xF0 && c <= 0xF4)
	{
		len = 4;
		cp = c & 0x07;
	}
	else
		return 0;
	for (i = 1; i < len; i++)
	{
		/* a NUL ends the text: it is no continuation byte either */
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

/*
 * json_string writes text as a JSON string (RFC 8259): in double quotes,
 * with '"' and '\' escaped, the control characters as \b, \f, \n, \r, \t
 * or \u00XX (and DEL as \u007f), other UTF-8 as it is, and each byte that
 * does not start a valid UTF-8 sequence as \ufffd, so that the output is
 * valid UTF-8 whatever the database holds.
 */
static void
json_string(const char *text)
{
	const unsigned char *p = (const unsigned char *) text;

	putchar('"');
	while (*p)
	{
		int			len = utf8_length(p);

		if (len == 0)
			fputs("\\ufffd", stdout);
		else if (len > 1)
			fwrite(p, 1, len, stdout);
		else if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p == '\b')
			fputs("\\b", stdout);
		else if (*p == '\f')
			fputs("\\f", stdout);
		else if (*p == '\n')
			fputs("\\n", stdout);
		else if (*p == '\r')
			fputs("\\r", stdout);
		else if (*p == '\t')
			fputs("\\t", stdout);
		else if (*p < 0x20 || *p == 0x7f)
			printf("\\u%04x", *p);
		else
			putchar(*p);
		p += len > 0 ? len : 1;
	}
	putchar('"');
}

/*
 * json_member writes "key": value, value being text of the given kind, or
 * null.
 */
static void
json_member(const char *key, const char *text, bool isnull, JsonKind kind)
{
	json_string(key);
	fputs(": ", stdout);
	if (isnull)
		fputs("null", stdout);
	else if (kind == JSON_STRING)
		json_string(text);
	else if (kind == JSON_BOOL)
		fputs(strcmp(text, "t") == 0 ? "true" : "false", stdout);
	else
		fputs(text, stdout);
}

/*
 * json_kind returns how a result column of the given type is written:
 * integers as numbers, booleans as true or false, anything else as a
 * string.
 */
static JsonKind
json_kind(Oid type)
{
	switch (type)
	{
		case TYPE_INT2:
		case TYPE_INT4:
		case TYPE_INT8:
		case TYPE_OID:
			return JSON_LITERAL;
		case TYPE_BOOL:
			return JSON_BOOL;
		default:
			return JSON_STRING;
	}
}

/*
 * json_rows writes the rows of res as a JSON array, one object per row
 * and one row per line, with the first ncols columns as members named as
 * the columns are.
 */
static void
json_rows(const PGresult *res, int ncols)
{
	int			row,
				col;

	if (PQntuples(res) == 0)
	{
		fputs("[]\n", stdout);
		return;
	}
	fputs("[\n", stdout);
	for (row = 0; row < PQntuples(res); row++)
	{
		putchar('{');
		for (col = 0; col < ncols; col++)
		{
			if (col > 0)
				fputs(", ", stdout);
			json_member(PQfname(res, col), PQgetvalue(res, row, col),
						PQgetisnull(res, row, col), json_kind(PQftype(res, col)));
		}
		fputs(row < PQntuples(res) - 1 ? "},\n" : "}\n", stdout);
	}
	fputs("]\n", stdout);
}

/*
 * status_call runs sql on link, with NAME (NULL without one) as $1 when
 * nparams is 1.  Returns 0 with the rows in *res, or reports the failure
 * ("could not read " what) and returns the exit status (69, 70,
 * 128+signal).
 */
static int
status_call(DlockLink *link, const DlockOptions *opt, const char *sql,
			int nparams, const char *what, PGresult **res)
{
	const char *values[1] = {opt->name};
	char		msg[200];
	int			signo;
	int			rc = DLOCK_EXIT_OK;

	*res = DlockLinkExec(link, sql, nparams, values, opt->timeout_ms, &signo);
	snprintf(msg, sizeof(msg), "while reading %s", what);
	if (DlockInterrupted(link, *res, signo, msg))
		rc = 128 + signo;
	else
	{
		snprintf(msg, sizeof(msg), "could not read %s", what);
		if (*res == NULL)
			rc = DlockCallFailed(link, NULL, msg, NULL);
		else if (PQresultStatus(*res) != PGRES_TUPLES_OK)
			rc = DlockCallFailed(link, *res, msg, NULL);
	}
	if (rc != DLOCK_EXIT_OK)
	{
		PQclear(*res);
		*res = NULL;
	}
	return rc;
}

/*
 * status_query connects link and runs sql on it (see status_call),
 * returning 0 with the rows in *res or the exit status.  The caller
 * closes link.  For --json from a SQL_ASCII database it first sets the
 * client encoding to SQL_ASCII (see the header).
 */
static int
status_query(DlockLink *link, const DlockOptions *opt, const char *sql,
			 int nparams, const char *what, PGresult **res)
{
	const char *encoding;
	int			rc = DLOCK_EXIT_OK;

	DlockConnectOrExit(link, false);
	encoding = PQparameterStatus(link->conn, "server_encoding");
	if (opt->json && encoding && strcmp(encoding, "SQL_ASCII") == 0)
	{
		rc = status_call(link, opt,
						 "SELECT pg_catalog.set_config('client_encoding', 'SQL_ASCII', false)",
						 0, what, res);
		PQclear(*res);
	}
	if (rc == DLOCK_EXIT_OK)
		rc = status_call(link, opt, DlockSql(sql), nparams, what, res);
	return rc;
}

/*
 * written returns rc once everything printed has reached stdout, or
 * reports why it could not and returns 70.
 */
static int
written(int rc)
{
	if (fflush(stdout) != 0 || ferror(stdout))
	{
		DlockError("could not write the output: %s", strerror(errno));
		return DLOCK_EXIT_ERROR;
	}
	return rc;
}

/*
 * status_leases is "dlock status [NAME]": one line per lease (or NAME's),
 * or with --json an array of lease objects.  Exits 1 when NAME has no
 * live lease.
 */
static int
status_leases(const DlockOptions *opt)
{
	static const char *const headers[] =
	{"NAME", "TOKEN", "HOLDER", "ROLE", "EXPIRES IN", "LIVE"};
	DlockLink	link;
	StatusTable t;
	PGresult   *res;
	bool		any_live = false;
	int			row;
	int			rc;

	rc = status_query(&link, opt, leases_sql, 1, "the leases", &res);
	DlockLinkClose(&link);
	if (rc != DLOCK_EXIT_OK)
		return rc;
	for (row = 0; row < PQntuples(res); row++)
		any_live |= strcmp(PQgetvalue(res, row, LEASE_LIVE), "t") == 0;
	if (opt->json)
		json_rows(res, PQnfields(res));
	else
	{
		table_init(&t, 6, headers, 1u << 1, PQntuples(res));
		for (row = 0; row < PQntuples(res); row++)
		{
			char		when[64];
			char		dur[32];
			int64_t		left = strtoll(PQgetvalue(res, row, LEASE_LEFT_MS), NULL, 10);
			bool		released = strcmp(PQgetvalue(res, row, LEASE_RELEASED), "t") == 0;
			bool		live = strcmp(PQgetvalue(res, row, LEASE_LIVE), "t") == 0;

			if (live)
				DlockFormatDuration(left, when, sizeof(when));
			else
			{
				DlockFormatDuration(-left, dur, sizeof(dur));
				snprintf(when, sizeof(when), "%s %s ago",
						 released ? "released" : "expired", dur);
			}
			table_set(&t, row, 0, PQgetvalue(res, row, LEASE_NAME));
			table_set(&t, row, 1, PQgetvalue(res, row, LEASE_TOKEN));
			table_set(&t, row, 2, PQgetisnull(res, row, LEASE_OWNER) ? "" :
					  PQgetvalue(res, row, LEASE_OWNER));
			table_set(&t, row, 3, PQgetisnull(res, row, LEASE_ROLE) ? "?" :
					  PQgetvalue(res, row, LEASE_ROLE));
			table_set(&t, row, 4, when);
			table_set(&t, row, 5, live ? "yes" : "no");
		}
		table_print(&t);
	}
	PQclear(res);
	return written(opt->name && !any_live ? DLOCK_EXIT_NO : DLOCK_EXIT_OK);
}

/*
 * status_waiters is "dlock status --waiters [NAME]": one line per session
 * waiting for a lease (or for NAME) in this database, in queue order, or
 * with --json an array of waiter objects.  Exits 0 also when nobody
 * waits.
 */
static int
status_waiters(const DlockOptions *opt)
{
	static const char *const headers[] =
	{"PID", "NAME", "KIND", "POSITION", "WAITING", "WAIT LEFT", "ROLE"};
	DlockLink	link;
	StatusTable t;
	PGresult   *res;
	int			row;
	int			rc;

	dlock_needs_1_2 = "--waiters and --stats";
	rc = status_query(&link, opt, waiters_sql, 1, "the waiters", &res);
	DlockLinkClose(&link);
	if (rc != DLOCK_EXIT_OK)
		return rc;
	if (opt->json)
		json_rows(res, PQnfields(res));
	else
	{
		table_init(&t, 7, headers, (1u << 0) | (1u << 3), PQntuples(res));
		for (row = 0; row < PQntuples(res); row++)
		{
			char		waiting[32];
			char		left[32];

			DlockFormatDuration(strtoll(PQgetvalue(res, row, WAITER_WAITING), NULL, 10),
								waiting, sizeof(waiting));
			if (PQgetisnull(res, row, WAITER_LEFT))
				snprintf(left, sizeof(left), "forever");
			else
				DlockFormatDuration(strtoll(PQgetvalue(res, row, WAITER_LEFT), NULL, 10),
									left, sizeof(left));
			table_set(&t, row, 0, PQgetvalue(res, row, WAITER_PID));
			table_set(&t, row, 1, PQgetvalue(res, row, WAITER_NAME));
			table_set(&t, row, 2, PQgetvalue(res, row, WAITER_KIND));
			table_set(&t, row, 3, PQgetisnull(res, row, WAITER_POSITION) ? "-" :
					  PQgetvalue(res, row, WAITER_POSITION));
			table_set(&t, row, 4, waiting);
			table_set(&t, row, 5, left);
			table_set(&t, row, 6, PQgetisnull(res, row, WAITER_ROLE) ? "?" :
					  PQgetvalue(res, row, WAITER_ROLE));
		}
		table_print(&t);
	}
	PQclear(res);
	return written(DLOCK_EXIT_OK);
}

/*
 * no_stats says why dlock_stats has no row for this database, as far as
 * the second query on link (no_stats_sql) can tell.
 */
static void
no_stats(DlockLink *link, const DlockOptions *opt)
{
	PGresult   *res;
	int			signo;

	res = DlockLinkExec(link, no_stats_sql, 0, NULL, opt->timeout_ms, &signo);
	if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		!PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), "f") == 0)
		DlockError("no statistics for this database: dlock is not in shared_preload_libraries, and dlock_stats counts only with it");
	else if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
			 !PQgetisnull(res, 0, 1) && strcmp(PQgetvalue(res, 0, 1), "off") == 0)
		DlockError("no statistics for this database: dlock.track_stats is off");
	else if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
			 !PQgetisnull(res, 0, 0))
		DlockError("no statistics for this database yet: nothing in it has used dlock since the server started");
	else
		DlockError("no statistics for this database: dlock_stats has a row for a database only when dlock is in shared_preload_libraries and the database has used dlock since the server started");
	PQclear(res);
}

/*
 * status_stats is "dlock status --stats": the current database's row of
 * dlock_stats, as a table of two columns (COUNTER, VALUE: one line per
 * column of the view) or with --json one object with every column.  When
 * the view has no row for this database (dlock is not in
 * shared_preload_libraries, or nothing in this database has used dlock
 * since the server started), it prints nothing, says why (no_stats) and
 * exits 1.
 */
static int
status_stats(const DlockOptions *opt)
{
	static const char *const headers[] = {"COUNTER", "VALUE"};
	DlockLink	link;
	StatusTable t;
	PGresult   *res;
	int			row;
	int			rc;

	dlock_needs_1_2 = "--waiters and --stats";
	rc = status_query(&link, opt, stats_sql, 0, "the statistics", &res);
	if (rc == DLOCK_EXIT_OK && PQntuples(res) == 0)
	{
		no_stats(&link, opt);
		rc = DLOCK_EXIT_NO;
	}
	DlockLinkClose(&link);
	if (rc != DLOCK_EXIT_OK)
	{
		PQclear(res);
		return rc;
	}
	if (opt->json)
	{
		putchar('{');
		for (row = 0; row < PQntuples(res); row++)
		{
			Oid			type = (Oid) strtoul(PQgetvalue(res, row, 2), NULL, 10);

			if (row > 0)
				fputs(", ", stdout);
			/* a boolean comes through to_json() as true or false */
			json_member(PQgetvalue(res, row, 0), PQgetvalue(res, row, 1),
						PQgetisnull(res, row, 1),
						type == TYPE_BOOL ? JSON_LITERAL : json_kind(type));
		}
		fputs("}\n", stdout);
	}
	else
	{
		table_init(&t, 2, headers, 0, PQntuples(res));
		for (row = 0; row < PQntuples(res); row++)
		{
			table_set(&t, row, 0, PQgetvalue(res, row, 0));
			table_set(&t, row, 1, PQgetisnull(res, row, 1) ? "" : PQgetvalue(res, row, 1));
		}
		table_print(&t);
	}
	PQclear(res);
	return written(DLOCK_EXIT_OK);
}

/*
 * DlockStatus is "dlock status": the leases, or with --waiters the
 * waiting sessions, or with --stats the counters (see the header).
 */
int
DlockStatus(const DlockOptions *opt)
{
	if (opt->waiters)
		return status_waiters(opt);
	if (opt->stats)
		return status_stats(opt);
	return status_leases(opt);
}
