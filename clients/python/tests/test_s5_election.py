"""Scenario 5, election: two candidates in child processes; the leader is
killed (SIGKILL), the other takes over with a greater token; observers,
following events and polling, see both changes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading

import dlock
import dlock.aio
from helpers import WAIT, read_event
from pgcluster import wait_for

NAME = "s5-election"


def test_s5_election(cluster, children):
    stop = threading.Event()
    seen = {"events": [], "polling": []}
    modes = {}
    errors = []

    def follow_events() -> None:
        try:
            with dlock.Election(cluster.conninfo, NAME, ttl=1.5).observe() as obs:
                while not stop.is_set():
                    got = obs.next(0.1)
                    modes["events"] = obs.mode
                    if got is not None:
                        seen["events"].append(got)
        except BaseException as e:
            errors.append(e)

    def follow_polling() -> None:
        async def main() -> None:
            election = dlock.aio.Election(cluster.conninfo, NAME, ttl=1.5)
            async with election.observe(listen=False, poll_interval=0.2) as obs:
                while not stop.is_set():
                    got = await obs.next(0.1)
                    modes["polling"] = obs.mode
                    if got is not None:
                        seen["polling"].append(got)
            await election.client.close()

        try:
            asyncio.run(main())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=follow_events), threading.Thread(target=follow_polling)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(modes) == 2 or errors, 10, "both observers connected")
        assert not errors, errors
        assert modes == {"events": "events", "polling": "polling"}

        # Candidates with a ttl of 3 s, which a loaded machine renews in time.
        a = children.spawn("child_candidate.py", cluster.conninfo, NAME, "cand-A", "3")
        ta = read_event(a, WAIT, "leader")["token"]
        b = children.spawn("child_candidate.py", cluster.conninfo, NAME, "cand-B", "3")
        read_event(b, WAIT, "campaigning")
        wait_for(lambda: cluster.one("SELECT count(*) FROM dlock_waiters WHERE lock_name = %s", (NAME,)) == 1,
                 15, "the second candidate to wait")
        wait_for(lambda: len(seen["events"]) >= 1 and len(seen["polling"]) >= 1, 10, "both observers see A")
        # A forged event (not from the notifier's pid, and naming a token no
        # lease has) reports nothing: only the view names leaders.
        forged = json.dumps({"event": "taken_over", "lock_name": NAME, "token": ta + 10**12,
                             "previous_token": ta})
        cluster.sql("SELECT pg_notify('dlock', %s)", (forged,))
        os.kill(a.pid, signal.SIGKILL)
        lead_b = read_event(b, WAIT, "leader")
        tb = lead_b["token"]
        assert tb > ta
        want = [dlock.Leader("cand-A", ta), dlock.Leader("cand-B", tb)]
        wait_for(lambda: len(seen["events"]) >= 2 and len(seen["polling"]) >= 2, 10, "both observers see B")
        assert seen["events"] == want, seen
        assert seen["polling"] == want, seen
        assert dlock.Election(cluster.conninfo, NAME, ttl=1.5).leader() == dlock.Leader("cand-B", tb)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
