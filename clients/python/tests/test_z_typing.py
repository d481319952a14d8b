"""The package passes ``mypy --strict`` (when Debian's mypy is installed;
skipped otherwise).  The run starts in the background at the session's
start (see conftest.py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

import pgcluster

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


def have_mypy() -> bool:
    return importlib.util.find_spec("mypy") is not None


def run_mypy() -> "subprocess.CompletedProcess[str]":
    work = os.path.join(pgcluster.WORKDIR, "mypy")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(SRC, os.path.join(work, "src"), ignore=shutil.ignore_patterns("__pycache__"))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", os.path.join(work, "cache"),
                           "-p", "dlock"], cwd=os.path.join(work, "src"), capture_output=True, text=True,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))


@pytest.mark.skipif(not have_mypy(), reason="mypy is not installed (Debian's package: mypy)")
def test_mypy_strict(background):
    r = background.get("mypy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout
