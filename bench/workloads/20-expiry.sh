# bench/workloads/20-expiry.sh: expiry wake-up error, how late after a
# 200 ms lease's expires_at the waiting dlock_acquire is granted, by the
# server clock (bench/expiry.c).  Target: <= 10 ms (issue 4).  Sourced by
# bench/run.

bench_say "expiry wake-up error ($BENCH_EXPIRY_ROUNDS rounds of a 200 ms lease)"
bench_client expiry --rounds "$BENCH_EXPIRY_ROUNDS" --ttl-ms 200

median=$(bench_get median_ms)
max=$(bench_get max_ms)
met=no
[ "$(bench_le "$max" 10)" = yes ] && [ "$(bench_le "$median" 10)" = yes ] && met=yes
bench_row "Expiry wake-up error (new acquired_at − old expires_at): median / max" \
    "$median / $max ms" "≤ 10 ms" "$met"
skipped=$(bench_get skipped)
[ "$skipped" = 0 ] ||
    bench_note "Expiry, $BENCH_CLUSTER cluster: $skipped of $BENCH_EXPIRY_ROUNDS rounds were not counted (the client sent the waiting acquire late)."

bench_note "Expiry: a session takes a lease for 200 ms and keeps it; a second session waits for it at once. The error is the new lease's acquired_at minus the old lease's expires_at, both the server clock, read from dlock_leases; $BENCH_EXPIRY_ROUNDS rounds."
