/*-------------------------------------------------------------------------
 *
 * src/compat.h
 *	  Every PostgreSQL-version difference dlock cares about, in one place.
 *
 * No other file tests PG_VERSION_NUM: they use the macros and inline
 * wrappers below.  Target is PostgreSQL 15; 13 to 17 should compile.
 *
 * Concurrency: none; this header only renames things.
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_COMPAT_H
#define DLOCK_COMPAT_H

#include "postgres.h"

#include "access/tableam.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

/* MarkGUCPrefixReserved() replaced EmitWarningsOnPlaceholders() in 15. */
#if PG_VERSION_NUM < 150000
#define DlockReserveGucPrefix(prefix) EmitWarningsOnPlaceholders(prefix)
#else
#define DlockReserveGucPrefix(prefix) MarkGUCPrefixReserved(prefix)
#endif

/*
 * The wait event shown in pg_stat_activity while an acquire waits.  Custom
 * wait event names (DlockLeaseWait) need PostgreSQL 17; before that the
 * generic "Extension" event is all an extension can report.
 */
#define DLOCK_WAIT_EVENT PG_WAIT_EXTENSION

/*
 * shmem_request_hook arrived in 15; before it, shared memory is requested
 * directly from _PG_init.
 */
#define DLOCK_HAVE_SHMEM_REQUEST_HOOK (PG_VERSION_NUM >= 150000)

/* This backend's PGPROC number, and the latch of the PGPROC numbered n. */
#if PG_VERSION_NUM >= 170000
#define DlockMyProcNumber()		MyProcNumber
#else
#define DlockMyProcNumber()		(MyProc->pgprocno)
#endif
#define DlockProcLatch(n)		(&GetPGProcByNumber(n)->procLatch)

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

#endif							/* DLOCK_COMPAT_H */
