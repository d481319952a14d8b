"""Bounds for blocking queries of the synchronous client.

A query that gets no answer within its bound is abandoned: the watchdog
thread shuts the connection's socket down (which needs no answer from the
server, unlike a cancel request), so the blocked call fails at once and the
caller closes the connection.  Arming and disarming cost a lock and a heap
push; the thread sleeps until the earliest bound.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from typing import Any, List, Optional, Tuple


class Guard:
    __slots__ = ("when", "conn", "done", "fired")

    def __init__(self, when: float, conn: Any):
        self.when = when
        self.conn = conn
        self.done = False
        self.fired = False


class Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: List[Tuple[float, int, Guard]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        # When the thread will wake up next (inf: idle).  A guard that
        # expires later needs no wake-up: arming stays a lock and a push.
        self._wake_at = float("inf")

    def arm(self, conn: Any, seconds: float) -> Guard:
        g = Guard(time.monotonic() + max(0.0, seconds), conn)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock watchdog", daemon=True)
                self._thread.start()
            heap = self._heap
            if len(heap) > 4096:  # ended guards wait for their time: drop them now and then
                heap[:] = [e for e in heap if not e[2].done]
                heapq.heapify(heap)
            heapq.heappush(heap, (g.when, next(self._seq), g))
            if g.when < self._wake_at:
                self._wake_at = g.when
                self._cond.notify()
        return g

    def disarm(self, g: Guard) -> bool:
        """Ends the guard; returns True when it fired (the connection's
        socket was shut down: close the connection)."""
        with self._cond:
            g.done = True
            return g.fired

    def _run(self) -> None:
        with self._cond:
            while True:
                # Ended guards are dropped when their time comes, not before:
                # the thread then sleeps until the earliest bound however
                # many short queries come and go meanwhile.
                if not self._heap:
                    self._wake_at = float("inf")
                    self._cond.wait()
                    continue
                when, _, g = self._heap[0]
                now = time.monotonic()
                if when > now:
                    self._wake_at = when
                    self._cond.wait(when - now)
                    continue
                heapq.heappop(self._heap)
                if g.done:
                    continue
                g.fired = True
                g.done = True
                _shutdown(g.conn)


def _shutdown(conn: Any) -> None:
    try:
        fd = conn.pgconn.socket
    except Exception:
        return
    try:
        s = socket.socket(fileno=__import__("os").dup(fd))
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()
