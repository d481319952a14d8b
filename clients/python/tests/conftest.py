"""Fixtures: the clusters the scenarios share, and per-test clean-up of
child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any, Iterator, List

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

import pgcluster  # noqa: E402


class Background:
    """Clusters made in background threads while the first scenarios run
    (their setup is mostly waiting for servers), for the scenarios that stop
    or restart a server of their own."""

    def __init__(self) -> None:
        self.results: dict = {}
        self.threads: dict = {}
        self.made: List[pgcluster.Cluster] = []

    def start(self, key: str, fn: Any) -> None:
        def run() -> None:
            try:
                self.results[key] = (True, fn(self))
            except BaseException as e:  # reported by get()
                self.results[key] = (False, e)

        t = threading.Thread(target=run, name=f"make {key}", daemon=True)
        self.threads[key] = t
        t.start()

    def get(self, key: str, timeout: float = 120) -> Any:
        self.threads[key].join(timeout)
        ok, value = self.results.get(key, (False, AssertionError(f"{key} not ready in {timeout} s")))
        if not ok:
            raise value
        return value

    def cluster(self, name: str) -> pgcluster.Cluster:
        c = pgcluster.Cluster(name)
        self.made.append(c)
        return c


def _make_restart(bg: Background) -> pgcluster.Cluster:
    return bg.cluster("restart").init().start().create_extension()


def _make_switchover(bg: Background) -> Any:
    primary = bg.cluster("primary").init().start().create_extension()
    standby = bg.cluster("standby").standby_of(primary).start()
    return primary, standby


def _pip_install(bg: Background) -> Any:
    from test_z_install import pip_install

    return pip_install()


@pytest.fixture(scope="session", autouse=True)
def background() -> Iterator[Background]:
    bg = Background()
    bg.start("restart", _make_restart)
    bg.start("switchover", _make_switchover)
    bg.start("install", _pip_install)
    from test_z_typing import have_mypy, run_mypy

    if have_mypy():
        bg.start("mypy", lambda bg: run_mypy())
    try:
        yield bg
    finally:
        for t in bg.threads.values():
            t.join(120)
        for c in bg.made:
            c.kill()


@pytest.fixture(scope="session")
def cluster() -> Iterator[pgcluster.Cluster]:
    """One cluster shared by the scenarios that neither stop nor restart it."""
    c = pgcluster.Cluster("shared")
    try:
        c.init().start().create_extension()
        yield c
    finally:
        c.kill()


_LAUNCH = ("import faulthandler, runpy, signal, sys; "
           "faulthandler.register(signal.SIGUSR1, all_threads=True); "
           "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


class Children:
    """Child processes of a test (small scripts in tests/ printing JSON
    lines), killed with SIGKILL at teardown."""

    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []

    def spawn(self, script: str, *args: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + HERE, PYTHONDONTWRITEBYTECODE="1",
                   PYTHONUNBUFFERED="1")
        # Each child dumps its threads' stacks to its stderr on SIGUSR1
        # (read_event does that when a child printed nothing in time).
        p = subprocess.Popen([sys.executable, "-c", _LAUNCH, os.path.join(HERE, script), *args], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()


@pytest.fixture
def children() -> Iterator[Children]:
    ch = Children()
    try:
        yield ch
    finally:
        ch.kill_all()


def pytest_configure(config: Any) -> None:
    os.makedirs(pgcluster.WORKDIR, exist_ok=True)
