/*-------------------------------------------------------------------------
 *
 * cli/signals.c
 *	  Signals of the dlock command-line tool, turned into poll()able
 *	  events with a self-pipe.
 *
 * Every signal dlock catches has one handler, which writes a record
 * (signal number and si_code) into a non-blocking pipe and returns; the
 * main loop polls the pipe's read end together with the database socket
 * and reads the records with DlockSignalNext().  The handler touches
 * nothing else (it saves and restores errno), so no state is shared with
 * the main flow and no lock is needed.  If the pipe is ever full, a record
 * is dropped: the main loop also polls its child with waitpid(WNOHANG) on
 * every wake-up, so a dropped SIGCHLD is harmless, and a dropped forwarded
 * signal can only be one of thousands pending at once.
 *
 * A signal that was ignored when dlock started (nohup ignores SIGHUP, a
 * non-interactive shell ignores SIGINT and SIGQUIT for background jobs) is
 * left ignored, so CMD inherits it ignored, as it would without dlock.
 * SIGCHLD, which dlock itself needs, is caught and unblocked whatever
 * dlock inherited; CMD gets the inherited state back.  The keeper
 * (cli/keeper.c), a fork of dlock, gets a pipe of its own
 * (DlockSignalsReinit) and catches again what it needs; what dlock started
 * with stays recorded, for CMD.
 *
 * The child: every signal is blocked around fork(); in CMD's process,
 * DlockSignalsRestoreInChild() puts back the dispositions and the signal
 * mask dlock started with, so CMD starts as if run directly.  The pipe is
 * close-on-exec.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock_cli.h"

/* One record in the pipe. */
typedef struct SignalRecord
{
	int			signo;
	int			code;
} SignalRecord;

static int	sig_pipe[2] = {-1, -1};

/* The dispositions and mask dlock started with, restored in the child. */
static struct sigaction original[NSIG];
static bool caught[NSIG];
static sigset_t original_mask;

/*
 * DlockSignalNotify writes a record for signo into the self-pipe.  It is
 * async-signal-safe: called from the handlers.
 */
void
DlockSignalNotify(int signo, int code)
{
	int			save_errno = errno;
	SignalRecord rec;
	ssize_t		rc;

	rec.signo = signo;
	rec.code = code;
	if (sig_pipe[1] >= 0)
	{
		/* A record (8 bytes) is below PIPE_BUF: written whole or not. */
		rc = write(sig_pipe[1], &rec, sizeof(rec));
		(void) rc;
	}
	errno = save_errno;
}

/*
 * handler is the signal handler of the caught signals, unless the caller
 * gives its own.
 */
static void
handler(int signo, siginfo_t *info, void *context)
{
	(void) context;
	DlockSignalNotify(signo, info ? info->si_code : 0);
}

/*
 * set_flags makes fd non-blocking and close-on-exec.
 */
static bool
set_flags(int fd)
{
	int			fl = fcntl(fd, F_GETFL);

	return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0 &&
		fcntl(fd, F_SETFD, FD_CLOEXEC) == 0;
}

/*
 * DlockSignalsInit creates the self-pipe and records the signal mask dlock
 * started with.  It catches nothing yet (see DlockSignalCatch).
 */
void
DlockSignalsInit(void)
{
	if (pipe(sig_pipe) != 0)
	{
		DlockError("could not create the signal pipe: %s", strerror(errno));
		exit(DLOCK_EXIT_ERROR);
	}
	if (!set_flags(sig_pipe[0]) || !set_flags(sig_pipe[1]))
	{
		DlockError("could not set up the signal pipe: %s", strerror(errno));
		exit(DLOCK_EXIT_ERROR);
	}
	sigprocmask(SIG_SETMASK, NULL, &original_mask);
}

/*
 * DlockSignalsReinit gives a freshly forked child (the keeper of
 * cli/keeper.c) a self-pipe of its own, closing the one it shares with
 * dlock; the handlers, which write into whichever pipe is current, stay.
 * Called with every signal blocked.
 */
void
DlockSignalsReinit(void)
{
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sig_pipe[0] = sig_pipe[1] = -1;
	/* (in a forked child: _exit, not exit, which would run atexit hooks) */
	if (pipe(sig_pipe) != 0 || !set_flags(sig_pipe[0]) || !set_flags(sig_pipe[1]))
		_exit(DLOCK_EXIT_ERROR);
}

/*
 * DlockSignalCatch installs a handler for signo and returns true: fn, or
 * when fn is NULL the self-pipe handler.  A signal that was ignored when
 * dlock started stays ignored and the result is false; SIGCHLD is caught
 * whatever its disposition was, since dlock needs it (with SA_NOCLDSTOP: a
 * stopped child is not an event), and unblocked if the inherited signal
 * mask blocked it.
 */
bool
DlockSignalCatch(int signo, void (*fn) (int, siginfo_t *, void *))
{
	struct sigaction sa;

	/* (the keeper catches again what dlock caught: the original stays) */
	if (!caught[signo] && sigaction(signo, NULL, &original[signo]) != 0)
		return false;
	if (original[signo].sa_handler == SIG_IGN &&
		signo != SIGCHLD)
		return false;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fn ? fn : handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	if (signo == SIGCHLD)
		sa.sa_flags |= SA_NOCLDSTOP;
	sigfillset(&sa.sa_mask);
	if (sigaction(signo, &sa, NULL) != 0)
		return false;
	caught[signo] = true;
	if (signo == SIGCHLD)
	{
		/*
		 * Started with it blocked (the mask is inherited), dlock would notice
		 * its child's exit only at its next timer.  CMD gets the original
		 * mask back.
		 */
		sigset_t	set;

		sigemptyset(&set);
		sigaddset(&set, signo);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
	}
	return true;
}

/*
 * DlockSignalIgnore ignores signo in dlock; the child gets the original
 * disposition back (DlockSignalsRestoreInChild).
 */
void
DlockSignalIgnore(int signo)
{
	struct sigaction sa;

	if (!caught[signo] && sigaction(signo, NULL, &original[signo]) != 0)
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	if (sigaction(signo, &sa, NULL) == 0)
		caught[signo] = true;
}

/*
 * DlockSignalFd returns the read end of the self-pipe, for poll().
 */
int
DlockSignalFd(void)
{
	return sig_pipe[0];
}

/*
 * DlockSignalNext reads the next signal record; returns false when the
 * pipe is empty.
 */
bool
DlockSignalNext(int *signo, int *code)
{
	SignalRecord rec;
	ssize_t		n;

	do
		n = read(sig_pipe[0], &rec, sizeof(rec));
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t) sizeof(rec))
		return false;
	*signo = rec.signo;
	*code = rec.code;
	return true;
}

/*
 * DlockSignalName returns "SIGTERM" etc. for the signals dlock handles,
 * "signal N" for others (in a static buffer).
 */
const char *
DlockSignalName(int signo)
{
	static char buf[32];

	switch (signo)
	{
		case SIGHUP:
			return "SIGHUP";
		case SIGINT:
			return "SIGINT";
		case SIGQUIT:
			return "SIGQUIT";
		case SIGTERM:
			return "SIGTERM";
		case SIGKILL:
			return "SIGKILL";
		case SIGUSR1:
			return "SIGUSR1";
		case SIGUSR2:
			return "SIGUSR2";
		default:
			snprintf(buf, sizeof(buf), "signal %d", signo);
			return buf;
	}
}

/*
 * DlockSignalsBlock blocks every signal and stores the previous mask in
 * *old; DlockSignalsUnblock puts it back.
 */
void
DlockSignalsBlock(sigset_t *old)
{
	sigset_t	all;

	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, old);
}

void
DlockSignalsUnblock(const sigset_t *old)
{
	sigprocmask(SIG_SETMASK, old, NULL);
}

/*
 * DlockSignalsRestoreInChild puts back, in a freshly forked child, the
 * dispositions of every caught signal and the signal mask dlock started
 * with, and closes the self-pipe.  Called with every signal blocked, so
 * no handler of dlock's can run in the child.
 */
void
DlockSignalsRestoreInChild(void)
{
	int			signo;

	for (signo = 1; signo < NSIG; signo++)
		if (caught[signo])
			sigaction(signo, &original[signo], NULL);
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sig_pipe[0] = sig_pipe[1] = -1;
	sigprocmask(SIG_SETMASK, &original_mask, NULL);
}
