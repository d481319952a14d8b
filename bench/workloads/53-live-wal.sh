# bench/workloads/53-live-wal.sh: what a 'live' check writes.  Since the
# 'live' fence keeps a takeover off with dlock's name lock in the lock
# manager (src/name_lock.c) rather than a FOR KEY SHARE row lock, it should
# write nothing of its own: a fenced UPDATE in mode 'live' writes as much
# WAL as one in mode 'latest', and a transaction that only checks in mode
# 'live' gets no transaction id, so no commit record to flush.  One hot
# lease ('grp:1') over two tables of 10000 rows, fenced in mode 'live' and
# in mode 'latest', 8 clients:
#
#   WAL bytes per fenced single-row UPDATE (pg_current_wal_insert_lsn
#   around a run, after a CHECKPOINT), live / latest, target <= 1.05;
#   check-only transactions with synchronous_commit = on (bench_sync),
#   live / latest tps, target >= 0.9.
#
# Alternating runs (bench_alternate).  On the preload cluster only.
# Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

bench_say "the 'live' check's own writes: WAL per fenced UPDATE and check-only transactions with synchronous_commit = on ($BENCH_TP_RUNS alternating runs of ${BENCH_TP_SECONDS} s per side)"
bench_database dlock_live_wal
bench_sql >/dev/null <<'SQL'
CREATE TABLE tok AS SELECT dlock_acquire('grp:1', '12 hours') AS t;
CREATE TABLE acct_live (id int PRIMARY KEY, grp int NOT NULL, bal bigint NOT NULL DEFAULT 0, fence_token bigint);
CREATE TABLE acct_latest (LIKE acct_live INCLUDING ALL);
INSERT INTO acct_live SELECT i, 1, 0, (SELECT t FROM tok) FROM generate_series(1, 10000) i;
INSERT INTO acct_latest SELECT * FROM acct_live;
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct_live
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('grp:{grp}', 'fence_token', 'live');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct_latest
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('grp:{grp}', 'fence_token', 'latest');
VACUUM ANALYZE acct_live, acct_latest;
SQL
live_tok=$(bench_sql -c "SELECT t FROM tok")
for t in acct_live acct_latest; do
    sed "s/UPDATE acct /UPDATE $t /" "$DLOCK_TOP/bench/pgbench/update-acct.sql" >"$BENCH_DIR/update-$t.sql"
done

# bench_side SIDE SECONDS: one run of SIDE: upd_live or upd_latest (the
# UPDATE; its WAL bytes are added to the run's output as "wal N"), or
# chk_live or chk_latest (the check alone, synchronous_commit = on).
bench_side() {
    local a b
    case $1 in
        upd_*)
            bench_sql -c CHECKPOINT >/dev/null
            a=$(bench_sql -c "SELECT pg_current_wal_insert_lsn()")
            "$PG_BINDIR/pgbench" -n -M prepared -f "$BENCH_DIR/update-acct_${1#upd_}.sql" \
                -c 8 -j 2 -T "$2" -D rows=10000 >"$BENCH_RUN" 2>&1 ||
                dlock_die "pgbench update-acct_${1#upd_} failed (see $BENCH_RUN)"
            b=$(bench_sql -c "SELECT pg_current_wal_insert_lsn()")
            printf 'wal %s\n' "$(bench_sql -c "SELECT pg_wal_lsn_diff('$b', '$a')::bigint")" >>"$BENCH_RUN"
            ;;
        chk_*)
            BENCH_RUN=$BENCH_RUN bench_sync on bench_pgbench "check-${1#chk_}.sql" -c 8 -j 2 -T "$2" \
                -D tok="$live_tok"
            ;;
    esac
}
bench_alternate "$BENCH_TP_RUNS" "$BENCH_TP_SECONDS" upd_live upd_latest chk_live chk_latest

# wal_per_txn SIDE: the median over SIDE's runs of WAL bytes / transactions.
wal_per_txn() {
    local f
    for f in "$BENCH_DIR/$BENCH_CLUSTER-$BENCH_WORKLOAD-$1"-[0-9]*.out; do
        echo "$(bench_field "$f" wal) $(bench_field "$f" txns)"
    done | awk '{ print $1 / $2 }' | sort -n | awk '{ v[NR] = $1 } END { printf "%.0f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
w_live=$(wal_per_txn upd_live)
w_latest=$(wal_per_txn upd_latest)
r_wal=$(bench_ratio "$w_live" "$w_latest")
bench_row "'live' fence: WAL bytes per fenced single-row UPDATE, live / latest (one hot lease, 8 clients)" \
    "$r_wal ($w_live B / $w_latest B)" "≤ 1.05" "$(awk -v r="$r_wal" 'BEGIN { print (r <= 1.05) ? "yes" : "no" }')"
r_chk=$(bench_ratio "$(bench_median chk_live tps)" "$(bench_median chk_latest tps)")
bench_row "'live' fence: check-only transactions, synchronous_commit = on, live / latest tps" \
    "$r_chk ($(bench_round "$(bench_median chk_live tps)") / $(bench_round "$(bench_median chk_latest tps)") tps)" "≥ 0.9" "$(bench_ge "$r_chk" 0.9)"
bench_note "'live' check's own writes (53-live-wal): one lease over two tables of 10000 rows fenced by dlock_fence('grp:{grp}', 'fence_token', 'live') and 'latest'; UPDATE runs (bench/pgbench/update-acct.sql) after a CHECKPOINT, WAL from pg_current_wal_insert_lsn around each run; check-only runs bench/pgbench/check-live.sql and check-latest.sql with synchronous_commit = on. With the row lock of earlier releases a 'live' UPDATE wrote about 283 B against 211 B, and a 'live' check-only transaction needed a commit record and its flush (bench/README.md)."
