"""The PostgreSQL catalog's change feed, for a chunk index outside the database (Milvus).

Chunk row ids come from a sequence, which concurrent writers draw from out of commit order,
so "every row id above the cursor" could skip a chunk committed late. The feed is therefore
two phases:

* **scan**: right after :meth:`PostgresChangeFeed.reset`, the chunks that existed then (ids up
  to ``scan_until``, the highest id visible to the reset) are read by id, ``limit`` at a time;
* **log**: every chunk insert and delete committed after the reset is in ``chunk_feed``
  (migration "feed"), numbered while the writer holds the ``corpus_stats`` lock that every
  chunk writer takes, so numbers follow commit order. The reset takes the same lock: a
  writer either committed before it (its chunks are scanned) or logs after it.

A chunk may reach the external index twice (scanned, and logged if written right then); the
writes are upserts, so that is harmless. Followers of one cursor serialize on its ``meta``
row (``SELECT ... FOR UPDATE``), held while the batch is applied. Log entries every cursor
has passed are deleted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from docgraph.errors import StoreError
from docgraph.model import CHUNK_KINDS, Vector
from docgraph.store.feed import Cursor, FeedBatch, FeedRow
from docgraph.store.postgres.catalog import PostgresCatalog, _array

_CHUNK_COLUMNS = "id, namespace_id, kind, breadcrumb, text, embedding"


class PostgresChangeFeed:
    """The database's chunk changes for one named external index."""

    def __init__(self, catalog: PostgresCatalog, name: str, dimension: int) -> None:
        self.catalog = catalog
        self.display_name = catalog.display_url
        self.key = f"index_cursor:{name}"
        self.dimension = dimension

    def marks(self) -> tuple[int, int]:
        """(newest log entry, chunks): changes with every committed chunk write once a
        cursor exists. Two index lookups."""
        row = self.catalog.connection().execute(
            "SELECT (SELECT coalesce(max(seq), 0) FROM chunk_feed),"
            " (SELECT coalesce(sum(n), 0) FROM chunk_counts)").fetchone()
        return int(row[0]), int(row[1])

    def cursor(self) -> Cursor | None:
        """The stored cursor (``rowid``: scan position; ``tombstone_seq``: log position)."""
        data = self._read(self.catalog.connection(), lock=False)
        if data is None:
            return None
        return Cursor(str(data["generation"]), int(data["rowid"]), int(data["seq"]))

    def reset(self, generation: str) -> None:
        """Follow from the beginning into a new collection: scan what exists, log the rest."""
        with self.catalog.transaction() as db:
            db.execute("SELECT 1 FROM corpus_stats WHERE id = 1 FOR UPDATE")  # no writer mid-way
            until = int(db.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0])
            seq = int(db.execute("SELECT coalesce(max(seq), 0) FROM chunk_feed")
                      .fetchone()[0])
            self._store(db, {"generation": generation, "rowid": 0, "scan_until": until,
                             "seq": seq})

    def live_chunks(self) -> int:
        """Chunks in the database now (all namespaces and kinds)."""
        row = self.catalog.connection().execute(
            "SELECT coalesce(sum(n), 0) FROM chunk_counts").fetchone()
        return int(row[0])

    def apply_next(self, limit: int, apply: Callable[[FeedBatch], None]) -> bool:
        """The next scan batch, or else the next log batch, applied while this cursor's row
        is locked; then the cursor advances. Returns whether anything was applied."""
        with self.catalog.transaction() as db:
            data = self._read(db, lock=True)
            if data is None:
                raise StoreError(f"{self.display_name}: no cursor for {self.key}; reset it first")
            if int(data["rowid"]) < int(data["scan_until"]):
                rows = db.execute(
                    f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE id > %s AND id <= %s"
                    " ORDER BY id LIMIT %s",
                    (int(data["rowid"]), int(data["scan_until"]), limit)).fetchall()
                done = len(rows) < limit
                if rows:
                    apply(FeedBatch([self._row(r) for r in rows], []))
                data["rowid"] = int(data["scan_until"]) if done else int(rows[-1][0])
                self._store(db, data)
                return bool(rows) or not done
            log = db.execute(
                "SELECT seq, chunk_id, added FROM chunk_feed WHERE seq > %s ORDER BY seq"
                " LIMIT %s", (int(data["seq"]), limit)).fetchall()
            if not log:
                return False
            added = list(dict.fromkeys(int(r[1]) for r in log if r[2]))
            rows = db.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE id = ANY(%s) ORDER BY id",
                (added,)).fetchall() if added else []
            # A chunk added and deleted within the batch is not read (it no longer exists)
            # and its delete is applied: the outcome is the same as replaying both.
            apply(FeedBatch([self._row(r) for r in rows],
                            [int(r[1]) for r in log if not r[2]]))
            data["seq"] = int(log[-1][0])
            self._store(db, data)
            self._prune(db)
            return True

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Stored unit vectors of the given chunks (absent: deleted)."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        if not ids:
            return {}
        rows = self.catalog.connection().execute(
            "SELECT id, embedding FROM chunks WHERE id = ANY(%s) AND embedding IS NOT NULL",
            (ids,)).fetchall()
        return {int(i): _array(v) for i, v in rows}

    # -- helpers --------------------------------------------------------------

    def _row(self, row: Any) -> FeedRow:
        vector = _array(row[5])
        if vector.shape != (self.dimension,):
            raise StoreError(f"{self.display_name}: stored vector of chunk {row[0]} does not "
                             f"have dimension {self.dimension}")
        breadcrumb, text = str(row[3]), str(row[4])
        return FeedRow(int(row[0]), int(row[1]), CHUNK_KINDS.index(row[2]),
                       f"{breadcrumb}\n{text}" if breadcrumb else text, vector)

    def _read(self, db: Any, *, lock: bool) -> dict[str, Any] | None:
        row = db.execute("SELECT value FROM meta WHERE key = %s" + (" FOR UPDATE" if lock
                                                                  else ""),
                         (self.key,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def _store(self, db: Any, data: dict[str, Any]) -> None:
        db.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE"
                   " SET value = excluded.value", (self.key, json.dumps(data)))

    @staticmethod
    def _prune(db: Any) -> None:
        """Delete log entries every follower has applied."""
        positions = [int(json.loads(v)["seq"]) for (v,) in db.execute(
            "SELECT value FROM meta WHERE key LIKE 'index_cursor:%%'")]
        if positions:
            db.execute("DELETE FROM chunk_feed WHERE seq <= %s", (min(positions),))
