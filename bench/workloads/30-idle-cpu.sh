# bench/workloads/30-idle-cpu.sh: CPU burnt by sessions waiting for a held
# lease: 10 waiters for 2 s, read from /proc/<backend pid>/stat (utime +
# stime) and /proc/<pid>/schedstat before and after (bench/idle_cpu.c).
# Target: ~0.  Sourced by bench/run.

bench_say "CPU of $BENCH_WAITERS waiters over $BENCH_WAIT_S s"
bench_client idle_cpu --waiters "$BENCH_WAITERS" --wait-s "$BENCH_WAIT_S"

cpu=$(bench_get cpu_ms)
tick_ms=$(awk -v t="$(bench_get clk_tck)" 'BEGIN { printf "%g\n", 1000 / t }')
sched=$(bench_get sched_ms)
bench_note "CPU: $BENCH_WAITERS sessions wait together for a lease held for a minute and get NULL at the end of their wait; each first called dlock_acquire without waiting (warm plans). utime+stime are read in clock ticks of $tick_ms ms (getconf CLK_TCK), each reading rounded down; schedstat is the kernel's on-CPU time in ns, and includes the work of the call itself (parse, plan, attempts, queueing)."
if [ "$sched" = "-1.00" ]; then
    # No schedstat: judge by the ticks (under one tick for all waiters).
    bench_row "CPU of $BENCH_WAITERS waiters over $BENCH_WAIT_S s, utime+stime: all / per waiter" \
        "$(bench_round "$cpu") / $(bench_get cpu_ms_per_waiter) ms" "~0" "$(bench_le "$cpu" "$tick_ms")"
    bench_note "CPU: \"met\" means under one clock tick ($tick_ms ms) for all $BENCH_WAITERS waiters together."
else
    bench_row "CPU of $BENCH_WAITERS waiters over $BENCH_WAIT_S s, utime+stime: all / per waiter" \
        "$(bench_round "$cpu") / $(bench_get cpu_ms_per_waiter) ms" "~0"
    per=$(bench_get sched_ms_per_waiter)
    call=$(bench_get call_sched_ms_per_waiter)
    added=$(awk -v p="$per" -v c="$call" 'BEGIN { print p - c }')
    bench_row "CPU of $BENCH_WAITERS waiters over $BENCH_WAIT_S s, on-CPU time (schedstat): all / per waiter" \
        "$sched / $per ms" "~0" "$(bench_le "$added" 1)"
    bench_row "For scale: on-CPU time of one dlock_acquire that does not wait" "$call ms"
    bench_note "CPU: \"met\" means that waiting $BENCH_WAIT_S s costs each waiter less than 1 ms of CPU (schedstat) beyond what a call that does not wait costs."
fi
bench_row "Wall time of the $BENCH_WAIT_S s wait" "$(bench_get wall_ms) ms"

