"""Scenario 8, switchover: a primary and a streaming standby behind a
multi-host conninfo with target_session_attrs=read-write; the primary is
stopped and the standby promoted within a third of the ttl; the lease
survives, renewals reach the new primary, and the release is confirmed
there."""

from __future__ import annotations

import time

import pytest

import dlock
from helpers import lease_row
from pgcluster import wait_for

# A third of the ttl is the switchover's budget: 10 s, since a fast stop and
# a promotion took 5.8 s on CI's loaded runs (4 servers' suites side by side).
TTL = 30.0


@pytest.fixture
def pair(background):
    """A primary and its standby, made in the background at the session's
    start (see conftest.py)."""
    primary, standby = background.get("switchover")
    try:
        yield primary, standby
    finally:
        standby.kill()
        primary.kill()


def test_s8_switchover(pair):
    primary, standby = pair
    conninfo = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres "
                f"dbname=postgres target_session_attrs=read-write connect_timeout=2")
    with dlock.Client(conninfo) as client:
        with client.lease("s8-switch", ttl=TTL) as lease:
            token = lease.token
            # The standby has replayed the lease row (and its last renewal).
            wait_for(lambda: (lease_row(standby, "s8-switch") or (None,))[0] == token, 10,
                     "the standby to replay the lease")
            t0 = time.monotonic()
            primary.stop("fast")
            standby.promote()
            took = time.monotonic() - t0
            assert took < TTL / 3, f"the switchover took {took:.1f} s"
            before = lease.renewals
            wait_for(lambda: lease.renewals > before, TTL, "a renewal on the new primary")
            lease.check()
            assert lease.token == token
            pid = client.renewal_pid
            assert standby.one("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)) == 1
            row = lease_row(standby, "s8-switch")
            assert row[0] == token and row[1] is True
        assert lease.confirmed is True
    row = lease_row(standby, "s8-switch")
    assert row[0] == token and row[2] is True  # released on the new primary
