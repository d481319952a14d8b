/* dlock--1.1--1.2.sql: fencing everywhere (dlock_check, DELETE and TRUNCATE, mode 'seen'); many names at once; waiters, counters and the notifier */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.2'" to load this file. \quit

/*
 * Fencing mode 'seen' (see src/mark.c): for a table in a database that is
 * not the lease store, the highest token accepted so far for each lock
 * name, kept per owner of the fenced tables (the tables of one owner share
 * their marks; another owner's tables, a role's own table among them,
 * cannot move them).  A write with a lower token is rejected; a higher one
 * raises the mark.  Every accepted writer holds the name's mark row locked
 * until its transaction ends, which orders the writers of one lock.
 * Private like the lease table; pg_dump carries it (the owner as a role
 * name), or a restored database would forget the tokens it has seen.
 */
CREATE TABLE @extschema@.dlock_fence_mark (
    table_owner pg_catalog.regrole NOT NULL,
    lock_name pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    token     pg_catalog.int8 NOT NULL,
    raised_at pg_catalog.timestamptz NOT NULL,
    CONSTRAINT dlock_fence_mark_pkey PRIMARY KEY (table_owner, lock_name)
);

COMMENT ON TABLE @extschema@.dlock_fence_mark IS
    'dlock: fencing mode seen, the highest token accepted in this database per owner of the fenced tables and lock name; never write it directly';

REVOKE ALL ON TABLE @extschema@.dlock_fence_mark FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump(c.oid, '')
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
 WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
   AND c.relname OPERATOR(pg_catalog.=) 'dlock_fence_mark'::pg_catalog.name;

/*
 * The fence as a call.  Not STRICT: a NULL token is a rejection (55T01),
 * a NULL name or mode an error (22004), never a silent NULL.
 */
CREATE FUNCTION @extschema@.dlock_check(
    lock_name pg_catalog.text,
    token pg_catalog.int8,
    mode pg_catalog.text DEFAULT 'latest')
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'dlock_check'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_check(pg_catalog.text, pg_catalog.int8, pg_catalog.text) IS
    'dlock: the fence as a call; returns token when it passes for lock_name in mode (latest, live or seen), raises 55T01 otherwise, and remembers the check for the rest of the transaction';

GRANT EXECUTE ON FUNCTION @extschema@.dlock_check(pg_catalog.text, pg_catalog.int8, pg_catalog.text) TO PUBLIC;

CREATE FUNCTION @extschema@.dlock_purge_marks(
    older_than pg_catalog.interval)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'dlock_purge_marks'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_purge_marks(pg_catalog.interval) IS
    'dlock: delete the fencing marks (mode seen) last raised more than older_than ago (for operators); returns how many';

REVOKE EXECUTE ON FUNCTION @extschema@.dlock_purge_marks(pg_catalog.interval) FROM PUBLIC;

/*
 * Many names at once (src/lease_set.c).  Not STRICT, like the single
 * calls: NULL arguments and elements are errors (22004).  The array forms
 * of renew and release have names of their own: as overloads of
 * dlock_renew and dlock_release they would make calls with untyped
 * parameters (dlock_release($1, $2) from drivers that send none)
 * ambiguous.
 */
CREATE FUNCTION @extschema@.dlock_acquire_all(
    lock_names pg_catalog.text[],
    ttl pg_catalog.interval,
    wait pg_catalog.interval DEFAULT '0'::pg_catalog.interval,
    owner pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.int8[]
AS 'MODULE_PATHNAME', 'dlock_acquire_all'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_acquire_all(pg_catalog.text[], pg_catalog.interval, pg_catalog.interval, pg_catalog.text) IS
    'dlock: take the leases on all lock_names for ttl or none, waiting up to wait; returns one new fencing token per name in the order given, or NULL';

CREATE FUNCTION @extschema@.dlock_acquire_any(
    lock_names pg_catalog.text[],
    ttl pg_catalog.interval,
    wait pg_catalog.interval DEFAULT '0'::pg_catalog.interval,
    owner pg_catalog.text DEFAULT NULL)
RETURNS TABLE (lock_name pg_catalog.text, token pg_catalog.int8)
AS 'MODULE_PATHNAME', 'dlock_acquire_any'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 1;

COMMENT ON FUNCTION @extschema@.dlock_acquire_any(pg_catalog.text[], pg_catalog.interval, pg_catalog.interval, pg_catalog.text) IS
    'dlock: take the lease on the first free name of lock_names for ttl, waiting up to wait for any to free; returns it with its new fencing token, or no row';

CREATE FUNCTION @extschema@.dlock_renew_each(
    lock_names pg_catalog.text[],
    tokens pg_catalog.int8[],
    ttl pg_catalog.interval)
RETURNS pg_catalog.bool[]
AS 'MODULE_PATHNAME', 'dlock_renew_each'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_renew_each(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval) IS
    'dlock: dlock_renew for each pair of lock_names and tokens, in one statement; returns one boolean per pair';

CREATE FUNCTION @extschema@.dlock_release_each(
    lock_names pg_catalog.text[],
    tokens pg_catalog.int8[])
RETURNS pg_catalog.bool[]
AS 'MODULE_PATHNAME', 'dlock_release_each'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_release_each(pg_catalog.text[], pg_catalog.int8[]) IS
    'dlock: dlock_release for each pair of lock_names and tokens, in one statement; returns one boolean per pair';

GRANT EXECUTE ON FUNCTION @extschema@.dlock_acquire_all(pg_catalog.text[], pg_catalog.interval, pg_catalog.interval, pg_catalog.text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dlock_acquire_any(pg_catalog.text[], pg_catalog.interval, pg_catalog.interval, pg_catalog.text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dlock_renew_each(pg_catalog.text[], pg_catalog.int8[], pg_catalog.interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dlock_release_each(pg_catalog.text[], pg_catalog.int8[]) TO PUBLIC;

/*
 * What operators see (src/wait.c, src/stats.c): the waiting calls of this
 * database, and the counters of every database since the server start.
 * Both read shared memory, so they have rows only with
 * shared_preload_libraries = 'dlock'.  The functions behind them stay
 * executable by PUBLIC, as the views are readable by it: they show no
 * lease data the leases view does not, and only this database's waiters.
 */
CREATE FUNCTION @extschema@.dlock_waiters_read(
    OUT pid pg_catalog.int4,
    OUT datid pg_catalog.oid,
    OUT roleid pg_catalog.oid,
    OUT lock_name pg_catalog.text,
    OUT kind pg_catalog.text,
    OUT names pg_catalog.int4,
    OUT waiting_since pg_catalog.timestamptz,
    OUT wait_until pg_catalog.timestamptz,
    OUT "position" pg_catalog.int4,
    OUT attempts pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_waiters_read'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.dlock_waiters_read() IS
    'dlock: the waiting calls of this database, for the dlock_waiters view';

CREATE VIEW @extschema@.dlock_waiters AS
SELECT w.pid,
       d.datname AS database,
       pg_catalog.pg_get_userbyid(w.roleid) AS role,
       w.lock_name,
       w.kind,
       w.names,
       w.waiting_since,
       w.wait_until,
       w."position",
       w.attempts
  FROM @extschema@.dlock_waiters_read() w
  LEFT JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) w.datid
 ORDER BY w.lock_name COLLATE "C", w."position" NULLS LAST, w.waiting_since, w.pid;

COMMENT ON VIEW @extschema@.dlock_waiters IS
    'dlock: one row per call waiting for a lease in this database; position 1 is next in its queue (needs shared_preload_libraries = dlock)';

GRANT SELECT ON @extschema@.dlock_waiters TO PUBLIC;

CREATE FUNCTION @extschema@.dlock_stats_read(
    OUT datid pg_catalog.oid,
    OUT grants_new pg_catalog.int8,
    OUT grants_after_release pg_catalog.int8,
    OUT takeovers pg_catalog.int8,
    OUT refusals pg_catalog.int8,
    OUT waits pg_catalog.int8,
    OUT wait_timeouts pg_catalog.int8,
    OUT renewals pg_catalog.int8,
    OUT renewals_failed pg_catalog.int8,
    OUT releases pg_catalog.int8,
    OUT releases_failed pg_catalog.int8,
    OUT breaks pg_catalog.int8,
    OUT purged pg_catalog.int8,
    OUT fence_latest_accepted pg_catalog.int8,
    OUT fence_latest_rejected pg_catalog.int8,
    OUT fence_live_accepted pg_catalog.int8,
    OUT fence_live_rejected pg_catalog.int8,
    OUT fence_seen_accepted pg_catalog.int8,
    OUT fence_seen_rejected pg_catalog.int8,
    OUT token_jumps pg_catalog.int8,
    OUT stats_reset pg_catalog.timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_stats_read'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.dlock_stats_read() IS
    'dlock: the counters of every database, for the dlock_stats view';

CREATE VIEW @extschema@.dlock_stats AS
SELECT s.datid,
       d.datname,
       s.grants_new,
       s.grants_after_release,
       s.takeovers,
       s.refusals,
       s.waits,
       s.wait_timeouts,
       s.renewals,
       s.renewals_failed,
       s.releases,
       s.releases_failed,
       s.breaks,
       s.purged,
       s.fence_latest_accepted,
       s.fence_latest_rejected,
       s.fence_live_accepted,
       s.fence_live_rejected,
       s.fence_seen_accepted,
       s.fence_seen_rejected,
       s.token_jumps,
       s.stats_reset
  FROM @extschema@.dlock_stats_read() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) s.datid;

COMMENT ON VIEW @extschema@.dlock_stats IS
    'dlock: counters per database since the server start or dlock_stats_reset() (needs shared_preload_libraries = dlock)';

GRANT SELECT ON @extschema@.dlock_stats TO PUBLIC;

CREATE FUNCTION @extschema@.dlock_stats_reset()
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'dlock_stats_reset'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_stats_reset() IS
    'dlock: set this database''s counters in dlock_stats to zero';

REVOKE ALL ON FUNCTION @extschema@.dlock_stats_reset() FROM PUBLIC;

/*
 * Lease events (src/events.c, src/notifier.c): the notifier of each
 * database, the background worker that sends dlock's NOTIFYs on channel
 * dlock.  A listener accepts a notification on that channel only from the
 * pid this view shows for its database (docs/sql-reference.md, "Lease
 * events").  Readable by PUBLIC: listeners of any role need it.
 */
CREATE FUNCTION @extschema@.dlock_notifier_read(
    OUT datid pg_catalog.oid,
    OUT pid pg_catalog.int4,
    OUT started_at pg_catalog.timestamptz,
    OUT events_sent pg_catalog.int8,
    OUT events_dropped pg_catalog.int8,
    OUT events_queued pg_catalog.int8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'dlock_notifier_read'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.dlock_notifier_read() IS
    'dlock: the notifier of every database with one, for the dlock_notifier view';

CREATE VIEW @extschema@.dlock_notifier AS
SELECT n.datid,
       d.datname,
       n.pid,
       n.started_at,
       n.events_sent,
       n.events_dropped,
       n.events_queued
  FROM @extschema@.dlock_notifier_read() n
  LEFT JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) n.datid;

COMMENT ON VIEW @extschema@.dlock_notifier IS
    'dlock: the notifier of each database, whose pid is the sender of dlock''s lease events (needs shared_preload_libraries = dlock)';

GRANT SELECT ON @extschema@.dlock_notifier TO PUBLIC;

COMMENT ON FUNCTION @extschema@.dlock_fence() IS
    'dlock: fencing trigger, BEFORE INSERT, UPDATE or DELETE row trigger or BEFORE TRUNCATE statement trigger; arguments: lock name template, token column [, latest | live | seen]';

/*
 * Backends cache where the extension's relations are until the lease
 * table's relcache entry is invalidated.  Re-setting its (unchanged)
 * fillfactor sends that invalidation, so running sessions find the mark
 * table at their next call.
 */
ALTER TABLE @extschema@.dlock_lease SET (fillfactor = 70);
