"""Scenario 7, leaving the body: an exception in the body releases the
lease (and is re-raised); cancelling the body releases it; a body that stops
reporting progress loses the lease at its progress deadline, and another
process takes it over.  Synchronous and asyncio variants (their loss
signalling and cancellation differ)."""

from __future__ import annotations

import asyncio
import time

import psycopg_pool
import pytest

import dlock
import dlock.aio
from helpers import WAIT, lease_row, read_event
from pgcluster import wait_for


class BodyError(Exception):
    pass


def test_s7_exception_releases_sync(cluster):
    # Through the module-level function on an application's pool.
    with psycopg_pool.ConnectionPool(cluster.conninfo, min_size=1, max_size=2) as pool:
        lease = dlock.lease(pool, "s7-exc-sync", ttl=10, owner="s7")
        with pytest.raises(BodyError):
            with lease:
                assert lease_row(cluster, "s7-exc-sync")[1:] == (True, False, "s7")
                raise BodyError("boom")
        assert lease.confirmed is True
        token, live, released, _ = lease_row(cluster, "s7-exc-sync")
        assert (token, live, released) == (lease.token, False, True)
        dlock._sync._shared_client(pool).close()


def test_s7_cancel_releases_sync(cluster):
    # A synchronous body is cancelled by an exception thrown into it, as
    # Ctrl-C does (KeyboardInterrupt): released, and it propagates.
    with dlock.Client(cluster.conninfo) as client:
        lease = client.lease("s7-cancel-sync", ttl=10)
        with pytest.raises(KeyboardInterrupt):
            with lease:
                raise KeyboardInterrupt
        assert lease.confirmed is True
        assert lease_row(cluster, "s7-cancel-sync")[2] is True


def check_progress_sync(cluster, children, name: str) -> None:
    lost_calls = []
    scope_error = None
    with dlock.Client(cluster.conninfo) as client:
        # A progress timeout of 1.5 s; a ttl of 6 s (renewed every 2 s), whose
        # deadline would come at least 4 s after the last progress: the loss at
        # the progress deadline is told apart from it with 2.5 s to spare.
        lease = client.lease(name, ttl=6, progress_timeout=1.5, on_lost=lost_calls.append)
        try:
            with lease:
                for _ in range(4):  # progress reported for a while: still held
                    time.sleep(0.25)
                    lease.progress()
                last = time.monotonic()
                assert lease.lost.wait(8), "the lease was not lost at its progress deadline"
                told = time.monotonic() - last
                assert 1.45 <= told <= 4.0, told
                with pytest.raises(dlock.LeaseLost):
                    lease.check()
                # lost is set before the loss callbacks run (on the renewal thread)
                wait_for(lambda: lost_calls, 2, "the on_lost callback")
                assert len(lost_calls) == 1 and lost_calls[0].reason == "no-progress"
        except dlock.LeaseLost as e:
            scope_error = e
        assert scope_error is not None and scope_error.reason == "no-progress", scope_error
        assert lease.confirmed is False
        # Not released: the lease ends at its server expiry, and another process takes it over.
        assert lease_row(cluster, name)[2] is False
        child = children.spawn("child_acquire.py", cluster.conninfo, name, "6", "10")
        ev = read_event(child, WAIT)
        assert ev["event"] == "acquired" and ev["token"] > lease.token


def test_s7_progress_deadline_sync(cluster, children):
    check_progress_sync(cluster, children, "s7-progress-sync")


def test_s7_exception_and_cancel_async(cluster):
    async def main():
        async with psycopg_pool.AsyncConnectionPool(cluster.conninfo, min_size=1, max_size=2) as apool:
            lease = dlock.aio.lease(apool, "s7-exc-async", ttl=10)
            with pytest.raises(BodyError):
                async with lease:
                    raise BodyError("boom")
            assert lease.confirmed is True
            assert lease_row(cluster, "s7-exc-async")[2] is True
            await dlock.aio._shared_client(apool).close()
        async with dlock.aio.Client(cluster.conninfo) as client:
            entered = asyncio.Event()
            lease2 = client.lease("s7-cancel-async", ttl=10)

            async def body():
                async with lease2:
                    entered.set()
                    await asyncio.sleep(30)

            task = asyncio.create_task(body())
            await entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task  # the caller's own cancel propagates, after the release
            assert lease2.confirmed is True
            assert lease_row(cluster, "s7-cancel-async")[2] is True

    asyncio.run(main())


def check_progress_async(cluster, children, name: str) -> None:
    async def main():
        async with dlock.aio.Client(cluster.conninfo) as client:
            lease = client.lease(name, ttl=6, progress_timeout=1.5)  # as in check_progress_sync
            reached = []
            scope_error = None
            try:
                async with lease:
                    for _ in range(4):
                        await asyncio.sleep(0.25)
                        lease.progress()
                    last = time.monotonic()
                    try:
                        await asyncio.sleep(8)  # stuck: cancelled at the progress deadline
                    finally:
                        reached.append(time.monotonic() - last)
                    reached.append("not cancelled")
            except dlock.LeaseLost as e:
                scope_error = e
            assert reached[-1] != "not cancelled", "the body was not cancelled at the progress deadline"
            assert len(reached) == 1 and 1.45 <= reached[0] <= 4.0, reached
            assert scope_error is not None and scope_error.reason == "no-progress", scope_error
            assert lease.lost.is_set()
            assert asyncio.current_task().cancelling() == 0
            return lease.token

    token = asyncio.run(main())
    assert lease_row(cluster, name)[2] is False
    child = children.spawn("child_acquire.py", cluster.conninfo, name, "6", "10")
    ev = read_event(child, WAIT)
    assert ev["event"] == "acquired" and ev["token"] > token


def test_s7_progress_deadline_async(cluster, children):
    check_progress_async(cluster, children, "s7-progress-async")


def test_s7_outer_cancel_of_lost_lease_async(cluster):
    """A caller's cancel that comes with a loss still propagates as CancelledError."""
    async def main():
        async with dlock.aio.Client(cluster.conninfo) as client:
            lease = client.lease("s7-outer-async", ttl=6, progress_timeout=0.3)
            started = asyncio.Event()

            async def body():
                async with lease:
                    started.set()
                    await asyncio.sleep(0.1)
                    try:
                        await asyncio.sleep(5)
                    except asyncio.CancelledError:
                        # lost (no progress); now the caller cancels too
                        asyncio.current_task().cancel()
                        raise

            task = asyncio.create_task(body())
            await started.wait()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert lease.lost_reason == "no-progress"

    asyncio.run(main())


def test_s7_cancel_during_waiting_acquire_async(cluster):
    """Cancelling a scope while its acquire waits cancels the statement too:
    the server does not grant the lease to the abandoned acquire later."""
    name = "s7-cancel-waiting"

    async def main():
        async with dlock.aio.Client(cluster.conninfo) as client:
            holder = client.lease(name, ttl=30)  # held throughout, on a loaded machine too
            async with holder:
                waiter = asyncio.create_task(client.lease(name, ttl=5, wait=10).__aenter__())
                for _ in range(200):
                    if cluster.one("SELECT count(*) FROM dlock_waiters WHERE lock_name = %s", (name,)) == 1:
                        break
                    await asyncio.sleep(0.02)
                else:
                    pytest.fail("the acquire did not wait")
                waiter.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiter
                for _ in range(200):
                    if cluster.one("SELECT count(*) FROM dlock_waiters WHERE lock_name = %s", (name,)) == 0:
                        break
                    await asyncio.sleep(0.02)
                else:
                    pytest.fail("the cancelled acquire still waits on the server")
            assert holder.confirmed is True
        # Released, and nobody took it.
        assert lease_row(cluster, name)[1:3] == (False, True)

    asyncio.run(main())
