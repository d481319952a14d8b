"""dlock: fenced leases in PostgreSQL, for Python (psycopg 3).

Synchronous API here; the asyncio API is :mod:`dlock.aio`.  See
docs/clients.md for the rules both client libraries follow.

>>> import dlock
>>> with dlock.lease(pool, "report", ttl=30, wait=5) as lease:
...     with lease.fenced(conn) as tx:
...         tx.execute("INSERT INTO reports ...")
"""

from ._sync import (Client, Election, Leader, Lease, Observer, fence_errors, lease, lease_all,
                    permit)
from .errors import DlockError, LeaseLost, NotAcquired, StaleToken

__version__ = "1.2.0"

__all__ = [
    "Client", "Lease", "Election", "Observer", "Leader", "lease", "lease_all", "permit",
    "fence_errors", "DlockError", "LeaseLost", "StaleToken", "NotAcquired", "__version__",
]

from . import aio  # noqa: E402,F401  (dlock.aio, the asyncio API)
