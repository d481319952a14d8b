"""Loss by the server's word (docs/clients.md, "When a lease is lost"): a
lease broken by an operator (dlock_break) is lost at its next renew
(reason renewed-false), and a scope whose release returns false ends with
LeaseLost (reason released-false), its lease unconfirmed."""

from __future__ import annotations

import asyncio

import pytest

import dlock
import dlock.aio
from helpers import lease_row
from pgcluster import wait_for


def test_renew_false_loses_the_lease(cluster):
    lost = []
    with dlock.Client(cluster.conninfo) as client:
        # ttl 6: the renew that returns false comes after 2 s, and a loaded
        # machine answers it long before the deadline (4 s later).
        lease = client.lease("loss-broken", ttl=6, on_lost=lost.append)
        with pytest.raises(dlock.LeaseLost) as info:
            with lease:
                assert cluster.one("SELECT dlock_break('loss-broken')") is True
                assert lease.lost.wait(12), "a renew returning false did not lose the lease"
                wait_for(lambda: lost, 2, "the on_lost callback")  # runs after lost is set
                assert lost[0].reason == "renewed-false"
        assert info.value.reason == "renewed-false"
        assert lease.confirmed is False
        # Never released again: the row is as the break left it.
        token, live, released, _ = lease_row(cluster, "loss-broken")
        assert (token, live, released) == (lease.token, False, True)


def test_release_false_raises(cluster):
    with dlock.Client(cluster.conninfo) as client:
        lease = client.lease("loss-release", ttl=30)  # no renew before the scope ends
        with pytest.raises(dlock.LeaseLost) as info:
            with lease:
                assert cluster.one("SELECT dlock_break('loss-release')") is True
        assert info.value.reason == "released-false"
        assert lease.confirmed is False


def test_renew_false_cancels_the_body_async(cluster):
    async def main():
        async with dlock.aio.Client(cluster.conninfo) as client:
            lease = client.lease("loss-broken-async", ttl=6)  # as above
            with pytest.raises(dlock.LeaseLost) as info:
                async with lease:
                    await asyncio.get_running_loop().run_in_executor(
                        None, cluster.one, "SELECT dlock_break('loss-broken-async')")
                    await asyncio.sleep(12)
                    pytest.fail("the body was not cancelled")
            assert info.value.reason == "renewed-false"
            assert lease.confirmed is False

    asyncio.run(main())
