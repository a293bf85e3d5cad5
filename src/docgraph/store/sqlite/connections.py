"""The embedded catalog's connections: one per thread, reused by the threads that come after.

A thread keeps its connection for as long as it lives, so no two threads ever use one
connection at once (each reads its own WAL snapshot, and ``BEGIN IMMEDIATE`` serializes the
writers). When the thread ends, its connection goes back to an idle list and the next thread
that asks takes it instead of opening a new one. Why: servers run each request in a worker
thread that ends after a few idle seconds (anyio), so a lookup after a pause opened a new
connection (five PRAGMAs) and the ended thread's connection stayed open until the catalog
closed, one more for every pause.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Callable


class _Lease:
    """One thread's hold on a connection; collected with the thread's local storage when the
    thread ends, which hands the connection back (:func:`_handed_back`)."""

    __slots__ = ("__weakref__", "db")

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db


class ConnectionPool:
    """Connections to one file, one per live thread, opened by ``connect`` when no ended
    thread left one idle."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._local = threading.local()
        self._open: list[sqlite3.Connection] = []  # every connection not closed yet
        self._idle: list[sqlite3.Connection] = []  # of ended threads, ready for new ones

    def get(self) -> sqlite3.Connection:
        """This thread's connection: the one it holds, else an idle one, else a new one."""
        lease: _Lease | None = getattr(self._local, "lease", None)
        if lease is not None:
            return lease.db
        with self._lock:
            db = self._idle.pop() if self._idle else None
        if db is None:
            db = self._connect()
            with self._lock:
                self._open.append(db)
        lease = _Lease(db)
        weakref.finalize(lease, _handed_back, weakref.ref(self), db).atexit = False
        self._local.lease = lease
        return db

    def _take_back(self, db: sqlite3.Connection) -> None:
        """A connection whose thread ended: idle again, unless the pool was closed since or
        the thread left a transaction open (then it is closed, never handed on)."""
        with self._lock:
            if not any(db is c for c in self._open):
                return
            if not db.in_transaction:
                self._idle.append(db)
                return
            self._open = [c for c in self._open if c is not db]
        db.close()

    def close(self) -> None:
        """Close every connection, held or idle; a later :meth:`get` opens new ones."""
        with self._lock:
            connections, self._open, self._idle = self._open, [], []
            held, self._local = self._local, threading.local()
        del held  # outside the lock: the leases' finalizers take it (and find nothing)
        for db in connections:
            db.close()


def _handed_back(pool: weakref.ref[ConnectionPool], db: sqlite3.Connection) -> None:
    """Finalizer of a lease (runs as its thread ends): the connection returns to its pool
    (a weak reference, so a pool no one uses any more is not kept alive by its leases)."""
    alive = pool()
    if alive is not None:
        alive._take_back(db)
