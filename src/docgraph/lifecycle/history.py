"""Build records in the catalog: each namespace build and the outcome of each of its phases
per source (``build_runs`` and ``build_phases``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from docgraph.store.sqlite import SQLiteCatalog

Outcome = Literal["ok", "partial", "error", "skipped"]
BuildOutcome = Literal["ok", "partial", "error"]

#: Phases of a build, in order. ``store`` is the transactional write of a document's chunks;
#: ``graph`` and ``communities`` run once per namespace (source ``*``).
PHASES = ("crawl", "extract", "chunk", "embed", "entities", "store", "graph", "communities")
NAMESPACE_WIDE = "*"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS build_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    outcome TEXT NOT NULL,
    documents_changed INTEGER NOT NULL DEFAULT 0,
    chunks_embedded INTEGER NOT NULL DEFAULT 0,
    bodies_read INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS build_runs_namespace ON build_runs(namespace, finished_at);
CREATE TABLE IF NOT EXISTS build_phases (
    build_id INTEGER NOT NULL REFERENCES build_runs(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    source TEXT NOT NULL,
    phase TEXT NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT NOT NULL,
    items INTEGER NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (build_id, ordinal)
);
"""


@dataclass(frozen=True, slots=True)
class PhaseOutcome:
    """How one phase went for one source (``*`` for namespace-wide phases).

    ``outcome``: ``ok``; ``partial`` (some documents failed, the rest went through);
    ``error`` (the phase failed for the source; ``message`` says why); ``skipped`` (not run
    because an earlier phase failed)."""

    source: str
    phase: str
    outcome: Outcome
    message: str = ""
    items: int = 0
    seconds: float = 0.0


@dataclass
class NamespaceBuild:
    """One build of one namespace: its phases per source and the overall outcome."""

    namespace: str
    started_at: float
    finished_at: float = 0.0
    phases: list[PhaseOutcome] = field(default_factory=list)
    documents_changed: int = 0
    chunks_embedded: int = 0
    bodies_read: int = 0
    id: int | None = None

    @property
    def outcome(self) -> BuildOutcome:
        """``error`` if any phase failed, ``partial`` if some documents failed, else ``ok``."""
        outcomes = {p.outcome for p in self.phases}
        if "error" in outcomes:
            return "error"
        return "partial" if "partial" in outcomes else "ok"

    @property
    def errors(self) -> list[PhaseOutcome]:
        """Phases that failed or partly failed."""
        return [p for p in self.phases if p.outcome in ("error", "partial")]


def _outcome(value: str) -> Outcome:
    if value in ("ok", "partial", "error", "skipped"):
        return value  # type: ignore[return-value]
    return "error"


class BuildHistory:
    """Reads and writes build records in the catalog file."""

    def __init__(self, catalog: SQLiteCatalog) -> None:
        self.catalog = catalog
        with catalog.transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)

    def record(self, build: NamespaceBuild, keep: int = 50) -> int:
        """Store a finished build (and drop all but the newest ``keep`` of its namespace)."""
        with self.catalog.transaction() as db:
            cursor = db.execute(
                "INSERT INTO build_runs(namespace, started_at, finished_at, outcome,"
                " documents_changed, chunks_embedded, bodies_read) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (build.namespace, build.started_at, build.finished_at, build.outcome,
                 build.documents_changed, build.chunks_embedded, build.bodies_read),
            )
            build_id = int(cursor.lastrowid or 0)
            db.executemany(
                "INSERT INTO build_phases VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(build_id, i, p.source, p.phase, p.outcome, p.message, p.items, p.seconds)
                 for i, p in enumerate(build.phases)],
            )
            db.execute(
                "DELETE FROM build_runs WHERE namespace = ? AND id NOT IN (SELECT id FROM"
                " build_runs WHERE namespace = ? ORDER BY id DESC LIMIT ?)",
                (build.namespace, build.namespace, keep),
            )
        build.id = build_id
        return build_id

    def _load(self, rows: Iterable[tuple[object, ...]]) -> list[NamespaceBuild]:
        builds: list[NamespaceBuild] = []
        db = self.catalog.connection()
        for r in rows:
            build = NamespaceBuild(str(r[1]), float(r[2]), float(r[3]),  # type: ignore[arg-type]
                                   documents_changed=int(r[5]), chunks_embedded=int(r[6]),  # type: ignore[call-overload]
                                   bodies_read=int(r[7]), id=int(r[0]))  # type: ignore[call-overload]
            build.phases = [
                PhaseOutcome(str(p[0]), str(p[1]), _outcome(str(p[2])), str(p[3]), int(p[4]),
                             float(p[5]))
                for p in db.execute(
                    "SELECT source, phase, outcome, message, items, seconds FROM build_phases"
                    " WHERE build_id = ? ORDER BY ordinal", (build.id,))
            ]
            builds.append(build)
        return builds

    _COLUMNS = ("id, namespace, started_at, finished_at, outcome, documents_changed,"
                " chunks_embedded, bodies_read")

    def latest(self, namespace: str) -> NamespaceBuild | None:
        """The newest build of ``namespace``."""
        rows = self.catalog.connection().execute(
            f"SELECT {self._COLUMNS} FROM build_runs WHERE namespace = ? ORDER BY id DESC"
            " LIMIT 1", (namespace,)).fetchall()
        found = self._load(rows)
        return found[0] if found else None

    def last_success_at(self, namespace: str) -> float | None:
        """When the newest build that did not fail (``ok`` or ``partial``) finished."""
        row = self.catalog.connection().execute(
            "SELECT max(finished_at) FROM build_runs WHERE namespace = ?"
            " AND outcome IN ('ok', 'partial')", (namespace,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def recent(self, namespace: str | None = None, limit: int = 20) -> list[NamespaceBuild]:
        """The newest builds (of one namespace, or of all), newest first."""
        if namespace is None:
            rows = self.catalog.connection().execute(
                f"SELECT {self._COLUMNS} FROM build_runs ORDER BY id DESC LIMIT ?",
                (limit,)).fetchall()
        else:
            rows = self.catalog.connection().execute(
                f"SELECT {self._COLUMNS} FROM build_runs WHERE namespace = ?"
                " ORDER BY id DESC LIMIT ?", (namespace, limit)).fetchall()
        return self._load(rows)

    def namespaces(self) -> list[str]:
        """Namespaces with at least one recorded build."""
        return [str(r[0]) for r in self.catalog.connection().execute(
            "SELECT DISTINCT namespace FROM build_runs ORDER BY namespace")]


def now() -> float:
    """Wall-clock time, in one place so tests can reason about it."""
    return time.time()
