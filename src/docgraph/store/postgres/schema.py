"""Versioned schema migrations of the PostgreSQL store: their order, the version, the lock keys
and the HNSW index statements (the migrations' statements are in ``migrations_1_7``,
``migrations_8_17`` and ``migrations_18_20``).

Each migration is a list of statements applied in one transaction, in order, and recorded in
``schema_migrations``; a database at a newer version than this code knows is refused.
Concurrent openers serialize on a transaction-level advisory lock, so two processes opening
a fresh database cannot both apply migration 1.

Lexical statistics (for BM25, see :mod:`docgraph.store.postgres`) are kept by statement-level
triggers with transition tables, in the same transaction as the chunk write:

* ``postings(term, namespace_id, kind, chunk_id, tf, doc_len)``: one row per distinct lexeme
  of a chunk; ``tf`` counts its occurrences in breadcrumb and text alike (as the embedded
  BM25 does), ``doc_len`` is the chunk's token count.
* ``terms(term, df, kind)``: how many chunks of each kind contain each lexeme (per kind since
  migration 17).
* ``corpus_kind_stats(kind, n, total_len)``: number of chunks of each kind and their summed
  length (migration 17). BM25 scores a search of one kind (text chunks, or community reports)
  with that kind's ``df``, ``n`` and average length only, so writing reports never moves a
  text chunk's score.
* ``corpus_stats(n, total_len)``: the same over every kind (``len()`` of the index), and the
  row every chunk writer locks.
* ``chunk_counts(namespace_id, kind, n)``: chunks per namespace and kind (migration 3), so a
  dense search can tell a selective namespace filter from a broad one with one tiny lookup.

Both triggers first lock the single ``corpus_stats`` row, so concurrent chunk writers queue
there instead of deadlocking on ``terms`` rows locked in different orders.
"""

from __future__ import annotations

from typing import Final

from docgraph.store.postgres.migrations_1_7 import MIGRATIONS_1_7, TS_CONFIG
from docgraph.store.postgres.migrations_8_17 import MIGRATIONS_8_17
from docgraph.store.postgres.migrations_18_20 import MIGRATIONS_18_20
from docgraph.store.postgres.migrations_21 import MIGRATIONS_21
from docgraph.store.postgres.migrations_22 import MIGRATIONS_22
from docgraph.store.postgres.migrations_23 import MIGRATIONS_23

__all__ = ["LEADER_LOCK_KEYS", "MIGRATIONS", "MIGRATION_LOCK_KEY", "SCHEMA_VERSION", "TS_CONFIG",
           "drop_hnsw_index_statements", "hnsw_index_statements"]

#: Every migration, in order: migration ``n`` is ``MIGRATIONS[n - 1]`` (the statements live in
#: :mod:`~docgraph.store.postgres.migrations_1_7`,
#: :mod:`~docgraph.store.postgres.migrations_8_17`,
#: :mod:`~docgraph.store.postgres.migrations_18_20`,
#: :mod:`~docgraph.store.postgres.migrations_21`,
#: :mod:`~docgraph.store.postgres.migrations_22` and
#: :mod:`~docgraph.store.postgres.migrations_23`).
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (*MIGRATIONS_1_7, *MIGRATIONS_8_17,
                                                  *MIGRATIONS_18_20, *MIGRATIONS_21,
                                                  *MIGRATIONS_22, *MIGRATIONS_23)
SCHEMA_VERSION: Final = len(MIGRATIONS)

# Any fixed 64-bit key: serializes migrations between processes.
MIGRATION_LOCK_KEY: Final = 0x646F6367726170
# The (int4, int4) key of the session-level advisory lock held by the refresh leader
# ("docg", "rfsh"); the two-key form keeps it apart from every one-key lock.
LEADER_LOCK_KEYS: Final = (0x646F6367, 0x72667368)


def hnsw_index_statements(dimension: int) -> tuple[str, ...]:
    """The HNSW (cosine) index for ``dimension``-d vectors: an expression index on the
    dimension-less ``embedding`` column (pgvector needs a fixed dimension to index), in half
    precision (see migration 5)."""
    return (
        f"CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw_half_{dimension} ON chunks "
        f"USING hnsw ((embedding::halfvec({dimension})) halfvec_cosine_ops)",
    )


def drop_hnsw_index_statements(dimension: int) -> tuple[str, ...]:
    """Drop the HNSW index of ``dimension``-d vectors (before vectors of another model), and
    the full-precision one of schemas before migration 5."""
    return (f"DROP INDEX IF EXISTS chunks_embedding_hnsw_half_{dimension}",
            f"DROP INDEX IF EXISTS chunks_embedding_hnsw_{dimension}")
