"""PostgreSQL migration 22 (:mod:`docgraph.store.postgres.schema` applies it after
:mod:`~docgraph.store.postgres.migrations_21`): chunks stored before their vectors."""

from __future__ import annotations

from typing import Final

# Chunks stored before their vectors (docgraph.store.pending): a NULL
# embedding is a chunk BM25 finds and the dense search skips until the build fills it in;
# the partial index holds only those, so counting them costs one probe when there are none.
# Chunks stay immutable but for that one change: a pending chunk's vector set (the lexical
# statistics never move, since no text does).
_PENDING_VECTORS: Final = (
    "ALTER TABLE chunks ALTER COLUMN embedding DROP NOT NULL",
    "CREATE INDEX chunks_pending ON chunks (namespace_id) WHERE embedding IS NULL",
    """CREATE OR REPLACE FUNCTION docgraph_chunks_immutable() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.embedding IS NULL AND NEW.embedding IS NOT NULL
           AND to_jsonb(NEW) - 'embedding' - 'lexemes'
               = to_jsonb(OLD) - 'embedding' - 'lexemes' THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'chunks are immutable: delete and insert instead (only a pending '
                        'chunk''s vector may be set)';
    END $$""",
)

#: Migration 22.
MIGRATIONS_22: Final[tuple[tuple[str, ...], ...]] = (_PENDING_VECTORS,)
