"""How the embedded catalog stores a chunk's vector: little-endian float16 (schema 6; float32
before). Half the bytes of float32, and what takes a million-chunk file under 2 GB (see
``docs/ARCHITECTURE.md``, "Storage"); a unit vector's cosines change by ~1e-4 at most, well
below the gaps between neighbours' scores that ranking depends on. Every read returns
float32, so nothing past the catalog sees the stored type."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from docgraph.errors import StoreError
from docgraph.model import Vector

STORED = np.dtype("<f2")


def encode_vector(vector: Vector) -> bytes:
    """The stored bytes of one vector."""
    return np.asarray(vector, dtype=np.float32).astype(STORED).tobytes()


def decode_vector(blob: bytes) -> Vector:
    """One stored vector as float32."""
    return np.frombuffer(blob, dtype=STORED).astype(np.float32)


def decode_vectors(blobs: Sequence[bytes], dimension: int, where: object = "") -> Vector:
    """Stored vectors as one float32 matrix of ``len(blobs)`` rows; raises
    :class:`StoreError` when their size is not ``dimension`` values each."""
    joined = b"".join(blobs)
    if len(joined) != len(blobs) * dimension * STORED.itemsize:  # also a torn or odd blob
        raise StoreError(f"{where}: stored vectors do not have dimension {dimension}")
    return np.frombuffer(joined, dtype=STORED).astype(np.float32).reshape(len(blobs), dimension)


def float32_to_stored(blob: bytes) -> bytes:
    """A float32 blob (schema 5 and before) in the stored form (the schema-6 upgrade)."""
    return np.frombuffer(blob, dtype="<f4").astype(STORED).tobytes()
