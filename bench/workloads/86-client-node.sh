# bench/workloads/86-client-node.sh: the Node client (clients/node).  One
# acquire + release through the client (a Dlock on a pg.Pool of one
# connection, and a Dlock on a connection string, its own connection)
# against the same two SQL calls (dlock_acquire, dlock_release) on one
# pg.Client, on random names of 100,000, in alternating rounds (target:
# client / SQL <= 1.2); and what renewal
# costs in statements: 5 single leases and one set of 10 names held with
# a 1.5 s ttl for about 3 s, the server's counts of dlock_renew and
# dlock_renew_each (pg_stat_user_functions, track_functions = all in the
# client's sessions) per renewal the client made (target: 1 per lease per
# renewal, 1 per set per renewal).  Preload cluster only.  Sourced by
# bench/run; needs node (clients/node/setup installs it and the
# dependencies when missing).

[ "$BENCH_CLUSTER" = preload ] || return 0

node_dir=$DLOCK_TOP/clients/node
if [ ! -d "$node_dir/node_modules/pg" ] || ! command -v node >/dev/null 2>&1; then
    "$node_dir/setup" >"$BENCH_DIR/client-node-setup.log" 2>&1 ||
        dlock_die "clients/node/setup failed (see $BENCH_DIR/client-node-setup.log)"
fi
bench_database dlock_client_node

rounds=$((6 * BENCH_TP_RUNS))
bench_say "Node client: acquire + release through the client vs the two SQL calls ($rounds alternating rounds of 250 cycles), and the statements renewal costs"
file=$BENCH_DIR/$BENCH_CLUSTER-client-node.out
PGOPTIONS="${PGOPTIONS:+$PGOPTIONS }-c track_functions=all" \
    node "$node_dir/bench/cycle.js" --rounds="$rounds" --cycles=250 >"$file" ||
    dlock_die "clients/node/bench/cycle.js failed on the $BENCH_CLUSTER cluster"
BENCH_OUT=$(cat "$file")

bench_row "Node client: acquire + release, µs per cycle (medians; min–max of rounds): client on a pg.Pool / client on its own connection / the two SQL calls on one pg.Client" \
    "$(bench_get client_us) ($(bench_get client_min)–$(bench_get client_max)) / $(bench_get own_us) ($(bench_get own_min)–$(bench_get own_max)) / $(bench_get sql_us) ($(bench_get sql_min)–$(bench_get sql_max)) µs"
for side in client own; do
    case $side in
        client) label="on a pg.Pool (max 1)" ;;
        own) label="on its own connection (a connection string)" ;;
    esac
    r=$(bench_get ${side}_ratio)
    bench_row "Node client $label / SQL, per cycle (ratio of medians; range of the rounds' ratios)" \
        "$(bench_round "$r" 3) ($(bench_get ${side}_ratio_min)–$(bench_get ${side}_ratio_max))" "≤ 1.2" "$(bench_le "$r" 1.2)"
done
bench_row "Node client: this process's CPU per cycle (user + system, medians): client on a pg.Pool / on its own connection / the two SQL calls; ratios to SQL" \
    "$(bench_get client_cpu_us) / $(bench_get own_cpu_us) / $(bench_get sql_cpu_us) µs; $(bench_get client_cpu_ratio) / $(bench_get own_cpu_ratio)"
pl=$(bench_get renew_per_lease_renewal)
ps=$(bench_get renew_each_per_set_renewal)
bench_row "Node client: statements per lease per renewal (dlock_renew calls / renewals of $(bench_get single_leases) leases: $(bench_get renew_calls) / $(bench_get single_renewals))" \
    "$pl" "1" "$(bench_le "$pl" 1)"
bench_row "Node client: statements per set per renewal (dlock_renew_each calls / renewals of a set of $(bench_get set_names) names: $(bench_get renew_each_calls) / $(bench_get set_renewals))" \
    "$ps" "1" "$(bench_le "$ps" 1)"
bench_note "Node client (86-client-node): bench/cycle.js in clients/node, one process on the same 2 CPUs as the server: a cycle is acquire (ttl 30 s) + release of a random name of 100,000, sequential, through dlock's Node client on a pg.Pool of max 1 (each call borrows the connection from the pool, as the client does for an application's pool) and on a connection string (its own connection, no pg-pool) against the two SQL calls on one pg.Client; after 200 warm-up cycles of each, alternating rounds of 250 cycles (A B C, C B A, …). Renewal: pg_stat_user_functions before and after, with track_functions = all in the sessions (PGOPTIONS); the renewal connection reports its counts when it closes after the last release."
