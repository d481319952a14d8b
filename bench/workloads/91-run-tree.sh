# bench/workloads/91-run-tree.sh: how soon the whole job of `dlock run` is
# gone after dlock itself is killed with SIGKILL (issue 24: within 1 s,
# long before the ttl).  Each run starts `dlock run --ttl 60s` with a job
# of three processes (a shell, a background child and a daemon that
# double-forks and calls setsid), waits until all three have written
# their pids, sends dlock SIGKILL and polls /proc every millisecond until
# none of the three is left.  Two jobs: one whose processes end on
# SIGTERM, and one whose processes ignore it (they end only by the
# keeper's SIGKILL, min(--kill-after, 0.5 s) after its SIGTERM).  The
# figure is the median (min–max) of the runs.  Target: < 1 s.  Preload
# cluster only.  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

runs=$((2 * BENCH_TP_RUNS))
cli=$DLOCK_TOP/cli/dlock
[ -x "$cli" ] || dlock_die "91-run-tree: no $cli (make builds it; DLOCK_NO_BUILD=1 needs a built tree)"
tree_dir=$BENCH_DIR/run-tree
rm -rf "$tree_dir"
mkdir -p "$tree_dir"

# job KIND: the job's script; KIND "stubborn" ignores SIGTERM everywhere.
job() {
    local trap=
    [ "$1" = stubborn ] && trap="trap '' TERM;"
    cat <<SCRIPT
#!/bin/bash
$trap echo \$\$ >> "\$PIDS"
( $trap echo \$BASHPID >> "\$PIDS"; while :; do sleep 0.2; done ) &
setsid -f bash -c "$trap"' echo \$\$ >> "\$PIDS"; while :; do sleep 0.2; done' </dev/null >/dev/null 2>&1
while :; do sleep 0.2; done
SCRIPT
}

# one KIND: one run; prints the ms from the SIGKILL of dlock to the last
# process of the job gone.
one() {
    local kind=$1 pids=$tree_dir/$1.pids dpid t0 t1 left i p
    : >"$pids"
    PIDS=$pids "$cli" run --ttl 60s "bench-tree-$kind" -- "$tree_dir/$kind.sh" &
    dpid=$!
    for ((i = 0; i < 2000; i++)); do
        [ "$(wc -l <"$pids")" -ge 3 ] && break
        sleep 0.005
    done
    [ "$(wc -l <"$pids")" -ge 3 ] || dlock_die "91-run-tree: the $kind job did not start"
    t0=$EPOCHREALTIME
    kill -KILL "$dpid"
    for ((i = 0; i < 20000; i++)); do
        left=0
        while read -r p; do
            [ -e "/proc/$p" ] && [ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)" != Z ] && left=1
        done <"$pids"
        [ "$left" = 0 ] && break
        sleep 0.001
    done
    t1=$EPOCHREALTIME
    wait "$dpid" 2>/dev/null
    [ "$left" = 0 ] || dlock_die "91-run-tree: the $kind job outlived dlock by 20 s"
    # the lease (ttl 60 s) is still live: break it for the next run
    psql -X -q -c "SELECT dlock_break('bench-tree-$kind')" >/dev/null
    awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.1f\n", (b - a) * 1000 }'
}

bench_say "dlock run: the job gone after a SIGKILL of dlock, $runs runs each of a job that ends on SIGTERM and one that ignores it"
for kind in plain stubborn; do
    job "$kind" >"$tree_dir/$kind.sh"
    chmod +x "$tree_dir/$kind.sh"
    : >"$tree_dir/$kind.times"
    for ((r = 1; r <= runs; r++)); do
        one "$kind" >>"$tree_dir/$kind.times"
    done
done

cell() {
    sort -g "$tree_dir/$1.times" | awk '
        { v[NR] = $1 }
        END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%.1f ms (%.1f–%.1f)\n", m, v[1], v[NR] }'
}
max_of() { sort -g "$tree_dir/$1.times" | tail -n 1; }
bench_row "dlock run: a SIGKILL of dlock to the job gone, processes that end on SIGTERM (median, min–max of $runs)" \
    "$(cell plain)" "< 1000 ms" "$(bench_le "$(max_of plain)" 999.9)"
bench_row "dlock run: a SIGKILL of dlock to the job gone, processes that ignore SIGTERM (median, min–max of $runs)" \
    "$(cell stubborn)" "< 1000 ms" "$(bench_le "$(max_of stubborn)" 999.9)"
bench_note "dlock run and its job's processes: dlock run --ttl 60s with a job of a shell, a background child and a setsid daemon (double fork); the time from kill -KILL of dlock until /proc shows none of the three (polled every ms from bash); the keeper sends SIGTERM at once and SIGKILL min(--kill-after, 0.5 s) later. The figure in the last column compares the slowest run with the target."
