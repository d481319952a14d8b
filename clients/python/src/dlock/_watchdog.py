"""Bounds for blocking queries of the synchronous client.

A query that gets no answer within its bound is abandoned: the watchdog
thread shuts the connection's socket down (which needs no answer from the
server, unlike a cancel request), so the blocked call fails at once and the
caller closes the connection.  Arming and disarming cost a lock and a dict
insertion or removal (no heap of ended guards); the thread sleeps until the
earliest bound of the guards armed when it last looked, and a guard ended
meanwhile costs it nothing: it wakes up at most once per such bound, never
per query.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Dict, Optional

_monotonic = time.monotonic
_INF = float("inf")


class Guard:
    __slots__ = ("when", "conn", "fired")

    def __init__(self, when: float, conn: Any):
        self.when = when
        self.conn = conn
        self.fired = False


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._live: Dict[Guard, None] = {}
        self._thread: Optional[threading.Thread] = None
        # When the thread will wake up next (inf: idle).  A guard that
        # expires later needs no wake-up: arming stays a lock and an insertion.
        self._wake_at = _INF

    def arm(self, conn: Any, seconds: float) -> Guard:
        g = Guard(_monotonic() + (seconds if seconds > 0.0 else 0.0), conn)
        with self._lock:
            self._live[g] = None
            if g.when < self._wake_at:
                self._wake_at = g.when
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="dlock watchdog", daemon=True)
                    self._thread.start()
                else:
                    self._cond.notify()
        return g

    def disarm(self, g: Guard) -> bool:
        """Ends the guard; returns True when it fired (the connection's
        socket was shut down: close the connection)."""
        with self._lock:
            self._live.pop(g, None)
            return g.fired

    def _run(self) -> None:
        with self._cond:
            while True:
                live = self._live
                if not live:
                    self._wake_at = _INF
                    self._cond.wait()
                    continue
                now = _monotonic()
                soonest = _INF
                for g in [g for g in live if g.when <= now]:
                    del live[g]
                    g.fired = True
                    _shutdown(g.conn)
                for g in live:
                    if g.when < soonest:
                        soonest = g.when
                if soonest == _INF:
                    continue
                self._wake_at = soonest
                self._cond.wait(soonest - now)


def _shutdown(conn: Any) -> None:
    try:
        fd = conn.pgconn.socket
    except Exception:
        return
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()
