"""PostgreSQL migrations 18 to 21 (:mod:`docgraph.store.postgres.schema` applies them after
:mod:`~docgraph.store.postgres.migrations_8_17`): the console's sign-in buckets (18),
per-document permissions (19), the index of restricted documents (20) and chunks stored
before their vectors (21)."""

from __future__ import annotations

from typing import Final

# Sign-in buckets (migration 18): one row per client address (and the console's shared
# bucket of failing addresses), refilled and taken by one upsert per sign-in attempt
# (docgraph.store.sql.signin), shared by every server of this database so a limit per
# address holds across the fleet; idle full rows are pruned by the limiter.
_SIGNIN_BUCKETS: Final = (
    """CREATE TABLE signin_buckets (
        key text PRIMARY KEY,
        burst double precision NOT NULL,
        per_second double precision NOT NULL,
        tokens double precision NOT NULL,
        attempted_at double precision NOT NULL,
        previous_at double precision,
        wait_s double precision NOT NULL,
        previous_wait_s double precision NOT NULL,
        succeeded_at double precision
    )""",
    "CREATE INDEX signin_buckets_attempted ON signin_buckets (attempted_at)",
)

# Per-document permissions (migration 19): who may read each document besides its
# namespace's grantees (NULL: everyone the namespace is granted to; else a JSON array of
# principals, user:<id> and group:<name>), and, per community, every document with a
# permission set whose chunks link a member (its set as last written: a report drawing on a
# document the caller may not read is re-assembled from what the caller may read).
_DOCUMENT_ACCESS: Final = (
    "ALTER TABLE documents ADD COLUMN access jsonb",
    """CREATE TABLE community_access_sources (
        community_id integer NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
        doc_id text NOT NULL,
        access jsonb NOT NULL,
        PRIMARY KEY (community_id, doc_id)
    )""",
    "CREATE INDEX community_access_sources_doc ON community_access_sources (doc_id)",
)

# The documents with a permission set, by namespace (migration 20): a search of namespaces
# without one answers "no restricted document here" from this (small) index once per query
# and skips the per-chunk permission check (docgraph.store.postgres.index).
_RESTRICTED_DOCUMENTS: Final = (
    "CREATE INDEX documents_restricted ON documents (namespace_id) WHERE access IS NOT NULL",
)

# Chunks stored before their vectors (migration 21, docgraph.store.pending): a NULL
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

#: Migrations 18 to 21.
MIGRATIONS_18_20: Final[tuple[tuple[str, ...], ...]] = (_SIGNIN_BUCKETS, _DOCUMENT_ACCESS,
                                                        _RESTRICTED_DOCUMENTS, _PENDING_VECTORS)
