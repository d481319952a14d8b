"""Throwaway PostgreSQL clusters (and a PgBouncer) for the suite.

Every binary comes from DLOCK_PG_BINDIR; every cluster lives under
DLOCK_CLIENT_WORKDIR, listens on 127.0.0.1 and a free port, and has dlock
preloaded.  Logs end in .log (test/run-tests searches them for crashes).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import Any, List, Optional, Sequence

import psycopg

BINDIR = os.environ.get("DLOCK_PG_BINDIR") or os.path.dirname(shutil.which("pg_ctl") or "/usr/lib/postgresql/15/bin/pg_ctl")
WORKDIR = os.environ.get("DLOCK_CLIENT_WORKDIR") or "/tmp/dlock-client-python"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

_used_ports: set = set()
_template_lock = threading.Lock()


def _template() -> str:
    """The data directory that initdb made for this run (copied by every
    cluster: one initdb instead of one per cluster)."""
    path = os.path.join(WORKDIR, "template")
    with _template_lock:
        if not os.path.exists(os.path.join(path, "PG_VERSION")):
            shutil.rmtree(path, ignore_errors=True)
            subprocess.run([bin("initdb"), "-A", "trust", "-U", "postgres", "-N", "-D", path],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return path


def _port_band() -> range:
    """The ports this suite's servers take: below the kernel's ephemeral
    range, where an outgoing connection's local end never lands (a port
    that was free when picked could otherwise be taken by a client before
    the server binds it), and apart from the bands of the shell tests
    (10000-17999) and the Node suite (25000 up), so that suites of several
    servers running side by side do not pick each other's ports."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return range(18000, min(25000, max(lo, 19000)))


def free_port() -> int:
    band = _port_band()
    for _ in range(200):
        port = random.choice(band)
        if port in _used_ports or port == 5432:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _used_ports.add(port)
        return port
    raise RuntimeError("no free port")


def bin(name: str) -> str:
    return os.path.join(BINDIR, name)


def wait_for(cond, timeout: float, what: str, interval: float = 0.02) -> Any:
    """Polls cond() until it returns a true value; fails after timeout."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Cluster:
    def __init__(self, name: str, conf: str = "", port: Optional[int] = None):
        self.name = name
        self.base = os.path.join(WORKDIR, name)
        self.data = os.path.join(self.base, "data")
        self.log = os.path.join(self.base, "server.log")
        self.port = port or free_port()
        self.conf = conf
        self.started = False

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def init(self) -> "Cluster":
        """A new cluster: a copy of one initdb's output (made once per run)."""
        shutil.rmtree(self.base, ignore_errors=True)
        os.makedirs(self.base)
        shutil.copytree(_template(), self.data, symlinks=True)
        self.write_conf()
        return self

    def write_conf(self) -> None:
        with open(os.path.join(self.data, "postgresql.auto.conf"), "a") as f:
            f.write(f"""
port = {self.port}
listen_addresses = '127.0.0.1'
unix_socket_directories = '{WORKDIR}'
shared_preload_libraries = 'dlock'
fsync = off
max_connections = 60
max_wal_senders = 5
dlock.notify = on
dlock.notifier_idle_timeout = '60s'
track_functions = all
log_min_messages = warning
{self.conf}
""")

    def start(self) -> "Cluster":
        """Starts the server. On its first start, a port that another
        process bound since free_port() picked it is replaced by a new one
        (up to 5 times); a restart keeps its port, which clients know."""
        for attempt in range(6):
            mark = os.path.getsize(self.log) if os.path.exists(self.log) else 0
            r = subprocess.run([bin("pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "60", "start"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode == 0:
                self.started = True
                return self
            try:
                with open(self.log, errors="replace") as f:
                    f.seek(mark)
                    tail = f.read()
            except OSError:
                tail = ""
            if not self.started and attempt < 5 and "could not bind" in tail:
                self.port = free_port()
                with open(os.path.join(self.data, "postgresql.auto.conf"), "a") as f:
                    f.write(f"\nport = {self.port}\n")
                continue
            raise RuntimeError(f"pg_ctl start of {self.data} failed ({r.returncode}): {r.stderr.strip()}\n"
                               f"server log since this start:\n{tail[-4000:]}")
        raise AssertionError("unreachable")

    def create_extension(self) -> "Cluster":
        self.sql("CREATE EXTENSION IF NOT EXISTS dlock")
        return self

    def stop(self, mode: str = "fast") -> None:
        subprocess.run([bin("pg_ctl"), "-D", self.data, "-m", mode, "-w", "-t", "60", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def restart(self) -> None:
        subprocess.run([bin("pg_ctl"), "-D", self.data, "-l", self.log, "-m", "fast", "-w", "-t", "60",
                        "restart"], check=True, stdout=subprocess.DEVNULL)

    def promote(self) -> None:
        subprocess.run([bin("pg_ctl"), "-D", self.data, "-w", "-t", "60", "promote"], check=True,
                       stdout=subprocess.DEVNULL)

    def running(self) -> bool:
        return os.path.exists(os.path.join(self.data, "postmaster.pid"))

    def kill(self) -> None:
        """Stops the server however it can (teardown)."""
        if not os.path.exists(os.path.join(self.data, "postmaster.pid")):
            return
        self.stop("immediate")
        pidfile = os.path.join(self.data, "postmaster.pid")
        if os.path.exists(pidfile):
            try:
                with open(pidfile) as f:
                    os.kill(int(f.readline()), signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def connect(self, **kw: Any) -> "psycopg.Connection[Any]":
        return psycopg.connect(self.conninfo, autocommit=True, **kw)

    def sql(self, query: str, params: Sequence[Any] = ()) -> List[Any]:
        with self.connect() as c:
            cur = c.execute(query, params)
            return cur.fetchall() if cur.description else []

    def one(self, query: str, params: Sequence[Any] = ()) -> Any:
        rows = self.sql(query, params)
        return rows[0][0] if rows else None

    def standby_of(self, primary: "Cluster") -> "Cluster":
        shutil.rmtree(self.base, ignore_errors=True)
        os.makedirs(self.base)
        subprocess.run([bin("pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                        "-D", self.data, "-R", "-X", "fetch", "-c", "fast", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(os.path.join(self.data, "postgresql.auto.conf"), "a") as f:
            # A promote waits out the retry interval of a lost walreceiver (5 s by default).
            f.write(f"\nport = {self.port}\nwal_retrieve_retry_interval = '100ms'\n")
        return self


class Bouncer:
    """PgBouncer in transaction mode in front of a cluster."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.base = os.path.join(WORKDIR, "pgbouncer")
        self.port = free_port()
        self.proc: Optional[subprocess.Popen] = None

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def start(self) -> "Bouncer":
        shutil.rmtree(self.base, ignore_errors=True)
        os.makedirs(self.base)
        with open(os.path.join(self.base, "userlist.txt"), "w") as f:
            f.write('"postgres" ""\n')
        ini = os.path.join(self.base, "pgbouncer.ini")
        with open(ini, "w") as f:
            f.write(f"""[databases]
postgres = host=127.0.0.1 port={self.cluster.port} dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.base}/userlist.txt
pool_mode = transaction
default_pool_size = 4
reserve_pool_size = 0
max_client_conn = 100
logfile = {self.base}/pgbouncer.log
pidfile = {self.base}/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
""")
        self.proc = subprocess.Popen([PGBOUNCER, ini], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up() -> bool:
            try:
                with psycopg.connect(self.conninfo, autocommit=True, prepare_threshold=None,
                                     connect_timeout=2) as c:
                    c.execute("SELECT 1")
                return True
            except psycopg.Error:
                return False

        wait_for(up, 20, "pgbouncer to accept connections", 0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
