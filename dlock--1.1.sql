/* dlock--1.1.sql: fenced leases, version 1.1 (full install script) */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION dlock" to load this file. \quit

/*
 * Token state.  Every fencing token comes from this sequence, so tokens are
 * unique and increasing across all lock names of the database.  Only the
 * extension's owner may use it; the C functions switch to that owner.
 */
CREATE SEQUENCE @extschema@.dlock_token_seq
    AS pg_catalog.int8
    MINVALUE 1
    NO CYCLE;

COMMENT ON SEQUENCE @extschema@.dlock_token_seq IS
    'dlock: source of fencing tokens; never write it directly';

/*
 * One row per lock name: the current (or last) lease.  The row outlives the
 * lease so that the last token stays known for fencing.  Only lock_name is
 * indexed so that renewals and takeovers can be HOT updates; fillfactor
 * leaves room on each page for them.  holder_role is a regrole: the role's
 * identity survives a rename, and pg_dump writes it as a role name, so a
 * restore maps it to the role of that name (which must exist).
 */
CREATE TABLE @extschema@.dlock_lease (
    lock_name   pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    token       pg_catalog.int8 NOT NULL,
    owner       pg_catalog.text NOT NULL,
    holder_role pg_catalog.regrole NOT NULL,
    acquired_at pg_catalog.timestamptz NOT NULL,
    renewed_at  pg_catalog.timestamptz NOT NULL,
    expires_at  pg_catalog.timestamptz NOT NULL,
    released    pg_catalog.bool NOT NULL,
    CONSTRAINT dlock_lease_pkey PRIMARY KEY (lock_name)
) WITH (fillfactor = 70);

COMMENT ON TABLE @extschema@.dlock_lease IS
    'dlock: lease state, one row per lock name; read it through dlock_leases, change it only through the dlock functions';

REVOKE ALL ON TABLE @extschema@.dlock_lease FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.dlock_token_seq FROM PUBLIC;

/*
 * pg_dump must carry the leases and the token state, or a restored database
 * could hand out tokens again.  The target schema is current_schema() while
 * this script runs, which avoids quoting @extschema@ inside a literal.
 */
SELECT pg_catalog.pg_extension_config_dump(c.oid, '')
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
 WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
   AND c.relname OPERATOR(pg_catalog.=) 'dlock_lease'::pg_catalog.name;

SELECT pg_catalog.pg_extension_config_dump(c.oid, '')
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
 WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
   AND c.relname OPERATOR(pg_catalog.=) 'dlock_token_seq'::pg_catalog.name;

/*
 * Token jumps (see src/token.c): a durable register holding a hash of the
 * identity (system identifier, timeline, database, token sequence) of the
 * server that last issued tokens.  A sequence, because sequences are
 * non-transactional and WAL-logged; only setval() ever writes it, never
 * nextval().  When a server with another identity issues the next token,
 * the token sequence first jumps ahead, to the server clock in
 * microseconds.  Private like the token sequence.
 */
CREATE SEQUENCE @extschema@.dlock_token_origin
    AS pg_catalog.int8
    MINVALUE 0
    NO CYCLE;

COMMENT ON SEQUENCE @extschema@.dlock_token_origin IS
    'dlock: identity of the server that last issued tokens (a hash); never write it directly';

REVOKE ALL ON SEQUENCE @extschema@.dlock_token_origin FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump(c.oid, '')
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
 WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
   AND c.relname OPERATOR(pg_catalog.=) 'dlock_token_origin'::pg_catalog.name;

CREATE VIEW @extschema@.dlock_leases AS
SELECT l.lock_name,
       l.token,
       l.owner,
       pg_catalog.pg_get_userbyid(l.holder_role) AS holder_role,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       l.released,
       (NOT l.released
        AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS live
  FROM @extschema@.dlock_lease l;

COMMENT ON VIEW @extschema@.dlock_leases IS
    'dlock: one row per lock name with its current or last lease; live is judged by the server clock now';

GRANT SELECT ON @extschema@.dlock_leases TO PUBLIC;

CREATE FUNCTION @extschema@.dlock_acquire(
    lock_name pg_catalog.text,
    ttl pg_catalog.interval,
    wait pg_catalog.interval DEFAULT '0'::pg_catalog.interval,
    owner pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'dlock_acquire'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_acquire(pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text) IS
    'dlock: take the lease on lock_name for ttl, waiting up to wait; returns a new fencing token, or NULL when another lease holds the name';

CREATE FUNCTION @extschema@.dlock_renew(
    lock_name pg_catalog.text,
    token pg_catalog.int8,
    ttl pg_catalog.interval)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'dlock_renew'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_renew(pg_catalog.text, pg_catalog.int8, pg_catalog.interval) IS
    'dlock: extend the live lease (lock_name, token) to now + ttl; false when the token no longer holds it';

CREATE FUNCTION @extschema@.dlock_release(
    lock_name pg_catalog.text,
    token pg_catalog.int8)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'dlock_release'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_release(pg_catalog.text, pg_catalog.int8) IS
    'dlock: end the live lease (lock_name, token) now; false when the token does not hold it';

CREATE FUNCTION @extschema@.dlock_break(
    lock_name pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'dlock_break'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_break(pg_catalog.text) IS
    'dlock: end whatever live lease holds lock_name (for operators); true when one was ended';

GRANT EXECUTE ON FUNCTION @extschema@.dlock_acquire(pg_catalog.text, pg_catalog.interval, pg_catalog.interval, pg_catalog.text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dlock_renew(pg_catalog.text, pg_catalog.int8, pg_catalog.interval) TO PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.dlock_release(pg_catalog.text, pg_catalog.int8) TO PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.dlock_break(pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION @extschema@.dlock_fence()
RETURNS trigger
AS 'MODULE_PATHNAME', 'dlock_fence'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.dlock_fence() IS
    'dlock: BEFORE INSERT OR UPDATE row trigger rejecting writes whose fencing token is not current; arguments: lock name template, token column [, latest | live]';

GRANT EXECUTE ON FUNCTION @extschema@.dlock_fence() TO PUBLIC;

CREATE FUNCTION @extschema@.dlock_purge(
    older_than pg_catalog.interval)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'dlock_purge'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.dlock_purge(pg_catalog.interval) IS
    'dlock: delete the rows of leases that ended more than older_than ago (for operators); returns how many';

REVOKE EXECUTE ON FUNCTION @extschema@.dlock_purge(pg_catalog.interval) FROM PUBLIC;

/*
 * Record in dlock_token_origin that this server issues the tokens of the
 * new sequence (src/token.c); without that the first grant would jump the
 * sequence, as it must wherever the issuer is unknown.  The function is
 * needed only here.
 */
CREATE FUNCTION @extschema@.dlock_token_init()
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'dlock_token_init'
LANGUAGE C VOLATILE STRICT;

SELECT @extschema@.dlock_token_init();

DROP FUNCTION @extschema@.dlock_token_init();
