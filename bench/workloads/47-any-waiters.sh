# bench/workloads/47-any-waiters.sh: what sessions waiting in
# dlock_acquire_any cost others (issue 22, item 6).  Four sessions wait in
# dlock_acquire_any on 10,000 names held for an hour in one database (A);
# one client runs 400 transactions, each a dlock_acquire and a
# dlock_release of a random name in one statement (bench/pgbench/
# cycle-once.sql), in another database (B), or in A on names nobody waits
# for; the same transactions without the waiters are the reference.  Four
# sides in alternating runs (bench_alternate): none-b, waiters-b, none-a,
# waiters-a; the figure is the time of the 400 transactions with waiters /
# without (ratio of the median latencies; range of the rounds' ratios).
# Target: <= 1.1 (a waiter costs others nothing but its one wake-up per
# change of one of its own names).  With the code before issue 22 every
# release in any database whose name fell into a hash bucket of the
# waiters' names (all buckets, for 10,000 names) woke the four and made
# each try its 10,000 names.  Also shows the CPU time the waiters' backends
# used during the waiter runs (/proc/PID/stat, until they are all asleep
# again) and the names they tried (dlock_waiters.attempts; "n/a" before
# issue 22, which had no such column): the work the transactions caused
# them.  Preload cluster only (without preload the waiters poll whatever
# happens elsewhere).  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

pool=10000
waiters=4
txns=400
others=1000
runs=$((BENCH_TP_RUNS * 5))
bench_say "any-waiters: $txns transactions with and without $waiters sessions waiting on $pool names of another database or of other names ($runs alternating runs per side)"

# B first (bench_database makes the last one PGDATABASE), then A
bench_database dlock_any_b
db_b=$PGDATABASE
bench_database dlock_any_a
db_a=$PGDATABASE

# the pool, held for an hour, created 1000 names per transaction (a new
# name keeps a lock until its transaction ends); the names of B and the
# other names of A exist already, so that every run takes over ended
# leases rather than creating some names
bench_sql >/dev/null <<SQL
DO \$\$
BEGIN
    FOR b IN 0 .. ($pool - 1) / 1000 LOOP
        PERFORM dlock_acquire('p:' || i, '1 hour')
           FROM generate_series(b * 1000 + 1, least(b * 1000 + 1000, $pool)) i;
        COMMIT;
    END LOOP;
END
\$\$;
SELECT count(dlock_release('o:' || i, dlock_acquire('o:' || i, '30 s')))
  FROM generate_series(1, $others) i;
VACUUM ANALYZE;
SQL
PGDATABASE=$db_b bench_sql >/dev/null <<SQL
SELECT count(dlock_release('p:' || i, dlock_acquire('p:' || i, '30 s')))
  FROM generate_series(1, $others) i;
VACUUM ANALYZE;
SQL
held=$(bench_sql -c "SELECT count(*) FROM dlock_leases WHERE live")
[ "$held" -eq "$pool" ] || dlock_die "any-waiters: $held of the $pool names held"

has_attempts=$(bench_sql -c "SELECT count(*) FROM pg_attribute WHERE attrelid = 'dlock_waiters'::regclass AND attname = 'attempts'")

# waiters_asleep: the number of waiter sessions asleep in dlock's wait
# event (wait_event_type Extension on every version).
waiters_asleep() {
    bench_sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench-any-waiter' AND wait_event_type = 'Extension'"
}

# waiters_running: the number of waiter sessions connected.
waiters_running() {
    bench_sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench-any-waiter'"
}

# waiters_start: starts the waiters unless they run, and returns once all
# are asleep (bounded: 120 s).
waiters_start() {
    local i tries
    if [ "$(waiters_running)" -ne "$waiters" ]; then
        for ((i = 1; i <= waiters; i++)); do
            bench_background "any-waiter-$i" env PGAPPNAME=bench-any-waiter \
                psql -X -q -At -c "SELECT * FROM dlock_acquire_any(ARRAY(SELECT 'p:' || g FROM generate_series(1, $pool) g), '1 hour', wait => '1 hour')"
        done
    fi
    for ((tries = 0; tries < 1200; tries++)); do
        [ "$(waiters_asleep)" -eq "$waiters" ] && return 0
        sleep 0.1
    done
    dlock_die "any-waiters: the $waiters waiters are not all asleep after 120 s"
}

# waiters_stop: cancels the waiters, and returns once they are gone.
waiters_stop() {
    local tries
    bench_sql -c "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = 'bench-any-waiter'" >/dev/null
    for ((tries = 0; tries < 600; tries++)); do
        [ "$(waiters_running)" -eq 0 ] && return 0
        sleep 0.1
    done
    dlock_die "any-waiters: the waiters are still there 60 s after their cancel"
}

# waiter_cpu_ms: the CPU time the waiters' backends used so far, in ms
# (utime + stime of /proc/PID/stat, in clock ticks).
waiter_cpu_ms() {
    local pid ticks total=0
    for pid in $(bench_sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench-any-waiter'"); do
        ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null) || continue
        total=$((total + ${ticks:-0}))
    done
    printf '%s\n' "$((total * 1000 / $(getconf CLK_TCK)))"
}

# waiter_attempts: the sum of the waiters' attempts (empty before issue 22).
waiter_attempts() {
    [ "$has_attempts" = 1 ] || return 0
    bench_sql -c "SELECT coalesce(sum(attempts), 0) FROM dlock_waiters WHERE kind = 'any'"
}

# bench_side SIDE SECONDS: $txns transactions by one client in B (none-b,
# waiters-b) or in A on the names o:* (none-a, waiters-a), with the
# waiters (waiters-*) or without (none-*); SECONDS is not used.  The
# waiters' attempts and CPU time during a waiter run, once they are all
# asleep again, are added to its output.
bench_side() {
    local side=$1 db=$db_a prefix=o: before after cpu tries
    case $side in *-b) db=$db_b prefix=p: ;; esac
    case $side in
        none-*) waiters_stop ;;
        waiters-*) waiters_start ;;
    esac
    before=$(waiter_attempts)
    cpu=$(waiter_cpu_ms)
    PGDATABASE=$db bench_pgbench cycle-once.sql -c 1 -t "$txns" -D prefix="$prefix" -D names="$others"
    case $side in
        waiters-*)
            for ((tries = 0; tries < 1200; tries++)); do
                [ "$(waiters_asleep)" -eq "$waiters" ] && break
                sleep 0.1
            done
            [ "$(waiters_running)" -eq "$waiters" ] || dlock_die "any-waiters: a waiter ended during a run"
            printf 'waiter_cpu_ms %s\n' "$(($(waiter_cpu_ms) - cpu))" >>"$BENCH_RUN"
            after=$(waiter_attempts)
            [ -z "$before" ] || printf 'attempts %s\n' "$((after - before))" >>"$BENCH_RUN"
            ;;
    esac
}

bench_alternate "$runs" 1 none-b waiters-b none-a waiters-a
waiters_stop

for where in b a; do
    none=$(bench_median "none-$where" latency)
    with=$(bench_median "waiters-$where" latency)
    r=$(bench_ratio "$with" "$none")
    case $where in
        b) what="in another database" ;;
        a) what="in the same database, on names nobody waits for" ;;
    esac
    tried=n/a
    [ "$has_attempts" = 1 ] && tried=$(bench_runs "waiters-$where" attempts | awk '{ s += $1 } END { print s + 0 }')
    cpu=$(bench_runs "waiters-$where" waiter_cpu_ms | awk '{ s += $1 } END { print s + 0 }')
    bench_row "$txns acquire+release transactions $what, one client, with $waiters sessions waiting in dlock_acquire_any on $pool names / without (ms for the $txns, medians); the waiters' CPU time and the names they tried during the $runs runs with them" \
        "$(bench_round "$(awk -v l="$with" -v t="$txns" 'BEGIN { print l * t }')") / $(bench_round "$(awk -v l="$none" -v t="$txns" 'BEGIN { print l * t }')") ms; $cpu ms, $tried names"
    bench_row "The same $what: with waiters / without (ratio of medians; range of the rounds' ratios)" \
        "$r ($(bench_ratio_spread "waiters-$where" "none-$where" latency))" "≤ 1.1" "$(bench_le "$r" 1.1)"
done

bench_note "Any-waiters (bench/workloads/47-any-waiters.sh, issue 22): database A has $pool names p:1 .. p:$pool held for an hour; $waiters psql sessions wait in dlock_acquire_any on all of them (wait 1 hour), started before each waiter run and cancelled before each run without. One pgbench client runs $txns transactions of bench/pgbench/cycle-once.sql (SELECT dlock_release(n, dlock_acquire(n, '30 s')) on a random name of $others, names that had leases already): in database B on p:1 .. p:$others (the same names as the pool, in another database), or in A on o:1 .. o:$others; $runs alternating rounds of the four sides, each run after a CHECKPOINT."
