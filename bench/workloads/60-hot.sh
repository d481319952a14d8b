# bench/workloads/60-hot.sh: one hot name, 8 clients each looping
# "acquire, waiting up to 10 s; release": grants per second, vs
# pg_advisory_lock + pg_advisory_unlock on one key (R4, target >= 0.3),
# alternating runs (bench_alternate).  On both clusters: without preload
# the waiters poll.  Sourced by bench/run.

bench_say "R4: one hot name, 8 clients acquiring with wait and releasing ($BENCH_TP_RUNS alternating runs of ${BENCH_TP_SECONDS} s per side)"
bench_database dlock_hot
bench_sql -c "SELECT dlock_release('hot', dlock_acquire('hot', '1 s'))" >/dev/null

# token_count: tokens handed out so far (every grant takes one).
token_count() {
    bench_sql -c "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM dlock_token_seq"
}

# bench_side SIDE SECONDS: one run of SIDE (dlock or advisory).  For dlock,
# the grants (tokens handed out during the run) are added to the run's
# output as "grants N": a wait that ran out counts as a transaction in
# pgbench, not as a grant.
bench_side() {
    local before
    before=$(token_count)
    bench_pgbench "hot-$1.sql" -c 8 -j 2 -T "$2"
    [ "$1" = dlock ] && printf 'grants %s\n' "$(($(token_count) - before))" >>"$BENCH_RUN"
    return 0
}
bench_alternate "$BENCH_TP_RUNS" "$BENCH_TP_SECONDS" dlock advisory

# Every transaction of a dlock run should have been a grant (in-flight
# ones at the end of a run may add a few grants).
for f in "$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD"-dlock-[0-9]*.out; do
    txns=$(bench_field "$f" txns)
    grants=$(bench_field "$f" grants)
    [ "$grants" -ge "$txns" ] ||
        bench_note "Hot name, $BENCH_CLUSTER cluster: in run $(basename "$f" .out), $((txns - grants)) of $txns acquires ran out of their 10 s wait."
done

dlock=$(bench_median dlock tps)
advisory=$(bench_median advisory tps)
r4=$(bench_ratio "$dlock" "$advisory")
bench_row "One hot name, 8 clients: dlock grants/s (median, min–max of runs)" \
    "$(bench_round "$dlock") /s ($(bench_spread dlock tps))"
bench_row "One hot name, 8 clients: pg_advisory_lock grants/s" \
    "$(bench_round "$advisory") /s ($(bench_spread advisory tps))"
bench_row "R4 = dlock / advisory, one hot name (ratio of medians; range of the rounds' ratios)" \
    "$r4 ($(bench_ratio_spread dlock advisory tps))" "≥ 0.3" "$(bench_ge "$r4" 0.3)"

bench_note "Hot name (R4): pgbench -c 8 -j 2 -M prepared, scripts bench/pgbench/hot-*.sql: dlock_acquire('hot', '30 s', wait => '10 s') then dlock_release with the token, or pg_advisory_lock(1) then pg_advisory_unlock(1); each statement its own transaction. Grants/s = pgbench tps (one grant per cycle; checked against the tokens handed out)."
