"""Small helpers of the suite."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Dict, Optional

# How long a test waits for a child to get somewhere before it gives up: a
# bound for a broken run, never a claim about timing (PostgreSQL's TAP tests
# use the same variable and default).  A loaded machine can stall a child or
# its server's WAL flush for seconds; a test that asserts a time says so
# with its own figures.
WAIT = float(os.environ.get("PG_TEST_TIMEOUT_DEFAULT", "180"))


def read_event(proc: subprocess.Popen, timeout: float, want: Optional[str] = None) -> Dict[str, Any]:
    """The next JSON line of a child (the next with event ``want``), within timeout."""
    import select

    end = time.monotonic() + timeout
    assert proc.stdout is not None
    skipped = []  # the other lines it printed meanwhile, for the message
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"child {proc.args} printed no {want or 'line'} within {timeout} s"
                                 f" (printed meanwhile: {skipped}); its stacks: {stacks(proc)}")
        r, _, _ = select.select([proc.stdout], [], [], left)
        if not r:
            continue
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"child {proc.args} ended without {want or 'a line'}"
                                 f" (printed meanwhile: {skipped}): {err}")
        ev = json.loads(line)
        if want is None or ev.get("event") == want:
            return ev
        skipped.append(ev)


def stacks(proc: subprocess.Popen) -> str:
    """What a child that still runs is doing: its threads' stacks, which it
    dumps to its stderr on SIGUSR1 (conftest's launcher), read for up to 5 s."""
    import select

    if proc.poll() is not None or proc.stderr is None:
        return "(ended)"
    try:
        os.kill(proc.pid, 10)  # SIGUSR1
    except OSError as e:
        return f"(not signalled: {e})"
    out = []
    end = time.monotonic() + 5
    fd = proc.stderr.fileno()
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 0.5)
        if not r:
            if out:
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out.append(chunk.decode(errors="replace"))
    return "".join(out)[-6000:] or "(nothing on stderr)"


def lease_row(cluster: Any, name: str) -> Optional[tuple]:
    rows = cluster.sql("SELECT token, live, released, owner FROM dlock_leases WHERE lock_name = %s", (name,))
    return rows[0] if rows else None
