/*-------------------------------------------------------------------------
 *
 * src/notifier_command.c
 *	  dlock's ProcessUtility_hook: before DROP DATABASE, CREATE DATABASE
 *	  (of its template), ALTER DATABASE ... RENAME and ... SET TABLESPACE,
 *	  which need a database without connections, it stops that database's
 *	  notifier, but only for a command that passes PostgreSQL's own checks
 *	  before its wait for other sessions (design.md §16).
 *
 * Concurrency: the stop mark of this backend is set under the "dlock
 * notify" LWLock before the notifier is asked to leave, and cleared after
 * the command (and on ERROR, and at exit); no lock is held while it waits
 * for the notifier.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <signal.h>
#include "access/htup_details.h"
#include "access/transam.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/tablespace.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "compat.h"
#include "dlock.h"
#include "notifier_int.h"

static ProcessUtility_hook_type prev_utility_hook = NULL;

/*
 * command_refused reports whether PostgreSQL refuses a database command
 * before it looks at anything: in a read-only transaction or in parallel
 * mode (standard_ProcessUtility), and, for a command that cannot run in a
 * transaction block (in_block_refused), in a transaction block, a
 * subtransaction, a pipeline or a function (PreventInTransactionBlock,
 * whose conditions IsInTransactionBlock repeats).
 */
static bool
command_refused(bool top_level, bool in_block_refused)
{
	if (XactReadOnly || IsInParallelMode())
		return true;
	return in_block_refused && IsInTransactionBlock(top_level);
}

/*
 * database_lookup returns the oid of database name (InvalidOid when there
 * is none), with whether it is a template and its tablespace.
 */
static Oid
database_lookup(const char *name, bool *istemplate, Oid *tablespace)
{
	Oid			dboid = get_database_oid(name, true);
	HeapTuple	tuple;

	if (!OidIsValid(dboid))
		return InvalidOid;
	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
	if (!HeapTupleIsValid(tuple))
		return InvalidOid;		/* dropped meanwhile */
	*istemplate = ((Form_pg_database) GETSTRUCT(tuple))->datistemplate;
	*tablespace = ((Form_pg_database) GETSTRUCT(tuple))->dattablespace;
	ReleaseSysCache(tuple);
	return dboid;
}

/*
 * user_has_createdb reports whether the current user may create databases:
 * a superuser, or a role with CREATEDB (what dbcommands.c's
 * have_createdb_privilege, static there, reads).
 */
static bool
user_has_createdb(void)
{
	HeapTuple	tuple;
	bool		createdb = false;

	if (superuser())
		return true;
	tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	if (HeapTupleIsValid(tuple))
	{
		createdb = ((Form_pg_authid) GETSTRUCT(tuple))->rolcreatedb;
		ReleaseSysCache(tuple);
	}
	return createdb;
}

/*
 * dropdb_database returns the database DROP DATABASE stmt drops, when the
 * user gets past dropdb's checks before its wait for other sessions: not
 * in a transaction block, the database exists, the user owns it, it is
 * not a template and not the current database; else InvalidOid.
 */
static Oid
dropdb_database(DropdbStmt *stmt, bool top_level)
{
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;

	if (command_refused(top_level, true))
		return InvalidOid;
	dboid = database_lookup(stmt->dbname, &istemplate, &tablespace);
	if (!OidIsValid(dboid) || istemplate || dboid == MyDatabaseId ||
		!DlockDatabaseOwnercheck(dboid, GetUserId()))
		return InvalidOid;
	return dboid;
}

/*
 * createdb_template returns the template CREATE DATABASE stmt copies (the
 * one it names, template1 when it names none), when the user gets past
 * createdb's checks of privileges and names before its wait for other
 * sessions: not in a transaction block, CREATEDB, allowed to make the
 * owner it names (if any) the owner, allowed to copy the template (it is
 * marked datistemplate, or the user owns it), the new name free; else
 * InvalidOid.
 */
static Oid
createdb_template(CreatedbStmt *stmt, bool top_level)
{
	const char *template_name = "template1";
	DefElem    *template_opt = NULL;
	DefElem    *owner_opt = NULL;
	Oid			owner = GetUserId();
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;
	ListCell   *lc;

	if (command_refused(top_level, true) || !user_has_createdb())
		return InvalidOid;
	foreach(lc, stmt->options)
	{
		DefElem    *opt = lfirst(lc);

		/* a second TEMPLATE or OWNER is refused */
		if (strcmp(opt->defname, "template") == 0)
		{
			if (template_opt != NULL)
				return InvalidOid;
			template_opt = opt;
		}
		else if (strcmp(opt->defname, "owner") == 0)
		{
			if (owner_opt != NULL)
				return InvalidOid;
			owner_opt = opt;
		}
	}
	/* TEMPLATE DEFAULT and OWNER DEFAULT have no argument */
	if (template_opt != NULL && template_opt->arg != NULL)
		template_name = defGetString(template_opt);
	if (owner_opt != NULL && owner_opt->arg != NULL)
		owner = get_role_oid(defGetString(owner_opt), true);
	if (!OidIsValid(owner) || !DlockCanSetRole(GetUserId(), owner))
		return InvalidOid;
	dboid = database_lookup(template_name, &istemplate, &tablespace);
	if (!OidIsValid(dboid) ||
		(!istemplate && !DlockDatabaseOwnercheck(dboid, GetUserId())) ||
		OidIsValid(get_database_oid(stmt->dbname, true)))
		return InvalidOid;
	return dboid;
}

/*
 * renamedb_database returns the database ALTER DATABASE ... RENAME stmt
 * renames, when the user gets past RenameDatabase's checks before its
 * wait for other sessions: the database exists, the user owns it and has
 * CREATEDB, the new name is free, it is not the current database; else
 * InvalidOid.  (It may run in a transaction block.)
 */
static Oid
renamedb_database(RenameStmt *stmt)
{
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;

	if (command_refused(false, false))
		return InvalidOid;
	dboid = database_lookup(stmt->subname, &istemplate, &tablespace);
	if (!OidIsValid(dboid) || dboid == MyDatabaseId ||
		!DlockDatabaseOwnercheck(dboid, GetUserId()) || !user_has_createdb() ||
		OidIsValid(get_database_oid(stmt->newname, true)))
		return InvalidOid;
	return dboid;
}

/*
 * movedb_database returns the database ALTER DATABASE ... SET TABLESPACE
 * stmt moves, when the user gets past AlterDatabase's and movedb's checks
 * before its wait for other sessions: the tablespace is its only option,
 * not in a transaction block, the database exists, the user owns it, it
 * is not the current database, the tablespace exists, the user may
 * create in it, it is not pg_global and not the database's tablespace
 * already (a no-op that waits for nobody); else InvalidOid.  Any other
 * ALTER DATABASE: InvalidOid.
 */
static Oid
movedb_database(AlterDatabaseStmt *stmt, bool top_level)
{
	DefElem    *opt;
	Oid			dboid;
	bool		istemplate;
	Oid			tablespace;
	Oid			target;

	if (list_length(stmt->options) != 1)
		return InvalidOid;
	opt = linitial(stmt->options);
	if (strcmp(opt->defname, "tablespace") != 0 ||
		command_refused(top_level, true))
		return InvalidOid;
	dboid = database_lookup(stmt->dbname, &istemplate, &tablespace);
	if (!OidIsValid(dboid) || dboid == MyDatabaseId ||
		!DlockDatabaseOwnercheck(dboid, GetUserId()))
		return InvalidOid;
	target = get_tablespace_oid(defGetString(opt), true);
	if (!OidIsValid(target) || target == GLOBALTABLESPACE_OID ||
		target == tablespace || !DlockTablespaceCreateOk(target, GetUserId()))
		return InvalidOid;
	return dboid;
}

/*
 * command_database returns the database a utility statement needs no
 * other process connected to (DROP DATABASE, CREATE DATABASE from a
 * template, ALTER DATABASE ... RENAME or SET TABLESPACE), when the
 * current user can run it that far (design.md §16), or InvalidOid;
 * top_level says it is a top-level statement, *is_drop that it is a DROP
 * DATABASE.
 */
static Oid
command_database(Node *stmt, bool top_level, bool *is_drop)
{
	*is_drop = false;
	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			*is_drop = true;
			return dropdb_database((DropdbStmt *) stmt, top_level);
		case T_CreatedbStmt:
			return createdb_template((CreatedbStmt *) stmt, top_level);
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
				return renamedb_database((RenameStmt *) stmt);
			break;
		case T_AlterDatabaseStmt:
			return movedb_database((AlterDatabaseStmt *) stmt, top_level);
		default:
			break;
	}
	return InvalidOid;
}

/*
 * notifier_stop_for stops the notifier of database dboid for a database
 * command of this backend: sets this backend's stop mark on it (no
 * notifier of it starts, attaches or keeps running while the mark
 * stays), sets its notifier's latch and waits up to NOTIFIER_EXIT_WAIT_MS
 * for it to send its exit event and exit, then sends it SIGTERM and waits
 * until NOTIFIER_STOP_WAIT_MS have passed.  Takes the lock; obeys
 * interrupts while it waits (the caller clears the mark on error).
 */
static void
notifier_stop_for(Oid dboid)
{
	NotifierSlot *slot = NULL;
	int			slotno;
	int			pid = 0;
	int			procno = 0;
	bool		signalled = false;
	TimestampTz start;

	DlockNotifierStopMark(dboid);
	LWLockAcquire(DlockNotifierShmem->lock, LW_SHARED);
	slotno = DlockNotifierSlotOfDatabase(dboid);
	if (slotno >= 0)
		slot = &DlockNotifierShmem->slots[slotno];
	if (slot != NULL && DlockNotifierSlotHasNotifier(slot))
	{
		pid = slot->pid;
		procno = slot->procno;
	}
	LWLockRelease(DlockNotifierShmem->lock);

	if (pid == 0)
		return;
	ereport(LOG,
			(errmsg("dlock: stopping the notifier of database %u (pid %d) for a database command",
					dboid, pid)));
	SetLatch(DlockProcLatch(procno));
	start = GetCurrentTimestamp();
	while (BackendPidGetProc(pid) != NULL)
	{
		TimestampTz now = GetCurrentTimestamp();

		if (TimestampDifferenceExceeds(start, now, NOTIFIER_STOP_WAIT_MS))
			break;
		if (!signalled &&
			TimestampDifferenceExceeds(start, now, NOTIFIER_EXIT_WAIT_MS))
		{
			bool		alive;

			/* it did not leave by itself: it may wait for a lock */
			LWLockAcquire(DlockNotifierShmem->lock, LW_SHARED);
			alive = DlockNotifierSlotHasNotifier(slot) && slot->pid == pid;
			LWLockRelease(DlockNotifierShmem->lock);
			if (alive)
				(void) kill(pid, SIGTERM);
			signalled = true;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 NOTIFIER_STOP_POLL_MS, DlockNotifierWaitEvent());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * notifier_resume clears this backend's stop mark after its command on
 * database dboid; after a DROP DATABASE that succeeded (dropped), frees
 * the database's slot and drops its records; otherwise starts a notifier
 * when records are queued.  Takes the lock.  Runs on the error path too:
 * raises nothing of its own.
 */
static void
notifier_resume(Oid dboid, bool dropped)
{
	NotifierSlot *slot = NULL;
	int			slotno;
	bool		start = false;
	uint32		generation = 0;

	LWLockAcquire(DlockNotifierShmem->lock, LW_EXCLUSIVE);
	DlockNotifierStopUnmarkLocked();
	slotno = DlockNotifierSlotOfDatabase(dboid);
	if (slotno >= 0)
		slot = &DlockNotifierShmem->slots[slotno];
	if (slot != NULL && dropped)
	{
		/*
		 * None is connected to the dropped database; one that attached but
		 * had not connected yet (when the wait for it ran out) fails to, and
		 * gives the slot up itself (DlockNotifierAtExit).
		 */
		if (!DlockNotifierSlotHasNotifier(slot))
		{
			/* a worker registered for it finds the slot gone */
			slot->state = NOTIFIER_NONE;
			DlockNotifierSlotDropQueued(slot);
			DlockNotifierSlotReset(slot, InvalidOid);
		}
	}
	else if (slot != NULL && slot->head != slot->tail)
		start = DlockNotifierSlotStartWanted(slot, &generation);
	LWLockRelease(DlockNotifierShmem->lock);
	if (start)
		DlockNotifierStart(dboid, slotno, generation);
}

/*
 * run_utility runs a utility statement as PostgreSQL would without dlock's
 * hook: the previous hook, or standard_ProcessUtility.
 */
static void
run_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString, readOnlyTree, context,
						  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * run_stopped runs a database command on database dboid (a DROP DATABASE
 * when is_drop) with the database's notifier stopped, and lets notifiers
 * start again afterwards, also when the command raises.
 */
static void
run_stopped(Oid dboid, bool is_drop, PlannedStmt *pstmt,
			const char *queryString, bool readOnlyTree,
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	PG_TRY();
	{
		notifier_stop_for(dboid);
		run_utility(pstmt, queryString, readOnlyTree, context, params,
					queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		notifier_resume(dboid, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	notifier_resume(dboid, is_drop);
}

/*
 * notifier_utility_hook is dlock's ProcessUtility_hook: before a database
 * command that fails while another process is connected to the database,
 * and that the user can run as far as that check (command_database), it
 * stops that database's notifier, runs the command (the previous hook,
 * or standard_ProcessUtility), and lets notifiers start again, also when
 * the command raises (run_stopped).
 */
static void
notifier_utility_hook(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Oid			dboid = InvalidOid;
	bool		is_drop = false;

	/* one stop mark per backend: a command inside another stops nothing */
	if (DlockNotifierShmem != NULL && !OidIsValid(DlockNotifierMyStopDboid))
		dboid = command_database(pstmt->utilityStmt,
								 context == PROCESS_UTILITY_TOPLEVEL, &is_drop);
	if (OidIsValid(dboid))
		run_stopped(dboid, is_drop, pstmt, queryString, readOnlyTree, context,
					params, queryEnv, dest, qc);
	else
		run_utility(pstmt, queryString, readOnlyTree, context, params,
					queryEnv, dest, qc);
}

/*
 * DlockNotifierCommandInit installs the ProcessUtility_hook (chaining the
 * previous one) when dlock is being preloaded, so that every backend has
 * it; _PG_init calls it.
 */
void
DlockNotifierCommandInit(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = notifier_utility_hook;
}
