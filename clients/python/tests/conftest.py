"""Fixtures: the clusters the scenarios share, and per-test clean-up of
child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, Iterator, List

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

import pgcluster  # noqa: E402


@pytest.fixture(scope="session")
def cluster() -> Iterator[pgcluster.Cluster]:
    """One cluster shared by the scenarios that neither stop nor restart it."""
    c = pgcluster.Cluster("shared")
    try:
        c.init().start().create_extension()
        yield c
    finally:
        c.kill()


class Children:
    """Child processes of a test (small scripts in tests/ printing JSON
    lines), killed with SIGKILL at teardown."""

    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []

    def spawn(self, script: str, *args: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + HERE, PYTHONDONTWRITEBYTECODE="1",
                   PYTHONUNBUFFERED="1")
        p = subprocess.Popen([sys.executable, os.path.join(HERE, script), *args], env=env,
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
