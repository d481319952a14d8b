"""Scenario 2, renewal connection terminated: pg_terminate_backend on the
renewal connection's backend; the lease survives with its token and keeps
being renewed."""

from __future__ import annotations

import time

import dlock
from helpers import lease_row
from pgcluster import wait_for


def check_terminated(cluster, name: str) -> None:
    # 4 s: the renew after the termination opens a new connection within the
    # lease's remaining time, which a loaded machine may take a second or more to do.
    ttl = 4.0
    with dlock.Client(cluster.conninfo) as client, client.lease(name, ttl=ttl) as lease:
        token = lease.token
        wait_for(lambda: lease.renewals >= 1 and client.renewal_pid, 2 * ttl, "the first renewal")
        pid = client.renewal_pid
        app = cluster.one("SELECT application_name FROM pg_stat_activity WHERE pid = %s", (pid,))
        assert app == "dlock renewal"
        assert cluster.one("SELECT pg_terminate_backend(%s)", (pid,)) is True
        killed_at = time.monotonic()
        before = lease.renewals
        # Past one more ttl after the kill, renewed again on a new connection.
        wait_for(lambda: time.monotonic() > killed_at + ttl * 1.2 and lease.renewals >= before + 2,
                 30, "renewals after the termination")
        lease.check()
        assert not lease.lost.is_set()
        assert lease.token == token
        assert client.renewal_pid not in (None, pid)
        row = lease_row(cluster, name)
        assert row[0] == token and row[1] is True, row
        # expires_at is the server's expiry of the last renew (to within microseconds).
        # (A renew may commit between the reads: a few tries.)
        def same_expiry() -> bool:
            seen = [lease.expires_at]
            server = cluster.one("SELECT expires_at FROM dlock_leases WHERE lock_name = %s", (name,))
            seen.append(lease.expires_at)
            return min(abs((server - e).total_seconds()) for e in seen) < 0.05

        assert any(same_expiry() for _ in range(3)), "expires_at is not the server's"
    assert lease.confirmed is True
    assert lease_row(cluster, name)[2] is True  # released


def test_s2_renewal_connection_terminated(cluster):
    check_terminated(cluster, "s2-terminated")


def test_s2_renewal_connection_hung(cluster):
    """A renewal connection that gets no answer (its backend stopped with
    SIGSTOP, holding no lock) is abandoned after half the time left and the
    renew is retried on a new connection: the lease survives."""
    import os
    import signal

    # After the abandoned attempt (a third of the ttl), a third is left to
    # reconnect: 3 s each, which a loaded machine needs (1 s was seen to fail).
    ttl = 9.0
    with dlock.Client(cluster.conninfo) as client, client.lease("s2-hung", ttl=ttl) as lease:
        token = lease.token
        wait_for(lambda: lease.renewals >= 1 and client.renewal_pid, 2 * ttl, "the first renewal")
        pid = client.renewal_pid
        before = lease.renewals
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: lease.renewals >= before + 2, 3 * ttl, "renewals on a new connection")
            lease.check()
            assert lease.token == token and client.renewal_pid not in (None, pid)
        finally:
            os.kill(pid, signal.SIGCONT)
            cluster.sql("SELECT pg_terminate_backend(%s)", (pid,))
    assert lease.confirmed is True
