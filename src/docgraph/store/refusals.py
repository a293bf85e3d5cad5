"""Which write errors are one document's fault, and which are the store's.

A build writes documents in batches. When a write fails, the build must know whether the
store refused *this document's values* (then that file is reported failed and the build goes
on) or cannot write at all (then the build stops, as it always did, keeping what it
committed). :func:`refused_write` says which, by a list of what is known to be a value's
fault; anything not on it ends the build, so an unknown failure is never hidden as a file
failure repeated for every file.

One document's fault:

* :class:`~docgraph.errors.StoreError` raised by docgraph's own checks of a write (vectors
  that do not line up, an attachment that would replace another document), but none of
  its subclasses that describe the store: :class:`~docgraph.errors.StoreUnavailable`,
  :class:`~docgraph.errors.StoreFull`, :class:`~docgraph.errors.ReadOnlyIndex`.
* :class:`UnicodeError`: a value the driver cannot encode.
* SQLite: :class:`sqlite3.IntegrityError` (a constraint, or a trigger's ``RAISE(ABORT)``)
  and :class:`sqlite3.DataError` (a value over SQLite's length limit).
* PostgreSQL (psycopg): a SQLSTATE of class 22 (data exception: an untranslatable
  character, a value out of range; psycopg's own ``DataError`` for a NUL has none), 23
  (integrity constraint), 54 (program limit exceeded: a key over the btree's 2704 bytes, as
  a path of some 2.7 KB gives) or P0001 (an exception a trigger raises).

The store's (ends the build): everything else, notably a full disk, a lost or refused
connection (:func:`docgraph.store.outages.store_unavailable`), a read-only index or a hot
standby (SQLSTATE 25006), a locked or corrupt SQLite file, a statement timeout, a
deadlock, a programming error, and :class:`KeyboardInterrupt` (not an :class:`Exception`).
"""

from __future__ import annotations

import sqlite3
import sys

from docgraph.errors import ReadOnlyIndex, StoreError, StoreFull, StoreUnavailable
from docgraph.store.outages import store_unavailable

#: SQLSTATE classes (and single states) of a value PostgreSQL refuses.
_REFUSED_CLASSES = ("22", "23", "54")
_REFUSED_STATES = frozenset({"P0001"})


def refused_write(exc: BaseException) -> bool:
    """Whether ``exc``, raised by writing one document, is that document's fault (see the
    module): True only for the errors known to be about a value, never for the store's
    own failures."""
    if not isinstance(exc, Exception):
        return False
    if isinstance(exc, StoreUnavailable | StoreFull | ReadOnlyIndex):
        return False
    if store_unavailable(exc) is not None:
        return False
    if isinstance(exc, StoreError | UnicodeError):
        return True
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError):
        return True
    return _psycopg_refused(exc)


def _psycopg_refused(exc: Exception) -> bool:
    """A psycopg error about a value (looked up only when psycopg is loaded already)."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return False
    state = getattr(exc, "sqlstate", None)
    if state is None:  # raised by the client before the server saw it
        return isinstance(exc, psycopg.DataError)
    return state.startswith(_REFUSED_CLASSES) or state in _REFUSED_STATES


def refusal_reason(exc: BaseException) -> str:
    """The store's word for a refused write, on one line: the error's type and the first
    line of its message."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
