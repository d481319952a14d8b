"""The mutations of scenario 9: bugs the suite must see.

``apply(name)`` patches the library in this process:

- ``no-renewal``: the renewer never renews (each attempt is skipped);
- ``no-signal``: a lost lease is never signalled (no event, no callback, no
  cancellation, check() passes).
"""

from __future__ import annotations

from typing import Any, List, Tuple

from dlock import _core

_saved: List[Tuple[Any, str, Any]] = []


def _patch(obj: Any, attr: str, value: Any) -> None:
    _saved.append((obj, attr, getattr(obj, attr)))
    setattr(obj, attr, value)


def apply(name: str) -> None:
    if name == "no-renewal":
        async def skip(self: Any, state: Any) -> None:
            state.next_attempt = _core.monotonic() + state.ttl / 3.0

        _patch(_core.Renewer, "_attempt", skip)
    elif name == "no-signal":
        def never(self: Any, reason: str) -> bool:
            return False

        _patch(_core.LeaseState, "lose", never)
    elif name != "none":
        raise ValueError(name)


def undo() -> None:
    while _saved:
        obj, attr, value = _saved.pop()
        setattr(obj, attr, value)
