"""The embedded catalog's change feed, for a chunk index outside the catalog file (Milvus).

It follows the SQLite catalog the way the in-memory dense matrix does: chunk row ids only
grow (SQLite has one writer, so they are assigned in commit order), and every deleted chunk
is logged in ``chunk_tombstones``. The external index's cursor is stored in ``meta``.

Every batch is read and its cursor advanced inside one ``BEGIN IMMEDIATE`` transaction, and
the caller applies the batch to the external index while that transaction is open. Two
processes following the same catalog into the same collection are therefore serialized by
SQLite's write lock: a batch can never be applied after a later batch that deletes its rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from docgraph.errors import StoreError
from docgraph.model import CHUNK_KINDS, Vector
from docgraph.store.feed import Cursor, FeedBatch, FeedRow
from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.vectors import STORED, decode_vector


class SQLiteChangeFeed:
    """The embedded catalog's chunk changes for one named external index: chunk row ids
    above the cursor, then tombstones above its sequence number."""

    def __init__(self, catalog: SQLiteCatalog, name: str, dimension: int) -> None:
        self.catalog = catalog
        self.display_name = str(catalog.path)
        self.key = f"index_cursor:{name}"
        self.dimension = dimension

    def marks(self) -> tuple[int, int]:
        """(highest chunk row id ever assigned, highest tombstone sequence number): changes
        whenever a chunk is added or deleted. One tiny query."""
        return self._marks(self.catalog.connection())

    def cursor(self) -> Cursor | None:
        """The stored cursor, or None if this index has never followed the catalog."""
        row = self.catalog.connection().execute(
            "SELECT value FROM meta WHERE key = ?", (self.key,)
        ).fetchone()
        if row is None:
            return None
        data = json.loads(row[0])
        return Cursor(str(data["generation"]), int(data["rowid"]), int(data["tombstone_seq"]))

    def reset(self, generation: str) -> None:
        """Start following from the beginning into a new (empty) external collection."""
        with self.catalog.transaction() as db:
            self._store(db, Cursor(generation))

    def live_chunks(self) -> int:
        """Chunks in the catalog now (all namespaces and kinds)."""
        return int(self.catalog.connection().execute("SELECT count(*) FROM chunks").fetchone()[0])

    def apply_next(self, limit: int, apply: Callable[[FeedBatch], None]) -> bool:
        """Read the next batch (at most ``limit`` added chunks, every pending tombstone), call
        ``apply`` with it while holding the catalog's write lock, then advance the cursor.

        Returns whether anything was applied. If ``apply`` raises, the cursor stays put."""
        with self.catalog.transaction() as db:
            cursor = self._load(db)
            last_rowid, last_seq = self._marks(db)
            rows = db.execute(
                "SELECT id, namespace_id, kind, breadcrumb, text, vector FROM chunks"
                " WHERE id > ? ORDER BY id LIMIT ?",
                (cursor.rowid, limit),
            ).fetchall()
            dead = db.execute(
                "SELECT seq, chunk_id FROM chunk_tombstones WHERE seq > ? ORDER BY seq",
                (cursor.tombstone_seq,),
            ).fetchall()
            if not rows and not dead:
                if (last_rowid, last_seq) != (cursor.rowid, cursor.tombstone_seq):
                    self._store(db, Cursor(cursor.generation, last_rowid, last_seq))
                return False
            apply(FeedBatch([self._row(r) for r in rows], [int(d[1]) for d in dead]))
            # A short batch read everything up to the sequence: jump the cursor there, so
            # row ids of chunks deleted before they were ever read are not re-scanned.
            rowid = int(rows[-1][0]) if len(rows) == limit else last_rowid
            seq = int(dead[-1][0]) if dead else cursor.tombstone_seq
            self._store(db, Cursor(cursor.generation, rowid, seq))
            return True

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Stored unit vectors of the given chunks (absent: deleted)."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        out: dict[int, Vector] = {}
        db = self.catalog.connection()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for rowid, blob in db.execute(
                f"SELECT id, vector FROM chunks WHERE id IN ({','.join('?' * len(part))})", part
            ):
                out[int(rowid)] = decode_vector(blob)
        return out

    def _row(self, row: Any) -> FeedRow:
        blob = row[5]
        if not isinstance(blob, bytes) or len(blob) != STORED.itemsize * self.dimension:
            raise StoreError(
                f"{self.catalog.path}: stored vector of chunk {row[0]} does not have "
                f"dimension {self.dimension}"
            )
        breadcrumb, text = str(row[3]), str(row[4])
        return FeedRow(
            rowid=int(row[0]),
            namespace_id=int(row[1]),
            kind=CHUNK_KINDS.index(row[2]),
            text=f"{breadcrumb}\n{text}" if breadcrumb else text,
            vector=decode_vector(blob),
        )

    @staticmethod
    def _marks(db: sqlite3.Connection) -> tuple[int, int]:
        rows = dict(db.execute(
            "SELECT name, seq FROM sqlite_sequence WHERE name IN ('chunks', 'chunk_tombstones')"
        ).fetchall())
        return int(rows.get("chunks", 0)), int(rows.get("chunk_tombstones", 0))

    def _load(self, db: sqlite3.Connection) -> Cursor:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (self.key,)).fetchone()
        if row is None:
            raise StoreError(f"{self.catalog.path}: no cursor for {self.key}; reset it first")
        data = json.loads(row[0])
        return Cursor(str(data["generation"]), int(data["rowid"]), int(data["tombstone_seq"]))

    def _store(self, db: sqlite3.Connection, cursor: Cursor) -> None:
        value = json.dumps({"generation": cursor.generation, "rowid": cursor.rowid,
                            "tombstone_seq": cursor.tombstone_seq})
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (self.key, value))
