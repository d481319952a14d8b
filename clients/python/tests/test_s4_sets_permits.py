"""Scenario 4, sets and permits: a set of three names is acquired all or
none and renewed with one dlock_renew_each per renewal (the server's
function call counts show no dlock_renew); permits: three contenders for two
permits, at most two hold one at any time, the third gets one when one is
released."""

from __future__ import annotations

import datetime
import threading
import time

import psycopg
import pytest

import dlock
from pgcluster import wait_for


def function_calls(conninfo: str) -> dict:
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        return dict(c.execute("SELECT funcname, calls FROM pg_stat_user_functions").fetchall())


def test_s4_set_all_or_none_one_renew_each(cluster):
    cluster.sql("CREATE DATABASE s4")
    conninfo = cluster.conninfo.replace("dbname=postgres", "dbname=s4")
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("CREATE EXTENSION dlock")
        names = ["s4-set:a", "s4-set:b", "s4-set:c"]
        # All or none: one name held elsewhere, the set gets none of them.
        other = c.execute("SELECT dlock_acquire('s4-set:b', '30 s')").fetchone()[0]
        with dlock.Client(conninfo) as client:
            with pytest.raises(dlock.NotAcquired):
                with client.lease_all(names, ttl=3):
                    pass
            assert c.execute("SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 's4-set:%' AND live"
                             ).fetchone()[0] == 1
            assert c.execute("SELECT dlock_release('s4-set:b', %s)", (other,)).fetchone()[0] is True
            with client.lease_all(names, ttl=3) as lease:  # 3 s: kept on a loaded machine
                assert lease.names == tuple(names) and len(set(lease.tokens)) == 3
                live = c.execute("SELECT lock_name, token FROM dlock_leases WHERE lock_name LIKE 's4-set:%' "
                                 "AND live ORDER BY 1").fetchall()
                assert live == list(zip(names, lease.tokens))
                wait_for(lambda: lease.renewals >= 3, 20, "three renewals of the set")
                with lease.fenced(c) as tx:  # one dlock_check per name
                    tx.execute("SELECT 1")
            assert lease.confirmed is True
            renewals = lease.renewals
        # The renewal connection has exited (its counts are flushed then).
        assert c.execute("SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 's4-set:%' AND live"
                         ).fetchone()[0] == 0

        def counted():
            calls = function_calls(conninfo)
            return calls if calls.get("dlock_renew_each", 0) >= renewals else None

        calls = wait_for(counted, 10, "the renewal backend's function counts")
        assert calls.get("dlock_renew", 0) == 0, calls
        assert calls["dlock_renew_each"] == renewals, (calls, renewals)
        assert calls["dlock_acquire_all"] == 2 and calls["dlock_release_each"] == 1, calls
        assert calls["dlock_check"] == 3, calls


def test_s4_three_contenders_two_permits(cluster):
    holding = []
    most = [0]
    lock = threading.Lock()
    got = {}
    release = {k: threading.Event() for k in "ABC"}
    errors = []

    def contender(who: str, client: dlock.Client) -> None:
        try:
            with client.permit("s4-backup", permits=2, ttl=3, wait=15) as lease:
                with lock:
                    holding.append(who)
                    most[0] = max(most[0], len(holding))
                    got[who] = (lease.name, lease.slot, lease.token, lease.expires_at, lease)
                release[who].wait(20)
                with lock:
                    holding.remove(who)
        except BaseException as e:  # reported by the test
            errors.append((who, e))

    with dlock.Client(cluster.conninfo) as client:
        threads = {}
        try:
            for who in "AB":
                threads[who] = threading.Thread(target=contender, args=(who, client))
                threads[who].start()
            wait_for(lambda: len(got) == 2, 10, "two permits granted")
            assert {got["A"][0], got["B"][0]} == {"s4-backup:1", "s4-backup:2"}
            assert {got["A"][1], got["B"][1]} == {1, 2}
            threads["C"] = threading.Thread(target=contender, args=("C", client))
            threads["C"].start()
            # C waits while two hold a permit, renewed past their ttl.
            time.sleep(3.5)
            assert "C" not in got
            live = cluster.one("SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 's4-backup:%%' AND live")
            assert live == 2
            assert got["A"][4].renewals >= 1 and got["B"][4].renewals >= 1
            a_expires = got["A"][4].expires_at  # A's lease, renewed, would live till then
            release["A"].set()
            wait_for(lambda: "C" in got or errors, 10, "the third contender's permit")
            assert not errors, errors
            assert got["C"][0] == got["A"][0]  # the permit A released
            # Woken by the release, not by the expiry: granted (its expiry
            # less the ttl, the server's clock just after the grant) before
            # A's lease would have expired.
            assert got["C"][3] - datetime.timedelta(seconds=3) < a_expires, (got["C"][3], a_expires)
        finally:
            for ev in release.values():
                ev.set()
            for t in threads.values():
                t.join(20)
    assert not errors, errors
    assert most[0] == 2
