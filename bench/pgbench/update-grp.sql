-- One UPDATE of the 100 rows of a random group of acct
-- (bench/workloads/52-fence-fresh.sh), all under the group's lock, carrying
-- the rows' current fencing token as a writer holding the lease would.
-- Variable: groups.
\set g random(0, :groups - 1)
UPDATE acct SET bal = bal + 1, fence_token = fence_token WHERE grp = :g;
