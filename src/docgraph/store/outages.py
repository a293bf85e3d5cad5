"""Which store errors mean "the store is unreachable right now" (not "the request is wrong").

A stopped, restarting or overloaded PostgreSQL shows up in many places at once (the token
check of every request, the catalog, the leader lock) and as several driver errors: a
refused connection, an administrator's shutdown of the session (``57P01``), a connection
lost mid-query. :func:`store_unavailable` turns every one of them, however deep in an
exception's causes, into one :class:`~docgraph.errors.StoreUnavailable`, so the server
answers them alike (503 with ``Retry-After``) and logs one line per outage rather than a
traceback per request. Errors a retry would not cure (a syntax error, a constraint, a
statement timeout) stay what they were.
"""

from __future__ import annotations

import sys

from docgraph.errors import StoreUnavailable

#: SQLSTATEs of a server that is going away or not accepting sessions yet: admin_shutdown,
#: crash_shutdown, cannot_connect_now (starting up or shutting down), too_many_connections.
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})
#: SQLSTATE class 08: connection exceptions.
_CONNECTION_CLASS = "08"
#: How deep a chain of causes is searched (a cycle or a freak chain ends the walk).
_MAX_CHAIN = 16


def _psycopg_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg's word for a connection that failed or went away.

    psycopg raises :class:`psycopg.OperationalError` without a SQLSTATE when the client
    side fails (refused, lost, closed connection) and with one of the states above when
    the server ends the session; other operational errors (a cancelled statement, a lock
    timeout) carry other states. Looked up only when psycopg is loaded already: an
    embedded index never imports it."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, psycopg.OperationalError):
        return False
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith(_CONNECTION_CLASS) or state in _UNAVAILABLE_STATES


def store_unavailable(exc: BaseException) -> StoreUnavailable | None:
    """The outage ``exc`` stands for, or None when it is another kind of failure.

    Looks at ``exc``, its causes and contexts, and the members of an exception group: a
    :class:`StoreUnavailable` is returned as it is; a driver's connection failure becomes
    a :class:`StoreUnavailable` whose message names the driver's error (and whose cause is
    it), so callers handle one exception type."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending and len(seen) < _MAX_CHAIN:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, StoreUnavailable):
            return current
        if _psycopg_unavailable(current):
            message = str(current).strip().splitlines()[0] if str(current).strip() else ""
            outage = StoreUnavailable(f"PostgreSQL unavailable: {type(current).__name__}"
                                      + (f": {message}" if message else ""))
            outage.__cause__ = current
            return outage
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
    return None
