-- One renewal of the lease 'renewed' held with token TOK.  A renewal that
-- returns false aborts the client (\shell false), which stops the
-- benchmark: it must not count.  Variable: tok.
SELECT dlock_renew('renewed', :tok, '1 hour')::int AS ok \gset
\if :ok = 0
\shell false
\endif
