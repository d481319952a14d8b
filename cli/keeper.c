/*-------------------------------------------------------------------------
 *
 * cli/keeper.c
 *	  The keeper of dlock run: the process that starts CMD, owns every
 *	  process CMD starts, and ends them all when the lease ends, also when
 *	  dlock itself dies.
 *
 * Process model.  dlock forks the keeper, and the keeper forks CMD:
 *
 *	 dlock (lease, renewals, signals)  --ctl pipe-->   keeper
 *	                                   <--report pipe--   |
 *	                                                     CMD -- its processes
 *
 * The keeper is a child subreaper: every process CMD ever started stays
 * its descendant until it exits.  "The tree" is that set, found through
 * /proc (each process identified by pid and start time, and signalled
 * through a pidfd checked against that start time); it is empty exactly
 * when the keeper has no children left.  Off Linux, or where /proc shows
 * another pid namespace, the tree is CMD alone.
 *
 * The keeper decides nothing about the lease; it enforces time, on its own
 * clock reading (CLOCK_MONOTONIC, as dlock's), so that its rules hold
 * even when dlock is stopped, starved or dead.  With the lease's local
 * deadline D (dlock sends each new one), the grace G, the margin M
 * (DlockKeeperSetup) and --kill-after K:
 *
 *   - at D - G, if no renew moved D, the tree gets SIGTERM ("deadline");
 *   - at D - M, and at the kill time of any stop if earlier, SIGKILL,
 *     again every KILL_REPEAT_MS until the tree is empty;
 *   - KEEPER_STOP from dlock: SIGTERM, SIGKILL at the time dlock names;
 *   - CMD exited and processes are left: SIGTERM, SIGKILL K later;
 *   - dlock died (the ctl pipe reads end-of-file): SIGTERM, SIGKILL
 *     min(K, ORPHAN_KILL_MS) later.
 *
 * It exits once CMD has exited and the tree is empty, with CMD's status
 * shell-style; dlock reaps it as "CMD has ended".  It reports CMD's pid,
 * CMD's own exit, and each SIGTERM and SIGKILL it sent of its own accord
 * (KEEPER_* in cli/dlock_cli.h).  Why these rules, the process group, and
 * the signals it catches and passes on: design.md §9, "The keeper".
 *
 * Concurrency: two single-threaded processes sharing nothing but the
 * pipes; messages are fixed-size records below PIPE_BUF, each written
 * whole or not at all, and each side only reads what the other wrote
 * whole.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#include "dlock_cli.h"

#define KILL_REPEAT_MS	20		/* SIGKILL again while the tree is not empty */
#define ORPHAN_KILL_MS	500		/* dlock died: SIGKILL this long after SIGTERM */
#define SCAN_RETRY_MS	10		/* CMD exited, children not yet reaped */

/* One message on either pipe. */
typedef struct KeeperMsg
{
	int32_t		type;
	int32_t		a;
	int64_t		b;
} KeeperMsg;

/* One process of the tree, as /proc/PID/stat shows it. */
typedef struct ProcEntry
{
	pid_t		pid;
	pid_t		ppid;
	unsigned long long start;	/* start time, clock ticks after boot */
	bool		mine;			/* a descendant of the root */
	bool		zombie;			/* exited, not yet reaped */
} ProcEntry;

/* The keeper's state (in the keeper process only). */
typedef struct Keeper
{
	DlockKeeperSetup setup;
	int			ctl;			/* read end: dlock -> keeper */
	int			report;			/* write end: keeper -> dlock */
	pid_t		cmd;
	bool		cmd_done;
	int			cmd_status;
	int64_t		deadline;		/* D */
	bool		termed;			/* the tree got SIGTERM */
	int64_t		kill_at;		/* SIGKILL at min(kill_at, D) once termed */
	bool		killed;			/* SIGKILL sent at least once */
	bool		orphaned;		/* dlock is gone */
} Keeper;

static int64_t
min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/*
 * write_msg writes one message, retrying on EINTR; a message that cannot
 * be written (the reader is gone) is dropped.
 */
static bool
write_msg(int fd, int type, int a, int64_t b)
{
	KeeperMsg	m;
	ssize_t		n;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.a = a;
	m.b = b;
	do
		n = write(fd, &m, sizeof(m));
	while (n < 0 && errno == EINTR);
	return n == (ssize_t) sizeof(m);
}

/*
 * read_msg reads one message: 1 when one was read, 0 at end-of-file, -1
 * when none is there (non-blocking) or on an error.
 */
static int
read_msg(int fd, KeeperMsg *m)
{
	ssize_t		n;

	do
		n = read(fd, m, sizeof(*m));
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return 0;
	return n == (ssize_t) sizeof(*m) ? 1 : -1;
}

#ifdef __linux__
/*
 * read_stat reads the parent and start time of pid from /proc/PID/stat.
 * The command name (field 2) may hold spaces and parentheses: the fields
 * after it are found after its last ')'.
 */
static bool
read_stat(pid_t pid, pid_t *ppid, unsigned long long *start, char *state)
{
	char		path[64];
	char		buf[1024];
	char	   *p;
	int			fd,
				field;
	ssize_t		n;
	long		pp;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (p == NULL)
		return false;
	/* p + 2: field 3, the state; field 4 is the parent */
	p += 2;
	if (sscanf(p, "%c %ld", state, &pp) != 2)
		return false;
	*ppid = (pid_t) pp;
	/* skip to field 22, the start time */
	for (field = 3; field < 22 && p != NULL; field++)
	{
		p = strchr(p, ' ');
		if (p != NULL)
			p++;
	}
	if (p == NULL || sscanf(p, "%llu", start) != 1)
		return false;
	return true;
}

/*
 * signal_entry sends sig to the process e, if it is still the process
 * that the scan saw (same pid and start time).  With a pidfd, opened
 * before the check, the signal reaches that process even if its pid were
 * reused right after; without (a kernel before 5.3), the window is the
 * few instructions between the check and kill().  Returns true when the
 * signal was sent.
 */
static bool
signal_entry(const ProcEntry *e, int sig)
{
	pid_t		ppid;
	unsigned long long start;
	char		state;
	bool		sent = false;

#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
	int			pidfd = (int) syscall(SYS_pidfd_open, e->pid, 0);

	if (pidfd >= 0)
	{
		if (read_stat(e->pid, &ppid, &start, &state) && start == e->start)
			sent = syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0;
		close(pidfd);
		return sent;
	}
	if (errno == ESRCH)
		return false;
#endif
	if (read_stat(e->pid, &ppid, &start, &state) && start == e->start)
		sent = kill(e->pid, sig) == 0;
	return sent;
}
#endif							/* __linux__ */

#ifdef __linux__
/*
 * proc_is_ours reports whether /proc shows this process's own pid
 * namespace (it may be another's: unshare -p without a /proc of its
 * own), so that the pids it lists are the pids kill() and pidfd_open()
 * take.  Decided once.
 */
static bool
proc_is_ours(void)
{
	static int	ours = -1;

	if (ours < 0)
	{
		char		buf[64];
		ssize_t		n;
		int			fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);

		ours = 0;
		if (fd >= 0)
		{
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (n > 0)
			{
				buf[n] = '\0';
				ours = atol(buf) == (long) getpid();
			}
		}
	}
	return ours == 1;
}
#endif

/*
 * DlockTreeSignal sends sig to every live descendant of root (not to
 * root, and not to zombies) and returns how many it sent it to.  Where
 * the tree cannot be read (off Linux, or a /proc of another pid
 * namespace), only CMD, whose pid is only (0: none), gets it.
 */
int
DlockTreeSignal(pid_t root, pid_t only, int sig)
{
#ifdef __linux__
	DIR		   *d;
	struct dirent *de;
	ProcEntry  *procs = NULL;
	int			n = 0,
				cap = 0,
				i,
				sent = 0;
	bool		grew;

	d = proc_is_ours() ? opendir("/proc") : NULL;
	if (d == NULL)
		return only > 0 && kill(only, sig) == 0 ? 1 : 0;
	while ((de = readdir(d)) != NULL)
	{
		char	   *end;
		long		pid = strtol(de->d_name, &end, 10);
		ProcEntry	e;
		char		state;

		if (*end != '\0' || pid <= 0 || pid == (long) root)
			continue;
		e.pid = (pid_t) pid;
		e.mine = false;
		if (!read_stat(e.pid, &e.ppid, &e.start, &state))
			continue;
		e.zombie = state == 'Z';
		if (n == cap)
		{
			ProcEntry  *bigger;

			cap = cap ? cap * 2 : 256;
			bigger = realloc(procs, sizeof(ProcEntry) * cap);
			if (bigger == NULL)
				break;
			procs = bigger;
		}
		procs[n++] = e;
	}
	closedir(d);

	/* mark the descendants: a pass per generation */
	do
	{
		grew = false;
		for (i = 0; i < n; i++)
		{
			int			j;

			if (procs[i].mine)
				continue;
			if (procs[i].ppid == root)
				procs[i].mine = grew = true;
			else
				for (j = 0; j < n; j++)
					if (procs[j].mine && procs[j].pid == procs[i].ppid)
					{
						procs[i].mine = grew = true;
						break;
					}
		}
	} while (grew);

	for (i = 0; i < n; i++)
		if (procs[i].mine && !procs[i].zombie && signal_entry(&procs[i], sig))
			sent++;
	free(procs);
	return sent;
#else
	(void) root;
	return only > 0 && kill(only, sig) == 0 ? 1 : 0;
#endif
}

/*
 * DlockTreeEnd kills every descendant of the calling process with SIGKILL,
 * again and again, reaping them, until it has no children left or
 * bound_ms has passed.  For dlock when its keeper was killed: the tree was
 * reparented to dlock (a child subreaper too).
 */
void
DlockTreeEnd(int64_t bound_ms)
{
	int64_t		end = DlockNow() + bound_ms;

	for (;;)
	{
		int			status;
		pid_t		pid;

		DlockTreeSignal(getpid(), 0, SIGKILL);
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			;
		if (pid < 0 && errno == ECHILD)
			return;
		if (DlockNow() >= end)
			return;
		poll(NULL, 0, KILL_REPEAT_MS);
	}
}

/*
 * term sends the tree SIGTERM once (later calls only move the kill time
 * earlier) and returns how many processes got it.
 */
static int
term(Keeper *k, int64_t kill_at)
{
	int			n = 0;

	if (!k->termed)
	{
		n = DlockTreeSignal(getpid(), k->cmd_done ? 0 : k->cmd, SIGTERM);
		/* a stopped process could not act on it (as systemd does) */
		DlockTreeSignal(getpid(), k->cmd_done ? 0 : k->cmd, SIGCONT);
	}
	k->termed = true;
	k->kill_at = min64(k->kill_at, kill_at);
	return n;
}

/*
 * keeper_read_ctl takes dlock's messages: new deadlines, signals for CMD,
 * stops.  End-of-file: dlock is gone.
 */
static void
keeper_read_ctl(Keeper *k, int64_t now)
{
	KeeperMsg	m;
	int			rc;

	while (!k->orphaned && (rc = read_msg(k->ctl, &m)) != -1)
	{
		if (rc == 0)
		{
			/* dlock died: nobody renews the lease */
			k->orphaned = true;
			term(k, now + min64(k->setup.kill_after_ms, ORPHAN_KILL_MS));
			break;
		}
		switch (m.type)
		{
			case KEEPER_DEADLINE:
				/* each from a later send time: never earlier */
				if (m.b > k->deadline)
					k->deadline = m.b;
				break;
			case KEEPER_SIGNAL:
				if (!k->cmd_done)
					kill(k->cmd, m.a);
				break;
			case KEEPER_STOP:
				term(k, m.b);
				break;
			default:
				break;
		}
	}
}

/*
 * keeper_reap reaps every child that has exited, noting CMD's status;
 * returns true when no child is left.
 */
static bool
keeper_reap(Keeper *k)
{
	for (;;)
	{
		int			status;
		pid_t		pid = waitpid(-1, &status, WNOHANG);

		if (pid > 0)
		{
			if (pid == k->cmd)
			{
				k->cmd_done = true;
				if (WIFEXITED(status))
					k->cmd_status = WEXITSTATUS(status);
				else if (WIFSIGNALED(status))
					k->cmd_status = 128 + WTERMSIG(status);
				else
					k->cmd_status = DLOCK_EXIT_ERROR;
				write_msg(k->report, KEEPER_CMD_EXITED, k->cmd_status, 0);
			}
			continue;
		}
		if (pid < 0 && errno == EINTR)
			continue;
		return pid < 0 && errno == ECHILD;
	}
}

/*
 * keeper_finish cleans up what dlock would have, had it lived, and exits
 * with CMD's status.
 */
static void keeper_finish(Keeper *k)
			__attribute__((noreturn));

static void
keeper_finish(Keeper *k)
{
	if (k->orphaned && k->setup.cleanup)
		k->setup.cleanup();
	_exit(k->cmd_status);
}

/*
 * keeper_main is the keeper process (see the header).  Called in the
 * child of dlock's fork with every signal blocked.
 */
static void keeper_main(Keeper *k)
			__attribute__((noreturn));

static void
keeper_main(Keeper *k)
{
	static const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
	SIGTSTP, SIGTTIN, SIGTTOU};
	sigset_t	none;
	pid_t		self = getpid();
	size_t		i;
	int			null_fd;
	int			contained = 1;

#ifdef __linux__
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		contained = 0;
#endif

	/* a pipe of its own for the signals it catches; dlock's is closed */
	DlockSignalsReinit();
	DlockSignalCatch(SIGCHLD, NULL);
	for (i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		DlockSignalCatch(ignored[i], NULL);

	k->cmd = fork();
	if (k->cmd == 0)
	{
#ifdef __linux__
		/* the keeper killed (it never exits before CMD): dlock takes over */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != self)
			_exit(128 + SIGTERM);
#endif
		close(k->ctl);
		close(k->report);
		DlockSignalsRestoreInChild();
		k->setup.exec_cmd(k->setup.exec_arg);
		_exit(DLOCK_EXIT_ERROR);
	}
	if (k->cmd < 0)
	{
		write_msg(k->report, KEEPER_STARTED, -errno, 0);
		_exit(DLOCK_EXIT_ERROR);
	}
	write_msg(k->report, KEEPER_STARTED, (int) k->cmd, contained);

	/* the keeper reads and writes no terminal, and holds no output open */
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd >= 0)
	{
		dup2(null_fd, STDIN_FILENO);
		dup2(null_fd, STDOUT_FILENO);
		dup2(null_fd, STDERR_FILENO);
		if (null_fd > STDERR_FILENO)
			close(null_fd);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	for (;;)
	{
		struct pollfd fds[2];
		int			nfds = 1;
		int64_t		now,
					wake,
					kill_time;
		int			signo,
					code;
		bool		empty;

		/* 1. children; 2. dlock; 3. the clock, then act */
		empty = keeper_reap(k);
		if (k->cmd_done && empty)
			keeper_finish(k);
		now = DlockNow();
		keeper_read_ctl(k, now);
		now = DlockNow();
		wake = INT64_MAX;

		if (k->cmd_done && !k->termed)
		{
			/* CMD is gone; what it left goes too */
			int			n = term(k, now + k->setup.kill_after_ms);

			if (n > 0)
				write_msg(k->report, KEEPER_TERM, KEEPER_WHY_LEFTOVER, n);
			else
				wake = now + SCAN_RETRY_MS; /* exiting: reap it next */
		}
		if (!k->termed && now >= k->deadline - k->setup.grace_ms)
		{
			int			n = term(k, now + k->setup.kill_after_ms);

			write_msg(k->report, KEEPER_TERM, KEEPER_WHY_DEADLINE, n);
		}
		kill_time = k->deadline - k->setup.margin_ms;
		if (k->termed)
			kill_time = min64(k->kill_at, kill_time);
		if (now >= kill_time)
		{
			int			n = DlockTreeSignal(self, k->cmd_done ? 0 : k->cmd, SIGKILL);

			/* by the deadline, or by the time a stop gave? */
			if (!k->killed && n > 0)
				write_msg(k->report, KEEPER_KILL,
						  kill_time == k->deadline - k->setup.margin_ms &&
						  (!k->termed || k->kill_at > kill_time) ?
						  KEEPER_WHY_DEADLINE : 0, n);
			k->killed = true;
			k->termed = true;
			wake = min64(wake, now + KILL_REPEAT_MS);
		}
		else
			wake = min64(wake, kill_time);
		if (!k->termed)
			wake = min64(wake, k->deadline - k->setup.grace_ms);

		fds[0].fd = DlockSignalFd();
		fds[0].events = POLLIN;
		if (!k->orphaned)
		{
			fds[1].fd = k->ctl;
			fds[1].events = POLLIN;
			nfds = 2;
		}
		now = DlockNow();
		if (poll(fds, nfds, wake <= now ? 0 : (int) min64(wake - now, 60000)) < 0 &&
			errno != EINTR)
			(void) poll(NULL, 0, KILL_REPEAT_MS);	/* never spin */
		while (DlockSignalNext(&signo, &code))
			;					/* SIGCHLD: reaped above; the others: ignored */
	}
}

/*
 * set_flags makes fd close-on-exec, and non-blocking if nonblock.
 */
static bool
set_flags(int fd, bool nonblock)
{
	int			fl = fcntl(fd, F_GETFL);

	if (fl < 0 || (nonblock && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
		return false;
	return fcntl(fd, F_SETFD, FD_CLOEXEC) == 0;
}

/*
 * DlockKeeperStart forks the keeper, which starts CMD, and waits for it to
 * say CMD's pid.  Returns false (with errno set, the keeper reaped) when
 * either fork fails.  Called with every signal blocked (the keeper sets
 * up its own handlers before it unblocks them).
 */
bool
DlockKeeperStart(DlockKeeper *kp, const DlockKeeperSetup *setup)
{
	int			ctl[2],
				report[2];
	Keeper		k;
	KeeperMsg	m;
	pid_t		pid;
	int			rc,
				err;

	memset(kp, 0, sizeof(*kp));
	kp->ctl = kp->report = -1;
	if (pipe(ctl) != 0)
		return false;
	if (pipe(report) != 0)
	{
		err = errno;
		close(ctl[0]);
		close(ctl[1]);
		errno = err;
		return false;
	}
	/* dlock never blocks on the keeper: a full pipe drops a message */
	if (!set_flags(ctl[0], true) || !set_flags(ctl[1], true) ||
		!set_flags(report[0], false) || !set_flags(report[1], false))
	{
		err = errno;
		close(ctl[0]);
		close(ctl[1]);
		close(report[0]);
		close(report[1]);
		errno = err;
		return false;
	}

	pid = fork();
	if (pid == 0)
	{
		memset(&k, 0, sizeof(k));
		k.setup = *setup;
		k.ctl = ctl[0];
		k.report = report[1];
		k.deadline = setup->deadline;
		k.kill_at = INT64_MAX;
		close(ctl[1]);
		close(report[0]);
		if (setup->close_fd >= 0)
			close(setup->close_fd);
		if (setup->close_fd2 >= 0)
			close(setup->close_fd2);
		keeper_main(&k);
	}
	err = errno;
	close(ctl[0]);
	close(report[1]);
	if (pid < 0)
	{
		close(ctl[1]);
		close(report[0]);
		errno = err;
		return false;
	}
	kp->pid = pid;
	kp->ctl = ctl[1];
	kp->report = report[0];

	/* CMD's pid, or why it could not be forked */
	do
		rc = read_msg(kp->report, &m);
	while (rc < 0 && errno == EINTR);
	if (rc == 1 && m.type == KEEPER_STARTED && m.a > 0)
	{
		kp->cmd = (pid_t) m.a;
		kp->contained = m.b == 1;
		set_flags(kp->report, true);
		return true;
	}
	err = rc == 1 && m.a < 0 ? -m.a : EAGAIN;
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	DlockKeeperClose(kp);
	errno = err;
	return false;
}

/*
 * DlockKeeperSend sends the keeper one message (see the header).  A
 * keeper that is gone reads nothing: the message is dropped (dlock
 * ignores SIGPIPE).
 */
void
DlockKeeperSend(DlockKeeper *kp, int type, int a, int64_t b)
{
	if (kp->ctl >= 0)
		write_msg(kp->ctl, type, a, b);
}

/*
 * DlockKeeperNext reads the keeper's next report; false when there is
 * none (or the keeper is gone).
 */
bool
DlockKeeperNext(DlockKeeper *kp, int *type, int *a, int64_t *b)
{
	KeeperMsg	m;

	if (kp->report < 0 || read_msg(kp->report, &m) != 1)
		return false;
	*type = m.type;
	*a = m.a;
	*b = m.b;
	return true;
}

/*
 * DlockKeeperClose closes dlock's ends of the pipes (the keeper, if still
 * running, takes that as dlock's death).
 */
void
DlockKeeperClose(DlockKeeper *kp)
{
	if (kp->ctl >= 0)
		close(kp->ctl);
	if (kp->report >= 0)
		close(kp->report);
	kp->ctl = kp->report = -1;
}
