# bench/workloads/55-stats.sh: what counting for dlock_stats costs
# (src/stats.c).  The same work with dlock.track_stats = on and off, the
# sessions set by PGOPTIONS, in alternating runs (bench_alternate): the
# acquire+release cycle of 40-cycle.sh on random names (8 clients), the
# 'latest'-fenced UPDATE of 50-fence.sh (8 clients), and the cycle once
# more in one backend, timed by the server (bench/cycle_loop.sql), where
# the client's round trips add no noise.  Target: on / off >= 0.99 for the
# cycle and the fence (the counters cost at most 1 %).  Preload cluster
# only (without preload nothing is counted).  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

names=100000
rows=20000
runs=$((BENCH_TP_RUNS * 2))
bench_say "Counters: cycles, fenced UPDATEs and a server-side cycle loop with dlock.track_stats on and off ($runs alternating runs of ${BENCH_TP_SECONDS} s per side)"
bench_database dlock_stats_cost
bench_sql -f "$DLOCK_TOP/bench/cycle_loop.sql" >/dev/null

# Names with ended leases (the steady state of 40-cycle.sh), and a table
# of fenced rows, one lease each, their tokens in the rows (50-fence.sh).
bench_sql >/dev/null <<SQL
INSERT INTO dlock_lease
SELECT 'r:' || i, nextval('dlock_token_seq'), 'bench', 'postgres'::regrole,
       now(), now(), now(), true
  FROM generate_series(1, $names) i;
INSERT INTO bench_ref SELECT 'r:' || i, 0 FROM generate_series(1, $names) i;
SQL
bench_fenced_table "$rows"
bench_sql >/dev/null <<SQL
CREATE TRIGGER fence_dlock BEFORE INSERT OR UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token');
UPDATE acct SET fence_token = fence_token;
ALTER TABLE dlock_lease SET (autovacuum_enabled = off);
ALTER TABLE acct SET (autovacuum_enabled = off);
VACUUM ANALYZE;
SQL

# counted: the sum of the counters of this database, to show that the
# "on" runs counted and the "off" runs did not.
counted() {
    bench_sql -c "SELECT grants_new + grants_after_release + takeovers + refusals + releases
                         + fence_latest_accepted + fence_latest_rejected
                    FROM dlock_stats WHERE datname = current_database()"
}

# bench_side SIDE SECONDS: SIDE is cycle-on, cycle-off, fence-on, fence-off,
# loop-on or loop-off: the work, and the setting of dlock.track_stats.
# Appends "counted N" (what the run added to the counters) to the run's
# output, and for the loop "server_us N" (its time per cycle).
bench_side() {
    local work=${1%-*} track=${1##*-} before out
    before=$(counted)
    case $work in
        cycle)
            bench_sql -c "VACUUM dlock_lease"
            PGOPTIONS="${PGOPTIONS:+$PGOPTIONS }-c dlock.track_stats=$track" \
                bench_pgbench cycle-dlock.sql -c 8 -j 2 -T "$2" -D names="$names"
            ;;
        fence)
            bench_sql -c "VACUUM acct"
            PGOPTIONS="${PGOPTIONS:+$PGOPTIONS }-c dlock.track_stats=$track" \
                bench_pgbench update-acct.sql -c 8 -j 2 -T "$2" -D rows="$rows"
            ;;
        loop)
            bench_sql -c "VACUUM dlock_lease"
            out=$(PGOPTIONS="${PGOPTIONS:+$PGOPTIONS }-c dlock.track_stats=$track" \
                bench_sql -F ' ' -c "CALL bench_cycle_loop($names, $2, 'dlock', NULL, NULL)")
            printf 'server_us %s\n' "${out#* }" >"$BENCH_RUN"
            ;;
    esac
    printf 'counted %s\n' "$(($(counted) - before))" >>"$BENCH_RUN"
}
bench_alternate "$runs" "$BENCH_TP_SECONDS" cycle-on cycle-off
bench_alternate "$runs" "$BENCH_TP_SECONDS" fence-on fence-off
bench_alternate "$runs" "$BENCH_TP_SECONDS" loop-on loop-off

# Counting was on and off as the sides say.
for side in cycle-off fence-off loop-off; do
    for n in $(bench_runs "$side" counted); do
        [ "$n" = 0 ] || dlock_die "counters: side $side counted $n"
    done
done
for side in cycle-on fence-on loop-on; do
    for n in $(bench_runs "$side" counted); do
        [ "$n" -gt 0 ] || dlock_die "counters: side $side counted nothing"
    done
done

cell() {
    printf '%s tps (%s)\n' "$(bench_round "$(bench_median "$1" tps)")" "$(bench_spread "$1" tps)"
}
cycle=$(bench_ratio "$(bench_median cycle-on tps)" "$(bench_median cycle-off tps)")
fence=$(bench_ratio "$(bench_median fence-on tps)" "$(bench_median fence-off tps)")
# the loop's figure is a time: off / on is the throughput ratio
loop=$(bench_ratio "$(bench_median loop-off server_us)" "$(bench_median loop-on server_us)")
bench_row "Counters on / off: cycles on 100k random names, 8 clients (tps: $(cell cycle-on) / $(cell cycle-off))" \
    "$cycle ($(bench_ratio_spread cycle-on cycle-off tps))" "≥ 0.99" "$(bench_ge "$cycle" 0.99)"
bench_row "Counters on / off: 'latest'-fenced UPDATEs, 8 clients (tps: $(cell fence-on) / $(cell fence-off))" \
    "$fence ($(bench_ratio_spread fence-on fence-off tps))" "≥ 0.99" "$(bench_ge "$fence" 0.99)"
bench_row "Counters on / off: server-side cycle loop, one backend (µs per cycle: $(bench_round "$(bench_median loop-on server_us)" 1) / $(bench_round "$(bench_median loop-off server_us)" 1))" \
    "$loop" "≥ 0.99" "$(bench_ge "$loop" 0.99)"

bench_note "Counters (dlock_stats): the same database and work with dlock.track_stats on and off for the session (PGOPTIONS), in $runs alternating runs of $BENCH_TP_SECONDS s per side: the cycle of 40-cycle.sh (bench/pgbench/cycle-dlock.sql on $names names with ended leases), the 'latest'-fenced UPDATE of 50-fence.sh (bench/pgbench/update-acct.sql on $rows rows), and CALL bench_cycle_loop (bench/cycle_loop.sql: the cycle in one backend, timed by the server clock; the ratio is off / on of its time per cycle, i.e. on / off as throughput). Each run checks that it counted (on) or did not (off). With counting on, each operation adds to one of the backend's own counters in shared memory with a plain store (src/stats.c), so the difference is expected to be within the runs' noise; a ratio above 1 is noise."
