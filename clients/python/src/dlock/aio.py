"""The asyncio client: ``dlock.aio.lease``, ``Client``, ``Lease``, ``Election``.

The renewer is a task in the application's event loop with a connection of
its own.  On loss, the body's task is cancelled and the scope raises
:class:`~dlock.LeaseLost` (a cancel of the caller's own still propagates as
``CancelledError``, after the release).

>>> async with dlock.aio.lease(apool, "report", ttl=30) as lease:
...     async with lease.fenced(conn) as tx:
...         await tx.execute("INSERT INTO reports ...")
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections import deque
from typing import (Any, AsyncIterator, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union)

import psycopg
from psycopg import pq

from . import _core
from ._core import LeaseState, monotonic
from ._sync import Leader, _broken, _retryable, _WAIT_CHUNK
from .errors import DlockError, LeaseLost, NotAcquired, StaleToken

__all__ = ["Client", "Lease", "Election", "Observer", "Leader", "lease", "lease_all", "permit",
           "LeaseLost", "StaleToken", "NotAcquired"]

PoolLike = Any  # a psycopg_pool.AsyncConnectionPool, or a conninfo string
OnLost = Callable[[LeaseLost], None]


def _cancel_quietly(canceller: Any) -> None:
    try:
        canceller.cancel()
    except Exception:
        pass


class Client:
    """An asyncio dlock client: one renewal task and connection (in the loop
    that first uses it) serving all its leases.  ``pool`` is a
    ``psycopg_pool.AsyncConnectionPool`` or a conninfo string (the client then
    keeps a small pool of its own).  Use ``async with`` or ``await
    client.close()``."""

    def __init__(self, pool: PoolLike, *, owner: Optional[str] = None, connect_timeout: float = 10.0,
                 prepare_threshold: Optional[int] = 5):
        if not isinstance(pool, str) and not asyncio.iscoroutinefunction(getattr(pool, "getconn", None)):
            raise TypeError("dlock.aio needs a psycopg_pool.AsyncConnectionPool or a conninfo string "
                            "(a ConnectionPool goes with the synchronous API: dlock)")
        self._conninfo, self._kwargs = _core.conninfo_of(pool)
        self.prepare_threshold = prepare_threshold
        self._pool = None if isinstance(pool, str) else pool
        self._own_pool: Any = None
        self.owner = owner
        self.connect_timeout = float(connect_timeout)
        self._renewer = _core.Renewer(self._conninfo, self._kwargs, self.connect_timeout)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._closed = False

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stops the renewal task and closes the client's own connections."""
        self._closed = True
        if self._loop is not None:
            await self._renewer.close()
            self._loop = None
        own, self._own_pool = self._own_pool, None
        if own is not None:
            await own.close()

    def _ensure_started(self) -> None:
        if self._closed:
            raise DlockError("the dlock client is closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._renewer.start()
        elif self._loop is not loop:
            raise DlockError("a dlock.aio.Client serves the event loop that first used it")

    @property
    def renewal_pid(self) -> Optional[int]:
        """The backend pid of the renewal connection (None while it has none)."""
        return self._renewer.backend_pid

    # -- connections

    async def _app_pool(self) -> Any:
        if self._pool is not None:
            return self._pool
        if self._own_pool is None:
            from psycopg_pool import AsyncConnectionPool

            pool = AsyncConnectionPool(
                self._conninfo, min_size=1, max_size=8, name="dlock", open=False,
                kwargs={"autocommit": True, "prepare_threshold": self.prepare_threshold, **self._kwargs},
                timeout=self.connect_timeout,
            )
            try:
                await pool.open(wait=True, timeout=self.connect_timeout)
            except BaseException:
                await pool.close()
                raise
            if self._own_pool is not None:  # another task made one meanwhile
                await pool.close()
            else:
                self._own_pool = pool
        return self._own_pool

    async def _direct(self, bound: float) -> "psycopg.AsyncConnection[Any]":
        kwargs = dict(self._kwargs)
        b = max(0.001, min(bound, self.connect_timeout))
        kwargs.setdefault("connect_timeout", max(2, math.ceil(b)))
        return await asyncio.wait_for(
            psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, prepare_threshold=None, **kwargs), b)

    async def _run(self, fresh: bool, query: str, params: Any, bound: float) -> Any:
        """One statement on a connection of the pool (``fresh``: on a new
        connection), bounded by ``bound`` seconds.  Returns its first row."""
        if not fresh:
            start = monotonic()
            pool = await self._app_pool()
            async with pool.connection(timeout=min(bound, self.connect_timeout)) as conn:
                try:
                    return await self._query(conn, query, params, bound)
                except psycopg.OperationalError:
                    # A pooled connection the server closed meanwhile: once
                    # more on a new connection.
                    if not _broken(conn) or monotonic() - start >= bound:
                        raise
            bound -= monotonic() - start
        conn = await self._direct(bound)
        try:
            return await self._query(conn, query, params, bound)
        finally:
            await conn.close()

    async def _query(self, conn: "psycopg.AsyncConnection[Any]", query: str, params: Any, bound: float) -> Any:
        prev = conn.autocommit
        if not prev:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                await conn.rollback()
            await conn.set_autocommit(True)
        try:
            cur = await asyncio.wait_for(conn.execute(query, params), max(0.001, bound))
            return await cur.fetchone()
        except BaseException:
            # No answer in time, or cancelled: the statement may still run (a
            # waiting acquire would still take the lease): cancel it, without
            # waiting for the server, and close the connection.
            if conn.info.transaction_status == pq.TransactionStatus.ACTIVE:
                try:
                    canceller = conn.pgconn.get_cancel()
                    asyncio.get_running_loop().run_in_executor(None, _cancel_quietly, canceller)
                except Exception:
                    pass
                await conn.close()
            raise
        finally:
            if not prev and not conn.closed:
                try:
                    await conn.set_autocommit(False)
                except psycopg.Error:
                    pass

    # -- acquire and release

    async def _acquire(self, kind: str, names: Sequence[str], ttl: float, wait: float,
                       owner: Optional[str]) -> Optional[Tuple[List[str], List[int], float, Any]]:
        end = monotonic() + wait
        backoff = 0.1
        fresh = False
        while True:
            this_wait = min(max(0.0, end - monotonic()), _WAIT_CHUNK)
            query, params = _core.acquire_query(kind, names, ttl, this_wait,
                                                owner if owner is not None else self.owner)
            bound = this_wait + self.connect_timeout
            try:
                sent = monotonic()
                row = await self._run(fresh, query, params, bound)
            except (psycopg.Error, OSError, asyncio.TimeoutError) as exc:
                retryable = _retryable(exc) or isinstance(exc, asyncio.TimeoutError)
                if not (retryable and (not fresh or (wait > 0 and monotonic() < end))):
                    raise
                if fresh:
                    await asyncio.sleep(min(backoff, max(0.0, end - monotonic())))
                fresh = True
                backoff = min(1.0, backoff * 2)
                continue
            got = _core.acquired(kind, names, row)
            if got is not None:
                return got[0], got[1], sent, got[2]
            if monotonic() >= end:
                return None

    async def _renew_now(self, state: LeaseState) -> bool:
        """One renew before the body starts (the two-thirds rule).  The lease
        was granted at some moment of the acquire, possibly long after it was
        sent (a waiting acquire), so the deadline counted from the send may
        have passed while the lease is live: this renew is bounded by half
        the ttl and judged by its own send time."""
        query, params = _core.renew_params(state)
        bound = state.ttl / 2
        sent = monotonic()
        row = await self._run(False, query, params, bound)
        if row is None or monotonic() >= sent + state.ttl:
            return False
        if _core.all_true(row[0]):
            state.renewed(sent, row[1])
            return True
        state.lost_reason = "renewed-false"
        return False

    async def _release(self, state: LeaseState) -> Optional[bool]:
        query, params = _core.release_params(state)
        fresh = False
        backoff = _core.PAUSE_MIN
        while True:
            left = state.time_left()
            if left <= 0:
                return None
            bound = left / 2
            try:
                row = await self._run(fresh, query, params, bound)
            except (psycopg.Error, OSError, asyncio.TimeoutError) as exc:
                _core.log.info("dlock: release of %s failed (%s: %s); retrying", state.names,
                               type(exc).__name__, str(exc).strip() or "no answer")
                fresh = True
                left = state.time_left()
                if left <= 0:
                    return None
                await asyncio.sleep(_core.pause_before_retry(backoff, left))
                backoff = _core.next_backoff(backoff)
                continue
            return _core.all_true(row[0]) if row is not None else None

    # -- scopes

    def lease(self, name: str, ttl: float, wait: float = 0, *, owner: Optional[str] = None,
              on_lost: Optional[OnLost] = None, progress_timeout: Optional[float] = None) -> "Lease":
        """``async with client.lease("report", ttl=30) as lease:``; see :class:`Lease`."""
        return Lease(self, "one", [name], ttl, wait, owner, on_lost, progress_timeout)

    def lease_all(self, names: Sequence[str], ttl: float, wait: float = 0, *,
                  owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
                  progress_timeout: Optional[float] = None) -> "Lease":
        """A scope on a set of names, all or none, renewed with one ``dlock_renew_each``."""
        if isinstance(names, str):
            raise TypeError("lease_all takes a sequence of names, not a string")
        return Lease(self, "all", list(names), ttl, wait, owner, on_lost, progress_timeout)

    def permit(self, base: str, permits: int, ttl: float, wait: float = 0, *,
               owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
               progress_timeout: Optional[float] = None) -> "Lease":
        """A scope on one of ``permits`` names ``base:1`` ... ``base:N``."""
        if int(permits) < 1:
            raise ValueError("permits must be at least 1")
        names = [f"{base}:{i}" for i in range(1, int(permits) + 1)]
        return Lease(self, "any", names, ttl, wait, owner, on_lost, progress_timeout)

    def election(self, name: str, ttl: float, *, owner: Optional[str] = None) -> "Election":
        return Election(self, name, ttl, owner=owner)


class Lease:
    """An asyncio lease scope (``async with``).  As :class:`dlock.Lease`, but
    ``lost`` is an ``asyncio.Event``, ``fenced()`` is an async context
    manager, and on loss the body's task is cancelled: the scope then raises
    :class:`LeaseLost` (``reason``) instead of ``CancelledError``."""

    def __init__(self, client: Client, kind: str, names: Sequence[str], ttl: float, wait: Optional[float],
                 owner: Optional[str], on_lost: Optional[OnLost], progress_timeout: Optional[float]):
        self._client = client
        self._kind = kind
        self._asked = list(names)
        self.ttl = _core.check_ttl(ttl)
        self.wait = math.inf if wait is None else _core.check_wait(wait)
        self.owner = owner
        self._on_lost = on_lost
        if progress_timeout is not None and not progress_timeout > 0:
            raise ValueError("progress_timeout must be a positive number of seconds")
        self.progress_timeout = progress_timeout
        self._state: Optional[LeaseState] = None
        self.lost = asyncio.Event()
        self.confirmed = False
        self._released: Optional[bool] = None
        self._entered = False
        self._task: Optional[asyncio.Task[Any]] = None
        self._in_body = False
        self._cancelled_by_loss = False

    @property
    def _st(self) -> LeaseState:
        if self._state is None:
            raise DlockError("the lease scope has not been entered")
        return self._state

    name = property(lambda self: self._st.names[0], doc="The lock name (a permit's: the one it got).")
    names = property(lambda self: self._st.names, doc="The lock names (of a set).")
    token = property(lambda self: self._st.tokens[0], doc="The fencing token.")
    tokens = property(lambda self: self._st.tokens, doc="The tokens (of a set).")
    expires_at = property(lambda self: self._st.expires_at, doc="The server's expiry of the last grant or renew.")
    deadline = property(lambda self: self._st.deadline, doc="The local deadline (time.monotonic()).")
    renewals = property(lambda self: self._st.renewals, doc="How many renews succeeded.")

    @property
    def slot(self) -> Optional[int]:
        if self._kind != "any":
            return None
        return int(self.name.rsplit(":", 1)[1])

    @property
    def lost_reason(self) -> Optional[str]:
        st = self._state
        return None if st is None else st.lost_reason

    def check(self) -> None:
        """Raises :class:`LeaseLost` when the lease is lost (clock first)."""
        st = self._st
        if st.active:
            st.check_clock()
        if st.lost_reason is not None:
            raise st.error()

    def progress(self) -> None:
        """Reports progress (see ``progress_timeout``); raises LeaseLost when lost."""
        self.check()
        self._st.last_progress = monotonic()

    @contextlib.asynccontextmanager
    async def fenced(self, conn: "psycopg.AsyncConnection[Any]", mode: str = "latest") -> AsyncIterator["psycopg.AsyncConnection[Any]"]:
        """A transaction on ``conn`` that starts with ``dlock_check`` of the
        lease's names and tokens; 55T01 raises :class:`StaleToken`."""
        self.check()
        st = self._st
        try:
            async with conn.transaction():
                for n, t in zip(st.names, st.tokens):
                    await conn.execute(_core.SQL_CHECK, (n, t, mode))
                yield conn
        except psycopg.Error as exc:
            err = _core.translate_stale(exc)
            if err is exc:
                raise
            raise err from exc

    async def release(self) -> bool:
        """Releases now; returns whether the release was confirmed."""
        st = self._st
        if self._released is None:
            await self._finish()
        if st.lost_reason is not None:
            raise st.error()
        return self.confirmed

    def _signal(self, err: LeaseLost) -> None:
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost(err)
        task = self._task
        if self._in_body and task is not None and not task.done():
            self._cancelled_by_loss = True
            task.cancel(f"dlock: {err}")

    async def __aenter__(self) -> "Lease":
        if self._entered:
            raise DlockError("a lease scope can be entered once")
        self._entered = True
        c = self._client
        c._ensure_started()
        got = await c._acquire(self._kind, self._asked, self.ttl, self.wait, self.owner)
        if got is None:
            raise NotAcquired(self._asked if self._kind != "one" else self._asked[0], self.wait)
        names, tokens, sent, expires = got
        st = LeaseState(names, tokens, self.ttl, sent, expires, self._kind == "all", self.progress_timeout)
        self._state = st
        tries = 0
        while st.time_left() < self.ttl * 2 / 3 and st.lost_reason is None:
            if tries == 2 or not await c._renew_now(st):
                lost = st.lost_reason
                if st.deactivate():
                    await c._release(st)
                if lost is not None:
                    raise st.error()
                raise NotAcquired(names, self.wait, f"{names!r}: the database took more than a third of "
                                                    f"the ttl ({self.ttl:g} s) to answer; use a longer ttl")
            tries += 1
        st.add_signal(self._signal)
        self._task = asyncio.current_task()
        self._in_body = True
        c._renewer.add(st)
        return self

    async def _finish(self) -> None:
        st = self._st
        if st.active:
            st.check_clock()
        live = st.deactivate()
        st.clear_signals()  # no more signals: and no reference cycle through them
        self._client._renewer.remove(st)
        if not live:
            self._released = False
            return
        outcome = await self._client._release(st)
        self._released = outcome is not None
        self.confirmed = outcome is True
        if outcome is False:
            with st._lock:
                st.lost_reason = "released-false"

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self._in_body = False
        st = self._state
        if st is None:
            return
        task = self._task
        if self._cancelled_by_loss and task is not None and not isinstance(ev, asyncio.CancelledError):
            # The loss's cancel was requested but not delivered: absorb it here.
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                pass
        outer_cancel = False
        if self._cancelled_by_loss and task is not None and hasattr(task, "uncancel"):
            outer_cancel = task.uncancel() > 0
        if self._released is None:
            await self._finish()
        if isinstance(ev, asyncio.CancelledError) and self._cancelled_by_loss and not outer_cancel:
            raise st.error() from ev
        if et is not None:
            return  # the body's exception (or a caller's cancel) propagates
        if st.lost_reason is not None:
            raise st.error()


# ---- elections --------------------------------------------------------------------


class Election:
    """Leader election on one lock name (asyncio).  See :class:`dlock.Election`."""

    def __init__(self, pool: Union[PoolLike, Client], name: str, ttl: float, *,
                 owner: Optional[str] = None, poll_interval: float = 0.5):
        self.client = pool if isinstance(pool, Client) else _shared_client(pool)
        self.name = name
        self.ttl = _core.check_ttl(ttl)
        self.owner = owner
        self.poll_interval = poll_interval
        self._lease: Optional[Lease] = None

    def campaign(self, wait: Optional[float] = None, *, on_lost: Optional[OnLost] = None,
                 progress_timeout: Optional[float] = None) -> Lease:
        """A lease scope entered once this candidate leads."""
        self._lease = Lease(self.client, "one", [self.name], self.ttl, wait, self.owner, on_lost,
                            progress_timeout)
        return self._lease

    async def resign(self) -> bool:
        """Releases the leadership of :meth:`campaign`'s scope."""
        lease = self._lease
        if lease is None or lease._state is None or lease._released is not None:
            return False
        return await lease.release()

    async def leader(self) -> Optional[Leader]:
        """The current leader, or None."""
        c = self.client
        c._ensure_started()
        row = await c._run(False, _core.SQL_LEADER, (self.name,), c.connect_timeout)
        return None if row is None else Leader(row[0], row[1])

    def observe(self, *, poll_interval: Optional[float] = None, listen: bool = True) -> "Observer":
        """An async iterator of each new leader; see :meth:`dlock.Election.observe`."""
        return Observer(self, poll_interval or self.poll_interval, listen)


class Observer:
    """``async for leader in election.observe():`` (see :class:`dlock.Observer`)."""

    safety_interval = 30.0
    probe_timeout = 1.0

    def __init__(self, election: Election, poll_interval: float, listen: bool):
        self._e = election
        self.poll_interval = poll_interval
        self._want_events = listen
        self.mode: Optional[str] = None
        self._listen: Optional[psycopg.AsyncConnection[Any]] = None
        self._query_conn: Optional[psycopg.AsyncConnection[Any]] = None
        self._pending: Deque[Leader] = deque()
        self._notes: Deque[Tuple[str, str, int]] = deque()
        self._arrived = asyncio.Event()
        self._last_token = 0
        self._notifier: Optional[int] = None
        self._next_read = 0.0
        self.reconnections = 0
        self._closed = False

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Leader:
        while True:
            got = await self.next(None)
            if got is not None:
                return got
            if self._closed:
                raise StopAsyncIteration

    async def __aenter__(self) -> "Observer":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        await self._drop()

    async def _drop(self) -> None:
        if self._listen is not None:
            try:
                asyncio.get_running_loop().remove_reader(self._listen.fileno())
            except Exception:
                pass
        for c in (self._listen, self._query_conn):
            if c is not None:
                try:
                    await c.close()
                except Exception:
                    pass
        self._listen = self._query_conn = None
        self._notifier = None

    def _on_readable(self) -> None:
        listen = self._listen
        if listen is None:
            return
        pgconn = listen.pgconn
        try:
            pgconn.consume_input()
        except psycopg.Error:
            pass
        n = pgconn.notifies()
        while n is not None:
            self._notes.append((n.relname.decode(), n.extra.decode(), n.be_pid))
            n = pgconn.notifies()
        if pgconn.status != pq.ConnStatus.OK:
            self._notes.append(("", "", -1))  # the connection was lost
            asyncio.get_running_loop().remove_reader(listen.fileno())
        self._arrived.set()

    async def _connect(self) -> None:
        c = self._e.client
        self._query_conn = await c._direct(c.connect_timeout)
        self.mode = "polling"
        if self._want_events:
            cur = await self._query_conn.execute("SELECT current_setting('dlock.notify', true)")
            on = await cur.fetchone()
            if on is not None and on[0] == "on":
                listen = await c._direct(c.connect_timeout)
                self._listen = listen
                probe = f"dlock_probe_{listen.info.backend_pid}_{id(self)}"
                await listen.execute("LISTEN dlock")
                await listen.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(probe)))
                asyncio.get_running_loop().add_reader(listen.fileno(), self._on_readable)
                await self._query_conn.execute("SELECT pg_notify(%s, 'probe')", (probe,))
                end = monotonic() + self.probe_timeout
                arrived = False
                while not arrived and monotonic() < end:
                    await self._wait_notes(end - monotonic())
                    while self._notes:
                        n = self._notes.popleft()
                        if n[0] == probe:
                            arrived = True
                        else:
                            await self._handle(n)
                if arrived:
                    self.mode = "events"
                else:
                    asyncio.get_running_loop().remove_reader(listen.fileno())
                    await listen.close()
                    self._listen = None
        await self._read_view(None)

    async def _wait_notes(self, timeout: float) -> None:
        if self._notes:
            return
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), max(0.0, timeout))
        except asyncio.TimeoutError:
            pass

    async def _handle(self, n: Tuple[str, str, int]) -> None:
        channel, payload, pid = n
        if pid == -1:
            raise psycopg.OperationalError("the listening connection was lost")
        if channel != "dlock":
            return
        if pid != self._notifier:
            assert self._query_conn is not None
            cur = await self._query_conn.execute(_core.SQL_NOTIFIER)
            row = await cur.fetchone()
            self._notifier = None if row is None else row[0]
            if pid != self._notifier:
                return
        action = _core.event_action(payload, self._e.name, self._last_token)
        if action is not None:
            forget, event_token = action
            if forget:
                self._notifier = None
            await self._read_view(event_token)

    async def _read_view(self, event_token: Optional[int]) -> None:
        assert self._query_conn is not None
        cur = await self._query_conn.execute(_core.SQL_LEASE_ROW, (self._e.name,))
        row = await cur.fetchone()
        self._next_read = monotonic() + (self.safety_interval if self.mode == "events" else self.poll_interval)
        if row is None:
            return
        owner, token, live = row
        if token > self._last_token and (live or token == event_token):
            self._last_token = token
            self._pending.append(Leader(owner, token))

    async def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next new leader, or None after ``timeout`` seconds."""
        end = math.inf if timeout is None else monotonic() + timeout
        backoff = 0.1
        while not self._closed:
            if self._pending:
                return self._pending.popleft()
            now = monotonic()
            if now >= end:
                return None
            try:
                if self._query_conn is None:
                    await self._connect()
                    continue
                wait = max(0.0, min(end, self._next_read) - now)
                if self.mode == "events":
                    await self._wait_notes(wait)
                    while self._notes:
                        await self._handle(self._notes.popleft())
                else:
                    await asyncio.sleep(wait)
                if monotonic() >= self._next_read:
                    await self._read_view(None)
                backoff = 0.1
            except (psycopg.Error, OSError, asyncio.TimeoutError):
                await self._drop()
                self.reconnections += 1
                await asyncio.sleep(min(backoff, max(0.0, end - monotonic())))
                backoff = min(1.0, backoff * 2)
        return None


# ---- module-level functions ---------------------------------------------------------

_shared: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[Any, Client]]" = weakref.WeakKeyDictionary()


def _shared_client(pool: PoolLike) -> Client:
    """The client the module-level functions share for ``pool`` in the
    running loop (one per pool object, or per conninfo string)."""
    loop = asyncio.get_running_loop()
    per_loop = _shared.setdefault(loop, {})
    key: Any = pool if isinstance(pool, str) else ("pool", id(pool))
    c = per_loop.get(key)
    if c is None or c._closed or (not isinstance(pool, str) and c._pool is not pool):
        c = per_loop[key] = Client(pool)
    return c


def lease(pool: PoolLike, name: str, ttl: float, wait: float = 0, *, owner: Optional[str] = None,
          on_lost: Optional[OnLost] = None, progress_timeout: Optional[float] = None) -> Lease:
    """``async with dlock.aio.lease(apool, "report", ttl=30) as lease:`` through
    the shared client of ``apool`` in the running loop."""
    return _shared_client(pool).lease(name, ttl, wait, owner=owner, on_lost=on_lost,
                                      progress_timeout=progress_timeout)


def lease_all(pool: PoolLike, names: Sequence[str], ttl: float, wait: float = 0, *,
              owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
              progress_timeout: Optional[float] = None) -> Lease:
    return _shared_client(pool).lease_all(names, ttl, wait, owner=owner, on_lost=on_lost,
                                          progress_timeout=progress_timeout)


def permit(pool: PoolLike, base: str, permits: int, ttl: float, wait: float = 0, *,
           owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
           progress_timeout: Optional[float] = None) -> Lease:
    return _shared_client(pool).permit(base, permits, ttl, wait, owner=owner, on_lost=on_lost,
                                       progress_timeout=progress_timeout)
