# bench/workloads/45-sets.sh: many names at once (bench/sets.c), under
# each synchronous_commit setting of BENCH_SYNC_MODES (bench_sync):
# renewing 10,000 held leases with one dlock_renew_each against 10,000
# single dlock_renew calls (target <= 0.1 of the time), taking 100 names
# with one dlock_acquire_all against 100 dlock_acquire calls in one
# transaction (target <= 0.3), both from one client, preload cluster only;
# and a hot set, on both clusters: 8 workers looping dlock_acquire_all
# with a wait + dlock_release_each on overlapping sets of 3 names given in
# opposite orders, cycles/s and the count of NULLs and errors (target
# 0 / 0: no deadlock, no wait that runs out).  Sourced by bench/run.

bench_database dlock_sets

renew_names=10000
acquire_names=100
acquire_rounds=$((20 * BENCH_TP_RUNS))
hot_seconds=$((2 * BENCH_TP_SECONDS))
hot_wait_s=10

for mode in $BENCH_SYNC_MODES; do
    if [ "$BENCH_CLUSTER" = preload ]; then
        bench_say "sets, synchronous_commit = $mode: $renew_names renewals, one dlock_renew_each vs single calls ($BENCH_TP_RUNS alternating rounds)"
        BENCH_CLUSTER=$BENCH_CLUSTER-$mode bench_sync "$mode" bench_client sets renew \
            --names "$renew_names" --rounds "$BENCH_TP_RUNS"
        [ "$(bench_get synchronous_commit)" = "$mode" ] || dlock_die "the sessions did not run with synchronous_commit = $mode"
        r=$(bench_get ratio)
        bench_row "$renew_names held leases renewed, synchronous_commit = $mode: one dlock_renew_each / $renew_names single dlock_renew, one client (ms, medians; min–max)" \
            "$(bench_round "$(bench_get each_ms)" 1) ($(bench_round "$(bench_get each_min)" 1)–$(bench_round "$(bench_get each_max)" 1)) / $(bench_round "$(bench_get singles_ms)") ($(bench_round "$(bench_get singles_min)")–$(bench_round "$(bench_get singles_max)")) ms"
        bench_row "Renewing $renew_names leases, synchronous_commit = $mode: dlock_renew_each / single calls (ratio of medians; range of the rounds' ratios)" \
            "$(bench_round "$r" 3) ($(bench_round "$(bench_get ratio_min)" 3)–$(bench_round "$(bench_get ratio_max)" 3))" "≤ 0.1" "$(bench_le "$r" 0.1)"

        bench_say "sets, synchronous_commit = $mode: $acquire_names names, one dlock_acquire_all vs $acquire_names dlock_acquire in one transaction ($acquire_rounds alternating rounds)"
        BENCH_CLUSTER=$BENCH_CLUSTER-$mode bench_sync "$mode" bench_client sets acquire \
            --names "$acquire_names" --rounds "$acquire_rounds"
        [ "$(bench_get synchronous_commit)" = "$mode" ] || dlock_die "the sessions did not run with synchronous_commit = $mode"
        r=$(bench_get ratio)
        bench_row "$acquire_names names taken, synchronous_commit = $mode: one dlock_acquire_all / BEGIN, $acquire_names × dlock_acquire, COMMIT (ms, medians; min–max)" \
            "$(bench_round "$(bench_get all_ms)" 2) ($(bench_round "$(bench_get all_min)" 2)–$(bench_round "$(bench_get all_max)" 2)) / $(bench_round "$(bench_get singles_ms)" 2) ($(bench_round "$(bench_get singles_min)" 2)–$(bench_round "$(bench_get singles_max)" 2)) ms"
        bench_row "Taking $acquire_names names, synchronous_commit = $mode: dlock_acquire_all / single calls in one transaction (ratio of medians; range of the rounds' ratios)" \
            "$(bench_round "$r" 2) ($(bench_round "$(bench_get ratio_min)" 2)–$(bench_round "$(bench_get ratio_max)" 2))" "≤ 0.3" "$(bench_le "$r" 0.3)"
    fi

    bench_say "hot set, synchronous_commit = $mode: 8 workers, 3 names each of 6, half in reverse order, ${hot_seconds} s"
    BENCH_CLUSTER=$BENCH_CLUSTER-$mode bench_sync "$mode" bench_client sets hot \
        --workers 8 --pool 6 --per 3 --seconds "$hot_seconds" --wait-s "$hot_wait_s"
    [ "$(bench_get synchronous_commit)" = "$mode" ] || dlock_die "the sessions did not run with synchronous_commit = $mode"
    nulls=$(bench_get nulls)
    deadlocks=$(bench_get deadlocks)
    errors=$(($(bench_get errors) + deadlocks))
    met=no
    [ "$nulls" -eq 0 ] && [ "$errors" -eq 0 ] && met=yes
    bench_row "Hot set, synchronous_commit = $mode: 8 workers, dlock_acquire_all (wait ${hot_wait_s} s) + dlock_release_each cycles/s (per worker in ${hot_seconds} s: min–max)" \
        "$(bench_round "$(bench_get cycles_per_s)") /s ($(bench_get worker_cycles_min)–$(bench_get worker_cycles_max))"
    bench_row "Hot set, synchronous_commit = $mode: NULLs (waits run out) / errors (of which deadlocks, 40P01); longest acquire" \
        "$nulls / $errors ($deadlocks); $(bench_get max_acquire_ms) ms" "0 / 0" "$met"
    [ "$(bench_get errors)" -eq 0 ] ||
        bench_note "Hot set, $BENCH_CLUSTER cluster, synchronous_commit = $mode: $(bench_get errors) errors other than 40P01, the last with SQLSTATE $(bench_get error_state)."
done
# Nothing may be left held.
held=$(bench_sql -c "SELECT count(*) FROM dlock_leases WHERE live")
[ "$held" -eq 0 ] || dlock_die "sets: $held leases still held after the hot set"

bench_note "Many names at once (bench/sets.c, one database with an empty lease table; each session's synchronous_commit set by PGOPTIONS): renewal: one client holds $renew_names leases (dlock_acquire_all in batches of 1000) and renews them all, alternately with $renew_names single prepared SELECT dlock_renew(name, token, '1 hour') statements, each its own autocommit transaction and round trip, and with one dlock_renew_each(names, tokens, '1 hour') (the arrays' text built in the timed part), $BENCH_TP_RUNS rounds, the order swapped each round. Taking: one client takes $acquire_names names, alternately with one dlock_acquire_all(names, '30 s') and with BEGIN, $acquire_names prepared SELECT dlock_acquire(name, '30 s'), COMMIT, giving them back in between with dlock_release_each (untimed); one uncounted round first (it creates the rows), then $acquire_rounds rounds, the order swapped each round. Every renewal must return true and every acquire a token, or the run stops."
bench_note "Hot set (bench/sets.c hot): 8 processes, one connection each; worker w wants the names hot:w, hot:w+1, hot:w+2 (mod 6), the odd workers listing them in reverse order, and loops dlock_acquire_all(its names, '30 s', wait => '${hot_wait_s} s') then dlock_release_each, for ${hot_seconds} s from a common start; cycles/s counts the cycles ended by then. A NULL is a wait that ran out; an error of any kind (40P01 deadlock in particular) is counted, not fatal. Target 0 / 0."
