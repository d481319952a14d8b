-- The same check in mode 'latest' (bench/workloads/53-live-wal.sh): it
-- locks nothing.  Variable: tok, the lease's token.
SELECT dlock_check('grp:1', :tok, 'latest');
