# bench/workloads/50-fence.sh: cost of the dlock_fence trigger on
# single-row UPDATEs, 8 clients: the same table and the same UPDATE with
# dlock_fence in mode 'latest', with dlock_fence in mode 'live', with
# dlock_fence in mode 'seen' (the marks of dlock_fence_mark), with no
# trigger, with the hand-written PL/pgSQL fence of bench/plpgsql_fence.sql,
# and with a built-in C trigger that checks nothing
# (suppress_redundant_updates_trigger, which never suppresses here: every
# UPDATE changes bal): what any BEFORE ROW UPDATE trigger costs, fence or
# not (PostgreSQL locks the old row before firing it).  R3 = latest / no
# trigger, target >= 0.95; live / no trigger, target >= 0.90; seen / no
# trigger, target >= 0.85.  Alternating
# runs (bench_alternate); the sides differ only in which trigger is
# enabled.  Preload cluster only (so the fence cache of src/fence_cache.c
# is on).  Sourced by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

rows=100000
bench_say "R3: single-row UPDATEs on $rows fenced rows, 8 clients ($BENCH_TP_RUNS alternating runs of ${BENCH_TP_SECONDS} s per side)"
bench_database dlock_fence
bench_sql -f "$DLOCK_TOP/bench/plpgsql_fence.sql" >/dev/null

# The table, one lease per row, each row carrying its lease's current token
# (bench_fenced_table).
bench_fenced_table "$rows"
bench_sql >/dev/null <<SQL
ALTER TABLE acct SET (autovacuum_enabled = off);
VACUUM ANALYZE acct;
VACUUM ANALYZE dlock_lease;
CREATE TRIGGER fence_dlock BEFORE INSERT OR UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token');
CREATE TRIGGER fence_live BEFORE INSERT OR UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token', 'live');
CREATE TRIGGER fence_seen BEFORE INSERT OR UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token', 'seen');
CREATE TRIGGER fence_noop BEFORE UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER fence_plpgsql BEFORE INSERT OR UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION bench_fence_acct();
SQL
missing=$(bench_sql -c "SELECT count(*) FROM acct WHERE fence_token IS NULL")
[ "$missing" = 0 ] || dlock_die "R3 setup: $missing rows of acct have no lease"
[ "$(bench_sql -c "SHOW dlock.fence_cache_size")" -ge "$rows" ] ||
    dlock_die "R3 setup: dlock.fence_cache_size is smaller than the $rows names"

# The steady state of a fenced table: every row written once with the
# 'latest' fence, which fills the fence cache (src/fence_cache.c) with
# every name's token, and once with the 'seen' fence, which creates every
# name's mark (a fenced table in another database has them once written).
bench_sql >/dev/null <<SQL
ALTER TABLE acct DISABLE TRIGGER USER, ENABLE TRIGGER fence_dlock;
UPDATE acct SET fence_token = fence_token;
ALTER TABLE acct DISABLE TRIGGER USER, ENABLE TRIGGER fence_seen;
UPDATE acct SET fence_token = fence_token;
VACUUM acct;
VACUUM ANALYZE dlock_fence_mark;
SQL
marks=$(bench_sql -c "SELECT count(*) FROM dlock_fence_mark")
[ "$marks" = "$rows" ] || dlock_die "R3 setup: $marks marks for $rows names"


# bench_side SIDE SECONDS: one run with only SIDE's trigger enabled
# (dlock_fence = mode latest, live, seen, none, plpgsql or noop), on acct freshly
# vacuumed (its autovacuum is off, see 40-cycle.sh).
bench_side() {
    local trigger
    case $1 in
        dlock_fence) trigger=fence_dlock ;;
        live) trigger=fence_live ;;
        seen) trigger=fence_seen ;;
        plpgsql) trigger=fence_plpgsql ;;
        noop) trigger=fence_noop ;;
        *) trigger= ;;
    esac
    bench_sql -c "ALTER TABLE acct DISABLE TRIGGER USER" >/dev/null
    [ -z "$trigger" ] || bench_sql -c "ALTER TABLE acct ENABLE TRIGGER $trigger" >/dev/null
    bench_sql -c "VACUUM acct"
    bench_pgbench update-acct.sql -c 8 -j 2 -T "$2" -D rows="$rows"
}
bench_alternate "$BENCH_TP_RUNS" "$BENCH_TP_SECONDS" dlock_fence live seen none plpgsql noop

# The fences checked something: each rejects a stale token with 55T01.
for trigger in fence_dlock fence_live fence_seen fence_plpgsql; do
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
live=$(bench_median live tps)
seen=$(bench_median seen tps)
none=$(bench_median none tps)
plpgsql=$(bench_median plpgsql tps)
noop=$(bench_median noop tps)
r3=$(bench_ratio "$fence" "$none")
r3live=$(bench_ratio "$live" "$none")
r3seen=$(bench_ratio "$seen" "$none")

bench_row "Fenced UPDATEs, 8 clients: dlock_fence, mode latest (median, min–max of runs)" "$(cell dlock_fence)"
bench_row "Fenced UPDATEs, 8 clients: dlock_fence, mode live" "$(cell live)"
bench_row "Fenced UPDATEs, 8 clients: dlock_fence, mode seen" "$(cell seen)"
bench_row "Fenced UPDATEs, 8 clients: no trigger" "$(cell none)"
bench_row "Fenced UPDATEs, 8 clients: hand-written PL/pgSQL fence" "$(cell plpgsql)"
bench_row "Fenced UPDATEs, 8 clients: a BEFORE ROW trigger that checks nothing (suppress_redundant_updates_trigger)" "$(cell noop)"
bench_row "R3 = dlock_fence latest / no trigger (ratio of medians; range of the rounds' ratios)" \
    "$r3 ($(bench_ratio_spread dlock_fence none tps))" "≥ 0.95" "$(bench_ge "$r3" 0.95)"
bench_row "R3 live = dlock_fence live / no trigger" \
    "$r3live ($(bench_ratio_spread live none tps))" "≥ 0.90" "$(bench_ge "$r3live" 0.90)"
bench_row "R3 seen = dlock_fence seen / no trigger" \
    "$r3seen ($(bench_ratio_spread seen none tps))" "≥ 0.85" "$(bench_ge "$r3seen" 0.85)"
bench_row "Any BEFORE ROW trigger (checking nothing) / no trigger: the ceiling of R3" \
    "$(bench_ratio "$noop" "$none") ($(bench_ratio_spread noop none tps))"
bench_row "dlock_fence latest / PL/pgSQL fence" \
    "$(bench_ratio "$fence" "$plpgsql") ($(bench_ratio_spread dlock_fence plpgsql tps))"

bench_note "Fenced UPDATEs (R3): a table acct of $rows rows (id int primary key, bal bigint, fence_token bigint), each row's lease acquired once beforehand and its token stored in the row; pgbench -c 8 -j 2 -M prepared, script bench/pgbench/update-acct.sql: UPDATE acct SET bal = bal + 1, fence_token = fence_token WHERE id = random row, each its own transaction. The same table for the six sides, only the enabled trigger differs: dlock_fence('acct:{id}', 'fence_token') (mode latest), dlock_fence('acct:{id}', 'fence_token', 'live'), dlock_fence('acct:{id}', 'fence_token', 'seen') (the marks in the same database, each name's mark created by a first write before the runs), none, bench/plpgsql_fence.sql (reads the token from dlock_leases and compares), or suppress_redundant_updates_trigger() (a built-in C trigger that checks nothing here: the cost of being a BEFORE ROW trigger, which makes PostgreSQL lock the old row first). dlock is preloaded with dlock.fence_cache_size = 262144 (the 100000 names fit), and every row was written once through the latest fence before the runs (the cache is warm, as it is on a table written steadily); each run's clients are new backends."
