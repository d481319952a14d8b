"""The synchronous client: ``Client``, ``Lease``, ``Election``, ``Observer``."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import math
import select
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import (Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union)

import psycopg
from psycopg import errors as _pg_errors, generators as _generators, pq
from psycopg.rows import tuple_row

from . import _core
from ._core import LeaseState, monotonic
from ._watchdog import Watchdog
from .errors import DlockError, LeaseLost, NotAcquired

__all__ = ["Client", "Lease", "Election", "Observer", "Leader", "lease", "lease_all", "permit",
           "fence_errors"]

PoolLike = Any  # a psycopg_pool.ConnectionPool, or a conninfo string
OnLost = Callable[[LeaseLost], None]

# The longest wait one dlock_acquire call is given when the scope waits for
# ever (campaign without a wait): the call is repeated.
_WAIT_CHUNK = 300.0

# The idle connections of a client's own pool kept at hand are handed back
# to the pool this often (seconds).
_IDLE_KEEP = 60.0


@dataclass(frozen=True)
class Leader:
    """A leader of an election: the owner label of its lease and its token."""

    owner: Optional[str]
    token: int


@contextlib.contextmanager
def fence_errors() -> Iterator[None]:
    """Turns a database error with SQLSTATE 55T01 (a fenced write or
    ``dlock_check`` rejected) raised in the block into :class:`StaleToken`.

    >>> with dlock.fence_errors():
    ...     conn.execute("UPDATE accounts SET fence_token = %s ...", (lease.token,))
    """
    try:
        yield
    except psycopg.Error as exc:
        err = _core.translate_stale(exc)
        if err is exc:
            raise
        raise err from exc


def _broken(conn: Any) -> bool:
    """True when a connection can no longer be used (closed, or its server
    side gone)."""
    return bool(conn.closed) or conn.pgconn.status != pq.ConnStatus.OK


# The two statements of every scope (the common acquire and the release of one
# name) are sent through libpq directly, in text: a psycopg cursor's
# adaptation of parameters and rows costs more than the statement takes in the
# client.  They are prepared on first use on a connection (under names of
# their own) unless its prepare_threshold is None (PgBouncer before 1.21 in
# transaction mode): then sent unnamed.  A statement found gone (a DISCARD, a
# DEALLOCATE) is prepared again.
_LOW_ACQUIRE = ("SELECT dlock_acquire($1::text, make_interval(secs => $2::float8)), "
                "date_part('epoch', clock_timestamp()) + $3::float8").encode()
_LOW_RELEASE = b"SELECT dlock_release($1::text, $2::bigint)"
_LOW_NAMES = {_LOW_ACQUIRE: b"_dlock_acquire_1", _LOW_RELEASE: b"_dlock_release_1"}
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_execute_gen = _generators.execute


def _low_exec(conn: "psycopg.Connection[Any]", sql: bytes, args: List[bytes], enc: str) -> Any:
    pgconn = conn.pgconn
    if conn.prepare_threshold is None:
        with conn.lock:
            pgconn.send_query_params(sql, args)
            return conn.wait(_execute_gen(pgconn))[-1]
    name = _LOW_NAMES[sql]
    prepared: Any = conn.__dict__.get("_dlock_prepared")
    if prepared is None:
        prepared = conn._dlock_prepared = set()  # type: ignore[attr-defined]
    for _ in range(2):
        with conn.lock:
            if name not in prepared:
                pgconn.send_prepare(name, sql)
                res = conn.wait(_execute_gen(pgconn))[-1]
                if res.status != _COMMAND_OK and res.error_field(pq.DiagnosticField.SQLSTATE) != b"42P05":
                    raise _pg_errors.error_from_result(res, encoding=enc)
                prepared.add(name)
            pgconn.send_query_prepared(name, args)
            res = conn.wait(_execute_gen(pgconn))[-1]
        if res.status == _TUPLES_OK or res.error_field(pq.DiagnosticField.SQLSTATE) != b"26000":
            return res
        prepared.discard(name)  # deallocated meanwhile: prepared again
    return res


def _low(conn: "psycopg.Connection[Any]", query: str, params: Any) -> Any:
    """The first row of _LOW_ACQUIRE or _LOW_RELEASE (``query`` is the
    psycopg form, SQL_ACQUIRE_NOW or SQL_RELEASE), with the values psycopg
    would have loaded; database errors are raised as psycopg raises them."""
    enc = conn.info.encoding
    release = query is _core.SQL_RELEASE
    if release:
        sql, args = _LOW_RELEASE, [params[0].encode(enc), str(int(params[1])).encode()]
    else:
        sql, args = _LOW_ACQUIRE, [params[0].encode(enc), repr(float(params[1])).encode(),
                                   repr(float(params[2])).encode()]
    res = _low_exec(conn, sql, args, enc)
    if res.status != _TUPLES_OK:
        raise _pg_errors.error_from_result(res, encoding=enc)
    if res.ntuples == 0:
        return None
    v = res.get_value(0, 0)
    if release:
        return (None if v is None else v == b"t",)
    e = res.get_value(0, 1)
    return (None if v is None else int(v), None if e is None else float(e))


def _retryable(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    if state is None:
        return isinstance(exc, (psycopg.OperationalError, OSError))
    return state in _core.RECONNECT_SQLSTATES or state.startswith("08")


class Client:
    """A dlock client: one renewal thread and connection serving all its
    leases.

    ``pool`` is a ``psycopg_pool.ConnectionPool`` (acquires and releases use
    its connections; renewals use a connection of their own, opened from the
    pool's conninfo) or a conninfo string (the client then keeps a small pool
    of its own).  ``owner`` is the default owner label of its leases (None:
    the session's default, see ``dlock_acquire``).  ``connect_timeout`` bounds
    every connection the client opens, in seconds.  ``prepare_threshold`` is
    psycopg's, for the client's own pool (a conninfo string): pass None behind
    PgBouncer before 1.21 in transaction mode.  A connection whose
    prepare_threshold is not None also gets the acquire and the release
    prepared on first use, under names of their own (``_dlock_acquire_1``,
    ``_dlock_release_1``).  The renewal connection never prepares
    statements.

    Use it as a context manager, or call :meth:`close`; the module-level
    functions (:func:`dlock.lease` ...) use one shared client per pool.
    """

    def __init__(self, pool: PoolLike, *, owner: Optional[str] = None, connect_timeout: float = 10.0,
                 prepare_threshold: Optional[int] = 5):
        if not isinstance(pool, str) and asyncio.iscoroutinefunction(getattr(pool, "getconn", None)):
            raise TypeError("an AsyncConnectionPool needs the asyncio API: dlock.aio")
        self._conninfo, self._kwargs = _core.conninfo_of(pool)
        self.prepare_threshold = prepare_threshold
        self._pool = None if isinstance(pool, str) else pool
        self._own_pool: Any = None
        self._idle: List["psycopg.Connection[Any]"] = []  # of the own pool, see _give_back
        self._idle_until = monotonic() + _IDLE_KEEP
        self.owner = owner
        self.connect_timeout = float(connect_timeout)
        self._renewer = _core.Renewer(self._conninfo, self._kwargs, self.connect_timeout)
        self._watchdog = Watchdog()
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    # -- life cycle

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops the renewal thread (leases still held are no longer renewed)
        and closes the client's own connections."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            own, self._own_pool = self._own_pool, None
            idle, self._idle = self._idle, []
        if loop is not None and thread is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._renewer.close(), loop).result(5)
            except Exception:
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
        if own is not None:
            for conn in idle:
                own.putconn(conn)
            own.close()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        running = self._loop
        if running is not None:  # no lock needed (close() clears it first)
            return running
        with self._lock:
            if self._closed:
                raise DlockError("the dlock client is closed")
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(self._renewer.start)
                loop.call_soon(started.set)
                try:
                    loop.run_forever()
                finally:
                    loop.close()

            t = threading.Thread(target=run, name="dlock renewal", daemon=True)
            t.start()
            started.wait()
            self._loop, self._thread = loop, t
            return loop

    @property
    def renewal_pid(self) -> Optional[int]:
        """The backend pid of the renewal connection (None while it has none)."""
        return self._renewer.backend_pid

    # -- connections

    def _app_pool(self) -> Any:
        if self._pool is not None:
            return self._pool
        if self._own_pool is not None:
            return self._own_pool
        with self._lock:
            if self._own_pool is None:
                from psycopg_pool import ConnectionPool

                pool = ConnectionPool(
                    self._conninfo, min_size=1, max_size=8, name="dlock", open=False,
                    kwargs={"autocommit": True, "prepare_threshold": self.prepare_threshold, **self._kwargs},
                    timeout=self.connect_timeout,
                )
                # Its first connection is made before the first request, which
                # then does not make the pool grow: one connection (and one
                # server process) serves a sequential application.
                try:
                    pool.open(wait=True, timeout=self.connect_timeout)
                except BaseException:
                    pool.close()
                    raise
                self._own_pool = pool
            return self._own_pool

    def _give_back(self, conn: "psycopg.Connection[Any]", ok: bool, now: float) -> None:
        """Returns a connection of the client's own pool: to the idle ones
        kept at hand after a statement that succeeded, to the pool (which
        checks, resets or replaces it) otherwise, and all of them every
        minute (the pool's max_lifetime and max_idle then apply)."""
        own = self._own_pool
        if own is None or self._closed:
            conn.close()  # the client was closed meanwhile
            return
        if now >= self._idle_until:
            self._idle_until = now + _IDLE_KEEP
            idle, self._idle = self._idle, []
            for c in idle:
                own.putconn(c)
            ok = False
        if ok and not conn.closed:
            self._idle.append(conn)
        else:
            own.putconn(conn)

    def _direct(self, bound: float) -> "psycopg.Connection[Any]":
        kwargs = dict(self._kwargs)
        kwargs.setdefault("connect_timeout", max(2, math.ceil(min(bound, self.connect_timeout))))
        return psycopg.connect(self._conninfo, autocommit=True, prepare_threshold=None, **kwargs)

    def _run(self, fresh: bool, query: str, params: Any, bound: float) -> Any:
        """One statement on a connection of the pool (``fresh``: on a new
        connection), bounded by ``bound`` seconds.  Returns its first row."""
        if not fresh:
            start = monotonic()
            app = pool = self._pool
            if pool is None:
                # The client's own pool: its idle connections are kept at hand
                # (no pool bookkeeping per statement); see _give_back.
                try:
                    conn = self._idle.pop()
                except IndexError:
                    pool = self._app_pool()
                    conn = pool.getconn(timeout=min(bound, self.connect_timeout))
            else:
                conn = pool.getconn(timeout=min(bound, self.connect_timeout))
            ok = False
            try:
                row = self._query(conn, query, params, bound)
                ok = True
                return row
            except psycopg.OperationalError:
                # A pooled connection that the server closed meanwhile (a
                # restart, a failover): once more on a new connection.
                if not _broken(conn) or monotonic() - start >= bound:
                    raise
            finally:
                if app is not None:
                    app.putconn(conn)
                else:
                    self._give_back(conn, ok, start)
            bound -= monotonic() - start
        conn = self._direct(bound)
        try:
            return self._query(conn, query, params, bound)
        finally:
            conn.close()

    def _query(self, conn: "psycopg.Connection[Any]", query: str, params: Any, bound: float) -> Any:
        """Runs one statement in a transaction of its own on ``conn``, abandoned
        (the connection closed) when it has no answer within ``bound``."""
        prev = conn.autocommit
        if not prev:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.rollback()
            conn.autocommit = True
        watchdog = self._watchdog
        guard = watchdog.arm(conn, bound)
        try:
            if query is _core.SQL_ACQUIRE_NOW or query is _core.SQL_RELEASE:
                return _low(conn, query, params)
            # One cursor per connection, kept on it: making a cursor (and its
            # adapters' caches) for each statement costs more than the
            # statement takes in the client.
            cur = conn.__dict__.get("_dlock_cursor")
            if cur is None:
                cur = conn._dlock_cursor = conn.cursor(row_factory=tuple_row)  # type: ignore[attr-defined]
            return cur.execute(query, params).fetchone()
        finally:
            if watchdog.disarm(guard):
                conn.close()
            elif not prev and not conn.closed:
                try:
                    conn.autocommit = False
                except psycopg.Error:
                    pass

    # -- acquire and release

    def _acquire(self, kind: str, names: Sequence[str], ttl: float, wait: float,
                 owner: Optional[str]) -> Optional[Tuple[List[str], List[int], float, Any]]:
        start = monotonic()
        end = start + wait
        backoff = 0.1
        fresh = False
        while True:
            now = monotonic()
            this_wait = min(max(0.0, end - now), _WAIT_CHUNK)
            query, params = _core.acquire_query(kind, names, ttl, this_wait,
                                                owner if owner is not None else self.owner)
            bound = this_wait + self.connect_timeout
            try:
                sent = monotonic()
                row = self._run(fresh, query, params, bound)
            except (psycopg.Error, OSError) as exc:
                # A pooled connection may be stale (the server restarted): one
                # more try on a new connection; a waiting acquire retries until
                # its wait runs out.
                if not (_retryable(exc) and (not fresh or (wait > 0 and monotonic() < end))):
                    raise
                if fresh:
                    time.sleep(min(backoff, max(0.0, end - monotonic())))
                fresh = True
                backoff = min(1.0, backoff * 2)
                continue
            got = _core.acquired(kind, names, row)
            if got is not None:
                return got[0], got[1], sent, got[2]
            if monotonic() >= end:
                return None

    def _renew_now(self, state: LeaseState) -> bool:
        """One renew before the body starts (the two-thirds rule).  The lease
        was granted at some moment of the acquire, possibly long after it was
        sent (a waiting acquire), so the deadline counted from the send may
        have passed while the lease is live: this renew is bounded by half
        the ttl and judged by its own send time."""
        query, params = _core.renew_params(state)
        bound = state.ttl / 2
        sent = monotonic()
        row = self._run(False, query, params, bound)
        if row is None or monotonic() >= sent + state.ttl:
            return False
        if _core.all_true(row[0]):
            state.renewed(sent, row[1])
            return True
        state.lost_reason = "renewed-false"
        return False

    def _release(self, state: LeaseState) -> Optional[bool]:
        """Releases until the deadline: True (confirmed), False (the server
        said the lease was not live), None (no answer, only errors)."""
        query, params = _core.release_params(state)
        fresh = False
        backoff = _core.PAUSE_MIN
        while True:
            left = state.time_left()
            if left <= 0:
                return None
            bound = left / 2
            try:
                row = self._run(fresh, query, params, bound)
            except (psycopg.Error, OSError) as exc:
                _core.log.info("dlock: release of %s failed (%s: %s); retrying", state.names,
                               type(exc).__name__, str(exc).strip())
                fresh = True  # retry on a new connection
                left = state.time_left()
                if left <= 0:
                    return None
                time.sleep(_core.pause_before_retry(backoff, left))
                backoff = _core.next_backoff(backoff)
                continue
            return _core.all_true(row[0]) if row is not None else None

    def _register(self, state: LeaseState) -> None:
        self._renewer.add_threadsafe(state, self._ensure_loop())

    def _unregister(self, state: LeaseState) -> None:
        self._renewer.remove_threadsafe(state)

    # -- scopes

    def lease(self, name: str, ttl: float, wait: float = 0, *, owner: Optional[str] = None,
              on_lost: Optional[OnLost] = None, progress_timeout: Optional[float] = None) -> "Lease":
        """A lease scope on one name: ``with client.lease("report", ttl=30) as lease:``.

        Entering acquires (waiting up to ``wait`` seconds; :class:`NotAcquired`
        when it could not), leaving releases.  See :class:`Lease`."""
        return Lease(self, "one", [name], ttl, wait, owner, on_lost, progress_timeout)

    def lease_all(self, names: Sequence[str], ttl: float, wait: float = 0, *,
                  owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
                  progress_timeout: Optional[float] = None) -> "Lease":
        """A scope on a set of names, all or none (``dlock_acquire_all``),
        renewed with one ``dlock_renew_each`` per renewal."""
        if isinstance(names, str):
            raise TypeError("lease_all takes a sequence of names, not a string")
        return Lease(self, "all", list(names), ttl, wait, owner, on_lost, progress_timeout)

    def permit(self, base: str, permits: int, ttl: float, wait: float = 0, *,
               owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
               progress_timeout: Optional[float] = None) -> "Lease":
        """A scope on one of ``permits`` names ``base:1`` ... ``base:N``
        (``dlock_acquire_any``): at most N holders at once.  The lease tells
        the name it got (``lease.name``) and its slot (``lease.slot``)."""
        if int(permits) < 1:
            raise ValueError("permits must be at least 1")
        names = [f"{base}:{i}" for i in range(1, int(permits) + 1)]
        return Lease(self, "any", names, ttl, wait, owner, on_lost, progress_timeout)

    def election(self, name: str, ttl: float, *, owner: Optional[str] = None) -> "Election":
        """An :class:`Election` on ``name`` through this client."""
        return Election(self, name, ttl, owner=owner)


_lost_lock = threading.Lock()


class _LostEvent(threading.Event):
    """The lease's ``lost`` event: ``is_set()`` reads the clock first, so a
    process paused past its deadline sees the loss before the renewal thread
    has run."""

    def __init__(self, state: Optional[LeaseState] = None):
        super().__init__()
        self._state = state

    def is_set(self) -> bool:
        st = self._state
        if st is not None and not super().is_set():
            if st.active:
                st.check_clock()
            # Lost, also while the renewal thread is still setting the event.
            return st.lost_reason is not None and st.lost_reason != "released-false"
        return True

    isSet = is_set


class Lease:
    """A lease scope (a context manager), from :meth:`Client.lease`,
    :meth:`Client.lease_all`, :meth:`Client.permit` or :func:`dlock.lease`.

    Inside the ``with`` block:

    - ``name``, ``names``, ``token``, ``tokens``, ``slot`` (permits),
      ``expires_at`` (the server's expiry of the last grant or renew);
    - ``lost``: a ``threading.Event`` set at once when the lease is lost;
    - ``check()`` raises :class:`LeaseLost` when it is lost;
    - ``progress()`` reports progress (with ``progress_timeout``);
    - ``fenced(conn, mode)`` runs a fenced transaction.

    Leaving the block releases the lease; ``confirmed`` then tells whether
    the release returned true.  The block ends with :class:`LeaseLost` when
    the lease was lost (also when the body returned normally); an exception
    of the body is re-raised as it is.
    """

    def __init__(self, client: Client, kind: str, names: Sequence[str], ttl: float, wait: Optional[float],
                 owner: Optional[str], on_lost: Optional[OnLost], progress_timeout: Optional[float]):
        self._client = client
        self._kind = kind
        self._asked = list(names)
        self.ttl = _core.check_ttl(ttl)
        self._forever = wait is None
        self.wait = math.inf if wait is None else _core.check_wait(wait)
        self.owner = owner
        self._on_lost = on_lost
        if progress_timeout is not None and not progress_timeout > 0:
            raise ValueError("progress_timeout must be a positive number of seconds")
        self.progress_timeout = progress_timeout
        self._state: Optional[LeaseState] = None
        self._lost: Optional[_LostEvent] = None  # made when first needed (see lost)
        #: After the scope: True when the release returned true, else False.
        self.confirmed: bool = False
        self._released: Optional[bool] = None  # the release's outcome once done
        self._entered = False

    # -- what the body sees

    @property
    def lost(self) -> threading.Event:
        """A ``threading.Event`` set at once when the lease is lost (made on
        first use: most scopes never look at it)."""
        ev = self._lost
        if ev is None:
            with _lost_lock:
                ev = self._lost
                if ev is None:
                    ev = self._lost = _LostEvent(self._state)
        return ev

    @property
    def _st(self) -> LeaseState:
        if self._state is None:
            raise DlockError("the lease scope has not been entered")
        return self._state

    @property
    def name(self) -> str:
        """The lock name (for a permit: the name it got; for a set: the first)."""
        return self._st.names[0]

    @property
    def names(self) -> Tuple[str, ...]:
        return self._st.names

    @property
    def token(self) -> int:
        """The fencing token (for a set: the first name's)."""
        return self._st.tokens[0]

    @property
    def tokens(self) -> Tuple[int, ...]:
        return self._st.tokens

    @property
    def slot(self) -> Optional[int]:
        """For a permit: its number, 1 ... N; None otherwise."""
        if self._kind != "any":
            return None
        return int(self.name.rsplit(":", 1)[1])

    @property
    def expires_at(self) -> Optional[_dt.datetime]:
        """The server's expiry of the last grant or renew (its clock at the end
        of that call plus the ttl)."""
        return self._st.expires_at

    @property
    def deadline(self) -> float:
        """The local deadline on ``time.monotonic()``'s clock."""
        return self._st.deadline

    @property
    def renewals(self) -> int:
        """How many renews succeeded."""
        return self._st.renewals

    @property
    def lost_reason(self) -> Optional[str]:
        """None, or why the lease was lost (see :class:`LeaseLost`)."""
        st = self._state
        return None if st is None else st.lost_reason

    def check(self) -> None:
        """Raises :class:`LeaseLost` when the lease is lost (reading the clock
        first)."""
        st = self._st
        if st.active:
            st.check_clock()
        if st.lost_reason is not None:
            raise st.error()

    def progress(self) -> None:
        """Reports progress: with ``progress_timeout``, the body must call it at
        least that often, or the lease is lost (reason ``no-progress``).
        Raises :class:`LeaseLost` when the lease is already lost."""
        self.check()
        self._st.last_progress = monotonic()

    @contextlib.contextmanager
    def fenced(self, conn: "psycopg.Connection[Any]", mode: str = "latest") -> Iterator["psycopg.Connection[Any]"]:
        """A transaction on the application's connection ``conn`` that starts
        with ``dlock_check(name, token, mode)`` (one per name of a set), so
        every write in it is fenced.  A rejected check or write raises
        :class:`StaleToken`; a lost lease raises :class:`LeaseLost` before the
        transaction starts.  ``mode``: ``"latest"`` (default) or ``"live"``
        (no takeover until the transaction commits)."""
        self.check()
        st = self._st
        try:
            with conn.transaction():
                for n, t in zip(st.names, st.tokens):
                    conn.execute(_core.SQL_CHECK, (n, t, mode))
                yield conn
        except psycopg.Error as exc:
            err = _core.translate_stale(exc)
            if err is exc:
                raise
            raise err from exc

    def release(self) -> bool:
        """Releases the lease now (the scope's end then does nothing more) and
        returns whether the release was confirmed.  Raises :class:`LeaseLost`
        when the lease had been lost."""
        st = self._st
        if self._released is None:
            self._finish()
        if st.lost_reason is not None:
            raise st.error()
        return self.confirmed

    # -- the scope

    def _signal(self, err: LeaseLost) -> None:
        super(_LostEvent, self.lost).set()  # type: ignore[misc]
        if self._on_lost is not None:
            self._on_lost(err)

    def __enter__(self) -> "Lease":
        if self._entered:
            raise DlockError("a lease scope can be entered once")
        self._entered = True
        c = self._client
        c._ensure_loop()
        got = c._acquire(self._kind, self._asked, self.ttl, self.wait, self.owner)
        if got is None:
            raise NotAcquired(self._asked if self._kind != "one" else self._asked[0], self.wait)
        names, tokens, sent, expires = got
        st = LeaseState(names, tokens, self.ttl, sent, expires, self._kind == "all", self.progress_timeout)
        self._state = st
        # The body starts only with two thirds of the ttl left.
        tries = 0
        while st.time_left() < self.ttl * 2 / 3 and st.lost_reason is None:
            if tries == 2 or not c._renew_now(st):
                lost = st.lost_reason
                if st.deactivate():
                    c._release(st)
                if lost is not None:
                    raise st.error()
                raise NotAcquired(names, self.wait, f"{names!r}: the database took more than a third of "
                                                    f"the ttl ({self.ttl:g} s) to answer; use a longer ttl")
            tries += 1
        with _lost_lock:
            if self._lost is not None:
                self._lost._state = st
        st.add_signal(self._signal)
        c._renewer.add_threadsafe(st, c._ensure_loop())
        return self

    def _finish(self) -> None:
        st = self._st
        c = self._client
        if st.active:
            st.check_clock()
        live = st.deactivate()
        st.clear_signals()  # no more signals: and no reference cycle through them
        c._renewer.remove_threadsafe(st)
        if not live:
            self._released = False
            self.confirmed = False
            return
        outcome = c._release(st)
        self._released = outcome is not None
        self.confirmed = outcome is True
        if outcome is False:
            with st._lock:
                st.lost_reason = "released-false"

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        st = self._state
        if st is None:
            return
        if self._released is None:
            self._finish()
        if et is not None:
            return  # the body's exception is re-raised as it is
        if st.lost_reason is not None:
            raise st.error()


# ---- elections --------------------------------------------------------------


class Election:
    """Leader election on one lock name.

    ``campaign()`` is a lease scope that waits until this candidate holds the
    name; ``resign()`` releases it; ``leader()`` reads the current leader;
    ``observe()`` yields each new leader.
    """

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
        """A lease scope entered once this candidate is the leader (waiting up
        to ``wait`` seconds, for ever when None; :class:`NotAcquired` after)."""
        self._lease = Lease(self.client, "one", [self.name], self.ttl, wait, self.owner, on_lost,
                            progress_timeout)
        return self._lease

    def resign(self) -> bool:
        """Releases the leadership held by :meth:`campaign`'s scope; returns
        whether the release was confirmed (False when not leading)."""
        lease = self._lease
        if lease is None or lease._state is None or lease._released is not None:
            return False
        return lease.release()

    def leader(self) -> Optional[Leader]:
        """The current leader (its owner label and token), or None."""
        row = self.client._run(False, _core.SQL_LEADER, (self.name,), self.client.connect_timeout)
        return None if row is None else Leader(row[0], row[1])

    def observe(self, *, poll_interval: Optional[float] = None, listen: bool = True) -> "Observer":
        """An iterator of each new :class:`Leader` (the current one first),
        once per token, in token order.  Follows dlock's NOTIFY events when
        they reach this connection (``listen=True``), polls ``dlock_leases``
        every ``poll_interval`` seconds otherwise."""
        return Observer(self, poll_interval or self.poll_interval, listen)


class Observer:
    """Iterates over the leaders of an election (see :meth:`Election.observe`).

    ``mode`` is ``"events"`` or ``"polling"`` once connected; ``next(timeout)``
    returns the next leader or None after ``timeout`` seconds; ``close()``
    closes its connections (also a context manager)."""

    #: In events mode, the view is also read this often (seconds).
    safety_interval = 30.0
    #: How long the self-sent probe notification may take to arrive.
    probe_timeout = 1.0

    def __init__(self, election: Election, poll_interval: float, listen: bool):
        self._e = election
        self.poll_interval = poll_interval
        self._want_events = listen
        self.mode: Optional[str] = None
        self._listen: Optional[psycopg.Connection[Any]] = None
        self._query_conn: Optional[psycopg.Connection[Any]] = None
        self._pending: Deque[Leader] = deque()
        self._last_token = 0
        self._notifier: Optional[int] = None
        self._next_read = 0.0
        self.reconnections = 0
        self._closed = False

    def __iter__(self) -> "Observer":
        return self

    def __next__(self) -> Leader:
        while True:
            got = self.next(None)
            if got is not None:
                return got
            if self._closed:
                raise StopIteration

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._drop()

    def _drop(self) -> None:
        for c in (self._listen, self._query_conn):
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass
        self._listen = self._query_conn = None
        self._notifier = None

    def _connect(self) -> None:
        client = self._e.client
        self._query_conn = client._direct(client.connect_timeout)
        self.mode = "polling"
        if self._want_events:
            on = self._query_conn.execute("SELECT current_setting('dlock.notify', true)").fetchone()
            if on is not None and on[0] == "on":
                listen = client._direct(client.connect_timeout)
                self._listen = listen
                probe = f"dlock_probe_{listen.info.backend_pid}_{id(self)}"
                listen.execute("LISTEN dlock")
                listen.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(probe)))
                self._query_conn.execute("SELECT pg_notify(%s, 'probe')", (probe,))
                end = monotonic() + self.probe_timeout
                arrived = False
                while not arrived and monotonic() < end:
                    for n in self._receive(end - monotonic()):
                        if n[0] == probe:
                            arrived = True
                        else:
                            self._handle(n)
                listen.execute(psycopg.sql.SQL("UNLISTEN {}").format(psycopg.sql.Identifier(probe)))
                if arrived:
                    self.mode = "events"
                else:
                    listen.close()
                    self._listen = None
        self._read_view(None)

    def _receive(self, timeout: float) -> List[Tuple[str, str, int]]:
        """Notifications that arrive on the listening connection within timeout."""
        listen = self._listen
        assert listen is not None
        out: List[Tuple[str, str, int]] = []
        pgconn = listen.pgconn
        n = pgconn.notifies()
        while n is not None:
            out.append((n.relname.decode(), n.extra.decode(), n.be_pid))
            n = pgconn.notifies()
        if out:
            return out
        r, _, _ = select.select([listen.fileno()], [], [], max(0.0, timeout))
        if r:
            pgconn.consume_input()
            if pgconn.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError("the listening connection was lost")
            n = pgconn.notifies()
            while n is not None:
                out.append((n.relname.decode(), n.extra.decode(), n.be_pid))
                n = pgconn.notifies()
        return out

    def _notifier_pid(self) -> Optional[int]:
        assert self._query_conn is not None
        row = self._query_conn.execute(_core.SQL_NOTIFIER).fetchone()
        return None if row is None else row[0]

    def _handle(self, n: Tuple[str, str, int]) -> None:
        """One notification, checked by the listener's rule."""
        channel, payload, pid = n
        if channel != "dlock":
            return
        if pid != self._notifier:  # the listener's rule
            self._notifier = self._notifier_pid()
            if pid != self._notifier:
                return
        action = _core.event_action(payload, self._e.name, self._last_token)
        if action is not None:
            forget, event_token = action
            if forget:
                self._notifier = None
            self._read_view(event_token)

    def _read_view(self, event_token: Optional[int]) -> None:
        assert self._query_conn is not None
        row = self._query_conn.execute(_core.SQL_LEASE_ROW, (self._e.name,)).fetchone()
        self._next_read = monotonic() + (self.safety_interval if self.mode == "events" else self.poll_interval)
        if row is None:
            return
        owner, token, live = row
        if token > self._last_token and (live or token == event_token):
            self._last_token = token
            self._pending.append(Leader(owner, token))

    def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next new leader, or None when none came within ``timeout``
        seconds (None: wait for ever)."""
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
                    self._connect()
                    continue
                wait = max(0.0, min(end, self._next_read) - now)
                if self.mode == "events":
                    for n in self._receive(wait):
                        self._handle(n)
                else:
                    time.sleep(wait)
                if monotonic() >= self._next_read:
                    self._read_view(None)
                backoff = 0.1
            except (psycopg.Error, OSError):
                self._drop()
                self.reconnections += 1
                time.sleep(min(backoff, max(0.0, end - monotonic())))
                backoff = min(1.0, backoff * 2)
        return None


# ---- module-level functions ---------------------------------------------------------

_shared_by_conninfo: Dict[str, Client] = {}
_shared_by_pool: "weakref.WeakKeyDictionary[Any, Client]" = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def _shared_client(pool: PoolLike) -> Client:
    """The client the module-level functions share for ``pool`` (one per pool
    object, or per conninfo string)."""
    table: Any = _shared_by_conninfo if isinstance(pool, str) else _shared_by_pool
    c: Optional[Client] = table.get(pool)  # the common case needs no lock
    if c is not None and not c._closed:
        return c
    with _shared_lock:
        c = table.get(pool)
        if c is None or c._closed:
            c = table[pool] = Client(pool)
        return c


def lease(pool: PoolLike, name: str, ttl: float, wait: float = 0, *, owner: Optional[str] = None,
          on_lost: Optional[OnLost] = None, progress_timeout: Optional[float] = None) -> Lease:
    """``with dlock.lease(pool, "report", ttl=30, wait=5) as lease:``: a lease
    scope on ``name`` through the shared client of ``pool`` (a
    ``psycopg_pool.ConnectionPool`` or a conninfo string).  See
    :meth:`Client.lease`."""
    return _shared_client(pool).lease(name, ttl, wait, owner=owner, on_lost=on_lost,
                                      progress_timeout=progress_timeout)


def lease_all(pool: PoolLike, names: Sequence[str], ttl: float, wait: float = 0, *,
              owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
              progress_timeout: Optional[float] = None) -> Lease:
    """A scope on a set of names, all or none.  See :meth:`Client.lease_all`."""
    return _shared_client(pool).lease_all(names, ttl, wait, owner=owner, on_lost=on_lost,
                                          progress_timeout=progress_timeout)


def permit(pool: PoolLike, base: str, permits: int, ttl: float, wait: float = 0, *,
           owner: Optional[str] = None, on_lost: Optional[OnLost] = None,
           progress_timeout: Optional[float] = None) -> Lease:
    """A scope on one of ``permits`` permits ``base:1`` ... ``base:N``.  See
    :meth:`Client.permit`."""
    return _shared_client(pool).permit(base, permits, ttl, wait, owner=owner, on_lost=on_lost,
                                       progress_timeout=progress_timeout)
