"""What the synchronous and the asyncio clients share: the lease state, the
timing rules of docs/clients.md ("Renewal and the deadline") and the renewer,
an asyncio task that renews every lease of one client on a connection of its
own.  The synchronous client runs it in a background thread with an event
loop of its own; the asyncio client runs it in the application's loop.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import logging
import math
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import psycopg

from .errors import LeaseLost, StaleToken, STALE_SQLSTATE

log = logging.getLogger("dlock")

monotonic = time.monotonic

# The pause between failed attempts: 50 ms doubling to 1 s, never more than a
# quarter of the time left to the deadline, never less than 50 ms.
PAUSE_MIN = 0.05
PAUSE_MAX = 1.0
# How often the renewal thread looks at leases added from other threads while
# they keep coming (seconds).
IDLE_LOOK = 1.0

# SQLSTATEs after which a retry needs a new connection (the server is not a
# writable one that stays up): read-only / standby, shutting down, crash.
RECONNECT_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03", "57P04", "57P05"})


def pause_before_retry(backoff: float, left: float) -> float:
    """The pause before the next attempt, given the current backoff step and
    the time left to the deadline."""
    return max(PAUSE_MIN, min(backoff, PAUSE_MAX, left / 4.0))


def next_backoff(backoff: float) -> float:
    return min(PAUSE_MAX, backoff * 2.0)


def needs_new_connection(error: BaseException, conn: Any) -> bool:
    """True when a retry after ``error`` must use a new connection."""
    if isinstance(error, (asyncio.TimeoutError, TimeoutError, OSError)):
        return True
    if conn is None or getattr(conn, "closed", True) or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
        return True
    state = getattr(error, "sqlstate", None)
    if state is None:
        return isinstance(error, psycopg.OperationalError)
    return state in RECONNECT_SQLSTATES or state.startswith("08")


def check_ttl(ttl: float) -> float:
    ttl = float(ttl)
    if not ttl > 0 or math.isinf(ttl):
        raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
    return ttl


def check_wait(wait: Optional[float]) -> float:
    w = float(wait or 0)
    if w < 0 or math.isnan(w):
        raise ValueError(f"wait must be zero or a positive number of seconds, not {wait!r}")
    return w


def conninfo_of(pool: Any) -> Tuple[str, Dict[str, Any]]:
    """The conninfo (and the extra connection keywords) of a psycopg_pool
    pool or a conninfo string."""
    if isinstance(pool, str):
        return pool, {}
    conninfo = getattr(pool, "conninfo", None)
    if not isinstance(conninfo, str):
        raise TypeError(
            f"expected a psycopg_pool pool or a conninfo string, not {type(pool).__name__}"
        )
    kwargs = dict(getattr(pool, "kwargs", None) or {})
    for k in ("autocommit", "row_factory", "cursor_factory", "context", "prepare_threshold"):
        kwargs.pop(k, None)
    return conninfo, kwargs


# ---- SQL ---------------------------------------------------------------

# Each grant or renew also returns the server's clock just after the call
# (the target list is computed left to right) plus the ttl, in seconds since
# the epoch: the lease's expires_at to within microseconds.  Durations are
# sent as seconds (make_interval), parameters positionally.
_SECS = "make_interval(secs => %s)"
_EXPIRES = "date_part('epoch', clock_timestamp()) + %s"
SQL_ACQUIRE = f"SELECT dlock_acquire(%s, {_SECS}, {_SECS}, %s), {_EXPIRES}"
# The common acquire (no wait, the session's owner label): the function's
# defaults, three parameters instead of five (less to send, bind and run).
SQL_ACQUIRE_NOW = f"SELECT dlock_acquire(%s, {_SECS}), {_EXPIRES}"
SQL_ACQUIRE_ALL = f"SELECT dlock_acquire_all(%s::text[], {_SECS}, {_SECS}, %s), {_EXPIRES}"
SQL_ACQUIRE_ANY = (f"SELECT a.lock_name, a.token, {_EXPIRES} "
                   f"FROM dlock_acquire_any(%s::text[], {_SECS}, {_SECS}, %s) a")
SQL_RENEW = f"SELECT dlock_renew(%s, %s, {_SECS}), {_EXPIRES}"
SQL_RENEW_EACH = f"SELECT dlock_renew_each(%s::text[], %s::bigint[], {_SECS}), {_EXPIRES}"
SQL_RELEASE = "SELECT dlock_release(%s, %s)"
SQL_RELEASE_EACH = "SELECT dlock_release_each(%s::text[], %s::bigint[])"
SQL_CHECK = "SELECT dlock_check(%s, %s, %s)"
SQL_LEADER = "SELECT owner, token FROM dlock_leases WHERE lock_name = %s AND live"
SQL_LEASE_ROW = "SELECT owner, token, live FROM dlock_leases WHERE lock_name = %s"
SQL_NOTIFIER = "SELECT pid FROM dlock_notifier WHERE datname = current_database()"


def acquire_query(kind: str, names: Sequence[str], ttl: float, wait: float,
                  owner: Optional[str]) -> Tuple[str, Tuple[Any, ...]]:
    """The statement of an acquire: ``kind`` one, all (a set) or any (a permit)."""
    if kind == "one":
        if wait == 0 and owner is None:
            return SQL_ACQUIRE_NOW, (names[0], ttl, ttl)
        return SQL_ACQUIRE, (names[0], ttl, wait, owner, ttl)
    if kind == "all":
        return SQL_ACQUIRE_ALL, (list(names), ttl, wait, owner, ttl)
    return SQL_ACQUIRE_ANY, (ttl, list(names), ttl, wait, owner)


def acquired(kind: str, names: Sequence[str], row: Any) -> Optional[Tuple[List[str], List[int], Optional[float]]]:
    """(names, tokens, expires epoch) of an acquire's row, or None when it
    got nothing."""
    if row is None:
        return None
    if kind == "any":
        return [row[0]], [row[1]], row[2]
    if row[0] is None:
        return None
    return list(names), list(row[0]) if kind == "all" else [row[0]], row[1]


def renew_params(state: "LeaseState") -> Tuple[str, Tuple[Any, ...]]:
    if state.is_set:
        return SQL_RENEW_EACH, (list(state.names), list(state.tokens), state.ttl, state.ttl)
    return SQL_RENEW, (state.names[0], state.tokens[0], state.ttl, state.ttl)


def release_params(state: "LeaseState") -> Tuple[str, Tuple[Any, ...]]:
    if state.is_set:
        return SQL_RELEASE_EACH, (list(state.names), list(state.tokens))
    return SQL_RELEASE, (state.names[0], state.tokens[0])


def all_true(value: Any) -> bool:
    if isinstance(value, list):
        return len(value) > 0 and all(v is True for v in value)
    return value is True


def translate_stale(error: BaseException) -> BaseException:
    """StaleToken for a 55T01 database error, else the error itself."""
    if getattr(error, "sqlstate", None) == STALE_SQLSTATE:
        st = StaleToken.from_error(error)
        st.__cause__ = error
        return st
    return error


# ---- events, for the observers of an election --------------------------


def event_action(payload: str, name: str, last_token: int) -> Optional[Tuple[bool, Optional[int]]]:
    """What an accepted ``dlock`` event (its sender already checked by the
    listener's rule) asks of an observer of ``name`` whose last reported
    token is ``last_token``: None (nothing), or ``(forget_notifier,
    event_token)``: read the view again, after forgetting the notifier's pid
    when it is exiting (``notifier_exit``); ``event_token`` is the token of
    a grant on ``name`` (None after ``overflow`` or ``notifier_exit``)."""
    try:
        ev = json.loads(payload)
    except ValueError:
        return None
    kind = ev.get("event")
    if kind == "notifier_exit":
        return True, None
    if kind == "overflow":
        return False, None
    token = ev.get("token")
    if (kind in ("acquired", "taken_over") and ev.get("lock_name") == name
            and isinstance(token, int) and token > last_token):
        return False, token
    return None


# ---- the state of one lease (one name, a set, or a permit) ---------------


class LeaseState:
    """The state of one lease as the renewer and the scope see it.

    Touched by two threads in the synchronous client (the application's and
    the renewal thread): the transitions (loss, deactivation) take the lock;
    plain reads of numbers are atomic in Python.
    """

    def __init__(
        self,
        names: Sequence[str],
        tokens: Sequence[int],
        ttl: float,
        sent: float,
        expires: Optional[float],
        is_set: bool,
        progress_timeout: Optional[float],
    ):
        self.names: Tuple[str, ...] = tuple(names)
        self.tokens: Tuple[int, ...] = tuple(tokens)
        self.ttl = ttl
        self.is_set = is_set
        self.deadline = sent + ttl
        self.next_attempt = sent + ttl / 3.0
        self.backoff = PAUSE_MIN
        self.expires = expires  # seconds since the epoch, the server's clock
        self.renewals = 0
        self.failed_attempts = 0
        self.progress_timeout = progress_timeout
        self.last_progress = monotonic()
        self.active = True  # renewed and subject to loss; False once the scope is left
        self.lost_reason: Optional[str] = None
        self._lock = threading.Lock()
        self._signals: List[Callable[[LeaseLost], None]] = []
        self.deadline_handle: Optional[asyncio.TimerHandle] = None
        self.progress_handle: Optional[asyncio.TimerHandle] = None

    # -- queries

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def token(self) -> int:
        return self.tokens[0]

    def error(self) -> LeaseLost:
        reason = self.lost_reason or "deadline"
        if self.is_set:
            return LeaseLost(",".join(self.names), None, reason,
                             _set_message(self.names, self.tokens, reason))
        return LeaseLost(self.names[0], self.tokens[0], reason)

    def time_left(self) -> float:
        return self.deadline - monotonic()

    # -- transitions

    def add_signal(self, fn: Callable[[LeaseLost], None]) -> None:
        self._signals.append(fn)

    def clear_signals(self) -> None:
        self._signals = []

    def lose(self, reason: str) -> bool:
        """Marks the lease lost (once, and only while the scope is active),
        then runs the loss signals on the calling thread."""
        with self._lock:
            if self.lost_reason is not None or not self.active:
                return False
            self.lost_reason = reason
        err = self.error()
        log.warning("%s", err)
        for fn in self._signals:
            try:
                fn(err)
            except Exception:  # a callback's failure must not stop the others
                log.exception("dlock: a loss callback failed")
        return True

    def deactivate(self) -> bool:
        """The scope is being left: no more renewals, no more loss signals.
        Returns False when the lease was already lost."""
        with self._lock:
            self.active = False
            return self.lost_reason is None

    def check_clock(self, now: Optional[float] = None) -> bool:
        """Reads the clock before anything else is trusted: marks the lease
        lost when its deadline (or progress deadline) has passed.  Returns
        True when the lease is lost."""
        if self.lost_reason is not None:
            return True
        t = monotonic() if now is None else now
        if t >= self.deadline:
            self.lose("deadline")
        elif self.progress_timeout is not None and t - self.last_progress >= self.progress_timeout:
            self.lose("no-progress")
        return self.lost_reason is not None

    @property
    def expires_at(self) -> Optional[_dt.datetime]:
        e = self.expires
        return None if e is None else _dt.datetime.fromtimestamp(e, _dt.timezone.utc)

    def renewed(self, sent: float, expires: Optional[float]) -> None:
        self.deadline = sent + self.ttl
        self.next_attempt = sent + self.ttl / 3.0
        self.backoff = PAUSE_MIN
        self.expires = expires
        self.renewals += 1

    def failed(self) -> None:
        now = monotonic()
        self.failed_attempts += 1
        self.next_attempt = now + pause_before_retry(self.backoff, self.deadline - now)
        self.backoff = next_backoff(self.backoff)


def _first_due(state: LeaseState) -> float:
    """When the renewer must first look at a lease: its first renewal, or its
    progress deadline if that comes sooner."""
    if state.progress_timeout is not None:
        return min(state.next_attempt, state.last_progress + state.progress_timeout)
    return state.next_attempt


def _set_message(names: Sequence[str], tokens: Sequence[int], reason: str) -> str:
    pairs = ", ".join(f'"{n}" ({t})' for n, t in zip(names, tokens))
    return str(LeaseLost("set", None, reason)).replace('lease "set" (token None)', f"lease set {pairs}")


# ---- the renewer ----------------------------------------------------------


class Renewer:
    """Renews the leases of one client on one connection of its own, in the
    event loop it runs in.  ``add`` and ``remove`` are called in that loop."""

    def __init__(self, conninfo: str, kwargs: Mapping[str, Any], connect_timeout: float):
        self.conninfo = conninfo
        self.kwargs = dict(kwargs)
        self.connect_timeout = connect_timeout
        self.states: Dict[int, LeaseState] = {}
        self.conn: Optional[psycopg.AsyncConnection[Any]] = None
        self.backend_pid: Optional[int] = None
        self.connections = 0
        self._wake: Optional[asyncio.Event] = None
        self._wake_at = 0.0  # when the loop wakes up next (inf: idle)
        self._pending: Dict[int, LeaseState] = {}
        self._pending_lock = threading.Lock()
        self._adds = 0  # leases added from other threads (adopted or not)
        self._adds_seen = 0
        self._task: Optional[asyncio.Task[None]] = None
        self._closing = False

    # -- in the loop

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._run(), name="dlock renewer")

    def add(self, state: LeaseState) -> None:
        """Adds a lease (in the loop)."""
        loop = asyncio.get_running_loop()
        self._adopt(state, loop)
        if _first_due(state) < self._wake_at:
            assert self._wake is not None
            self._wake.set()

    def _adopt(self, state: LeaseState, loop: asyncio.AbstractEventLoop) -> None:
        if not state.active:
            return
        self.states[id(state)] = state
        self._arm(state, loop)
        if state.progress_timeout is not None:
            self._arm_progress(state, loop)

    def add_threadsafe(self, state: LeaseState, loop: asyncio.AbstractEventLoop) -> None:
        """Adds a lease from another thread.  The loop adopts it when it
        wakes up next; it is woken only when the lease needs it sooner, so a
        short scope costs no wake-up of the renewal thread."""
        with self._pending_lock:
            self._pending[id(state)] = state
            self._adds += 1
            wake = _first_due(state) < self._wake_at
            if wake:
                self._wake_at = _first_due(state)
        if wake:
            loop.call_soon_threadsafe(self._wake_up)

    def remove_threadsafe(self, state: LeaseState) -> None:
        """Removes a lease from another thread (the state is inactive
        already).  A lease the loop has adopted is dropped when the loop wakes
        up next (its timers do nothing for an inactive lease): no wake-up."""
        with self._pending_lock:
            self._pending.pop(id(state), None)

    def _wake_up(self) -> None:
        """In the loop: adopts the pending leases at once (their timers are
        armed even while an attempt is under way), and wakes the renewer."""
        loop = asyncio.get_running_loop()
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for st in pending.values():
            self._adopt(st, loop)
        if self._wake is not None:
            self._wake.set()

    def remove(self, state: LeaseState) -> None:
        self.states.pop(id(state), None)
        for h in (state.deadline_handle, state.progress_handle):
            if h is not None:
                h.cancel()

    def _arm(self, state: LeaseState, loop: asyncio.AbstractEventLoop) -> None:
        if state.deadline_handle is not None:
            state.deadline_handle.cancel()
        # loop.time() is time.monotonic() in asyncio's loops.
        state.deadline_handle = loop.call_at(state.deadline, self._on_deadline, state)

    def _on_deadline(self, state: LeaseState) -> None:
        if state.check_clock():
            self._drop(state)
        elif state.active:
            self._arm(state, asyncio.get_running_loop())

    def _arm_progress(self, state: LeaseState, loop: asyncio.AbstractEventLoop) -> None:
        assert state.progress_timeout is not None
        state.progress_handle = loop.call_at(state.last_progress + state.progress_timeout,
                                             self._on_progress, state)

    def _on_progress(self, state: LeaseState) -> None:
        if state.check_clock():
            self._drop(state)
        elif state.active:
            self._arm_progress(state, asyncio.get_running_loop())

    def _drop(self, state: LeaseState) -> None:
        self.remove(state)
        assert self._wake is not None
        self._wake.set()

    async def close(self) -> None:
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        await self._close_conn()
        for st in list(self.states.values()):
            self.remove(st)

    async def _close_conn(self) -> None:
        conn, self.conn = self.conn, None
        self.backend_pid = None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    async def connection(self, bound: float) -> "psycopg.AsyncConnection[Any]":
        if self.conn is not None and not self.conn.closed and \
                self.conn.pgconn.status == psycopg.pq.ConnStatus.OK:
            return self.conn
        await self._close_conn()
        bound = max(0.001, min(bound, self.connect_timeout))
        kwargs = dict(self.kwargs)
        kwargs.setdefault("connect_timeout", max(2, math.ceil(bound)))
        kwargs.setdefault("fallback_application_name", "dlock renewal")
        conn: psycopg.AsyncConnection[Any] = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, prepare_threshold=None, **kwargs),
            bound,
        )
        self.conn = conn
        self.backend_pid = conn.info.backend_pid
        self.connections += 1
        return conn

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while not self._closing:
            with self._pending_lock:
                pending, self._pending = self._pending, {}
                self._wake_at = 0.0  # awake: adding needs no wake-up
            for st in pending.values():
                self._adopt(st, loop)
            now = monotonic()
            due: Optional[LeaseState] = None
            soonest = math.inf
            for st in list(self.states.values()):
                if not st.active or st.check_clock(now):
                    self.remove(st)
                    continue
                if st.next_attempt <= now and (due is None or st.next_attempt < due.next_attempt):
                    due = st
                soonest = min(soonest, st.next_attempt)
            if due is None:
                with self._pending_lock:
                    if self._pending:
                        continue
                    # While leases come and go from other threads, look at the
                    # pending ones at least every second, so that a short scope
                    # needs no wake-up of this thread; idle otherwise.
                    wake_at = soonest
                    if self._adds != self._adds_seen:
                        self._adds_seen = self._adds
                        wake_at = min(soonest, now + IDLE_LOOK)
                    self._wake.clear()
                    self._wake_at = wake_at
                timeout = None if wake_at is math.inf else max(0.0, wake_at - now)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
                continue
            with self._pending_lock:
                self._wake_at = -math.inf  # busy: a new lease wakes it up
            await self._attempt(due)

    async def _attempt(self, state: LeaseState) -> None:
        start = monotonic()
        if state.check_clock(start) or not state.active:
            self.remove(state)
            return
        bound = (state.deadline - start) / 2.0  # an attempt without an answer is abandoned then
        conn: Optional[psycopg.AsyncConnection[Any]] = None
        try:
            conn = await self.connection(bound)
            query, params = renew_params(state)
            sent = monotonic()
            left = bound - (sent - start)
            if left <= 0:
                raise asyncio.TimeoutError()
            cur = await asyncio.wait_for(conn.execute(query, params), left)
            row = await cur.fetchone()
        except (asyncio.TimeoutError, psycopg.Error, OSError) as exc:
            if state.check_clock() or not state.active:
                self.remove(state)
                return
            if needs_new_connection(exc, conn):
                await self._close_conn()
            log.info("dlock: renew of %s failed (%s: %s); retrying", state.names,
                     type(exc).__name__, str(exc).strip() or "no answer")
            state.failed()
            return
        # The clock first: an answer read after the deadline is not trusted.
        if state.check_clock() or not state.active:
            self.remove(state)
            return
        assert row is not None
        if all_true(row[0]):
            state.renewed(sent, row[1])
            self._arm(state, asyncio.get_running_loop())
        else:
            state.lose("renewed-false")
            self.remove(state)
