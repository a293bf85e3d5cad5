"""The build history, written once for every relational backend.

Tables (SQLite: :func:`docgraph.store.sqlite.lifecycle.create_build_tables`; PostgreSQL:
migration `_LIFECYCLE`): ``build_runs(id, namespace, started_at, finished_at, outcome,
documents_changed, chunks_embedded, bodies_read)`` and ``build_phases(build_id, ordinal,
source, phase, outcome, message, items, seconds)``, deleted with their run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from docgraph.store.lifecycle import StoredBuild, StoredPhase
from docgraph.store.sql.dialect import SqlDatabase, marks, run

_COLUMNS = ("id, namespace, started_at, finished_at, outcome, documents_changed,"
            " chunks_embedded, bodies_read")


class SqlBuildHistoryStore:
    """The :class:`~docgraph.store.lifecycle.BuildHistoryStore` port on a relational
    catalog."""

    def __init__(self, database: SqlDatabase) -> None:
        self.database = database

    def record(self, build: StoredBuild, keep: int) -> int:
        """Store a build with its phases and drop all but the newest ``keep`` of its
        namespace (one transaction); returns its id."""
        dialect = self.database.dialect
        with self.database.transaction() as db:
            row = db.execute(dialect.sql(
                "INSERT INTO build_runs(namespace, started_at, finished_at, outcome,"
                " documents_changed, chunks_embedded, bodies_read)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id"),
                (build.namespace, build.started_at, build.finished_at, build.outcome,
                 build.documents_changed, build.chunks_embedded, build.bodies_read),
            ).fetchone()
            build_id = int(row[0])
            dialect.executemany(
                db, "INSERT INTO build_phases(build_id, ordinal, source, phase, outcome,"
                " message, items, seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(build_id, i, p.source, p.phase, p.outcome, p.message, p.items, p.seconds)
                 for i, p in enumerate(build.phases)])
            self._keep_newest(db, build.namespace, keep)
        return build_id

    def _keep_newest(self, db: Any, namespace: str, keep: int) -> None:
        db.execute(self.database.dialect.sql(
            "DELETE FROM build_runs WHERE namespace = ? AND id NOT IN (SELECT id FROM"
            " (SELECT id FROM build_runs WHERE namespace = ? ORDER BY id DESC LIMIT ?)"
            " newest)"), (namespace, namespace, keep))

    def update(self, build: StoredBuild, keep: int | None = None) -> None:
        """Rewrite the stored build ``build.id`` (row and phases) in one transaction; with
        ``keep``, then drop all but the newest ``keep`` of its namespace."""
        assert build.id is not None, "only a stored build can be updated"
        dialect = self.database.dialect
        with self.database.transaction() as db:
            db.execute(dialect.sql(
                "UPDATE build_runs SET started_at = ?, finished_at = ?, outcome = ?,"
                " documents_changed = ?, chunks_embedded = ?, bodies_read = ? WHERE id = ?"),
                (build.started_at, build.finished_at, build.outcome, build.documents_changed,
                 build.chunks_embedded, build.bodies_read, build.id))
            db.execute(dialect.sql("DELETE FROM build_phases WHERE build_id = ?"), (build.id,))
            dialect.executemany(
                db, "INSERT INTO build_phases(build_id, ordinal, source, phase, outcome,"
                " message, items, seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(build.id, i, p.source, p.phase, p.outcome, p.message, p.items, p.seconds)
                 for i, p in enumerate(build.phases)])
            if keep is not None:
                self._keep_newest(db, build.namespace, keep)

    def recent(self, namespace: str | None = None, limit: int = 20) -> list[StoredBuild]:
        """The newest builds (of one namespace, or of all), newest first."""
        if namespace is None:
            rows = run(self.database, f"SELECT {_COLUMNS} FROM build_runs ORDER BY id DESC"
                       " LIMIT ?", (limit,)).fetchall()
        else:
            rows = run(self.database, f"SELECT {_COLUMNS} FROM build_runs WHERE namespace = ?"
                       " ORDER BY id DESC LIMIT ?", (namespace, limit)).fetchall()
        return self._with_phases(rows)

    def _with_phases(self, rows: Sequence[Sequence[object]]) -> list[StoredBuild]:
        ids = [int(r[0]) for r in rows]  # type: ignore[call-overload]
        phases: dict[int, list[StoredPhase]] = {i: [] for i in ids}
        if ids:
            found = run(self.database,
                        "SELECT build_id, source, phase, outcome, message, items, seconds"
                        f" FROM build_phases WHERE build_id IN ({marks(len(ids))})"
                        " ORDER BY build_id, ordinal", ids).fetchall()
            for p in found:
                phases[int(p[0])].append(StoredPhase(str(p[1]), str(p[2]), str(p[3]),
                                                     str(p[4]), int(p[5]), float(p[6])))
        return [StoredBuild(str(r[1]), float(r[2]), float(r[3]),  # type: ignore[arg-type]
                            str(r[4]), int(r[5]), int(r[6]), int(r[7]),  # type: ignore[call-overload]
                            tuple(phases[i]), i)
                for r, i in zip(rows, ids, strict=True)]

    def last_success_at(self, namespace: str) -> float | None:
        """When the newest build that did not fail (``ok`` or ``partial``) finished."""
        row = run(self.database, "SELECT max(finished_at) FROM build_runs WHERE namespace = ?"
                  " AND outcome IN ('ok', 'partial')", (namespace,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def namespaces(self) -> list[str]:
        """Namespaces with at least one recorded build, by name."""
        rows = run(self.database, "SELECT DISTINCT namespace FROM build_runs").fetchall()
        return sorted(str(r[0]) for r in rows)
