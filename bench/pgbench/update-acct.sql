-- One single-row UPDATE of a random row of acct (bench/workloads/50-fence.sh),
-- carrying the row's current fencing token as a writer holding the lease
-- would.  Variable: rows.
\set id random(1, :rows)
UPDATE acct SET bal = bal + 1, fence_token = fence_token WHERE id = :id;
