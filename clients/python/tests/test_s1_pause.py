"""Scenario 1, pause: a child holds a lease (ttl 4 s: a loaded machine running
both client suites beside assertion-enabled servers must not lose it before
the pause) and writes fenced rows;
it is stopped (SIGSTOP) past its ttl while this process takes the lease over
and writes.  On resume the child is told the lease is lost before it trusts
anything else, its next fenced write is rejected (StaleToken), its scope ends
with LeaseLost, and the newer holder's rows stay."""

from __future__ import annotations

import os
import signal

import dlock
from helpers import WAIT, lease_row, read_event
from pgcluster import wait_for


def check_pause(cluster, children, name: str, mutation: str = "none") -> None:
    table = name.replace("-", "_")
    cluster.sql(f"""
        CREATE TABLE {table} (id serial PRIMARY KEY, writer text NOT NULL, fence_token bigint);
        CREATE TRIGGER {table}_fence BEFORE INSERT OR UPDATE ON {table}
          FOR EACH ROW EXECUTE FUNCTION dlock_fence('{name}', 'fence_token')""")
    child = children.spawn("child_pause.py", cluster.conninfo, name, table, mutation)
    old = read_event(child, WAIT, "acquired")["token"]
    assert read_event(child, WAIT, "wrote")["rows"] == 3
    os.kill(child.pid, signal.SIGSTOP)
    try:
        # The stopped child renews nothing: its lease expires, and we take it over.
        wait_for(lambda: lease_row(cluster, name)[1] is False, 15, "the stopped child's lease to expire")
        with dlock.Client(cluster.conninfo) as client, client.lease(name, ttl=5) as lease:
            new = lease.token
            assert new > old
            with cluster.connect() as conn:
                with lease.fenced(conn) as tx:
                    tx.execute(f"INSERT INTO {table} (writer) VALUES ('new'), ('new')")
            assert lease.confirmed is False  # not yet: released when the scope ends
        assert lease.confirmed is True
    finally:
        os.kill(child.pid, signal.SIGCONT)
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    resumed = read_event(child, WAIT, "resumed")
    assert resumed["lost"] is True, f"the resumed child was not told first that its lease is lost: {resumed}"
    assert resumed["reason"] == "deadline"
    check = read_event(child, WAIT, "check")
    assert check == {"event": "check", "error": "LeaseLost", "reason": "deadline"}
    write = read_event(child, WAIT, "write")
    assert write["error"] == "StaleToken", write
    assert "do not retry" in write["message"]
    assert read_event(child, WAIT, "fenced")["error"] == "LeaseLost"
    scope = read_event(child, WAIT, "scope")
    assert scope == {"event": "scope", "error": "LeaseLost", "reason": "deadline"}
    assert child.wait(10) == 0
    rows = cluster.sql(f"SELECT writer, fence_token FROM {table} ORDER BY id")
    assert rows == [("old", old)] * 3 + [("new", new)] * 2
    # The child never released the newer holder's lease: it is still as we left it.
    assert lease_row(cluster, name)[0] == new


def test_s1_pause(cluster, children):
    check_pause(cluster, children, "s1-pause")


def check_pause_async(cluster, children, name: str, mutation: str = "none") -> None:
    """The asyncio variant: on resume the body's task is cancelled before it
    reads anything (the loss is signalled by cancellation)."""
    table = name.replace("-", "_")
    cluster.sql(f"""
        CREATE TABLE {table} (id serial PRIMARY KEY, writer text NOT NULL, fence_token bigint);
        CREATE TRIGGER {table}_fence BEFORE INSERT OR UPDATE ON {table}
          FOR EACH ROW EXECUTE FUNCTION dlock_fence('{name}', 'fence_token')""")
    child = children.spawn("child_pause_async.py", cluster.conninfo, name, table, mutation)
    old = read_event(child, WAIT, "acquired")["token"]
    assert read_event(child, WAIT, "wrote")["rows"] == 3
    os.kill(child.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: lease_row(cluster, name)[1] is False, 15, "the stopped child's lease to expire")
        with dlock.Client(cluster.conninfo) as client, client.lease(name, ttl=5) as lease:
            new = lease.token
            with cluster.connect() as conn:
                with lease.fenced(conn) as tx:
                    tx.execute(f"INSERT INTO {table} (writer) VALUES ('new'), ('new')")
    finally:
        os.kill(child.pid, signal.SIGCONT)
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    body = read_event(child, WAIT, "body")
    assert body["cancelled"] is True, f"the resumed body was not cancelled before it read anything: {body}"
    assert body["lost"] is True and body["reason"] == "deadline", body
    assert read_event(child, WAIT, "scope") == {"event": "scope", "error": "LeaseLost", "reason": "deadline"}
    assert read_event(child, WAIT, "write")["error"] == "StaleToken"
    assert child.wait(10) == 0
    rows = cluster.sql(f"SELECT writer, fence_token FROM {table} ORDER BY id")
    assert rows == [("old", old)] * 3 + [("new", new)] * 2


def test_s1_pause_async(cluster, children):
    check_pause_async(cluster, children, "s1-pause-async")
