# bench/workloads/90-etcd.sh: "run a command under a lock", whole
# processes, as a shell script or cron job does it: `dlock run NAME --
# true` (cli/dlock, under each synchronous_commit setting of
# BENCH_SYNC_MODES, bench_sync) against `etcdctl lock NAME true` on an
# etcd started here (Debian's etcd-server, on 127.0.0.1, non-default
# ports, a throwaway data directory, stopped when the workload ends), and
# for scale `psql -c 'select 1'`, `dlock --version` and `dlock status NAME`
# (where dlock run's time goes).  The sides alternate, one process at a
# time (A B C, C B A, ...), each timed from bash ($EPOCHREALTIME) around
# the process.  Target: dlock / etcd <= 0.6.  Preload cluster only.
# Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

runs=$((10 * BENCH_TP_RUNS))
cli=$DLOCK_TOP/cli/dlock
[ -x "$cli" ] || dlock_die "90-etcd: no $cli (make builds it; DLOCK_NO_BUILD=1 needs a built tree)"
etcd_bin=$(command -v etcd) || dlock_die "90-etcd: no etcd (Debian package etcd-server)"
etcdctl_bin=$(command -v etcdctl) || dlock_die "90-etcd: no etcdctl (Debian package etcd-client)"
export ETCDCTL_API=3

# etcd on loopback, on two free ports, with a data directory of its own.
client_port=$(dlock_free_port)
peer_port=$(dlock_free_port)
while [ "$peer_port" = "$client_port" ]; do peer_port=$(dlock_free_port); done
etcd_dir=$BENCH_DIR/etcd
rm -rf "$etcd_dir"
mkdir -p "$etcd_dir"
bench_background etcd "$etcd_bin" --name bench --data-dir "$etcd_dir/data" \
    --listen-client-urls "http://127.0.0.1:$client_port" \
    --advertise-client-urls "http://127.0.0.1:$client_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "bench=http://127.0.0.1:$peer_port" \
    --initial-cluster-state new --logger zap --log-outputs stderr --log-level warn
endpoint=http://127.0.0.1:$client_port
for ((i = 0; i < 100; i++)); do
    "$etcdctl_bin" --endpoints="$endpoint" --dial-timeout=1s endpoint health >/dev/null 2>&1 && break
    kill -0 "$BENCH_BG_PID" 2>/dev/null ||
        { tail -n 5 "$BENCH_DIR/$BENCH_CLUSTER-etcd.log" >&2; dlock_die "90-etcd: etcd did not start"; }
    sleep 0.2
done
"$etcdctl_bin" --endpoints="$endpoint" --dial-timeout=1s endpoint health >/dev/null 2>&1 ||
    dlock_die "90-etcd: etcd did not answer within 20 s"
etcd_version=$("$etcd_bin" --version 2>/dev/null | sed -n 's/^etcd Version: *//p')

sides=()
for mode in $BENCH_SYNC_MODES; do sides+=("dlock-$mode"); done
sides+=(etcd psql version status)
bench_say "dlock run vs etcdctl lock (etcd ${etcd_version:-?}): whole processes, $runs alternating runs each of ${sides[*]}"

# one SIDE: runs SIDE's command once, prints its wall time in ms; stops
# the benchmark when the command fails.
one() {
    local t0 t1 status=0
    t0=$EPOCHREALTIME
    case $1 in
        dlock-*) bench_sync "${1#dlock-}" "$cli" run bench-etcd-cmp -- true || status=$? ;;
        etcd) "$etcdctl_bin" --endpoints="$endpoint" lock bench-etcd-cmp true || status=$? ;;
        psql) psql -X -q -c 'select 1' >/dev/null || status=$? ;;
        # where dlock run's time goes: the process with libpq's libraries
        # alone, and that plus a session and one query
        version) "$cli" --version >/dev/null || status=$? ;;
        status) "$cli" status bench-etcd-cmp >/dev/null
            s=$?
            [ "$s" -le 1 ] || status=$s ;;    # 1: no live lease, as expected
    esac
    t1=$EPOCHREALTIME
    [ "$status" -eq 0 ] || dlock_die "90-etcd: side $1 failed (status $status)"
    awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }'
}

# Times of run I of SIDE go to tmp_bench/preload-90-etcd-SIDE.times.
for side in "${sides[@]}"; do
    one "$side" >/dev/null    # warm-up, uncounted
    : >"$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$side.times"
done
for ((i = 1; i <= runs; i++)); do
    order=("${sides[@]}")
    if ((i % 2 == 0)); then
        order=()
        for side in "${sides[@]}"; do order=("$side" "${order[@]}"); done
    fi
    for side in "${order[@]}"; do
        one "$side" >>"$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$side.times" </dev/null
    done
done

# times_of SIDE: "median min max" of SIDE's times (ms).
times_of() {
    sort -g "$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$1.times" | awk '
        { v[NR] = $1 }
        END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR] }'
}
# cell SIDE: "median ms (min–max)".
cell() {
    times_of "$1" | awk '{ printf "%.1f ms (%.1f–%.1f)\n", $1, $2, $3 }'
}

etcd_ms=$(times_of etcd | cut -d' ' -f1)
for mode in $BENCH_SYNC_MODES; do
    bench_row "\`dlock run NAME -- true\`, whole process, synchronous_commit = $mode (median, min–max of $runs runs)" \
        "$(cell "dlock-$mode")"
done
bench_row "\`etcdctl lock NAME true\`, whole process, etcd ${etcd_version:-?} on loopback, one member" "$(cell etcd)"
bench_row "For scale: \`psql -X -c 'select 1'\`, whole process" "$(cell psql)"
bench_row "Where dlock run's time goes: \`dlock --version\` (the process, libpq and its libraries loaded)" "$(cell version)"
bench_row "Where dlock run's time goes: \`dlock status NAME\` (the process, a new session, one query)" "$(cell status)"
for mode in $BENCH_SYNC_MODES; do
    r=$(bench_ratio "$(times_of "dlock-$mode" | cut -d' ' -f1)" "$etcd_ms")
    bench_row "dlock run / etcdctl lock, synchronous_commit = $mode (ratio of medians)" \
        "$r" "≤ 0.6" "$(bench_le "$r" 0.6)"
done

bench_note "dlock run vs etcdctl lock: each side is one whole process started from bash and timed around it (\$EPOCHREALTIME; fork, exec, connection, lock, running true, unlock, exit): cli/dlock run bench-etcd-cmp -- true (default ttl 30 s; connection from PGHOST etc. as for the other workloads, a Unix socket; synchronous_commit from PGOPTIONS), etcdctl --endpoints=$endpoint lock bench-etcd-cmp true (ETCDCTL_API=3; etcd ${etcd_version:-?} started by the bench, one member on 127.0.0.1 with a throwaway data directory, fsync on its WAL as always), and psql -X -c 'select 1' for scale (connect, one query, exit); cli/dlock --version and cli/dlock status bench-etcd-cmp show how much of dlock run is the process start and a new session. One uncounted run of each side, then $runs runs of each, the sides alternating (A B C, C B A, …); a side's figure is the median of its runs."
