/*-------------------------------------------------------------------------
 *
 * cli/leases.c
 *	  The leases that dlock run and dlock acquire take: one NAME, a set
 *	  (--all NAME...), or one permit of --slots N NAME; the array
 *	  parameters and results of the extension's functions for many names.
 *
 * A set is taken all or nothing (dlock_acquire_all), and renewed and
 * released with one statement each (dlock_renew_each, dlock_release_each,
 * in cli/run.c); its members keep the order given on the command line,
 * which is the order of DLOCK_NAMES and DLOCK_TOKENS and of dlock
 * acquire's output.  The permits of --slots N NAME are the names NAME:1
 * ... NAME:N (the semaphore of docs/sql-reference.md, "Semaphores: N
 * permits, each fenced"), which dlock_acquire_any tries in that order: a
 * run with --slots holds one lease, the permit it got.
 *
 * Arrays are passed as array literals in query parameters, never as SQL
 * text (design.md §9): every element double-quoted, with '"' and '\'
 * escaped, so that a name is read as itself whatever it contains.  The
 * arrays the functions return (int8[], bool[]) have unquoted elements.
 *
 * Concurrency: none; dlock is single-threaded (cli/dlock_cli.h).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock_cli.h"

/* The most names a message lists before "and N more". */
#define LIST_MAX	3

/*
 * DlockLeasesInit sets up *l for the names opt asks for: NAME, the names
 * of --all, or the permits of --slots N NAME.  Nothing is held yet.
 */
void
DlockLeasesInit(DlockLeases *l, const DlockOptions *opt)
{
	int			i;

	memset(l, 0, sizeof(*l));
	if (opt->slots > 0)
	{
		size_t		len = strlen(opt->name) + 16;

		l->nwant = opt->slots;
		l->want = DlockAlloc(sizeof(char *) * l->nwant);
		for (i = 0; i < l->nwant; i++)
		{
			l->want[i] = DlockAlloc(len);
			snprintf(l->want[i], len, "%s:%d", opt->name, i + 1);
		}
	}
	else
	{
		l->nwant = opt->nnames;
		l->want = DlockAlloc(sizeof(char *) * l->nwant);
		for (i = 0; i < l->nwant; i++)
			l->want[i] = DlockStrdup(opt->names[i]);
	}
	if (opt->all || opt->slots > 0)
		l->want_array = DlockTextArray(l->want, NULL, l->nwant);
	l->names = DlockAlloc(sizeof(char *) * l->nwant);
	l->tokens = DlockAlloc(sizeof(char *) * l->nwant);
}

/*
 * is_token reports whether text is a token: a positive decimal integer.
 */
static bool
is_token(const char *text)
{
	const char *p;

	if (*text == '\0' || *text == '0')
		return false;
	for (p = text; *p; p++)
		if (!isdigit((unsigned char) *p))
			return false;
	return p - text <= 19;
}

/*
 * DlockLeasesTake records in *l the leases that the answer res of a
 * successful acquire grants: dlock_acquire's token, dlock_acquire_all's
 * array of tokens (one per name, in the order given) or
 * dlock_acquire_any's row (lock_name, token).  The caller has checked
 * that res grants something (not NULL, a row).  Returns false when the
 * answer is not what the function returns.
 */
bool
DlockLeasesTake(DlockLeases *l, const DlockOptions *opt, const PGresult *res)
{
	int			i;

	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
		return false;
	if (opt->slots > 0)
	{
		const char *name = PQgetvalue(res, 0, 0);
		const char *token;

		if (PQnfields(res) != 2 || PQgetisnull(res, 0, 1))
			return false;
		token = PQgetvalue(res, 0, 1);
		for (i = 0; i < l->nwant; i++)
			if (strcmp(l->want[i], name) == 0)
				break;
		if (i == l->nwant || !is_token(token))
			return false;
		l->slot = i + 1;
		l->names[0] = l->want[i];
		l->tokens[0] = DlockStrdup(token);
		l->n = 1;
		return true;
	}
	if (opt->all)
	{
		char	  **tokens;
		int			n = DlockParseArray(PQgetvalue(res, 0, 0), &tokens);

		if (n != l->nwant)
			return false;
		for (i = 0; i < n; i++)
		{
			if (!is_token(tokens[i]))
				return false;
			l->names[i] = l->want[i];
			l->tokens[i] = tokens[i];
		}
		l->n = n;
		return true;
	}
	if (!is_token(PQgetvalue(res, 0, 0)))
		return false;
	l->names[0] = l->want[0];
	l->tokens[0] = DlockStrdup(PQgetvalue(res, 0, 0));
	l->n = 1;
	return true;
}

/*
 * append writes fmt's text at the end of the string in buf (of size len),
 * as far as it fits.
 */
static void append(char *buf, size_t len, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

static void
append(char *buf, size_t len, const char *fmt,...)
{
	size_t		used = strlen(buf);
	va_list		ap;

	if (used + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

/*
 * list writes the names (with their tokens, when tokens is not NULL) of
 * the n entries for which only is NULL or true: '"a" (token 5), "b"
 * (token 6) and 3 more'.
 */
static void
list(char *const *names, char *const *tokens, const bool *only, int n,
	 char *buf, size_t len)
{
	int			shown = 0,
				total = 0,
				i;

	buf[0] = '\0';
	for (i = 0; i < n; i++)
	{
		if (only && !only[i])
			continue;
		total++;
		if (shown == LIST_MAX)
			continue;
		append(buf, len, "%s\"%s\"", shown > 0 ? ", " : "", names[i]);
		if (tokens)
			append(buf, len, " (token %s)", tokens[i]);
		shown++;
	}
	if (total > shown)
		append(buf, len, " and %d more", total - shown);
}

/*
 * DlockLeasesWanted writes what opt asks for, for messages: '"a"', 'all
 * of "a", "b", "c" and 7 more' (--all), 'a permit of "gpu" ("gpu:1" ...
 * "gpu:4")' (--slots).
 */
void
DlockLeasesWanted(const DlockLeases *l, const DlockOptions *opt, char *buf,
				  size_t len)
{
	char		names[1024];

	if (opt->slots > 0)
	{
		snprintf(buf, len, "a permit of \"%s\" (\"%s\"", opt->name, l->want[0]);
		if (l->nwant > 1)
			append(buf, len, "%s\"%s\"", l->nwant > 2 ? " ... " : ", ",
				   l->want[l->nwant - 1]);
		append(buf, len, ")");
		return;
	}
	list(l->want, NULL, NULL, l->nwant, names, sizeof(names));
	snprintf(buf, len, "%s%s", opt->all ? "all of " : "", names);
}

/*
 * DlockLeasesList writes the leases held (only those for which only is
 * NULL or true) with their tokens: '"a" (token 5), "b" (token 6)'.
 */
void
DlockLeasesList(const DlockLeases *l, const bool *only, char *buf, size_t len)
{
	list(l->names, l->tokens, only, l->n, buf, len);
}

/*
 * DlockTextArray returns the elements of elems for which only is NULL or
 * true as a text[] literal, '{"a","b\"c"}' (DlockAlloc'd).
 */
char *
DlockTextArray(char *const *elems, const bool *only, int n)
{
	size_t		len = 3;
	char	   *out;
	char	   *w;
	int			i;
	bool		first = true;

	for (i = 0; i < n; i++)
		if (only == NULL || only[i])
			len += 2 * strlen(elems[i]) + 3;
	w = out = DlockAlloc(len);
	*w++ = '{';
	for (i = 0; i < n; i++)
	{
		const char *p;

		if (only && !only[i])
			continue;
		if (!first)
			*w++ = ',';
		first = false;
		*w++ = '"';
		for (p = elems[i]; *p; p++)
		{
			if (*p == '"' || *p == '\\')
				*w++ = '\\';
			*w++ = *p;
		}
		*w++ = '"';
	}
	*w++ = '}';
	*w = '\0';
	return out;
}

/*
 * DlockParseArray splits the text of a one-dimensional array whose
 * elements are never quoted (int8[], bool[]: '{5,6}', '{t,f}') into
 * *elems and returns their number, or -1 (and *elems NULL) when text is
 * not such an array (quotes, nesting, a dimension decoration).  *elems
 * and the elements are one allocation (DlockAlloc): free(*elems) frees
 * them all, which a renew every few seconds needs.
 */
int
DlockParseArray(const char *text, char ***elems)
{
	size_t		len = strlen(text);
	const char *q;
	char	   *copy;
	char	   *p;
	int			n = 1;
	int			i;

	*elems = NULL;
	if (len < 2 || text[0] != '{' || text[len - 1] != '}' ||
		strpbrk(text + 1, "{\"\\") != NULL)
		return -1;
	if (len == 2)
	{
		*elems = DlockAlloc(sizeof(char *));
		return 0;
	}
	for (q = text; *q; q++)
		if (*q == ',')
			n++;
	*elems = DlockAlloc(sizeof(char *) * n + len);
	copy = (char *) (*elems + n);
	memcpy(copy, text + 1, len - 2);
	copy[len - 2] = '\0';
	p = copy;
	for (i = 0; i < n; i++)
	{
		char	   *comma = strchr(p, ',');

		if (comma)
			*comma = '\0';
		(*elems)[i] = p;
		p = comma ? comma + 1 : p + strlen(p);
	}
	return n;
}

/*
 * join returns the n strings of elems joined with newlines (DlockAlloc'd).
 */
static char *
join(char *const *elems, int n)
{
	size_t		len = 1;
	char	   *out;
	int			i;

	for (i = 0; i < n; i++)
		len += strlen(elems[i]) + 1;
	out = DlockAlloc(len);
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			strcat(out, "\n");
		strcat(out, elems[i]);
	}
	return out;
}

/*
 * DlockLeasesSetEnv sets the environment CMD gets (docs/cli.md, "Sets and
 * permits"): DLOCK_NAMES and DLOCK_TOKENS, one lease per line in the order
 * given; DLOCK_NAME and DLOCK_TOKEN when one lease is held, DLOCK_SLOT
 * with --slots.  Those that do not apply are removed, so that CMD never
 * sees the ones of an outer dlock run.  Returns false (errno set) when
 * the environment cannot be changed.
 */
bool
DlockLeasesSetEnv(const DlockLeases *l)
{
	char		slot[16];

	if (setenv("DLOCK_NAMES", join(l->names, l->n), 1) != 0 ||
		setenv("DLOCK_TOKENS", join(l->tokens, l->n), 1) != 0)
		return false;
	if (l->n == 1)
	{
		if (setenv("DLOCK_NAME", l->names[0], 1) != 0 ||
			setenv("DLOCK_TOKEN", l->tokens[0], 1) != 0)
			return false;
	}
	else if (unsetenv("DLOCK_NAME") != 0 || unsetenv("DLOCK_TOKEN") != 0)
		return false;
	if (l->slot > 0)
	{
		snprintf(slot, sizeof(slot), "%d", l->slot);
		return setenv("DLOCK_SLOT", slot, 1) == 0;
	}
	return unsetenv("DLOCK_SLOT") == 0;
}
