# bench/workloads/10-handoff.sh: hand-off latency, from the return of a
# committed dlock_release to the return of the dlock_acquire waiting for
# it, and the same for pg_advisory_unlock / pg_advisory_lock, in
# alternating blocks (bench/handoff.c explains the protocol and the three
# ways of timing it).  Targets: median <= 1 ms, p99 <= 5 ms (issue 4).
# Sourced by bench/run.

bench_say "hand-off latency ($BENCH_ROUNDS rounds of each kind after $BENCH_WARMUP warm-up rounds)"
# Over TCP: the kernel timestamps the answers' arrival only there.
PGHOST=127.0.0.1 bench_client handoff --rounds "$BENCH_ROUNDS" --warmup "$BENCH_WARMUP" \
    --hold-ms "$BENCH_HOLD_MS"

# pair PREFIX: "median / p99 µs" of the client's figures PREFIX_median_us
# and PREFIX_p99_us, in whole microseconds.
pair() {
    printf '%s / %s µs\n' "$(bench_round "$(bench_get "$1_median_us")")" \
        "$(bench_round "$(bench_get "$1_p99_us")")"
}

# met PREFIX: yes when PREFIX's median <= 1 ms and its p99 <= 5 ms.
met() {
    if [ "$(bench_le "$(bench_get "$1_median_us")" 1000)" = yes ] &&
        [ "$(bench_le "$(bench_get "$1_p99_us")" 5000)" = yes ]; then
        echo yes
    else
        echo no
    fi
}

target="≤ 1000 / ≤ 5000 µs"
for kind in dlock advisory; do
    n=$(bench_get "${kind}_arrival_n")
    [ "$n" = "$(bench_get "${kind}_n")" ] ||
        bench_note "Hand-off, $BENCH_CLUSTER cluster: $kind: the kernel timestamped both answers in $n of $(bench_get "${kind}_n") rounds; the arrival figures cover those."
done
if [ "$(bench_get dlock_arrival_n)" -gt 0 ]; then
    bench_row "Hand-off, dlock: median / p99 (answers' arrival)" \
        "$(pair dlock_arrival)" "$target" "$(met dlock_arrival)"
    bench_row "Hand-off, pg_advisory_lock: median / p99 (answers' arrival)" "$(pair advisory_arrival)"
fi
bench_row "Hand-off, dlock: median / p99 (calls' returns seen by the client)" \
    "$(pair dlock)" "$target" "$(met dlock)"
bench_row "Hand-off, pg_advisory_lock: median / p99 (calls' returns seen by the client)" \
    "$(pair advisory)"
bench_row "Rounds in which the client read both answers together, dlock / advisory" \
    "$(bench_get dlock_together_pct) % / $(bench_get advisory_together_pct) %"
bench_row "Release sent → waiter returned, dlock: median / p99 (upper bound)" \
    "$(pair dlock_from_send)"
bench_row "Release sent → waiter returned, pg_advisory_lock: median / p99" \
    "$(pair advisory_from_send)"
bench_row "Ratio dlock / advisory, calls' returns: median / p99" \
    "$(bench_get ratio_median) / $(bench_get ratio_p99)"
bench_row "Ratio dlock / advisory, release sent → waiter returned: median / p99" \
    "$(bench_get ratio_from_send_median) / $(bench_get ratio_from_send_p99)"

bench_note "Hand-off: one client process, connected over TCP to 127.0.0.1; two sessions take turns as holder and waiter, a third watches pg_stat_activity. A round starts once the waiter is seen asleep; the holder lets go (dlock_release in autocommit, or pg_advisory_unlock) after a further 0–$BENCH_HOLD_MS ms, uniform, so a polling waiter is caught at every point of its backoff. $BENCH_ROUNDS rounds of each kind after $BENCH_WARMUP warm-up rounds, dlock and advisory alternating in blocks of 25."
bench_note "Hand-off latency = the waiter's answer minus the holder's answer. \"Calls' returns seen by the client\": when the client's monotonic clock read them. The server wakes the waiter before it answers the holder, so the two answers race to the client, and when the client finds both already there (\"read together\") it sees only the microseconds between reading them. \"Answers' arrival\": the kernel's receive timestamps of the two answers (SO_TIMESTAMPNS), which a late client does not shift; negative when the waiter answered first. \"Release sent → waiter returned\" adds the release's own work and commit: an upper bound. A ratio whose advisory figure is a few µs or negative says little."
