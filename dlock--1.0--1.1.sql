/* dlock--1.0--1.1.sql: token jumps (tokens stay increasing across failover and restore) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.1'" to load this file. \quit

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

/*
 * Backends cache where the extension's relations are until the lease
 * table's relcache entry is invalidated.  Re-setting its (unchanged)
 * fillfactor sends that invalidation, so running sessions find the new
 * register at their next call instead of going on without token jumps.
 */
ALTER TABLE @extschema@.dlock_lease SET (fillfactor = 70);
