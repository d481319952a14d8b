# bench/workloads/80-scale.sh: acquire+release latency with 1k, 100k and
# 1M lease rows present (BENCH_SCALE_ROWS): it should be flat.  One
# database per size, loaded by a direct INSERT into dlock_lease (as the
# superuser that owns the extension) of ended leases with increasing tokens
# from dlock_token_seq.  Each run of a size is pgbench -c 1 on random
# existing names (the latency a client sees), then the server-side loop of
# bench/cycle_loop.sql (the server's time per cycle, without round trips),
# then the same loop doing two plain UPDATEs on a table of the same shape
# and size (what the size alone costs PostgreSQL); the sizes alternate
# (bench_alternate).  Flatness is judged on the server-side time: one
# client's round trips on this kind of machine drift by more than the
# effect measured.  Preload cluster only.  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

sizes=${BENCH_SCALE_ROWS//,/ }
bench_say "scale: acquire+release latency, 1 client, with ${sizes// / \/ } lease rows ($BENCH_TP_RUNS alternating runs of ${BENCH_TP_SECONDS} s per size)"
started=$SECONDS
for n in $sizes; do
    bench_database "dlock_scale_$n"
    bench_sql -f "$DLOCK_TOP/bench/cycle_loop.sql" >/dev/null
    bench_sql >/dev/null <<SQL
INSERT INTO dlock_lease
SELECT 'r:' || i, nextval('dlock_token_seq'), 'bench', 'postgres'::regrole,
       now(), now(), now(), true
  FROM generate_series(1, $n) i;
INSERT INTO bench_ref SELECT 'r:' || i, 0 FROM generate_series(1, $n) i;
VACUUM ANALYZE dlock_lease;
VACUUM ANALYZE bench_ref;
SQL
done
# The load's dirty pages are written now, not during the measured runs.
bench_sql -c CHECKPOINT >/dev/null
bench_say "  loaded in $((SECONDS - started)) s"

# bench_side N SECONDS: one run with N lease rows present: pgbench, then
# the server-side loops, whose figures are added to the run's output as
# "server_us" and "ref_us" (mean µs per cycle of dlock and of the plain
# UPDATEs).
bench_side() {
    local out
    PGDATABASE=dlock_scale_$1 bench_pgbench cycle-dlock.sql -c 1 -T "$2" -r -D names="$1"
    out=$(PGDATABASE=dlock_scale_$1 bench_sql -F ' ' -c "CALL bench_cycle_loop($1, $2, 'dlock', NULL, NULL)")
    printf 'server_us %s\n' "${out#* }" >>"$BENCH_RUN"
    out=$(PGDATABASE=dlock_scale_$1 bench_sql -F ' ' -c "CALL bench_cycle_loop($1, $2, 'update', NULL, NULL)")
    printf 'ref_us %s\n' "${out#* }" >>"$BENCH_RUN"
}
# Three measures per run: 2 s each by default.
seconds=$((BENCH_TP_SECONDS > 1 ? BENCH_TP_SECONDS - 1 : 1))
# shellcheck disable=SC2086
bench_alternate "$BENCH_TP_RUNS" "$seconds" $sizes

cycle=
acquire=
server=
ref=
own=
lo=
hi=
reflo=
refhi=
for n in $sizes; do
    c=$(bench_median "$n" latency)
    a=$(bench_median "$n" stmt:dlock_acquire)
    v=$(bench_median "$n" server_us)
    r=$(bench_median "$n" ref_us)
    cycle="${cycle:+$cycle / }$(bench_round "$c" 3)"
    acquire="${acquire:+$acquire / }$(bench_round "$a" 3)"
    server="${server:+$server / }$(bench_round "$v" 1)"
    ref="${ref:+$ref / }$(bench_round "$r" 1)"
    own="${own:+$own / }$(awk -v v="$v" -v r="$r" 'BEGIN { printf "%.1f\n", v - r }')"
    [ -z "$lo" ] && lo=$v && reflo=$r
    hi=$v
    refhi=$r
done
label=$(for n in $sizes; do
    case $n in
        *000000) printf '%sM\n' "${n%000000}" ;;
        *000) printf '%sk\n' "${n%000}" ;;
        *) printf '%s\n' "$n" ;;
    esac
done | paste -sd/ | sed 's|/| / |g')
growth=$(bench_ratio "$hi" "$lo")
bench_row "Acquire+release cycle with $label lease rows, server side: time per cycle (median of runs)" \
    "$server µs" "flat: last ≤ 1.25 × first" "$(bench_le "$growth" 1.25)"
bench_row "Same, server-side time with the most rows / with the fewest" "$growth"
bench_row "For reference: two plain UPDATEs per cycle on a table of the same shape and size, server side" \
    "$ref µs (most / fewest: $(bench_ratio "$refhi" "$reflo"))"
bench_row "dlock's cycle minus the plain UPDATEs (what dlock adds), server side" "$own µs"
bench_row "Same, seen by one client (pgbench -c 1): mean latency per cycle" "$cycle ms"
bench_row "… of which dlock_acquire (pgbench -r)" "$acquire ms"

bench_note "Scale: one database per size, its lease table loaded with $label ended leases (INSERT … SELECT from generate_series, tokens from nextval), VACUUM ANALYZE, CHECKPOINT; then, in each run, pgbench -c 1 -M prepared -r with bench/pgbench/cycle-dlock.sql on a random existing name (a takeover and a release; latency = pgbench's mean per cycle, two statements, two round trips), and the procedure of bench/cycle_loop.sql doing the same cycles in the server (each acquire and release committed on its own), and then two plain UPDATEs per cycle (each committed) on a table bench_ref of the same shape (text key, COLLATE \"C\", fillfactor 70) and size, each for $seconds s, the sizes alternating as the throughput comparisons do. The server-side time is what the table's size can change; the client's figure adds two round trips, whose latency on this machine drifts between runs by more than that (one client waiting on one backend: process wake-ups dominate). The lease table at 1M rows (about 190 MB with its index; bench_ref as much again) exceeds the default shared_buffers (128 MB), so some pages come from the OS cache. \"Met\" judges dlock's own server-side time (a threshold of 1.25 chosen here); the plain UPDATEs show how much of the growth the table's size costs PostgreSQL anyway."
