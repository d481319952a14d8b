/*-------------------------------------------------------------------------
 *
 * src/compat.h
 *	  Every PostgreSQL-version difference dlock cares about, in one place.
 *
 * No other file tests PG_VERSION_NUM: they use the macros and inline
 * wrappers below.  dlock supports PostgreSQL 15, 17 and 18 (tested) and
 * should build on 16 (not tested: no server to test it on).
 *
 * Concurrency: none; this header only renames things.  DlockWaitEvent()
 * and DlockNotifierWaitEvent() register dlock's wait events on first use
 * (PostgreSQL 17 and later), which takes core's WaitEventCustomLock
 * briefly, once per backend, before the first sleep.  That can raise (too
 * many custom wait events in the cluster); they are called with no lock
 * of dlock's held.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_COMPAT_H
#define DLOCK_COMPAT_H

#include "access/genam.h"
#include "access/tableam.h"
#include "catalog/pg_database.h"
#include "catalog/pg_tablespace.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/relcache.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000
#error "dlock needs PostgreSQL 15 or later"
#endif

/* The varlena macros (VARSIZE_ANY and the like) moved to varatt.h in 16. */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * DlockWaitEvent returns the wait event shown in pg_stat_activity while an
 * acquire waits: "DlockLeaseWait" (type Extension) from PostgreSQL 17 on,
 * registered on first use; before 17 an extension can only report the
 * generic "Extension".
 */
#define DLOCK_WAIT_EVENT_NAME	"DlockLeaseWait"

#if PG_VERSION_NUM >= 170000
static inline uint32
DlockWaitEvent(void)
{
	static uint32 wait_event = 0;

	if (wait_event == 0)
		wait_event = WaitEventExtensionNew(DLOCK_WAIT_EVENT_NAME);
	Assert(wait_event != 0);
	return wait_event;
}
#else
#define DlockWaitEvent()		((uint32) PG_WAIT_EXTENSION)
#endif

/*
 * DlockNotifierWaitEvent returns the wait event of the notifier
 * (notifier.c) while it sleeps, and of a backend waiting for a notifier to
 * stop: "DlockNotifier" from PostgreSQL 17 on, "Extension" before.
 */
#define DLOCK_NOTIFIER_WAIT_EVENT_NAME	"DlockNotifier"

#if PG_VERSION_NUM >= 170000
static inline uint32
DlockNotifierWaitEvent(void)
{
	static uint32 wait_event = 0;

	if (wait_event == 0)
		wait_event = WaitEventExtensionNew(DLOCK_NOTIFIER_WAIT_EVENT_NAME);
	Assert(wait_event != 0);
	return wait_event;
}
#else
#define DlockNotifierWaitEvent()	((uint32) PG_WAIT_EXTENSION)
#endif

/*
 * A function that never returns: pg_noreturn from PostgreSQL 18 on (C11's
 * _Noreturn), pg_attribute_noreturn() before.  Written among the
 * declaration specifiers: static DLOCK_NORETURN void f(...).
 */
#if PG_VERSION_NUM >= 180000
#define DLOCK_NORETURN	pg_noreturn
#else
#define DLOCK_NORETURN	pg_attribute_noreturn()
#endif

/*
 * Whether an interval is finite: PostgreSQL 17 added 'infinity' and
 * '-infinity' intervals; before, every interval is finite.
 */
#if PG_VERSION_NUM >= 170000
#define DlockIntervalIsFinite(iv)	(!INTERVAL_NOT_FINITE(iv))
#else
#define DlockIntervalIsFinite(iv)	((void) (iv), true)
#endif

/* This backend's PGPROC number, and the latch of the PGPROC numbered n. */
#if PG_VERSION_NUM >= 170000
#define DlockMyProcNumber()		MyProcNumber
#else
#define DlockMyProcNumber()		(MyProc->pgprocno)
#endif
#define DlockProcLatch(n)		(&GetPGProcByNumber(n)->procLatch)

/*
 * index_beginscan gained an instrumentation argument in PostgreSQL 18
 * (NULL: no EXPLAIN ANALYZE counts).
 */
#if PG_VERSION_NUM >= 180000
#define DlockIndexBeginScan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define DlockIndexBeginScan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * RelationGetPrimaryKeyIndex can skip a deferrable primary key from
 * PostgreSQL 18 on; dlock's is never deferrable, and the lookup by key
 * needs an immediate one.
 */
#if PG_VERSION_NUM >= 180000
#define DlockPrimaryKeyIndex(rel)	RelationGetPrimaryKeyIndex((rel), false)
#else
#define DlockPrimaryKeyIndex(rel)	RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * LockHeldByMe takes whether a stronger mode counts from PostgreSQL 17 on
 * (dlock always asks about the exact mode).
 */
#if PG_VERSION_NUM >= 170000
#define DlockLockHeldByMe(tag, mode)	LockHeldByMe((tag), (mode), false)
#else
#define DlockLockHeldByMe(tag, mode)	LockHeldByMe((tag), (mode))
#endif

/*
 * LockAcquireExtended, waiting, returning LOCKACQUIRE_NOT_AVAIL instead of
 * raising 53200 when the shared lock table has no room; PostgreSQL 18
 * added whether a failure to lock without waiting is logged.
 */
#if PG_VERSION_NUM >= 180000
#define DlockLockAcquireNoMemoryError(tag, mode) \
	LockAcquireExtended((tag), (mode), false, false, false, NULL, false)
#else
#define DlockLockAcquireNoMemoryError(tag, mode) \
	LockAcquireExtended((tag), (mode), false, false, false, NULL)
#endif

/*
 * table_tuple_update reports whether the new version needs index entries:
 * a bool before PG16, a TU_UpdateIndexes after.
 */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes DlockUpdateIndexes;
#define DlockNeedsIndexInsert(u)	((u) != TU_None)
#define DlockInsertIndexTuples(rri, slot, estate, u) \
	((void) ExecInsertIndexTuples((rri), (slot), (estate), true, false, NULL, NIL, \
								  (u) == TU_Summarizing))
#else
typedef bool DlockUpdateIndexes;
#define DlockNeedsIndexInsert(u)	(u)
#define DlockInsertIndexTuples(rri, slot, estate, u) \
	((void) ExecInsertIndexTuples((rri), (slot), (estate), true, false, NULL, NIL))
#endif

/*
 * The relfilenode of a relation (the fence cache's key), and whether the
 * current transaction created it (TRUNCATE, or a new relation; the "first"
 * field stays set after a ROLLBACK TO has forgotten the newest one):
 * RelFileNode became RelFileLocator in PostgreSQL 16.
 */
#if PG_VERSION_NUM >= 160000
#define DlockRelFileNumber(rel)		((Oid) (rel)->rd_locator.relNumber)
#define DlockRelFileNumberIsNew(rel) \
	((rel)->rd_createSubid != InvalidSubTransactionId || \
	 (rel)->rd_newRelfilelocatorSubid != InvalidSubTransactionId || \
	 (rel)->rd_firstRelfilelocatorSubid != InvalidSubTransactionId)
#else
#define DlockRelFileNumber(rel)		((Oid) (rel)->rd_node.relNode)
#define DlockRelFileNumberIsNew(rel) \
	((rel)->rd_createSubid != InvalidSubTransactionId || \
	 (rel)->rd_newRelfilenodeSubid != InvalidSubTransactionId || \
	 (rel)->rd_firstRelfilenodeSubid != InvalidSubTransactionId)
#endif

/*
 * DlockRestrictSearchPath pins search_path to "pg_catalog, pg_temp" at the
 * current GUC nest level (call NewGUCNestLevel first; AtEOXact_GUC undoes
 * it), as PostgreSQL does around index functions it runs for maintenance:
 * RestrictSearchPath() from PostgreSQL 17 on, the same setting before.
 */
#if PG_VERSION_NUM >= 170000
#define DlockRestrictSearchPath()	RestrictSearchPath()
#else
#define DLOCK_SAFE_SEARCH_PATH		"pg_catalog, pg_temp"
#define DlockRestrictSearchPath() \
	((void) set_config_option("search_path", DLOCK_SAFE_SEARCH_PATH, \
							  PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, \
							  true, 0, false))
#endif

/*
 * Whether the setting transaction_timeout exists (PostgreSQL 17 on).
 */
#if PG_VERSION_NUM >= 170000
#define DLOCK_HAS_TRANSACTION_TIMEOUT	true
#else
#define DLOCK_HAS_TRANSACTION_TIMEOUT	false
#endif

/*
 * Whether role roleid may create objects in tablespace spcoid (ACL_CREATE):
 * pg_tablespace_aclcheck before PostgreSQL 16, object_aclcheck from 16 on.
 */
#if PG_VERSION_NUM >= 160000
#define DlockTablespaceCreateOk(spcoid, roleid) \
	(object_aclcheck(TableSpaceRelationId, (spcoid), (roleid), ACL_CREATE) == ACLCHECK_OK)
#else
#define DlockTablespaceCreateOk(spcoid, roleid) \
	(pg_tablespace_aclcheck((spcoid), (roleid), ACL_CREATE) == ACLCHECK_OK)
#endif

/*
 * Whether role member may make role the owner of what it creates, as
 * CREATE DATABASE ... OWNER checks it: membership before PostgreSQL 16
 * (check_is_member_of_role), the right to SET ROLE to it from 16 on
 * (check_can_set_role).
 */
#if PG_VERSION_NUM >= 160000
#define DlockCanSetRole(member, role)	member_can_set_role((member), (role))
#else
#define DlockCanSetRole(member, role)	is_member_of_role((member), (role))
#endif

/*
 * DlockMayActFor reports whether role member may act for role, the holder
 * role of a lease: renew or release it, keep it from being taken over:
 * it has the role's privileges or may SET ROLE to it (superusers may for
 * every role).  From PostgreSQL 16 on a membership granted WITH INHERIT
 * FALSE, SET FALSE (as CREATEROLE's own grants are) gives neither, and
 * does not count; before 16 every member may SET ROLE.
 */
#define DlockMayActFor(member, role) \
	(has_privs_of_role((member), (role)) || DlockCanSetRole((member), (role)))

/*
 * Whether role roleid owns (or has the privileges of the owner of) database
 * dboid: pg_database_ownercheck before PostgreSQL 16, object_ownercheck
 * from 16 on.
 */
#if PG_VERSION_NUM >= 160000
#define DlockDatabaseOwnercheck(dboid, roleid) \
	object_ownercheck(DatabaseRelationId, (dboid), (roleid))
#else
#define DlockDatabaseOwnercheck(dboid, roleid) \
	pg_database_ownercheck((dboid), (roleid))
#endif

/*
 * A set-returning function's materialized result (funcapi.h): 15.0 named
 * it SetSingleFuncCall, 15.1 on InitMaterializedSRF.
 */
#if PG_VERSION_NUM < 150001
#define InitMaterializedSRF(fcinfo, flags)	SetSingleFuncCall((fcinfo), (flags))
#endif

#endif							/* DLOCK_COMPAT_H */
