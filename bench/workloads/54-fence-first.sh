# bench/workloads/54-fence-first.sh: the first fenced write of each name
# after its grant.  A grant that commits publishes its token in the fence
# cache (design.md §12, "Publishing"), so a 'latest' fence answers the
# first write under a newly granted lease without reading the lease
# table's index; before, every first write was a miss (an index descent,
# a heap fetch and a fill).  One backend writes each of 10000 rows of acct
# once (one UPDATE per row, in a PL/pgSQL loop timed inside the server),
# each row under its own lock acct:{id} (mode 'latest'), right after all
# 10000 names were granted again (dlock_break + dlock_acquire, 1000 names
# per transaction):
#
#   published  as the grants left the cache;
#   cold       the cache emptied after the grants (a write of a session
#              with dlock.fence_cache = off drops every entry): every
#              write is the name's first miss, as before publishing;
#   none       the trigger disabled.
#
# Reported: none's time / the side's time (as a throughput ratio), and
# cold / published.  Sides alternate (bench_alternate: a warm-up pass each,
# then A B C, C B A, ...) for BENCH_TP_RUNS rounds, VACUUM before each
# pass.  On the preload cluster only.  Sourced
# by bench/run.

[ "$BENCH_CLUSTER" = preload ] || return 0

first_rows=10000
bench_say "the first fenced write of each name after its grant: $first_rows names, one backend ($BENCH_TP_RUNS alternating rounds)"
bench_database dlock_first
bench_sql >/dev/null <<SQL
CREATE TABLE acct (id int PRIMARY KEY, bal bigint NOT NULL DEFAULT 0, fence_token bigint);
INSERT INTO acct (id) SELECT i FROM generate_series(1, $first_rows) i;
CREATE TRIGGER fence BEFORE UPDATE ON acct
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token', 'latest');
-- every name granted again (a takeover publishes), tokens into the rows
-- with the fence off (that UPDATE reads no lease)
CREATE PROCEDURE regrant() LANGUAGE plpgsql AS \$\$
BEGIN
    FOR b IN 0 .. ($first_rows - 1) / 1000 LOOP
        PERFORM dlock_break('acct:' || i), dlock_acquire('acct:' || i, '12 hours')
           FROM generate_series(b * 1000 + 1, least(b * 1000 + 1000, $first_rows)) i;
        COMMIT;
    END LOOP;
    ALTER TABLE acct DISABLE TRIGGER fence;
    UPDATE acct a SET fence_token = l.token
      FROM dlock_leases l WHERE l.lock_name = 'acct:' || a.id;
    ALTER TABLE acct ENABLE TRIGGER fence;
END
\$\$;
-- one UPDATE per row, each its name's first fenced write; milliseconds
CREATE FUNCTION first_pass() RETURNS float8 LANGUAGE plpgsql AS \$\$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1 .. $first_rows LOOP
        UPDATE acct SET bal = bal + 1 WHERE id = i;
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END
\$\$;
SQL

# bench_side SIDE SECONDS (for bench_alternate; SECONDS unused): one pass of
# SIDE, its time in the run's file as "ms N".
bench_side() {
    local ms
    bench_sql -c "CALL regrant()" >/dev/null
    case $1 in
        cold)
            # a writing transaction of a session with the cache off drops it
            bench_sql -c "SET dlock.fence_cache = off" -c "CREATE TABLE drop_cache ()" \
                -c "DROP TABLE drop_cache" >/dev/null
            ;;
        none) bench_sql -c "ALTER TABLE acct DISABLE TRIGGER fence" >/dev/null ;;
    esac
    bench_sql -c "VACUUM acct" -c "VACUUM dlock_lease" -c CHECKPOINT >/dev/null
    ms=$(bench_sql -c "SELECT round(first_pass()::numeric, 1)")
    [ "$1" != none ] || bench_sql -c "ALTER TABLE acct ENABLE TRIGGER fence" >/dev/null
    printf 'ms %s\n' "$ms" >"$BENCH_RUN"
}
bench_alternate "$BENCH_TP_RUNS" 1 published cold none

# The fence checked something: a stale token is rejected with 55T01.
out=$(psql -X -q -d dlock_first -v VERBOSITY=verbose \
    -c "UPDATE acct SET fence_token = fence_token - 1 WHERE id = 1" 2>&1)
case $out in
    *55T01*) ;;
    *) dlock_die "first writes: the fence did not reject a stale token: $out" ;;
esac

ms_none=$(bench_median none ms)
ms_pub=$(bench_median published ms)
ms_cold=$(bench_median cold ms)
bench_row "First write of each name after its grant, one backend: unfenced pass (median, min–max)" \
    "$ms_none ms ($(bench_spread none ms 1) ms) for $first_rows rows"
bench_row "First writes: unfenced / fenced time, the grants' tokens published (ratio of medians; rounds' range)" \
    "$(bench_ratio "$ms_none" "$ms_pub") ($(bench_ratio_spread none published ms))" "≥ 0.95" \
    "$(bench_ge "$(bench_ratio "$ms_none" "$ms_pub")" 0.95)"
bench_row "First writes: unfenced / fenced time, the cache emptied after the grants (every write a miss, as before publishing)" \
    "$(bench_ratio "$ms_none" "$ms_cold") ($(bench_ratio_spread none cold ms))"
bench_row "First writes: published / cold time (the publish's saving)" \
    "$(bench_ratio "$ms_pub" "$ms_cold") ($(bench_ratio_spread published cold ms))"
bench_note "First writes (54-fence-first): one backend updates each of $first_rows rows of acct once (a PL/pgSQL loop, one UPDATE per row, timed in the server), each row under its own lock acct:{id} fenced in mode 'latest', right after every name was broken and acquired again (1000 per transaction) and the new tokens stored with the trigger disabled. Sides: published (the cache as the grants left it), cold (emptied after the grants by a write of a session with dlock.fence_cache = off), none (trigger disabled); VACUUM and CHECKPOINT before each pass; a warm-up pass per side, then $BENCH_TP_RUNS alternating rounds."
