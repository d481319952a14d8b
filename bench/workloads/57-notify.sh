# bench/workloads/57-notify.sh: what lease events cost (dlock.notify,
# src/events.c, src/notifier.c).  Throughput of the acquire+release cycle
# of 40-cycle.sh on random names (8 clients) in alternating runs
# (bench_alternate) of three sides: dlock.notify off; the events sent by
# the committing sessions themselves, as dlock 1.2 first did (a NOTIFY in
# the transaction of each change, bench/pgbench/cycle-notify-commit.sql,
# with dlock.notify off: each commit takes PostgreSQL's cluster-wide
# notification lock until it has ended); and dlock.notify = on, the
# events handed to the notifier.  Under each synchronous_commit setting
# of BENCH_SYNC_MODES (bench_sync).  A listener (bench/notify.c --drain)
# reads every event.  Then the delay from a change's commit to a
# listener's receipt, both ways (bench/notify.c).  Preload cluster only
# (without preload nothing is sent).  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

names=100000
bench_say "Lease events: cycles on $names random names, 8 clients, with dlock.notify off, NOTIFY from the committing session, and the notifier ($BENCH_TP_RUNS alternating runs of ${BENCH_TP_SECONDS} s per side, per synchronous_commit setting)"
bench_database dlock_notify

# Every name has an ended lease (the steady state of 40-cycle.sh).
bench_sql >/dev/null <<SQL
INSERT INTO dlock_lease
SELECT 'r:' || i, nextval('dlock_token_seq'), 'bench', 'postgres'::regrole,
       now(), now(), now(), true
  FROM generate_series(1, $names) i;
ALTER TABLE dlock_lease SET (autovacuum_enabled = off);
VACUUM ANALYZE dlock_lease;
SQL
bench_background listener "$BENCH_BIN/notify" --drain

# sent_dropped: "sent dropped" of this database's notifier so far ("0 0"
# with a dlock that has no notifier, so that the workload also measures
# builds from before it).
sent_dropped() {
    if [ "$(bench_sql -c "SELECT to_regclass('dlock_notifier') IS NOT NULL")" != t ]; then
        printf '0 0\n'
        return
    fi
    bench_sql -F ' ' -c "SELECT coalesce(sum(events_sent), 0), coalesce(sum(events_dropped), 0)
                           FROM dlock_notifier WHERE datname = current_database()"
}

# bench_side SIDE SECONDS: SIDE is off, commit or notifier, with -MODE
# for a synchronous_commit setting other than the cluster's.  Appends
# "sent N" and "dropped N" (the notifier's counts during the run) to the
# run's output.
bench_side() {
    local side=$1 mode=$BENCH_SYNC_CLUSTER before after script=cycle-dlock.sql notify=off
    case $side in
        *-on | *-off) mode=${side##*-} side=${side%-*} ;;
    esac
    case $side in
        commit) script=cycle-notify-commit.sql ;;
        notifier) notify=on ;;
    esac
    bench_sql -c "VACUUM dlock_lease"
    before=$(sent_dropped)
    PGOPTIONS="${PGOPTIONS:+$PGOPTIONS }-c dlock.notify=$notify" \
        bench_sync "$mode" bench_pgbench "$script" -c 8 -j 2 -T "$2" -D names="$names"
    after=$(sent_dropped)
    printf 'sent %s\ndropped %s\n' "$((${after% *} - ${before% *}))" "$((${after#* } - ${before#* }))" >>"$BENCH_RUN"
}

cell() {
    printf '%s tps (%s)\n' "$(bench_round "$(bench_median "$1" tps)")" "$(bench_spread "$1" tps)"
}

for mode in $BENCH_SYNC_MODES; do
    sfx=
    [ "$mode" = "$BENCH_SYNC_CLUSTER" ] || sfx=-$mode
    [ -z "$sfx" ] || bench_say "  again with synchronous_commit = $mode"
    bench_alternate "$BENCH_TP_RUNS" "$BENCH_TP_SECONDS" "off$sfx" "commit$sfx" "notifier$sfx"
    off=$(bench_median "off$sfx" tps)
    commit=$(bench_median "commit$sfx" tps)
    notifier=$(bench_median "notifier$sfx" tps)
    bench_row "Events, synchronous_commit = $mode: cycles, 8 clients, dlock.notify off (median, min–max of runs)" "$(cell "off$sfx")"
    bench_row "Events, synchronous_commit = $mode: cycles with a NOTIFY from the committing session (1.2's first design)" "$(cell "commit$sfx")"
    bench_row "Events, synchronous_commit = $mode: cycles with dlock.notify on (the notifier)" "$(cell "notifier$sfx")"
    bench_row "Events, synchronous_commit = $mode: committing-session NOTIFY / off; notifier / off (ratios of medians)" \
        "$(bench_ratio "$commit" "$off") ($(bench_ratio_spread "commit$sfx" "off$sfx" tps)); $(bench_ratio "$notifier" "$off") ($(bench_ratio_spread "notifier$sfx" "off$sfx" tps))"
    bench_row "Events, synchronous_commit = $mode: notifier / committing-session NOTIFY" \
        "$(bench_ratio "$notifier" "$commit") ($(bench_ratio_spread "notifier$sfx" "commit$sfx" tps))"
    sent=0 dropped=0
    for v in $(bench_runs "notifier$sfx" sent); do sent=$((sent + v)); done
    for v in $(bench_runs "notifier$sfx" dropped); do dropped=$((dropped + v)); done
    bench_row "Events, synchronous_commit = $mode: notifier runs: events sent / dropped (all runs)" "$sent / $dropped"
done

# The delay from the commit to the listener's receipt.
for way in notifier commit; do
    bench_client notify --mode "$way" --rounds 500
    label="the notifier"
    [ "$way" = commit ] && label="NOTIFY from the committing session"
    bench_row "Event delay, $label: after the call returned, median / p99 (1000 events, one writer)" \
        "$(bench_get after_commit_median_ms) / $(bench_get after_commit_p99_ms) ms"
    bench_row "Event delay, $label: from the call, median / p99" \
        "$(bench_get from_call_median_ms) / $(bench_get from_call_p99_ms) ms"
done

bench_note "Events (57-notify): pgbench -c 8 -j 2 -M prepared, the cycle of 40-cycle.sh (bench/pgbench/cycle-dlock.sql) with dlock.notify off and on, and bench/pgbench/cycle-notify-commit.sql, which sends each change's event itself in the change's transaction (pg_notify with the payload dlock sends), as the committing session did before the notifier; a listener (bench/notify.c --drain) reads every event. The event delay (bench/notify.c): one writer acquires and releases nb:1 … nb:500, each call its own transaction, while a listener on another connection waits for each event; \"after the call returned\" is receipt minus the writer's call returning (negative: the event arrived first), \"from the call\" receipt minus the call's sending."
