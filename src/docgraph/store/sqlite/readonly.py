"""What a read-only embedded index stands in for the writes it cannot make.

Tables a port creates on first use (traces, audit, tokens, sessions, ...) may be missing
from a file that was never served before it was copied or mounted read-only. Reading them
must not fail, so each connection gets an empty ``TEMP`` table of the same layout instead
(:class:`TempTables`): SQLite resolves an unqualified name to ``temp`` first, and a
``TEMP`` table lives in the connection's memory, never in the index file.

Columns a newer docgraph added to a table without a version step (``schema.ADDED_COLUMNS``)
cannot be added to a read-only file either: each connection reads such a table through a
``TEMP`` view of the same name that gives a missing column the value the upgrade gives the
rows written before (:func:`stand_in_columns`).

Traces and audit records are not recorded on a read-only index (:class:`UnrecordedTraces`,
:class:`UnrecordedAudit`: the records already in the file stay readable); the catalog says
so once when it opens, and ``store.require_audit`` refuses governed reads instead.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from docgraph.errors import ReadOnlyIndex
from docgraph.store.base import TraceEntry
from docgraph.store.sql.logs import SqlAuditStore, SqlTraceLog

_CREATE_TABLE = re.compile(r"^\s*CREATE TABLE IF NOT EXISTS (\w+)", re.IGNORECASE)
_ON_TABLE = re.compile(r"^\s*(?:CREATE INDEX IF NOT EXISTS \w+ ON|INSERT INTO) (\w+)",
                       re.IGNORECASE)


class TempTables:
    """The table scripts registered on a read-only catalog, applied to each connection
    before its first use: every ``CREATE TABLE IF NOT EXISTS`` whose table the file lacks
    becomes a ``TEMP`` table (with its indexes and seed rows); the rest is left alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: list[str] = []
        # id(connection) -> (that connection, scripts applied to it); holding the connection
        # keeps its id from being reused by a new one before forget()
        self._applied: dict[int, tuple[sqlite3.Connection, int]] = {}

    def register(self, script: str) -> None:
        """Add a table script (the same text a writable catalog runs)."""
        with self._lock:
            if script not in self._scripts:
                self._scripts.append(script)

    def apply(self, db: sqlite3.Connection) -> None:
        """Apply the scripts ``db`` has not had yet (one dict look-up when none is new)."""
        with self._lock:
            held = self._applied.get(id(db))
            done = held[1] if held is not None and held[0] is db else 0
            if done == len(self._scripts):
                return
            scripts = list(self._scripts)
            self._applied[id(db)] = (db, len(scripts))
        for script in scripts[done:]:
            _apply_script(db, script)

    def forget(self) -> None:
        """The catalog's connections were closed: new ones start from none applied."""
        with self._lock:
            self._applied.clear()


def stand_in_columns(db: sqlite3.Connection,
                     missing: Sequence[tuple[str, str, str, str]]) -> None:
    """Give ``db`` a ``TEMP`` view over each table of ``missing`` (``(table, column,
    declaration, value before)``, the columns the file lacks: ``schema.missing_columns``):
    the table's own columns, then each missing one as its value before. An unqualified name
    resolves to ``temp`` first, so every query reads the view; a simple view is flattened
    by SQLite, so the table's indexes still serve."""
    if not missing:
        return
    by_table: dict[str, list[str]] = {}
    for table, column, _, before in missing:
        by_table.setdefault(table, []).append(f"{before} AS {column}")
    db.execute("PRAGMA query_only=OFF")  # temp only: the connection is mode=ro
    try:
        for table, columns in by_table.items():
            db.execute(f"CREATE TEMP VIEW IF NOT EXISTS {table} AS"
                       f" SELECT *, {', '.join(columns)} FROM main.{table}")
    finally:
        db.execute("PRAGMA query_only=ON")


def _apply_script(db: sqlite3.Connection, script: str) -> None:
    """Make ``script``'s missing tables in ``temp`` (``query_only`` is lifted for that:
    the connection is ``mode=ro``, so the file stays out of reach all the same)."""
    existing = {str(r[0]) for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    made: set[str] = set()
    db.execute("PRAGMA query_only=OFF")
    try:
        for statement in (s.strip() for s in script.split(";")):
            create = _CREATE_TABLE.match(statement)
            if create and create.group(1) not in existing:
                db.execute(_CREATE_TABLE.sub(r"CREATE TEMP TABLE IF NOT EXISTS \1",
                                             statement, count=1))
                made.add(create.group(1))
                continue
            on_table = _ON_TABLE.match(statement)
            if on_table and on_table.group(1) in made:
                db.execute(statement)
    finally:
        db.execute("PRAGMA query_only=ON")


class UnrecordedTraces(SqlTraceLog):
    """Traces of a read-only index: those in the file stay readable, new ones are not
    recorded (the catalog said so when it opened)."""

    def save(self, trace_id: str, created_at: float, payload: Mapping[str, Any]) -> None:
        """Not recorded: the index is read-only."""


class UnrecordedAudit(SqlAuditStore):
    """The audit log of a read-only index: records in the file stay readable, new ones are
    not recorded (the catalog said so when it opened; ``store.require_audit`` refuses
    governed reads instead)."""

    def append(self, at: float, user_id: str, operation: str, outcome: str,
               payload: Mapping[str, Any], traces: Sequence[TraceEntry] = ()) -> None:
        """Not recorded: the index is read-only."""


class ReadOnlyLeaderLock:
    """The refresh leadership of a read-only index: no process here may build it, so
    taking the lead refuses (naming the index and why), and no one is said to lead."""

    identity = ""

    def __init__(self, refusal: str) -> None:
        self.refusal = refusal

    def try_acquire(self) -> bool:
        """Refused: builds and refreshes need a writable index."""
        raise ReadOnlyIndex(self.refusal)

    @property
    def held(self) -> bool:
        """Never held."""
        return False

    def holder(self) -> str | None:
        """No leader this process can see (the index is not built here)."""
        return None

    def release(self) -> None:
        """Nothing held."""

    def close(self) -> None:
        """Nothing held."""
