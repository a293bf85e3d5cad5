"""The chunk rows the embedded index reads from the SQLite catalog: one batch of rows as
arrays (vectors decoded, and quantized unless the index is exact), and the stored vectors of
given rows for exact re-scoring."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from docgraph.model import CHUNK_KINDS, Vector
from docgraph.store.quantized import int8_codes, sign_words
from docgraph.store.sqlite.vectors import decode_vectors


@dataclass
class RowBatch:
    """One batch of chunk rows read while following the catalog."""

    has_vector: npt.NDArray[np.bool_]  # False: a pending chunk (posting lists only)
    rowids: npt.NDArray[np.int64]
    namespaces: npt.NDArray[np.int32]
    kinds: npt.NDArray[np.int8]
    terms: list[bytes]
    term_counts: npt.NDArray[np.float32]
    vectors: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    words: npt.NDArray[np.uint64] = field(default_factory=lambda: np.zeros((0, 0), np.uint64))
    codes: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros((0, 0), np.int8))
    scales: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))


def read_row_batch(rows: list[tuple[int, int, bytes, str, bytes, float]], dimension: int,
                   path: Path, exact: bool) -> RowBatch:
    """Arrays of one batch of ``(id, namespace, vector, kind, terms, term_count)`` rows;
    vectors (of the rows that have one: a pending chunk's blob is empty) quantized at once
    unless ``exact``. ``path`` names the catalog in a decoding error."""
    has = np.fromiter((len(r[2]) > 0 for r in rows), dtype=bool, count=len(rows))
    matrix = decode_vectors([r[2] for r in rows if r[2]], dimension, path)
    batch = RowBatch(
        has_vector=has,
        rowids=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
        namespaces=np.fromiter((r[1] for r in rows), dtype=np.int32, count=len(rows)),
        kinds=np.fromiter((CHUNK_KINDS.index(r[3]) for r in rows), dtype=np.int8,
                          count=len(rows)),
        terms=[r[4] for r in rows],
        term_counts=np.fromiter((r[5] for r in rows), dtype=np.float32, count=len(rows)),
    )
    if exact:
        batch.vectors = matrix
    else:
        batch.words = sign_words(matrix)
        batch.codes, batch.scales = int8_codes(matrix)
    return batch


def stored_vectors(db: sqlite3.Connection, rowids: npt.NDArray[np.int64], dimension: int,
                   path: Path) -> tuple[npt.NDArray[np.int64], Vector]:
    """The catalog's vectors (as float32) of the given chunks: deleted and pending ones
    (no vector yet) absent, so the returned ids say which were found."""
    ids = [int(r) for r in rowids]
    found: list[int] = []
    blobs: list[bytes] = []
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        for rowid, blob in db.execute(
            f"SELECT id, vector FROM chunks WHERE id IN ({','.join('?' * len(part))})"
            " AND vector != x''", part  # a pending chunk has none yet
        ):
            found.append(int(rowid))
            blobs.append(blob)
    return np.array(found, dtype=np.int64), decode_vectors(blobs, dimension, path)
