# bench/workloads/70-size.sh: the lease relations stay small under churn.
# Their size after BENCH_SIZE_CYCLES (120k) acquire+release cycles on 100
# names (8 clients), and after as many renewals of one lease by its holder
# (1 client), each in a new database with default autovacuum settings;
# also after a quarter and half of them, to show whether it grows with the
# count.  Target: <= 256 KiB at the end (pg_total_relation_size of
# dlock_lease: heap, index, free space and visibility maps; the sequence is
# shown too).  For comparison, the hand-written PL/pgSQL lease's table
# after as many cycles.  Preload cluster only.  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

cycles=$BENCH_SIZE_CYCLES
names=100
marks="$((cycles / 4)) $((cycles / 2)) $cycles"

# token_count: tokens handed out so far in this database.
token_count() {
    bench_sql -c "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM dlock_token_seq"
}

# kib TABLE: "total heap index" of TABLE, in KiB.
kib() {
    bench_sql -F ' ' -c "SELECT pg_total_relation_size('$1') / 1024, pg_relation_size('$1') / 1024,
                                pg_indexes_size('$1') / 1024"
}

# sizes_cell SIZES FINAL: "a / b / c KiB (heap h, index i)" from the totals
# SIZES at the marks and the final "total heap index".
sizes_cell() {
    # shellcheck disable=SC2086
    set -- "$1" $2
    printf '%s KiB (at the end: heap %s, index %s)\n' "$1" "$3" "$4"
}

# run_until SCRIPT COUNTER MARK [PGBENCH-ARG...]: runs SCRIPT until the
# shell function COUNTER reports at least MARK, in as few pgbench runs as
# it takes (each -t of what is left, split over the clients given).
run_until() {
    local script=$1 counter=$2 mark=$3 n clients
    shift 3
    clients=$(printf '%s\n' "$@" | awk 'p { print; exit } $0 == "-c" { p = 1 }')
    while n=$($counter) && [ "$n" -lt "$mark" ]; do
        round=$((round + 1))
        BENCH_RUN=$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$round.out
        bench_pgbench "$script" -t $(((mark - n + clients - 1) / clients)) "$@"
        done_txns=$((done_txns + $(bench_field "$BENCH_RUN" txns)))
    done
    unset BENCH_RUN
}
round=0
txn_count() { printf '%s\n' "$done_txns"; }

# measure LABEL SCRIPT COUNTER TABLE [PGBENCH-ARG...]: runs to each mark,
# records TABLE's total size at each, and adds the row LABEL.
measure() {
    local label=$1 script=$2 counter=$3 table=$4 mark totals='' target='' met='' started=$SECONDS
    shift 4
    done_txns=0
    for mark in $marks; do
        run_until "$script" "$counter" "$mark" "$@"
        totals="${totals:+$totals / }$(kib "$table" | cut -d' ' -f1)"
    done
    final=$(kib "$table")
    if [ "$table" = dlock_lease ]; then
        target="≤ 256 KiB"
        met=$(bench_le "${final%% *}" 256)
    fi
    bench_row "$label" "$(sizes_cell "$totals" "$final")" "$target" "$met"
    bench_say "  $label: $totals KiB ($((SECONDS - started)) s; $(table_stats "$table"))"
}

# table_stats TABLE: its row updates, how many of them were not HOT (the new
# version went to another page), and how often autovacuum ran on it
# (cumulative statistics, which a backend reports at the latest when it
# exits: every pgbench run has ended before this).
table_stats() {
    bench_sql -c "SELECT format('updates %s, not HOT %s, autovacuum %s',
                                n_tup_upd, n_tup_upd - n_tup_hot_upd, autovacuum_count)
                  FROM pg_stat_user_tables WHERE relid = '$1'::regclass"
}

bench_say "lease relations after ${marks// / \/ } acquire+release cycles on $names names, 8 clients"
bench_database dlock_size_cycles
measure "Lease table after ${marks// / \/ } acquire+release cycles on $names names" \
    cycle-dlock.sql token_count dlock_lease -c 8 -j 2 -D names=$names
bench_row "Token sequence after them; lease rows" \
    "$(bench_sql -c "SELECT pg_total_relation_size('dlock_token_seq') / 1024") KiB; $(bench_sql -c "SELECT count(*) FROM dlock_lease") rows"

bench_database dlock_size_plpgsql
bench_sql -f "$DLOCK_TOP/bench/plpgsql_lease.sql" >/dev/null
measure "For comparison: PL/pgSQL lease table after as many cycles" \
    cycle-plpgsql.sql txn_count bench_lease -c 8 -j 2 -D names=$names

bench_say "lease relations after ${marks// / \/ } renewals of one lease, 1 client"
bench_database dlock_size_renew
tok=$(bench_sql -c "SELECT dlock_acquire('renewed', '1 hour')")
measure "Lease table after ${marks// / \/ } renewals of one lease" \
    renew-dlock.sql txn_count dlock_lease -c 1 -D tok="$tok"
live=$(bench_sql -c "SELECT live AND token = $tok FROM dlock_leases WHERE lock_name = 'renewed'")
[ "$live" = t ] || dlock_die "size: the renewed lease is not live after the renewals"

bench_note "Size: each in a new database, default autovacuum (it seldom runs in these seconds: old row versions are pruned on their page when it fills up; a new version that does not fit, because a transaction still open or another session's pin keeps the page from being pruned, leaves the page: dlock sends it to a page with room that it picks, adding pages one at a time (src/lease_table.c), while PostgreSQL places the PL/pgSQL lease's, extending the table by many pages at once when several sessions need a new page together, so that table's size varies from run to run). Cycles: pgbench -c 8 -j 2 -M prepared with bench/pgbench/cycle-dlock.sql on $names names, counted by tokens handed out (an acquire that finds its name held is not a cycle); the PL/pgSQL lease (bench/plpgsql_lease.sql, cycle-plpgsql.sql) counted by pgbench transactions. Renewals: bench/pgbench/renew-dlock.sql, one client (the holder) renewing one live lease (1 hour TTL), every renewal checked to return true. Sizes: pg_total_relation_size (heap, index, free space and visibility maps), pg_relation_size, pg_indexes_size, in KiB."
