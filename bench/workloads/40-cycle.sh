# bench/workloads/40-cycle.sh: throughput of acquire+release cycles on
# random names, 8 clients: dlock vs the hand-written PL/pgSQL lease of
# bench/plpgsql_lease.sql (R1, target >= 2.0) and vs pg_try_advisory_lock +
# pg_advisory_unlock (R2, target >= 0.7), and, for scale, two plain
# single-row UPDATEs (the least a lease kept in a table writes per cycle),
# measured with pgbench in alternating runs (bench_alternate).  dlock
# against the two UPDATEs again under each synchronous_commit setting of
# BENCH_SYNC_MODES (bench_sync): with on, a release in its own transaction
# commits without waiting for the WAL flush (src/async_commit.c), so a
# cycle waits for one flush where the two UPDATEs wait for two (target
# >= 1.5).  Preload cluster only.  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

names=100000
bench_say "R1/R2: acquire+release cycles on $names random names, 8 clients ($BENCH_TP_RUNS alternating runs of ${BENCH_TP_SECONDS} s per side)"
bench_database dlock_cycle
bench_sql -f "$DLOCK_TOP/bench/plpgsql_lease.sql" >/dev/null

# Every name already has an ended lease, in both tables, so that every run
# measures the steady state of a recurring set of names (takeover of an
# ended lease) rather than the first creation of some names.  Autovacuum
# is off for the three tables: each run starts from a freshly vacuumed
# table instead (bench_side), as pgbench does with its own tables, so
# that an autovacuum landing in some runs and not others adds no noise.
bench_sql >/dev/null <<SQL
INSERT INTO dlock_lease
SELECT 'r:' || i, nextval('dlock_token_seq'), 'bench', 'postgres'::regrole,
       now(), now(), now(), true
  FROM generate_series(1, $names) i;
INSERT INTO bench_lease
SELECT 'r:' || i, nextval('bench_lease_token_seq'), 'bench', now(), now()
  FROM generate_series(1, $names) i;
CREATE TABLE bench_row (id int PRIMARY KEY, v bigint NOT NULL) WITH (fillfactor = 70);
INSERT INTO bench_row SELECT i, 0 FROM generate_series(1, $names) i;
ALTER TABLE dlock_lease SET (autovacuum_enabled = off);
ALTER TABLE bench_lease SET (autovacuum_enabled = off);
ALTER TABLE bench_row SET (autovacuum_enabled = off);
ANALYZE;
SQL

# wal_syncs: WAL flushes (fsync or fdatasync of WAL) so far, by every
# process (pg_stat_wal; a backend reports its own when it exits).
wal_syncs() {
    bench_sql -c "SELECT wal_sync FROM pg_stat_wal"
}

# bench_side SIDE SECONDS: one run of SIDE (dlock, plpgsql, advisory or
# update, the last one for scale: two plain UPDATEs, no lock), with the
# cluster's synchronous_commit, or with MODE when SIDE is dlock-MODE or
# update-MODE.  The WAL flushes during the run are added to the run's
# output as "wal_syncs N".
bench_side() {
    local side=$1 mode=$BENCH_SYNC_CLUSTER before
    case $side in
        *-on | *-off) mode=${side##*-} side=${side%-*} ;;
    esac
    case $side in
        dlock) bench_sql -c "VACUUM dlock_lease" ;;
        plpgsql) bench_sql -c "VACUUM bench_lease" ;;
        update) bench_sql -c "VACUUM bench_row" ;;
    esac
    before=$(wal_syncs)
    bench_sync "$mode" bench_pgbench "cycle-$side.sql" -c 8 -j 2 -T "$2" -r -D names="$names"
    printf 'wal_syncs %s\n' "$(($(wal_syncs) - before))" >>"$BENCH_RUN"
}
bench_alternate "$BENCH_TP_RUNS" "$BENCH_TP_SECONDS" dlock plpgsql advisory update
# The other settings of BENCH_SYNC_MODES: dlock and the two UPDATEs only.
other_sides=()
for mode in $BENCH_SYNC_MODES; do
    [ "$mode" = "$BENCH_SYNC_CLUSTER" ] || other_sides+=("dlock-$mode" "update-$mode")
done
if [ ${#other_sides[@]} -gt 0 ]; then
    bench_say "  again with synchronous_commit = ${other_sides[0]##*-}: dlock and two plain UPDATEs"
    bench_alternate "$BENCH_TP_RUNS" "$BENCH_TP_SECONDS" "${other_sides[@]}"
fi

# cell SIDE: "median tps (min–max)".
cell() {
    printf '%s tps (%s)\n' "$(bench_round "$(bench_median "$1" tps)")" "$(bench_spread "$1" tps)"
}
dlock=$(bench_median dlock tps)
plpgsql=$(bench_median plpgsql tps)
advisory=$(bench_median advisory tps)
r1=$(bench_ratio "$dlock" "$plpgsql")
r2=$(bench_ratio "$dlock" "$advisory")

bench_row "Cycles on 100k random names, 8 clients: dlock (median, min–max of runs)" "$(cell dlock)"
bench_row "Cycles on 100k random names, 8 clients: hand-written PL/pgSQL lease" "$(cell plpgsql)"
bench_row "Cycles on 100k random names, 8 clients: pg_try_advisory_lock + pg_advisory_unlock" "$(cell advisory)"
bench_row "For scale, no lock: two single-row UPDATEs of a random row (of $names), each its own transaction" "$(cell update)"
bench_row "R1 = dlock / PL/pgSQL lease (ratio of medians; range of the rounds' ratios)" \
    "$r1 ($(bench_ratio_spread dlock plpgsql tps))" "≥ 2.0" "$(bench_ge "$r1" 2.0)"
bench_row "R2 = dlock / advisory locks" "$r2 ($(bench_ratio_spread dlock advisory tps))" "≥ 0.7" "$(bench_ge "$r2" 0.7)"
update=$(bench_median update tps)
bench_row "Two plain UPDATEs / PL/pgSQL lease (R1 ceiling for a lease that writes a row per acquire and per release)" \
    "$(bench_ratio "$update" "$plpgsql")"
bench_row "Two plain UPDATEs / advisory locks (R2 ceiling for such a lease)" \
    "$(bench_ratio "$update" "$advisory")"

# stmts SIDE: "acquire / release ms", the per-statement latencies (-r),
# medians over the runs.
stmts() {
    printf '%s / %s ms\n' "$(bench_round "$(bench_median "$1" "stmt:$2")" 3)" \
        "$(bench_round "$(bench_median "$1" "stmt:$3")" 3)"
}
bench_row "Cycles, per statement (pgbench -r, 8 clients on 2 CPUs): dlock acquire / release" \
    "$(stmts dlock dlock_acquire dlock_release)"
bench_row "Cycles, per statement: PL/pgSQL acquire / release" \
    "$(stmts plpgsql bench_lease_acquire bench_lease_release)"
bench_row "Cycles, per statement: pg_try_advisory_lock / pg_advisory_unlock" \
    "$(stmts advisory pg_try_advisory_lock pg_advisory_unlock)"

# flushes SIDE: the median over SIDE's runs of WAL flushes per cycle.
flushes() {
    local f
    for f in "$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$1"-[0-9]*.out; do
        awk -v s="$(bench_field "$f" wal_syncs)" -v t="$(bench_field "$f" txns)" \
            'BEGIN { printf "%.3f\n", (t + 0 == 0) ? 0 : s / t }'
    done | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The cycle against the two plain UPDATEs under each setting.
for mode in $BENCH_SYNC_MODES; do
    d=dlock u=update target= met=
    [ "$mode" = "$BENCH_SYNC_CLUSTER" ] || d=dlock-$mode u=update-$mode
    dm=$(bench_median "$d" tps)
    um=$(bench_median "$u" tps)
    r=$(bench_ratio "$dm" "$um")
    if [ "$mode" = on ]; then
        target="≥ 1.5"
        met=$(bench_ge "$r" 1.5)
    fi
    bench_row "Cycles, synchronous_commit = $mode: dlock / two plain UPDATEs (tps: medians, min–max of runs)" \
        "$(bench_round "$dm") ($(bench_spread "$d" tps)) / $(bench_round "$um") ($(bench_spread "$u" tps)) tps"
    bench_row "Cycle vs two plain UPDATEs, synchronous_commit = $mode: dlock / UPDATEs (ratio of medians; range of the rounds' ratios)" \
        "$r ($(bench_ratio_spread "$d" "$u" tps))" "$target" "$met"
    [ "$mode" = "$BENCH_SYNC_CLUSTER" ] ||
        bench_row "Cycles, synchronous_commit = $mode, per statement: dlock acquire / release; the first UPDATE" \
            "$(stmts "$d" dlock_acquire dlock_release); $(bench_round "$(bench_median "$u" "stmt:UPDATE bench_row")" 3) ms"
    bench_row "Cycles, synchronous_commit = $mode: WAL flushes per cycle (pg_stat_wal.wal_sync / cycles, medians): dlock / two UPDATEs" \
        "$(flushes "$d") / $(flushes "$u")"
done

bench_note "Cycles (R1, R2): pgbench -c 8 -j 2 -M prepared -r, scripts bench/pgbench/cycle-*.sql: a random name of $names (r:1 … r:$names; advisory: the key 1 … $names), acquire with a 30 s TTL, then release with the token: two statements, each its own transaction, as an application does it (dlock_acquire, then dlock_release; bench_lease_acquire, then bench_lease_release; pg_try_advisory_lock, then pg_advisory_unlock). A name another client holds gives NULL and no release (rare with $names names). Every name starts with an ended lease, so the runs measure takeovers of ended leases, not first inserts. The PL/pgSQL lease is bench/plpgsql_lease.sql (INSERT … ON CONFLICT DO UPDATE … WHERE expired … RETURNING with nextval; release as an UPDATE guarded by name and token). \"Two single-row UPDATEs\" (bench/pgbench/cycle-update.sql) is not a lock: it writes and commits the least that a lease keeping its state in a table writes per cycle (one row version per acquire and one per release, each committed), so its tps bounds what such a lease can reach on this machine."
bench_note "Cycle vs two plain UPDATEs under synchronous_commit = on and off: the same pgbench scripts and runs as above (the sides of the other setting alternating among themselves, their sessions set by PGOPTIONS). With on, dlock_acquire's commit waits for its WAL flush and the release, in a transaction of its own, commits without waiting (src/async_commit.c): one flush per cycle, against two for the two UPDATEs; concurrent commits share flushes (group commit), so the ratio need not reach 2; the WAL flushes per cycle (pg_stat_wal.wal_sync over the run, all processes, / pgbench's cycles) show how many flushes the cycles shared. Target ≥ 1.5 with on; with off no commit waits and the ratio shows CPU alone."
bench_note "Throughput comparisons: after a 1 s warm-up run of each side, $BENCH_TP_RUNS measured runs of $BENCH_TP_SECONDS s per side, the sides alternating in order, then in reverse order (A B C, C B A, A B C …); a side's figure is the median of its runs' tps (pgbench, without connection time), shown with the min–max of its runs; a ratio is a ratio of medians. Every run starts after a CHECKPOINT; the tables written by a throughput run have autovacuum off and are vacuumed just before each run of their side (as pgbench vacuums its own tables), so the figures leave out vacuum's work. pgbench runs on the same 2 CPUs as the server. Per-statement latencies are pgbench -r averages under that load (queueing included): they show where a cycle's time goes, not single-client latency."
