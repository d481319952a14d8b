# bench/workloads/50-fence.sh: cost of the dlock_fence trigger on
# single-row UPDATEs, 8 clients: the same table and the same UPDATE with
# dlock_fence, with no trigger, and with the hand-written PL/pgSQL fence of
# bench/plpgsql_fence.sql.  R3 = dlock_fence / no trigger, target >= 0.95.
# Alternating runs (bench_alternate); the sides differ only in which
# trigger is enabled.  Preload cluster only.  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

rows=100000
bench_say "R3: single-row UPDATEs on $rows fenced rows, 8 clients ($BENCH_TP_RUNS alternating runs of ${BENCH_TP_SECONDS} s per side)"
bench_database dlock_fence
bench_sql -f "$DLOCK_TOP/bench/plpgsql_fence.sql" >/dev/null

# The table, one lease per row (acquired with dlock_acquire, committed every
# 1000 rows: each new name keeps a lock until its transaction ends), and
# each row carrying its lease's current token, as its writer would.
bench_sql >/dev/null <<SQL
CREATE TABLE acct (
    id          int PRIMARY KEY,
    bal         bigint NOT NULL DEFAULT 0,
    fence_token bigint
);
INSERT INTO acct (id) SELECT i FROM generate_series(1, $rows) i;
DO \$\$
BEGIN
    FOR b IN 0 .. ($rows - 1) / 1000 LOOP
        PERFORM dlock_acquire('acct:' || i, '12 hours')
           FROM generate_series(b * 1000 + 1, least(b * 1000 + 1000, $rows)) i;
        COMMIT;
    END LOOP;
END
\$\$;
UPDATE acct a SET fence_token = l.token
  FROM dlock_leases l WHERE l.lock_name = 'acct:' || a.id;
ALTER TABLE acct SET (autovacuum_enabled = off);
VACUUM ANALYZE acct;
VACUUM ANALYZE dlock_lease;
CREATE TRIGGER fence_dlock BEFORE INSERT OR UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token');
CREATE TRIGGER fence_plpgsql BEFORE INSERT OR UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION bench_fence_acct();
SQL
missing=$(bench_sql -c "SELECT count(*) FROM acct WHERE fence_token IS NULL")
[ "$missing" = 0 ] || dlock_die "R3 setup: $missing rows of acct have no lease"

# bench_side SIDE SECONDS: one run with only SIDE's trigger enabled
# (dlock_fence, none or plpgsql), on acct freshly vacuumed (its autovacuum
# is off, see 40-cycle.sh).
bench_side() {
    local dlock=DISABLE plpgsql=DISABLE
    case $1 in
        dlock_fence) dlock=ENABLE ;;
        plpgsql) plpgsql=ENABLE ;;
    esac
    bench_sql -c "ALTER TABLE acct $dlock TRIGGER fence_dlock, $plpgsql TRIGGER fence_plpgsql" >/dev/null
    bench_sql -c "VACUUM acct"
    bench_pgbench update-acct.sql -c 8 -j 2 -T "$2" -D rows="$rows"
}
bench_alternate "$BENCH_TP_RUNS" "$BENCH_TP_SECONDS" dlock_fence none plpgsql

# The fences checked something: each rejects a stale token with 55T01.
for trigger in fence_dlock fence_plpgsql; do
    bench_sql -c "ALTER TABLE acct DISABLE TRIGGER USER, ENABLE TRIGGER $trigger" >/dev/null
    out=$(psql -X -q -v VERBOSITY=verbose -c "UPDATE acct SET fence_token = fence_token - 1 WHERE id = 1" 2>&1)
    case $out in
        *55T01*) ;;
        *) dlock_die "R3: trigger $trigger did not reject a stale token: $out" ;;
    esac
done

cell() {
    printf '%s tps (%s)\n' "$(bench_round "$(bench_median "$1" tps)")" "$(bench_spread "$1" tps)"
}
fence=$(bench_median dlock_fence tps)
none=$(bench_median none tps)
plpgsql=$(bench_median plpgsql tps)
r3=$(bench_ratio "$fence" "$none")

bench_row "Fenced UPDATEs, 8 clients: dlock_fence (median, min–max of runs)" "$(cell dlock_fence)"
bench_row "Fenced UPDATEs, 8 clients: no trigger" "$(cell none)"
bench_row "Fenced UPDATEs, 8 clients: hand-written PL/pgSQL fence" "$(cell plpgsql)"
bench_row "R3 = dlock_fence / no trigger (ratio of medians; range of the rounds' ratios)" \
    "$r3 ($(bench_ratio_spread dlock_fence none tps))" "≥ 0.95" "$(bench_ge "$r3" 0.95)"
bench_row "dlock_fence / PL/pgSQL fence" \
    "$(bench_ratio "$fence" "$plpgsql") ($(bench_ratio_spread dlock_fence plpgsql tps))"

bench_note "Fenced UPDATEs (R3): a table acct of $rows rows (id int primary key, bal bigint, fence_token bigint), each row's lease acquired once beforehand and its token stored in the row; pgbench -c 8 -j 2 -M prepared, script bench/pgbench/update-acct.sql: UPDATE acct SET bal = bal + 1, fence_token = fence_token WHERE id = random row, each its own transaction. The same table for the three sides, only the enabled trigger differs: dlock_fence('acct:{id}', 'fence_token') (mode latest), none, or bench/plpgsql_fence.sql (reads the token from dlock_leases and compares)."
