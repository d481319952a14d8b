"""Scenario 1's child: holds a lease (ttl 4 s) and writes fenced rows; after
the parent's SIGSTOP and SIGCONT (and a line on stdin), reports what it was
told first.  Prints JSON lines.

usage: child_pause.py CONNINFO NAME TABLE MUTATION
"""

import json
import sys

import psycopg

import dlock
import mutations

conninfo, name, table, mutation = sys.argv[1:5]
mutations.apply(mutation)


def say(**kw):
    print(json.dumps(kw), flush=True)


conn = psycopg.connect(conninfo, autocommit=True)
try:
    with dlock.Client(conninfo) as client:
        with client.lease(name, ttl=4) as lease:
            say(event="acquired", token=lease.token)
            written = 0
            for _ in range(3):
                with lease.fenced(conn) as tx:
                    tx.execute(f"INSERT INTO {table} (writer) VALUES ('old')")
                written += 1
            say(event="wrote", rows=written)
            sys.stdin.readline()  # SIGSTOP lands here; the parent writes a line after SIGCONT
            # The first thing after the pause: was the loss told, before any query?
            say(event="resumed", lost=lease.lost.is_set(), reason=lease.lost_reason)
            try:
                lease.check()
                say(event="check", error=None)
            except dlock.LeaseLost as e:
                say(event="check", error="LeaseLost", reason=e.reason)
            # The next fenced write, with the token, straight at the trigger.
            try:
                with dlock.fence_errors():
                    conn.execute(f"INSERT INTO {table} (writer, fence_token) VALUES ('old-late', %s)",
                                 (lease.token,))
                say(event="write", error=None)
            except dlock.StaleToken as e:
                say(event="write", error="StaleToken", message=str(e))
            try:
                with lease.fenced(conn) as tx:
                    tx.execute(f"INSERT INTO {table} (writer) VALUES ('old-fenced')")
                say(event="fenced", error=None)
            except (dlock.LeaseLost, dlock.StaleToken) as e:
                say(event="fenced", error=type(e).__name__)
    say(event="scope", error=None)
except dlock.LeaseLost as e:
    say(event="scope", error="LeaseLost", reason=e.reason)
