"""The errors of the dlock client (docs/clients.md, "Errors").

Other database errors pass through as psycopg's own errors (``psycopg.Error``
and its subclasses), with their SQLSTATE in ``.sqlstate``.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["DlockError", "LeaseLost", "StaleToken", "NotAcquired", "STALE_SQLSTATE", "is_stale"]

#: The SQLSTATE with which dlock's fence rejects a token (``dlock_check``
#: or the ``dlock_fence`` trigger).
STALE_SQLSTATE = "55T01"


class DlockError(Exception):
    """Base class of the errors this library raises itself."""


class LeaseLost(DlockError):
    """The lease was lost: work done under it must not count as done.

    ``reason`` is one of

    - ``"renewed-false"``: a renew returned false (the lease was broken, or it
      expired and another holder took it over);
    - ``"deadline"``: the local deadline (the moment the last successful
      acquire or renew was sent, plus the ttl) passed without a successful
      renew;
    - ``"no-progress"``: the body did not call ``lease.progress()`` within
      ``progress_timeout``;
    - ``"released-false"``: the final release returned false (the lease had
      been lost meanwhile).
    """

    def __init__(self, name: str, token: Optional[int], reason: str, message: Optional[str] = None):
        self.name = name
        self.token = token
        self.reason = reason
        super().__init__(message or _lost_message(name, token, reason))


def _lost_message(name: str, token: Optional[int], reason: str) -> str:
    why = {
        "renewed-false": "a renew returned false (the lease was broken, or it expired and was taken over)",
        "deadline": "its deadline passed without a successful renew",
        "no-progress": "the body did not report progress within progress_timeout",
        "released-false": "the release returned false (the lease had been lost)",
    }.get(reason, reason)
    return f'lease "{name}" (token {token}) was lost: {why}; work done under it must not count as done'


class StaleToken(DlockError):
    """A fenced write or ``dlock_check`` was rejected (SQLSTATE 55T01).

    Do not retry the same write: it can never succeed.  Acquire the lease
    again, re-read the data, and redo the work.  The psycopg error is kept as
    ``__cause__`` and in ``.error``; ``.sqlstate`` is ``"55T01"``.
    """

    sqlstate = STALE_SQLSTATE

    def __init__(self, message: str, error: Optional[BaseException] = None):
        self.error = error
        super().__init__(message)

    @classmethod
    def from_error(cls, error: BaseException) -> "StaleToken":
        detail = ""
        diag = getattr(error, "diag", None)
        if diag is not None:
            primary = getattr(diag, "message_primary", None) or str(error).strip()
            det = getattr(diag, "message_detail", None)
            detail = primary + (f" ({det})" if det else "")
        else:
            detail = str(error).strip()
        return cls(
            f"{detail}: the token is stale; do not retry the same write: "
            "acquire the lease again, re-read, and redo the work",
            error,
        )


class NotAcquired(DlockError):
    """The scope's acquire got no lease within ``wait``."""

    def __init__(self, names: object, wait: float, message: Optional[str] = None):
        self.names = names
        self.wait = wait
        super().__init__(message or f"{names!r} not acquired within {wait:g} s: held by another holder")


def is_stale(error: BaseException) -> bool:
    """True when ``error`` is a database error with SQLSTATE 55T01."""
    return getattr(error, "sqlstate", None) == STALE_SQLSTATE
