"""Scenario 3, server restart and outage: a restart shorter than the ttl
(well within two thirds of it): the lease survives; a server down past the
ttl: the lease is reported lost no later than its deadline (plus
scheduling slack)."""

from __future__ import annotations

import threading
import time

import pytest

import dlock
from helpers import lease_row
from pgcluster import wait_for


@pytest.fixture
def restarting(background):
    """A cluster of its own (made in the background, see conftest.py)."""
    c = background.get("restart")
    try:
        yield c
    finally:
        c.kill()


def test_s3_restart_and_outage(restarting):
    c = restarting
    with dlock.Client(c.conninfo) as client:
        # A restart: the lease (ttl 15 s) survives it, renewed on a new connection;
        # a waiting acquire of another client rides through it too.  (A ttl of 15 s:
        # a loaded machine's restart takes seconds, and it must take less than two
        # thirds of the ttl; the waiter's ttl of 6 s gives its confirming renew 2 s.)
        waiter: dict = {}

        def wait_for_it() -> None:
            try:
                with dlock.Client(c.conninfo) as other, other.lease("s3-restart", ttl=6, wait=40) as got:
                    waiter["token"] = got.token
            except BaseException as e:  # reported below
                waiter["error"] = e

        with client.lease("s3-restart", ttl=15) as lease:
            token = lease.token
            thread = threading.Thread(target=wait_for_it)
            thread.start()
            wait_for(lambda: c.one("SELECT count(*) FROM dlock_waiters") == 1, 10, "the waiting acquire")
            t0 = time.monotonic()
            c.restart()
            took = time.monotonic() - t0
            assert took < 10, f"the restart took {took:.1f} s, more than two thirds of the ttl"
            before = lease.renewals
            wait_for(lambda: lease.renewals > before, 20, "a renewal after the restart")
            lease.check()
            assert lease.token == token
            row = lease_row(c, "s3-restart")
            assert row[0] == token and row[1] is True
        assert lease.confirmed is True
        thread.join(45)
        assert "error" not in waiter, waiter
        assert waiter["token"] > token

        # An outage past the ttl: lost at the deadline, not later (nor sooner).
        lost_at = []
        lease = client.lease("s3-outage", ttl=2, on_lost=lambda e: lost_at.append((time.monotonic(), e)))
        with pytest.raises(dlock.LeaseLost) as info:
            with lease:
                wait_for(lambda: lease.renewals >= 1, 5, "the first renewal")
                c.stop("fast")
                stopped = time.monotonic()
                assert lease.lost.wait(15), "the lease was not reported lost"
                wait_for(lambda: lost_at, 10, "the on_lost callback")  # runs after lost is set
                when, err = lost_at[0]
                assert err.reason == "deadline"
                assert when >= lease.deadline, "reported lost before its deadline"
                # (scheduling slack: a loaded machine starves the process for seconds)
                assert when <= lease.deadline + 10.0, f"reported lost {when - lease.deadline:.2f} s after its deadline"
                assert lease.deadline - stopped <= 2.0
        assert info.value.reason == "deadline"
        assert lease.confirmed is False
