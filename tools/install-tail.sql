/*
 * What a fresh install does after creating the objects, and an update does
 * not: record in dlock_token_origin that this server issues the tokens of
 * the new sequence (src/token.c).  Without that the first grant would jump
 * the sequence, as it must wherever the issuer is unknown (an update from
 * 1.0).  The function is needed only here.  tools/gen-install-script
 * appends this file to the full install script.
 */
CREATE FUNCTION @extschema@.dlock_token_init()
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'dlock_token_init'
LANGUAGE C VOLATILE STRICT;

SELECT @extschema@.dlock_token_init();

DROP FUNCTION @extschema@.dlock_token_init();
