/*-------------------------------------------------------------------------
 *
 * src/store_restricted.c
 *	  The store's security-restricted operations: what runs as the lease
 *	  table's owner but may evaluate functions a DBA added (an expression
 *	  or partial index's, a column default's) runs with search_path pinned
 *	  and as a security-restricted operation, as PostgreSQL runs index
 *	  functions during REINDEX or VACUUM (design.md §4).
 *
 * Used by store.c (the SQL statements that may evaluate such functions)
 * and lease_table.c (index entries of an update that is not HOT).
 *
 * Concurrency: none; backend-local state (the user id, the security
 * context and the GUC nest level).
 *
 * Copyright (c) 2026, the dlock authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"

#include "compat.h"
#include "dlock.h"

/*
 * DlockRestrictedBegin makes the code that follows a security-restricted
 * operation with search_path pinned to pg_catalog, pg_temp, as PostgreSQL
 * runs index functions during REINDEX, VACUUM or CREATE INDEX: so an
 * expression or partial index evaluates its functions as the current user
 * (the table's owner here) without the caller's search_path choosing them,
 * and cannot change the session (SET ROLE, temporary tables, GUC changes
 * outlive it).  Pair with DlockRestrictedEnd; on an error, transaction or
 * subtransaction abort restores the context and the settings.
 */
void
DlockRestrictedBegin(DlockRestricted *saved)
{
	GetUserIdAndSecContext(&saved->save_userid, &saved->save_sec_context);
	SetUserIdAndSecContext(saved->save_userid,
						   saved->save_sec_context | SECURITY_RESTRICTED_OPERATION);
	saved->save_nestlevel = NewGUCNestLevel();
	DlockRestrictSearchPath();
}

/*
 * DlockRestrictedEnd undoes DlockRestrictedBegin: rolls back every
 * setting changed since (the search_path included) and restores the
 * security context.
 */
void
DlockRestrictedEnd(DlockRestricted *saved)
{
	Assert(InSecurityRestrictedOperation());
	AtEOXact_GUC(false, saved->save_nestlevel);
	SetUserIdAndSecContext(saved->save_userid, saved->save_sec_context);
}
