-- For scale, not a lock: the least a table-based lease writes per cycle,
-- two single-row UPDATEs of a random row of bench_row (1 .. NAMES), each its
-- own transaction, with no lease logic at all.  Variable: names.
\set id random(1, :names)
UPDATE bench_row SET v = v + 1 WHERE id = :id;
UPDATE bench_row SET v = v + 1 WHERE id = :id;
