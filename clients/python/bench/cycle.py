"""The Python client's benchmark (run by bench/workloads/85-client-python.sh).

1. One acquire + release through the client against the same two SQL calls
   (dlock_acquire, dlock_release) on one psycopg connection, on random names
   of 100,000, sequential, in alternating rounds (A B C, C B A, ...): the
   client on a psycopg_pool.ConnectionPool of one connection, the client on
   a conninfo string (its own small pool), and the two SQL calls.
2. What renewal costs: 5 single leases and one set of 10 names held with a
   1.5 s ttl for about 3 s; the server's dlock_renew and dlock_renew_each
   counts (pg_stat_user_functions; track_functions = all in the sessions,
   through PGOPTIONS) per renewal the client made.

Connects with libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE).
Prints "key value" lines.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import psycopg  # noqa: E402
import psycopg_pool  # noqa: E402

import dlock  # noqa: E402

NAMES = 100_000


def name() -> str:
    return f"py:{random.randint(1, NAMES)}"


def sql_side(conn: psycopg.Connection, cycles: int) -> float:
    t0 = time.perf_counter()
    for _ in range(cycles):
        n = name()
        token = conn.execute("SELECT dlock_acquire(%s, %s)", (n, "30 s")).fetchone()[0]
        if token is not None:
            conn.execute("SELECT dlock_release(%s, %s)", (n, token))
    return (time.perf_counter() - t0) / cycles * 1e6


def client_side(client: dlock.Client, cycles: int) -> float:
    t0 = time.perf_counter()
    for _ in range(cycles):
        try:
            with client.lease(name(), ttl=30):
                pass
        except dlock.NotAcquired:
            pass
    return (time.perf_counter() - t0) / cycles * 1e6


def function_calls(conn: psycopg.Connection) -> dict:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return dict(conn.execute("SELECT funcname, calls FROM pg_stat_user_functions").fetchall())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cycles", type=int, default=250)
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args()

    sql_conn = psycopg.connect("", autocommit=True)
    pool = psycopg_pool.ConnectionPool("", min_size=1, max_size=1, kwargs={"autocommit": True})
    pooled = dlock.Client(pool)
    own = dlock.Client("")
    sides = {
        "client": lambda n: client_side(pooled, n),
        "own": lambda n: client_side(own, n),
        "sql": lambda n: sql_side(sql_conn, n),
    }
    for f in sides.values():
        f(args.warmup)
    runs: dict = {k: [] for k in sides}
    order = list(sides)
    for i in range(args.rounds):
        for k in (order if i % 2 == 0 else order[::-1]):
            runs[k].append(sides[k](args.cycles))
    for k, v in runs.items():
        print(f"{k}_us {statistics.median(v):.1f}")
        print(f"{k}_min {min(v):.1f}")
        print(f"{k}_max {max(v):.1f}")
    for k in ("client", "own"):
        ratios = [a / b for a, b in zip(runs[k], runs["sql"])]
        print(f"{k}_ratio {statistics.median(runs[k]) / statistics.median(runs['sql']):.3f}")
        print(f"{k}_ratio_min {min(ratios):.2f}")
        print(f"{k}_ratio_max {max(ratios):.2f}")
    pooled.close()
    own.close()
    pool.close()

    # Renewal: statements per lease per renewal, per set per renewal.
    before = function_calls(sql_conn)
    with dlock.Client("") as client:
        singles = [client.lease(f"py-renew:{i}", ttl=1.5) for i in range(5)]
        the_set = client.lease_all([f"py-set:{i}" for i in range(10)], ttl=1.5)
        for lease in singles:
            lease.__enter__()
        the_set.__enter__()
        time.sleep(3.2)
        single_renewals = sum(lease.renewals for lease in singles)
        set_renewals = the_set.renewals
        for lease in singles:
            lease.__exit__(None, None, None)
        the_set.__exit__(None, None, None)
    # The renewal connection reports its counts when it exits.
    end = time.monotonic() + 10
    while True:
        after = function_calls(sql_conn)
        renew = after.get("dlock_renew", 0) - before.get("dlock_renew", 0)
        each = after.get("dlock_renew_each", 0) - before.get("dlock_renew_each", 0)
        if (renew >= single_renewals and each >= set_renewals) or time.monotonic() > end:
            break
        time.sleep(0.1)
    print(f"single_leases {len(singles)}")
    print(f"single_renewals {single_renewals}")
    print(f"renew_calls {renew}")
    print(f"renew_per_lease_renewal {renew / max(1, single_renewals):.2f}")
    print(f"set_names 10")
    print(f"set_renewals {set_renewals}")
    print(f"renew_each_calls {each}")
    print(f"renew_each_per_set_renewal {each / max(1, set_renewals):.2f}")
    sql_conn.close()


if __name__ == "__main__":
    main()
