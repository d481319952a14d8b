"""Scenario 6, PgBouncer in transaction mode: a lease scope renewed several
times and released confirmed, a fenced transaction, and observe falling back
to polling (LISTEN does not work through the pooler)."""

from __future__ import annotations

import asyncio

import psycopg_pool
import pytest

import dlock
import dlock.aio
from helpers import lease_row
from pgcluster import Bouncer, wait_for


@pytest.fixture
def bouncer(cluster):
    b = Bouncer(cluster)
    try:
        yield b.start()
    finally:
        b.stop()


def test_s6_pgbouncer_transaction_mode(cluster, bouncer):
    cluster.sql("""
        CREATE TABLE s6_rows (id serial PRIMARY KEY, body text, fence_token bigint);
        CREATE TRIGGER s6_fence BEFORE INSERT OR UPDATE ON s6_rows
          FOR EACH ROW EXECUTE FUNCTION dlock_fence('s6-job', 'fence_token')""")
    # PgBouncer 1.18 in transaction mode keeps no prepared statements.
    with psycopg_pool.ConnectionPool(bouncer.conninfo, min_size=1, max_size=2,
                                     kwargs={"prepare_threshold": None}) as pool:
        with dlock.Client(pool) as client:
            observer = client.election("s6-job", ttl=3).observe(poll_interval=0.2)
            with observer:
                # ttl 3 s: renewed each second through pgbouncer, in time on a loaded machine too.
                with client.lease("s6-job", ttl=3, owner="bounced") as lease:
                    wait_for(lambda: lease.renewals >= 3, 20, "three renewals through pgbouncer")
                    # The renewal connection is one of pgbouncer's server connections.
                    assert client.renewal_pid is not None
                    with pool.connection() as conn:
                        with lease.fenced(conn, "live") as tx:
                            tx.execute("INSERT INTO s6_rows (body) VALUES ('fenced')")
                    got = observer.next(5)
                    assert observer.mode == "polling"
                    assert got == dlock.Leader("bounced", lease.token)
                    token = lease.token
                    lease.check()
                assert lease.confirmed is True
    assert cluster.sql("SELECT body, fence_token FROM s6_rows") == [("fenced", token)]
    row = lease_row(cluster, "s6-job")
    assert row[0] == token and row[2] is True


def test_s6_pgbouncer_async(cluster, bouncer):
    async def main():
        async with psycopg_pool.AsyncConnectionPool(bouncer.conninfo, min_size=1, max_size=2,
                                                    kwargs={"prepare_threshold": None}) as pool:
            async with dlock.aio.Client(pool) as client:
                async with client.lease("s6-async", ttl=3) as lease:  # as above
                    wait_for_renewals = asyncio.get_running_loop().time() + 20
                    while lease.renewals < 2:
                        assert asyncio.get_running_loop().time() < wait_for_renewals
                        await asyncio.sleep(0.05)
                    async with pool.connection() as conn:
                        async with lease.fenced(conn) as tx:
                            await tx.execute("SELECT 1")
                assert lease.confirmed is True

    asyncio.run(main())
