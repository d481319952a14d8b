/*-------------------------------------------------------------------------
 *
 * cli/notify.c
 *	  The watchdog of dlock run --watchdog: a notification socket in the
 *	  convention of systemd's sd_notify(3), so that a job pings dlock the
 *	  way it would ping systemd.
 *
 * dlock binds a datagram socket in a directory of its own (mode 0700,
 * under $TMPDIR or /tmp) and gives CMD its path in NOTIFY_SOCKET, the
 * timeout in WATCHDOG_USEC and CMD's pid in WATCHDOG_PID, as systemd does
 * for a service with WatchdogSec=: systemd-notify WATCHDOG=1, sd_notify()
 * and the libraries that wrap it then work unchanged.  A datagram is lines
 * of KEY=VALUE; dlock acts on
 *
 *   WATCHDOG=1          the job is alive: the timeout starts again;
 *   WATCHDOG=trigger    the job asks to be treated as hung, now;
 *   WATCHDOG_USEC=N     the timeout is N microseconds from now on;
 *   BARRIER=1           a synchronisation point (sd_notify_barrier(3)):
 *                       the sender passes the write end of a pipe and
 *                       waits until it is closed, i.e. until every earlier
 *                       datagram was read;
 *
 * and ignores the rest (READY=1, STATUS=..., ...).  Every file descriptor
 * a datagram carries is closed as soon as it is read: that answers
 * BARRIER=1, and no FDSTORE=1 leaks.
 *
 * Concurrency: dlock's main loop only (cli/dlock_cli.h); the keeper
 * removes the socket when dlock dies (DlockNotifyCleanup).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef _GNU_SOURCE				/* PostgreSQL's CPPFLAGS may define it */
#define _GNU_SOURCE				/* MSG_CMSG_CLOEXEC */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dlock_cli.h"

#define NOTIFY_MAX_DATAGRAM	4096
#define NOTIFY_MAX_FDS		16

/* What to remove at exit: also used by the keeper, in another process. */
static char notify_dir[sizeof(((struct sockaddr_un *) 0)->sun_path)];
static char notify_path[sizeof(((struct sockaddr_un *) 0)->sun_path)];

/*
 * DlockNotifyOpen creates the socket, ping timeout timeout_ms.  Returns
 * false with a message in err when it cannot.
 */
bool
DlockNotifyOpen(DlockNotify *n, int64_t timeout_ms, char *err, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	struct sockaddr_un addr;
	int			fd;

	memset(n, 0, sizeof(*n));
	n->fd = -1;
	n->timeout_ms = timeout_ms;
	if (tmp == NULL || tmp[0] != '/')
		tmp = "/tmp";
	if (snprintf(notify_dir, sizeof(notify_dir), "%s/dlock-XXXXXX", tmp) >= (int) sizeof(notify_dir) - 8)
	{
		snprintf(err, len, "could not create the watchdog's socket: TMPDIR \"%s\" is too long", tmp);
		notify_dir[0] = '\0';
		return false;
	}
	if (mkdtemp(notify_dir) == NULL)
	{
		snprintf(err, len, "could not create a directory for the watchdog's socket under \"%s\": %s",
				 tmp, strerror(errno));
		notify_dir[0] = '\0';
		return false;
	}
	snprintf(notify_path, sizeof(notify_path), "%s/notify", notify_dir);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
	{
		snprintf(err, len, "could not create the watchdog's socket: %s", strerror(errno));
		DlockNotifyCleanup();
		return false;
	}
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	memcpy(addr.sun_path, notify_path, strlen(notify_path) + 1);
	if (bind(fd, (struct sockaddr *) &addr, sizeof(addr)) != 0)
	{
		snprintf(err, len, "could not bind the watchdog's socket \"%s\": %s",
				 notify_path, strerror(errno));
		close(fd);
		DlockNotifyCleanup();
		return false;
	}
	n->fd = fd;
	return true;
}

/*
 * DlockNotifySetEnv puts NOTIFY_SOCKET and WATCHDOG_USEC into the
 * environment CMD gets (WATCHDOG_PID is set in CMD's process, which alone
 * knows its pid: DlockNotifySetPid).
 */
bool
DlockNotifySetEnv(const DlockNotify *n)
{
	char		usec[32];

	snprintf(usec, sizeof(usec), "%" PRId64, n->timeout_ms * 1000);
	return setenv("NOTIFY_SOCKET", notify_path, 1) == 0 &&
		setenv("WATCHDOG_USEC", usec, 1) == 0;
}

/*
 * DlockNotifySetPid sets WATCHDOG_PID to the calling process's pid: CMD's,
 * called in its process before exec.
 */
void
DlockNotifySetPid(void)
{
	char		pid[32];

	snprintf(pid, sizeof(pid), "%d", (int) getpid());
	setenv("WATCHDOG_PID", pid, 1);
}

/*
 * take_line acts on one KEY=VALUE line of a datagram.
 */
static void
take_line(DlockNotify *n, const char *line, size_t len, int64_t now)
{
#define IS(lit) (len == sizeof(lit) - 1 && memcmp(line, lit, len) == 0)
#define STARTS(lit) (len > sizeof(lit) - 1 && memcmp(line, lit, sizeof(lit) - 1) == 0)
	if (IS("WATCHDOG=1"))
	{
		n->last_ping = now;
		n->pings++;
	}
	else if (IS("WATCHDOG=trigger"))
		n->triggered = true;
	else if (STARTS("WATCHDOG_USEC="))
	{
		char		num[32];
		char	   *end;
		long long	usec;
		size_t		l = len - (sizeof("WATCHDOG_USEC=") - 1);

		if (l < sizeof(num))
		{
			memcpy(num, line + sizeof("WATCHDOG_USEC=") - 1, l);
			num[l] = '\0';
			errno = 0;
			usec = strtoll(num, &end, 10);
			if (errno == 0 && *end == '\0' && usec > 0)
			{
				/* (at most a year: no overflow in the arithmetic below) */
				if (usec > 365LL * 24 * 3600 * 1000000)
					usec = 365LL * 24 * 3600 * 1000000;
				/* as systemd: the new timeout runs from now */
				n->timeout_ms = (usec + 999) / 1000;
				n->last_ping = now;
			}
		}
	}
#undef IS
#undef STARTS
}

/*
 * DlockNotifyRead reads every datagram waiting on the socket (now: the
 * time of the reading), closing the file descriptors they carry.
 */
void
DlockNotifyRead(DlockNotify *n, int64_t now)
{
	if (n->fd < 0)
		return;
	for (;;)
	{
		char		buf[NOTIFY_MAX_DATAGRAM];
		union
		{
			struct cmsghdr align;
			/* the descriptors, and room for the sender's credentials */
			char		space[CMSG_SPACE(sizeof(int) * NOTIFY_MAX_FDS) + 64];
		}			control;
		struct iovec iov;
		struct msghdr msg;
		struct cmsghdr *c;
		ssize_t		got;
		char	   *p,
				   *end;

		iov.iov_base = buf;
		iov.iov_len = sizeof(buf);
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = control.space;
		msg.msg_controllen = sizeof(control.space);
		got = recvmsg(n->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (got < 0)
		{
			if (errno == EINTR)
				continue;
			return;				/* EAGAIN: nothing more */
		}
		/* close what was passed first: BARRIER=1 waits for that */
		for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			{
				int			nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				int			i;

				for (i = 0; i < nfd; i++)
				{
					int			fd;

					memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
					close(fd);
				}
			}
		if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
			continue;			/* not a notification dlock can read */
		for (p = buf, end = buf + got; p < end;)
		{
			char	   *nl = memchr(p, '\n', end - p);
			char	   *stop = nl ? nl : end;

			take_line(n, p, stop - p, now);
			p = stop + 1;
		}
	}
}

/*
 * DlockNotifyDue returns when the watchdog fires unless a ping comes.
 */
int64_t
DlockNotifyDue(const DlockNotify *n)
{
	return n->triggered ? 0 : n->last_ping + n->timeout_ms;
}

/*
 * DlockNotifyClose closes the socket and removes it and its directory.
 */
void
DlockNotifyClose(DlockNotify *n)
{
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
	DlockNotifyCleanup();
}

/*
 * DlockNotifyCleanup removes the socket and its directory, if any (for the
 * keeper, when dlock died).
 */
void
DlockNotifyCleanup(void)
{
	if (notify_path[0])
		unlink(notify_path);
	if (notify_dir[0])
		rmdir(notify_dir);
	notify_path[0] = notify_dir[0] = '\0';
}
