"""Pending chunks on SQLite (see :mod:`docgraph.store.pending`): a chunk stored before its
vector has an empty ``vector`` blob, found through the partial index ``chunks_pending``.

Filling a vector writes the chunk row again under a new row id (same contents, the vector
set, its entity links moved) and deletes the pending row, in one transaction: row ids only
grow and a deleted row is logged in ``chunk_tombstones``, so the in-memory chunk index and
its sidecar (which follow the catalog by row id and tombstone) take the filled chunk into
the dense lane exactly as they take any new chunk, with no update in place to track."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from docgraph.model import Vector
from docgraph.store.pending import PendingChunk, pending_counts_sql
from docgraph.store.sqlite.vectors import encode_vector

#: The stored form of "no vector yet".
PENDING_BLOB = b""

# Every column of a chunk row but its id and vector, copied when its vector is filled.
_COPIED = ("document_id, namespace_id, chunk_index, kind, text, breadcrumb, section_path,"
           " token_count, prev_index, next_index, parent_index, embed_hash, terms, term_count,"
           " page_first, page_last, ocr")


class _Database(Protocol):
    """What the mixin uses of :class:`~docgraph.store.sqlite.SQLiteCatalog`."""

    def connection(self) -> sqlite3.Connection: ...

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...


class SQLitePendingVectors:
    """:class:`~docgraph.store.pending.PendingVectors` for the SQLite catalog (a mixin)."""

    def pending_chunks(self: _Database, source_id: int | None, limit: int
                       ) -> list[PendingChunk]:
        """Up to ``limit`` pending text chunks of the source (every source's when None),
        oldest first."""
        source = "" if source_id is None else " AND d.source_id = ?"
        # Driven by the partial index (the pending rows only): joined the other way round,
        # SQLite would read every chunk of the source's documents for each batch.
        rows = self.connection().execute(
            "SELECT c.id, c.breadcrumb, c.text, c.embed_hash FROM chunks c"
            " INDEXED BY chunks_pending CROSS JOIN documents d ON d.id = c.document_id"
            f" WHERE c.vector = x'' AND c.kind = 'text'{source} ORDER BY c.id LIMIT ?",
            (() if source_id is None else (source_id,)) + (limit,)).fetchall()
        return [PendingChunk(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def fill_vectors(self: _Database, fills: Sequence[tuple[int, Vector]]) -> int:
        """Write each pending chunk again with its vector under a new row id (see the
        module docstring); chunks deleted or filled meanwhile are skipped."""
        if not fills:
            return 0
        filled = 0
        columns = _COPIED.count(",") + 1
        marks = ", ".join("?" * (columns + 1))
        with self.transaction() as db:
            for rowid, vector in fills:
                row = db.execute(f"SELECT {_COPIED} FROM chunks WHERE id = ? AND vector = x''",
                                 (rowid,)).fetchone()
                if row is None:  # deleted (a newer version of its document) or filled
                    continue
                links = db.execute("SELECT entity_id, frequency, first_position, score"
                                   " FROM chunk_entities WHERE chunk_id = ?", (rowid,)).fetchall()
                db.execute("DELETE FROM chunks WHERE id = ?", (rowid,))  # its links go too
                new_id = db.execute(f"INSERT INTO chunks({_COPIED}, vector) VALUES ({marks})",
                                    (*row, encode_vector(vector))).lastrowid
                db.executemany("INSERT INTO chunk_entities(chunk_id, entity_id, frequency,"
                               " first_position, score) VALUES (?, ?, ?, ?, ?)",
                               [(new_id, *link) for link in links])
                filled += 1
        return filled

    def pending_counts(self: _Database, namespaces: Iterable[str] | None = None, *,
                       open_only: bool = False) -> dict[str, int]:
        """Pending chunks per namespace (through the partial index: no pending chunk, one
        empty index probe). ``open_only``: only those of documents every reader of the
        namespace may see (no permission set, not a table row, not a report), the count an
        agent may be told."""
        rows = self.connection().execute(
            pending_counts_sql("c.vector = x''", open_only)).fetchall()
        wanted = None if namespaces is None else set(namespaces)
        return {str(name): int(count) for name, count in rows
                if wanted is None or name in wanted}


def pending_flags(missing: Sequence[bool] | None, count: int) -> Iterator[bool]:
    """Whether each of ``count`` chunks of a write is stored pending."""
    return iter(missing) if missing is not None else iter([False] * count)
