# bench/workloads/85-client-python.sh: the Python client (clients/python).
# One acquire + release through the client (a dlock.Client on a
# psycopg_pool.ConnectionPool of one connection, and a dlock.Client on a
# conninfo string, its own small pool) against the same two SQL calls
# (dlock_acquire, dlock_release) on one psycopg connection, on random
# names of 100,000, in alternating rounds (target: client / SQL <= 1.2);
# and what renewal costs in statements: 5 single leases and one set of 10
# names held with a 1.5 s ttl for about 3 s, the server's counts of
# dlock_renew and dlock_renew_each (pg_stat_user_functions,
# track_functions = all in the client's sessions) per renewal the client
# made (target: 1 per lease per renewal, 1 per set per renewal).  Preload
# cluster only.  Sourced by bench/run; needs /usr/bin/python3 with
# Debian's python3-psycopg and python3-psycopg-pool (test/lib/common.sh).

[ "$BENCH_CLUSTER" = preload ] || return 0

bench_database dlock_client_python

rounds=$((6 * BENCH_TP_RUNS))
bench_say "Python client: acquire + release through the client vs the two SQL calls ($rounds alternating rounds of 250 cycles), and the statements renewal costs"
file=$BENCH_DIR/$BENCH_CLUSTER-client-python.out
PGOPTIONS="${PGOPTIONS:+$PGOPTIONS }-c track_functions=all" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 "$DLOCK_TOP/clients/python/bench/cycle.py" --rounds="$rounds" --cycles=250 >"$file" ||
    dlock_die "clients/python/bench/cycle.py failed on the $BENCH_CLUSTER cluster"
BENCH_OUT=$(cat "$file")

bench_row "Python client: acquire + release, µs per cycle (medians; min–max of rounds): client on a ConnectionPool / client on a conninfo string / the two SQL calls on one psycopg connection" \
    "$(bench_get client_us) ($(bench_get client_min)–$(bench_get client_max)) / $(bench_get own_us) ($(bench_get own_min)–$(bench_get own_max)) / $(bench_get sql_us) ($(bench_get sql_min)–$(bench_get sql_max)) µs"
for side in client own; do
    case $side in
        client) label="on a ConnectionPool (max 1)" ;;
        own) label="on a conninfo string (its own pool)" ;;
    esac
    r=$(bench_get ${side}_ratio)
    bench_row "Python client $label / SQL, per cycle (ratio of medians; range of the rounds' ratios)" \
        "$(bench_round "$r" 3) ($(bench_get ${side}_ratio_min)–$(bench_get ${side}_ratio_max))" "≤ 1.2" "$(bench_le "$r" 1.2)"
done
pl=$(bench_get renew_per_lease_renewal)
ps=$(bench_get renew_each_per_set_renewal)
bench_row "Python client: statements per lease per renewal (dlock_renew calls / renewals of $(bench_get single_leases) leases: $(bench_get renew_calls) / $(bench_get single_renewals))" \
    "$pl" "1" "$(bench_le "$pl" 1)"
bench_row "Python client: statements per set per renewal (dlock_renew_each calls / renewals of a set of $(bench_get set_names) names: $(bench_get renew_each_calls) / $(bench_get set_renewals))" \
    "$ps" "1" "$(bench_le "$ps" 1)"
bench_note "Python client (85-client-python): clients/python/bench/cycle.py, one process on the same 2 CPUs as the server: a cycle is acquire (ttl 30 s) + release of a random name of 100,000, sequential, through dlock's Python client (a with-scope: acquire on a pooled connection, the lease registered with the renewal thread, release on leaving) on a psycopg_pool.ConnectionPool of one connection and on a conninfo string (the client's own pool) against the two SQL calls on one psycopg connection (autocommit); after 200 warm-up cycles of each, alternating rounds of 250 cycles (A B C, C B A, …). Renewal: pg_stat_user_functions before and after, with track_functions = all in the sessions (PGOPTIONS); the renewal connection reports its counts when it closes."
