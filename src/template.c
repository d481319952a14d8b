/*-------------------------------------------------------------------------
 *
 * src/template.c
 *	  Lock name templates, the first argument of dlock_fence: split into
 *	  literal text and column references, and matched against a lock name.
 *
 * A template is text in which {col} stands for the text of a row's column
 * col, and {{ and }} for literal braces; a template without {...} names
 * one lock.  fence.c splits a trigger's template here and resolves its
 * columns against the table; mark.c asks whether a lock name could be one
 * that a template makes (any text can stand where a column is), to find
 * the tables a lock fences in mode 'seen'.
 *
 * Concurrency: none; pure functions on backend-local memory.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "dlock.h"

/*
 * DlockTemplateSplit splits template into *nparts parts, allocated in the
 * current memory context: literal text (with {{ and }} made single braces)
 * and column names, in order, never two literals in a row.  Returns
 * DLOCK_TEMPLATE_OK, or what is wrong with it and, in *errpos, the
 * position (counted from 1) of the offending brace; the caller reports it.
 */
DlockTemplateError
DlockTemplateSplit(const char *template, DlockTemplatePart **parts,
				   int *nparts, int *errpos)
{
	int			len = strlen(template);
	StringInfoData lit;
	DlockTemplatePart *out;
	int			n = 0;
	int			i = 0;

	/* at most one part per character, plus one */
	out = palloc0(sizeof(DlockTemplatePart) * (len + 1));
	initStringInfo(&lit);
	*errpos = 0;
	while (i < len)
	{
		char		c = template[i];

		if ((c == '{' || c == '}') && i + 1 < len && template[i + 1] == c)
		{
			appendStringInfoChar(&lit, c);
			i += 2;
		}
		else if (c == '{')
		{
			const char *close = strchr(template + i + 1, '}');

			*errpos = i + 1;
			if (close == NULL)
				return DLOCK_TEMPLATE_UNCLOSED;
			if (close == template + i + 1)
				return DLOCK_TEMPLATE_EMPTY_COLUMN;
			if (lit.len > 0)
			{
				out[n++].literal = pstrdup(lit.data);
				resetStringInfo(&lit);
			}
			out[n++].column = pnstrdup(template + i + 1,
									   close - (template + i + 1));
			i = close - template + 1;
		}
		else if (c == '}')
		{
			*errpos = i + 1;
			return DLOCK_TEMPLATE_STRAY_CLOSE;
		}
		else
		{
			appendStringInfoChar(&lit, c);
			i++;
		}
	}
	if (lit.len > 0)
		out[n++].literal = pstrdup(lit.data);
	if (n == 0)
		return DLOCK_TEMPLATE_EMPTY;
	Assert(n <= len + 1);
	*parts = out;
	*nparts = n;
	return DLOCK_TEMPLATE_OK;
}

/*
 * find_bytes returns the first position at or after from where the len
 * bytes of needle start in hay (of haylen bytes), or -1.
 */
static int
find_bytes(const char *hay, int haylen, int from, const char *needle, int len)
{
	int			i;

	for (i = from; i + len <= haylen; i++)
		if (memcmp(hay + i, needle, len) == 0)
			return i;
	return -1;
}

/*
 * DlockTemplateMatches reports whether the lock name name (len bytes)
 * could be made by the template of the nparts parts: its literals in
 * order, any text (also none) where a column stands.  As a glob pattern
 * whose only wildcard is "*": the first literal must be a prefix unless a
 * column comes first, the last a suffix unless a column comes last, and
 * the literals between them, found leftmost in order, must fit between
 * the two (leftmost is enough when every wildcard matches anything).
 */
bool
DlockTemplateMatches(const DlockTemplatePart *parts, int nparts,
					 const char *name, int len)
{
	int			first = 0;
	int			last = nparts - 1;
	int			start = 0;
	int			end = len;
	int			i;

	Assert(nparts > 0);
	/* a template without columns: one name */
	if (nparts == 1 && parts[0].literal != NULL)
		return (int) strlen(parts[0].literal) == len &&
			memcmp(parts[0].literal, name, len) == 0;
	if (parts[first].literal != NULL)
	{
		int			l = strlen(parts[first].literal);

		if (l > len || memcmp(name, parts[first].literal, l) != 0)
			return false;
		start = l;
		first++;
	}
	if (parts[last].literal != NULL)
	{
		int			l = strlen(parts[last].literal);

		if (l > end - start ||
			memcmp(name + end - l, parts[last].literal, l) != 0)
			return false;
		end -= l;
		last--;
	}
	for (i = first; i <= last; i++)
	{
		int			l;
		int			at;

		if (parts[i].literal == NULL)
			continue;
		l = strlen(parts[i].literal);
		at = find_bytes(name, end, start, parts[i].literal, l);
		if (at < 0)
			return false;
		start = at + l;
	}
	return true;
}
