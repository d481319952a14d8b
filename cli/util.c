/*-------------------------------------------------------------------------
 *
 * cli/util.c
 *	  Small helpers of the dlock command-line tool: the monotonic clock,
 *	  durations ("500ms", "30s", "2m", "1h", "1m30s"), messages, memory.
 *
 * Concurrency: none.  DlockNow() reads CLOCK_MONOTONIC, the one clock of
 * dlock and of its keeper (cli/keeper.c), a separate process.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock_cli.h"

const char *dlock_progname = "dlock";

/* The longest duration accepted: 2^31-1 seconds, dlock.max_ttl's limit. */
#define MAX_DURATION_MS (INT64_C(2147483647) * 1000)

/*
 * DlockNow returns the time of CLOCK_MONOTONIC in milliseconds.  It never
 * jumps with the wall clock, and it keeps counting while the process is
 * stopped (SIGSTOP) or the machine's scheduler starves it, which is what
 * lease deadlines need.
 */
int64_t
DlockNow(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		abort();				/* cannot happen for CLOCK_MONOTONIC */
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * DlockAlloc returns size bytes of zeroed memory, or exits 70 when there
 * is none.  dlock is short-lived: what it allocates lives until it exits.
 */
void *
DlockAlloc(size_t size)
{
	void	   *p = calloc(1, size > 0 ? size : 1);

	if (p == NULL)
	{
		DlockError("out of memory");
		exit(DLOCK_EXIT_ERROR);
	}
	return p;
}

/*
 * DlockStrdup returns a copy of text made with DlockAlloc.
 */
char *
DlockStrdup(const char *text)
{
	size_t		n = strlen(text) + 1;

	return memcpy(DlockAlloc(n), text, n);
}

/*
 * unit_ms returns the length in milliseconds of the unit that starts at
 * *p ("ms", "s", "m", "h", "d") and advances *p past it, or returns 0
 * when there is no unit there.
 */
static int64_t
unit_ms(const char **p)
{
	const char *s = *p;

	if (s[0] == 'm' && s[1] == 's')
	{
		*p += 2;
		return 1;
	}
	switch (s[0])
	{
		case 's':
			*p += 1;
			return 1000;
		case 'm':
			*p += 1;
			return 60 * 1000;
		case 'h':
			*p += 1;
			return 60 * 60 * 1000;
		case 'd':
			*p += 1;
			return 24 * 60 * 60 * 1000;
		default:
			return 0;
	}
}

/*
 * DlockParseDuration parses a duration: a number with a unit (ms, s, m, h,
 * d), several of them in a row ("1m30s"), or a bare number of seconds.
 * Numbers may have a fraction ("1.5s").  The result is rounded to whole
 * milliseconds.  Returns false for anything else (signs, spaces, empty
 * text, other units, more than 2^31-1 seconds).
 */
bool
DlockParseDuration(const char *text, int64_t *ms)
{
	const char *p = text;
	double		total = 0;
	bool		any = false;

	while (*p)
	{
		double		value = 0;
		double		scale = 1;
		bool		digits = false;
		int64_t		unit;

		while (isdigit((unsigned char) *p))
		{
			value = value * 10 + (*p - '0');
			digits = true;
			p++;
			if (value > 1e15)
				return false;
		}
		if (*p == '.')
		{
			p++;
			while (isdigit((unsigned char) *p))
			{
				scale /= 10;
				value += (*p - '0') * scale;
				digits = true;
				p++;
			}
		}
		if (!digits)
			return false;
		unit = unit_ms(&p);
		if (unit == 0)
		{
			/* a bare number of seconds, only on its own */
			if (*p != '\0' || any)
				return false;
			unit = 1000;
		}
		total += value * (double) unit;
		if (total > (double) MAX_DURATION_MS)
			return false;
		any = true;
	}
	if (!any)
		return false;
	*ms = (int64_t) (total + 0.5);
	return true;
}

/*
 * DlockFormatDuration writes a duration for people: "750ms", "2.5s",
 * "30s", "2m", "4m05s", "1h", "1h30m", "2d03h".  Seconds below one minute
 * keep one decimal; longer durations are truncated to their two largest
 * units.
 */
void
DlockFormatDuration(int64_t ms, char *buf, size_t len)
{
	int64_t		s;

	if (ms < 0)
		ms = 0;
	s = ms / 1000;
	if (ms < 1000)
		snprintf(buf, len, "%" PRId64 "ms", ms);
	else if (ms < 60 * 1000)
	{
		if (ms % 1000 < 100)
			snprintf(buf, len, "%" PRId64 "s", s);
		else
			snprintf(buf, len, "%" PRId64 ".%" PRId64 "s", s, (ms % 1000) / 100);
	}
	else if (s < 60 * 60)
	{
		if (s % 60 == 0)
			snprintf(buf, len, "%" PRId64 "m", s / 60);
		else
			snprintf(buf, len, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	}
	else if (s < 24 * 60 * 60)
	{
		if (s / 60 % 60 == 0)
			snprintf(buf, len, "%" PRId64 "h", s / 3600);
		else
			snprintf(buf, len, "%" PRId64 "h%02" PRId64 "m", s / 3600, s / 60 % 60);
	}
	else
	{
		if (s / 3600 % 24 == 0)
			snprintf(buf, len, "%" PRId64 "d", s / 86400);
		else
			snprintf(buf, len, "%" PRId64 "d%02" PRId64 "h", s / 86400, s / 3600 % 24);
	}
}

/*
 * DlockErrorV prints "dlock: <message>" and a newline on stderr.
 */
void
DlockErrorV(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", dlock_progname);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	fflush(stderr);
}

/*
 * DlockError is DlockErrorV with the arguments inline.
 */
void
DlockError(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	DlockErrorV(fmt, ap);
	va_end(ap);
}

/*
 * DlockTrim removes trailing newlines and spaces from a libpq message in
 * place (libpq ends its messages with a newline; some span several lines,
 * which are kept).
 */
void
DlockTrim(char *text)
{
	size_t		n = strlen(text);

	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '\t'))
		text[--n] = '\0';
}

/*
 * DlockHostname returns this machine's host name, or "localhost" when it
 * cannot be read.
 */
const char *
DlockHostname(void)
{
	static char name[256];

	if (name[0] == '\0')
	{
		if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0')
			strcpy(name, "localhost");
		name[sizeof(name) - 1] = '\0';
	}
	return name;
}
