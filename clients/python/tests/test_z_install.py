"""(Named to run last: its pip run starts in the background at the session's
start.)  The package installs offline with pip (its own PEP 517 backend, no
setuptools to download): ``pip install --no-index --target DIR`` of a copy of
clients/python, then imported from DIR in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pgcluster

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


def pip_install() -> tuple:
    """Copies clients/python and installs it with pip into a target
    directory (started in the background at the session's start: pip takes
    seconds, mostly of its own start-up)."""
    work = os.path.join(pgcluster.WORKDIR, "install")
    shutil.rmtree(work, ignore_errors=True)
    src = os.path.join(work, "src")
    target = os.path.join(work, "target")
    shutil.copytree(TOP, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.pyc"))
    env = dict(os.environ, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1", TMPDIR=work,
               HOME=work, PYTHONDONTWRITEBYTECODE="1")
    # --no-deps: psycopg and psycopg_pool are Debian's, which --target does not see.
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                        "--target", target, src], env=env, capture_output=True, text=True)
    return work, src, target, env, r


def test_pip_install_offline(background):
    work, src, target, env, r = background.get("install")
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.path.exists(os.path.join(target, "dlock", "py.typed"))
    probe = ("import json, sys, dlock, dlock.aio, dlock.errors; "
             "print(json.dumps([dlock.__version__, dlock.__file__, dlock.errors.LeaseLost is dlock.LeaseLost]))")
    r = subprocess.run([sys.executable, "-c", probe], env=dict(env, PYTHONPATH=target), cwd=work,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    version, path, same = json.loads(r.stdout)
    assert version == "1.2.0" and path.startswith(target) and same
    with open(os.path.join(target, "dlock-1.2.0.dist-info", "METADATA")) as f:
        meta = f.read()
    assert "Name: dlock\n" in meta and "Requires-Dist: psycopg>=3.1" in meta

    # The sdist and the wheel from the backend itself.
    out = os.path.join(work, "dist")
    code = ("import sys; sys.path.insert(0, 'build_backend'); import dlock_build as b; "
            f"print(b.build_sdist({out!r})); print(b.build_wheel({out!r}))")
    r = subprocess.run([sys.executable, "-c", code], cwd=src, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sdist, wheel = r.stdout.split()
    assert (sdist, wheel) == ("dlock-1.2.0.tar.gz", "dlock-1.2.0-py3-none-any.whl")
    with tarfile.open(os.path.join(out, sdist)) as tf:
        names = tf.getnames()
    assert {"dlock-1.2.0/PKG-INFO", "dlock-1.2.0/pyproject.toml", "dlock-1.2.0/src/dlock/__init__.py",
            "dlock-1.2.0/build_backend/dlock_build.py"} <= set(names)
    with zipfile.ZipFile(os.path.join(out, wheel)) as zf:
        record = zf.read("dlock-1.2.0.dist-info/RECORD").decode()
        assert "dlock/_core.py,sha256=" in record and "dlock/py.typed," in record
        assert zf.testzip() is None
