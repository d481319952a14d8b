# bench/workloads/52-fence-fresh.sh: the fence's cost from a cold start,
# as a new deployment sees it (issue 27's second setup).  A fresh cluster
# of its own, with dlock preloaded and otherwise default settings (the
# default dlock.fence_cache_size; synchronous_commit = off, as on the
# other clusters), and a database per side, each with its own table and
# leases, so that no side warms anything for another:
#
#   latest, live, seen   acct of 10000 rows (id, bal, fence_token) fenced by
#                        dlock_fence('acct:{id}', 'fence_token'[, mode]),
#                        each row's lease acquired beforehand and its token
#                        stored in the row, but no fenced write yet (no
#                        cache entry, no mark: the first writes happen
#                        during the runs)
#   noop                 the same table with a BEFORE ROW trigger that
#                        checks nothing (below): the ceiling of any row
#                        trigger
#   none                 the same table, no trigger
#   grp_latest, grp_noop, grp_none
#                        acct of 10000 rows in 100 groups (grp = id % 100,
#                        an index on grp), fenced by
#                        dlock_fence('grp:{grp}', 'fence_token'), or with a
#                        BEFORE ROW trigger that checks nothing
#                        (suppress_redundant_updates_trigger: any BEFORE ROW
#                        UPDATE trigger makes PostgreSQL lock each old row
#                        first, a WAL record per row), or none; each UPDATE
#                        writes the 100 rows of a random group
#                        (bench/pgbench/update-grp.sql)
#
# pgbench 8 clients, 5 s runs, no warm-up run, the sides alternating
# (A B C, C B A, ...) for BENCH_TP_RUNS rounds; the first round's ratios
# are the cold start's.  Targets (issue 27): latest >= 0.95, live and seen
# >= 0.92, the 100-row UPDATE >= 0.97 of the unfenced one.  Runs once,
# on the preload cluster's pass.  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

fresh_rows=10000
fresh_groups=100
fresh_seconds=5
fresh_sides=(latest live seen noop none grp_latest grp_noop grp_none)
bench_say "fresh cluster: the fence from a cold start, $fresh_rows rows per side, 8 clients ($BENCH_TP_RUNS alternating runs of $fresh_seconds s per side, no warm-up)"

bench_own_cluster fresh "shared_preload_libraries = 'dlock'" "synchronous_commit = off"

for side in "${fresh_sides[@]}"; do
    bench_database "fresh_$side"
    case $side in
        grp_*)
            bench_sql >/dev/null <<SQL
CREATE TABLE acct (
    id          int PRIMARY KEY,
    grp         int NOT NULL,
    bal         bigint NOT NULL DEFAULT 0,
    fence_token bigint
);
CREATE INDEX acct_grp ON acct (grp);
CREATE TEMP TABLE grp_token AS
SELECT g, dlock_acquire('grp:' || g, '12 hours') AS token
  FROM generate_series(0, $fresh_groups - 1) g;
INSERT INTO acct (id, grp, fence_token)
SELECT i, i % $fresh_groups, t.token
  FROM generate_series(1, $fresh_rows) i JOIN grp_token t ON t.g = i % $fresh_groups;
SQL
            ;;
        *) bench_fenced_table "$fresh_rows" ;;
    esac
    case $side in
        latest | grp_latest) mode=latest ;;
        live | seen) mode=$side ;;
        *) mode= ;;
    esac
    template='acct:{id}'
    case $side in grp_*) template='grp:{grp}' ;; esac
    case $side in
        noop | grp_noop)
            bench_sql -c "CREATE TRIGGER noop BEFORE UPDATE ON acct
                FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()" >/dev/null ;;
    esac
    [ -z "$mode" ] || bench_sql -c "CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct
        FOR EACH ROW EXECUTE FUNCTION dlock_fence('$template', 'fence_token', '$mode')" >/dev/null
    missing=$(bench_sql -c "SELECT count(*) FROM acct WHERE fence_token IS NULL")
    [ "$missing" = 0 ] || dlock_die "fresh setup ($side): $missing rows without a token"
    bench_sql -c "VACUUM ANALYZE acct" >/dev/null
done
bench_sql -d postgres -c CHECKPOINT >/dev/null
# Nothing was fenced yet: no mark exists.
[ "$(PGDATABASE=fresh_seen bench_sql -c "SELECT count(*) FROM dlock_fence_mark")" = 0 ] ||
    dlock_die "fresh setup: marks exist before the runs"

# fresh_run SIDE I: measured run I of SIDE.  Two UPDATEs of one group can
# deadlock in PostgreSQL itself, fenced or not (each visits the group's
# rows in the order its scan meets them, and a non-HOT update moves a row),
# so pgbench retries a deadlocked one (--max-tries) rather than failing the
# run; it happened once in 35 runs of 5 s.
fresh_run() {
    local script=update-acct.sql retry=()
    case $1 in grp_*) script=update-grp.sql retry=(--max-tries=5) ;; esac
    bench_sql -d postgres -c CHECKPOINT >/dev/null
    PGDATABASE=fresh_$1 BENCH_RUN=$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$1-$2.out \
        bench_pgbench "$script" -c 8 -j 2 -T "$fresh_seconds" "${retry[@]}" \
        -D rows="$fresh_rows" -D groups="$fresh_groups"
}
for ((i = 1; i <= BENCH_TP_RUNS; i++)); do
    order=("${fresh_sides[@]}")
    if ((i % 2 == 0)); then
        order=()
        for side in "${fresh_sides[@]}"; do order=("$side" "${order[@]}"); done
    fi
    for side in "${order[@]}"; do fresh_run "$side" "$i"; done
done

# The fences checked something: each rejects a stale token with 55T01.
for side in latest live seen grp_latest; do
    out=$(psql -X -q -d "fresh_$side" -v VERBOSITY=verbose \
        -c "UPDATE acct SET fence_token = fence_token - 1 WHERE id = 1" 2>&1)
    case $out in
        *55T01*) ;;
        *) dlock_die "fresh: the $side fence did not reject a stale token: $out" ;;
    esac
done
marks=$(PGDATABASE=fresh_seen bench_sql -c "SELECT count(*) FROM dlock_fence_mark")

# first SIDE-A SIDE-B: A's tps / B's in round 1, the cold start.
first() {
    bench_ratio "$(bench_field "$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$1-1.out" tps)" \
        "$(bench_field "$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$2-1.out" tps)"
}
# ratio_row LABEL SIDE-A SIDE-B TARGET: the row of A / B.
ratio_row() {
    local r
    r=$(bench_ratio "$(bench_median "$2" tps)" "$(bench_median "$3" tps)")
    bench_row "$1 (ratio of medians; rounds' range; the first round)" \
        "$r ($(bench_ratio_spread "$2" "$3" tps); first $(first "$2" "$3"))" "≥ $4" "$(bench_ge "$r" "$4")"
}
cell() {
    printf '%s tps (%s)\n' "$(bench_round "$(bench_median "$1" tps)")" "$(bench_spread "$1" tps)"
}
bench_row "Fresh cluster, single-row UPDATEs, 8 clients: no trigger (median, min–max of runs)" "$(cell none)"
ratio_row "Fresh cluster: dlock_fence latest / no trigger" latest none 0.95
ratio_row "Fresh cluster: dlock_fence live / no trigger" live none 0.92
ratio_row "Fresh cluster: dlock_fence seen / no trigger" seen none 0.92
bench_row "Fresh cluster: single-row UPDATE with a BEFORE ROW trigger that checks nothing / no trigger: the ceiling of any row trigger" \
    "$(bench_ratio "$(bench_median noop tps)" "$(bench_median none tps)") ($(bench_ratio_spread noop none tps))"
bench_row "Fresh cluster: dlock_fence latest / with the trigger that checks nothing: the fence's own cost" \
    "$(bench_ratio "$(bench_median latest tps)" "$(bench_median noop tps)") ($(bench_ratio_spread latest noop tps))"
bench_row "Fresh cluster, 100-row UPDATEs under one lock, 8 clients: no trigger" "$(cell grp_none)"
ratio_row "Fresh cluster: 100-row UPDATE fenced (latest) / no trigger" grp_latest grp_none 0.97
bench_row "Fresh cluster: 100-row UPDATE with a BEFORE ROW trigger that checks nothing / no trigger: the ceiling of any row trigger" \
    "$(bench_ratio "$(bench_median grp_noop tps)" "$(bench_median grp_none tps)") ($(bench_ratio_spread grp_noop grp_none tps))"
bench_row "Fresh cluster: 100-row UPDATE fenced (latest) / with the trigger that checks nothing: the fence's own cost" \
    "$(bench_ratio "$(bench_median grp_latest tps)" "$(bench_median grp_noop tps)") ($(bench_ratio_spread grp_latest grp_noop tps))"

bench_note "Fresh cluster (52-fence-fresh): its own cluster started for the workload, dlock preloaded, dlock.fence_cache_size at its default, synchronous_commit = off, everything else default; a database per side with a table acct of $fresh_rows rows whose tokens were stored before the runs and no fenced write before them (the 'seen' database had no mark; it had $marks after the runs). pgbench -c 8 -j 2 -M prepared, $BENCH_TP_RUNS rounds of $fresh_seconds s per side, alternating, no warm-up run: the first round is the cold start. Single-row sides (fenced, a BEFORE ROW trigger that checks nothing, none): bench/pgbench/update-acct.sql. 100-row sides (fenced, a BEFORE ROW trigger that checks nothing, none): bench/pgbench/update-grp.sql, UPDATE acct SET bal = bal + 1, fence_token = fence_token WHERE grp = random group of $fresh_groups (100 rows each, under lock grp:N)."
