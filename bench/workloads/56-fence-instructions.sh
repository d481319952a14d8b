# bench/workloads/56-fence-instructions.sh: what the fence costs in
# instructions, counted by valgrind's callgrind in one single-user backend
# (postgres --single).  A count does not move with the machine's load: the
# same binary and script give the same total within a few hundred
# instructions, where the throughput ratios of 52-fence-fresh swing by
# 15% and more between rounds on a shared machine.  It counts the CPU work
# of one backend only: not waiting for locks, WAL or other backends, nor
# memory stalls (52 measures those).
#
# A cluster of its own (dlock preloaded, autovacuum off so that nothing
# changes between runs), one database, and these tables, each filled in
# the same way (so that every run starts from the same pages) with tokens
# of leases acquired beforehand, with fillfactor 70 (room on each page, so
# that the UPDATEs are HOT, as in a table's steady state):
#
#   s_none, s_noop, s_latest, s_live, s_seen
#       1000 rows (id, bal, fence_token), each under its own lock
#       acct:{id}: no trigger; a BEFORE ROW trigger that checks nothing
#       (suppress_redundant_updates_trigger); dlock_fence in mode latest,
#       live, seen (no mark yet)
#   g_none, g_noop, g_latest
#       10000 rows (id, grp, bal, fence_token) in 100 groups of 100 rows,
#       each group's rows together on one or two pages (so that the UPDATE
#       reads them through the index on grp, and its cost is the rows'
#       rather than a scan's), each group under lock grp:{grp}
#
# The cluster is stopped after the setup, and each run is one backend on a
# fresh copy of its data directory, so that it starts with an empty fence
# cache.  Single-row tables: 1000 UPDATEs, one per row (pass 1: the first
# write of each name), then the same 1000 again (pass 2: later writes,
# cache hits); 100-row tables: 100 UPDATEs, one per group, then again.
# Per statement: pass 1 is (run with pass 1 - run of as many SELECT 1)
# / statements, pass 2 is (run with both passes - run with pass 1) /
# statements.  Each statement is its own transaction.  On the preload
# cluster's pass only; skipped when valgrind is missing.  Sourced by
# bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0
if ! command -v valgrind >/dev/null; then
    bench_say "fence instructions: valgrind is missing, skipped"
    return 0
fi

ins_rows=1000
ins_grp_rows=10000
ins_groups=100
bench_say "fence instructions: callgrind, one single-user backend per run ($ins_rows single-row UPDATEs twice, $ins_groups 100-row UPDATEs twice, per side)"

bench_own_cluster instructions "shared_preload_libraries = 'dlock'" \
    "synchronous_commit = off" "autovacuum = off"
ins_dir=$BENCH_OWN_DIR
bench_database dlock_ins
bench_sql >/dev/null <<SQL
CREATE TABLE s_base AS
SELECT i AS id, dlock_acquire('acct:' || i, '12 hours') AS token
  FROM generate_series(1, $ins_rows) i;
CREATE TABLE g_base AS
SELECT g AS grp, dlock_acquire('grp:' || g, '12 hours') AS token
  FROM generate_series(0, $ins_groups - 1) g;
SQL
for side in none noop latest live seen; do
    bench_sql >/dev/null <<SQL
CREATE TABLE s_$side (id int PRIMARY KEY, bal bigint NOT NULL DEFAULT 0, fence_token bigint)
    WITH (fillfactor = 70);
INSERT INTO s_$side (id, fence_token) SELECT id, token FROM s_base ORDER BY id;
SQL
done
for side in none noop latest; do
    bench_sql >/dev/null <<SQL
CREATE TABLE g_$side (id int PRIMARY KEY, grp int NOT NULL, bal bigint NOT NULL DEFAULT 0, fence_token bigint)
    WITH (fillfactor = 70);
INSERT INTO g_$side (id, grp, fence_token)
SELECT i, i % $ins_groups, b.token
  FROM generate_series(1, $ins_grp_rows) i JOIN g_base b ON b.grp = i % $ins_groups
 ORDER BY i % $ins_groups, i;
CREATE INDEX ON g_$side (grp);
SQL
done
bench_sql >/dev/null <<SQL
CREATE TRIGGER noop BEFORE UPDATE ON s_noop
    FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER noop BEFORE UPDATE ON g_noop
    FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON s_latest
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token', 'latest');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON s_live
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token', 'live');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON s_seen
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token', 'seen');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON g_latest
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('grp:{grp}', 'fence_token', 'latest');
VACUUM ANALYZE;
SQL
bench_sql -d postgres -c CHECKPOINT >/dev/null
data=$DLOCK_CLUSTER_DIR/data
dlock_cluster_stop

# The scripts: one statement a line (without -j, single-user mode ends a
# statement at each newline).
for ((k = 1; k <= ins_rows; k++)); do echo "SELECT 1;"; done >"$ins_dir/base-s.sql"
for ((k = 1; k <= ins_groups; k++)); do echo "SELECT 1;"; done >"$ins_dir/base-g.sql"
for side in none noop latest live seen; do
    for ((k = 1; k <= ins_rows; k++)); do
        echo "UPDATE s_$side SET bal = bal + 1, fence_token = fence_token WHERE id = $k;"
    done >"$ins_dir/s_$side-1.sql"
    cat "$ins_dir/s_$side-1.sql" "$ins_dir/s_$side-1.sql" >"$ins_dir/s_$side-2.sql"
done
for side in none noop latest; do
    for ((k = 0; k < ins_groups; k++)); do
        echo "UPDATE g_$side SET bal = bal + 1, fence_token = fence_token WHERE grp = $k;"
    done >"$ins_dir/g_$side-1.sql"
    cat "$ins_dir/g_$side-1.sql" "$ins_dir/g_$side-1.sql" >"$ins_dir/g_$side-2.sql"
done
[ "$(id -u)" -eq 0 ] && chown -R "$DLOCK_RUN_USER": "$ins_dir"

# ins_count NAME: the instructions of one backend running NAME.sql on a
# fresh copy of the data directory; fails on any error of the script (it
# runs in a command substitution: its callers exit when it fails).
ins_count() {
    local run=$ins_dir/run-$1 refs
    rm -rf "$ins_dir/copy"
    cp -a "$data" "$ins_dir/copy"
    dlock_run_as_pg valgrind --tool=callgrind --callgrind-out-file="$run.callgrind" \
        "$PG_BINDIR/postgres" --single -D "$ins_dir/copy" dlock_ins \
        <"$ins_dir/$1.sql" >"$run.log" 2>&1 ||
        dlock_die "fence instructions: $1 failed (see $run.log)"
    ! grep -q 'ERROR:' "$run.log" || dlock_die "fence instructions: $1 raised an error (see $run.log)"
    refs=$(sed -n 's/^==[0-9]*== I *refs: *\([0-9,]*\)$/\1/p' "$run.log" | tr -d ,)
    [ -n "$refs" ] || dlock_die "fence instructions: no count for $1 (see $run.log)"
    echo "$refs"
}

declare -A ins_first ins_later
base_s=$(ins_count base-s) || exit 1
base_g=$(ins_count base-g) || exit 1
for side in s_none s_noop s_latest s_live s_seen g_none g_noop g_latest; do
    one=$(ins_count "$side-1") || exit 1
    two=$(ins_count "$side-2") || exit 1
    case $side in s_*) n=$ins_rows base=$base_s ;; *) n=$ins_groups base=$base_g ;; esac
    ins_first[$side]=$(((one - base) / n))
    ins_later[$side]=$(((two - one) / n))
done
rm -rf "$ins_dir/copy"

# The fences checked something: a stale token is rejected, in one more run.
for side in s_latest s_live s_seen g_latest; do
    echo "UPDATE $side SET fence_token = fence_token - 1 WHERE id = 1;" >"$ins_dir/stale-$side.sql"
    [ "$(id -u)" -eq 0 ] && chown "$DLOCK_RUN_USER": "$ins_dir/stale-$side.sql"
    rm -rf "$ins_dir/copy"
    cp -a "$data" "$ins_dir/copy"
    out=$(dlock_run_as_pg "$PG_BINDIR/postgres" --single -D "$ins_dir/copy" dlock_ins \
        <"$ins_dir/stale-$side.sql" 2>&1)
    case $out in
        *"fencing token rejected"*) ;;
        *) dlock_die "fence instructions: the $side fence did not reject a stale token: $out" ;;
    esac
done
rm -rf "$ins_dir/copy"

kilo() { bench_round "$(awk -v v="$1" 'BEGIN { print v / 1000 }')" 1; }
# ins_ratio KIND A B: A's count / B's (a throughput ratio: B costs more).
ins_ratio() {
    local -n counts=ins_$1
    bench_ratio "${counts[$2]}" "${counts[$3]}"
}
bench_row "Instructions, single-row UPDATE without trigger: a later write of the row; its first" \
    "$(kilo "${ins_later[s_none]}")k; $(kilo "${ins_first[s_none]}")k"
for side in noop latest live seen; do
    case $side in
        noop) what="with a BEFORE ROW trigger that checks nothing" ;;
        *) what="dlock_fence $side" ;;
    esac
    bench_row "Instructions, single-row UPDATE: none / $what (a later write; the name's first)" \
        "$(ins_ratio later s_none "s_$side"); $(ins_ratio first s_none "s_$side")"
done
bench_row "Instructions, single-row UPDATE: the trigger that checks nothing / dlock_fence latest, a later write (the fence's own cost)" \
    "$(ins_ratio later s_noop s_latest)"
bench_row "Instructions, 100-row UPDATE under one lock without trigger (a later write)" \
    "$(kilo "${ins_later[g_none]}")k"
bench_row "Instructions, 100-row UPDATE: none / the trigger that checks nothing; none / dlock_fence latest; the trigger / dlock_fence latest (a later write)" \
    "$(ins_ratio later g_none g_noop); $(ins_ratio later g_none g_latest); $(ins_ratio later g_noop g_latest)"
bench_note "Fence instructions (56-fence-instructions): valgrind --tool=callgrind, one postgres --single backend per run on a fresh copy of one stopped cluster (dlock preloaded, autovacuum off), each statement its own transaction. Single-row tables of $ins_rows rows, each row under its own lock (acct:{id}); 100-row tables of $ins_grp_rows rows in $ins_groups groups (grp:{grp}); fillfactor 70 (HOT updates). A ratio is the instructions of none (or of the trigger that checks nothing) per statement over the side's: like a throughput ratio, lower means the side costs more. 'First' is a name's first write after the setup (an empty fence cache: a miss; for seen, the mark's insert), 'later' the same statements run again."
