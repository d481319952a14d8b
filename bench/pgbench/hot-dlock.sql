-- One hot name: wait up to 10 s for the lease, then release it at once.
-- A wait that ran out gives NULL (0 here): no release then.
SELECT coalesce(dlock_acquire('hot', '30 s', '10 s'), 0) AS tok \gset
\if :tok
SELECT dlock_release('hot', :tok);
\endif
