"""Versioned schema migrations of the PostgreSQL store.

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

# The text search configuration: English Snowball stemming, like FTS5's porter tokenizer;
# ``unaccent`` folds diacritics when the server ships it (migration 2).
TS_CONFIG: Final = "docgraph_text"

_V1: Final[tuple[str, ...]] = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    f"""DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = '{TS_CONFIG}') THEN
            CREATE TEXT SEARCH CONFIGURATION {TS_CONFIG} (COPY = pg_catalog.english);
        END IF;
    END $$""",
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE namespaces (
        id serial PRIMARY KEY,
        name text NOT NULL UNIQUE,
        graph_dirty boolean NOT NULL DEFAULT false
    )""",
    """CREATE TABLE sources (
        id bigserial PRIMARY KEY,
        urn text NOT NULL,
        namespace_id integer NOT NULL REFERENCES namespaces(id),
        scheme text NOT NULL,
        created_at double precision NOT NULL,
        last_indexed_at double precision,
        UNIQUE (urn, namespace_id)
    )""",
    """CREATE TABLE documents (
        id bigserial PRIMARY KEY,
        source_id bigint REFERENCES sources(id) ON DELETE CASCADE,
        kind text NOT NULL DEFAULT 'document',
        namespace_id integer NOT NULL REFERENCES namespaces(id),
        doc_id text NOT NULL,
        path text NOT NULL,
        title text NOT NULL,
        content_hash text NOT NULL,
        change_token text NOT NULL,
        media_type text NOT NULL,
        chunk_count integer NOT NULL,
        updated_at double precision NOT NULL,
        origin_source text,
        origin_schema text,
        origin_table text,
        origin_pk_column text,
        origin_pk_value text,
        UNIQUE (namespace_id, doc_id),
        UNIQUE (source_id, path)
    )""",
    f"""CREATE TABLE chunks (
        id bigserial PRIMARY KEY,
        document_id bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        namespace_id integer NOT NULL,
        chunk_index integer NOT NULL,
        kind text NOT NULL DEFAULT 'text',
        text text NOT NULL,
        breadcrumb text NOT NULL,
        section_path jsonb NOT NULL,
        token_count integer NOT NULL,
        prev_index integer,
        next_index integer,
        parent_index integer,
        embed_hash text NOT NULL,
        embedding vector NOT NULL,
        lexemes tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('{TS_CONFIG}'::regconfig, breadcrumb), 'A')
            || to_tsvector('{TS_CONFIG}'::regconfig, text)
        ) STORED,
        UNIQUE (document_id, chunk_index)
    )""",
    "CREATE INDEX chunks_namespace_kind ON chunks (namespace_id, kind)",
    """CREATE TABLE postings (
        term text NOT NULL,
        namespace_id integer NOT NULL,
        kind text NOT NULL,
        chunk_id bigint NOT NULL,
        tf real NOT NULL,
        doc_len integer NOT NULL,
        PRIMARY KEY (term, namespace_id, kind, chunk_id)
    )""",
    "CREATE TABLE terms (term text PRIMARY KEY, df bigint NOT NULL)",
    """CREATE TABLE corpus_stats (
        id integer PRIMARY KEY CHECK (id = 1),
        n bigint NOT NULL,
        total_len bigint NOT NULL
    )""",
    "INSERT INTO corpus_stats VALUES (1, 0, 0)",
    """CREATE TABLE failures (
        source_id bigint NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        path text NOT NULL,
        reason text NOT NULL,
        at double precision NOT NULL,
        PRIMARY KEY (source_id, path)
    )""",
    # One statement: the lexemes of the new chunks are unnested once (tf = positions), then
    # postings, document frequencies and totals.
    """CREATE FUNCTION docgraph_chunks_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM new_chunks) THEN
            RETURN NULL;
        END IF;
        PERFORM 1 FROM corpus_stats WHERE id = 1 FOR UPDATE;  -- writers queue here
        WITH t AS MATERIALIZED (
            SELECT c.id AS chunk_id, c.namespace_id, c.kind, u.lexeme AS term,
                   cardinality(u.positions)::float8 AS tf,
                   cardinality(u.positions) AS n
            FROM new_chunks c, unnest(c.lexemes) AS u
        ), lens AS (
            SELECT chunk_id, sum(n)::integer AS len FROM t GROUP BY chunk_id
        ), posted AS (
            INSERT INTO postings (term, namespace_id, kind, chunk_id, tf, doc_len)
            SELECT t.term, t.namespace_id, t.kind, t.chunk_id, t.tf, lens.len
            FROM t JOIN lens USING (chunk_id)
        ), counted AS (
            INSERT INTO terms (term, df)
            SELECT term, count(*) FROM t GROUP BY term ORDER BY term
            ON CONFLICT (term) DO UPDATE SET df = terms.df + excluded.df
        )
        UPDATE corpus_stats SET
            n = n + (SELECT count(*) FROM new_chunks),
            total_len = total_len + (SELECT coalesce(sum(n), 0) FROM t)
        WHERE id = 1;
        RETURN NULL;
    END $$""",
    """CREATE FUNCTION docgraph_chunks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM old_chunks) THEN
            RETURN NULL;  -- a document's first write deletes nothing
        END IF;
        PERFORM 1 FROM corpus_stats WHERE id = 1 FOR UPDATE;  -- writers queue here
        WITH t AS MATERIALIZED (
            SELECT c.id AS chunk_id, c.namespace_id, c.kind, u.lexeme AS term,
                   cardinality(u.positions) AS n
            FROM old_chunks c, unnest(c.lexemes) AS u
        ), unposted AS (
            DELETE FROM postings p USING t
            WHERE p.term = t.term AND p.namespace_id = t.namespace_id
              AND p.kind = t.kind AND p.chunk_id = t.chunk_id
        ), gone AS (
            SELECT term, count(*) AS df FROM t GROUP BY term
        ), uncounted AS (
            UPDATE terms SET df = terms.df - gone.df FROM gone WHERE terms.term = gone.term
        )
        UPDATE corpus_stats SET
            n = n - (SELECT count(*) FROM old_chunks),
            total_len = total_len - (SELECT coalesce(sum(n), 0) FROM t)
        WHERE id = 1;
        DELETE FROM terms t USING (
            SELECT DISTINCT u.lexeme FROM old_chunks c, unnest(c.lexemes) AS u
        ) g WHERE t.term = g.lexeme AND t.df <= 0;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER chunks_inserted AFTER INSERT ON chunks
        REFERENCING NEW TABLE AS new_chunks
        FOR EACH STATEMENT EXECUTE FUNCTION docgraph_chunks_inserted()""",
    """CREATE TRIGGER chunks_deleted AFTER DELETE ON chunks
        REFERENCING OLD TABLE AS old_chunks
        FOR EACH STATEMENT EXECUTE FUNCTION docgraph_chunks_deleted()""",
    # Chunks are never updated in place (a document write deletes and re-inserts them);
    # refusing updates keeps the term statistics exact.
    """CREATE FUNCTION docgraph_chunks_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'chunks are immutable: delete and insert instead';
    END $$""",
    """CREATE TRIGGER chunks_no_update BEFORE UPDATE ON chunks
        FOR EACH ROW EXECUTE FUNCTION docgraph_chunks_immutable()""",
)

# Fold diacritics (like FTS5's remove_diacritics) when the server has the unaccent extension.
_V2: Final[tuple[str, ...]] = (
    f"""DO $$ BEGIN
        IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'unaccent')
           AND NOT EXISTS (SELECT 1 FROM chunks LIMIT 1) THEN
            CREATE EXTENSION IF NOT EXISTS unaccent;
            ALTER TEXT SEARCH CONFIGURATION {TS_CONFIG}
                ALTER MAPPING FOR hword, hword_part, word WITH unaccent, english_stem;
        END IF;
    END $$""",
)

# Chunks per namespace and kind, kept by statement-level triggers like the term statistics
# (and queued on the same corpus_stats row lock), backfilled from the existing chunks.
_V3: Final[tuple[str, ...]] = (
    """CREATE TABLE chunk_counts (
        namespace_id integer NOT NULL,
        kind text NOT NULL,
        n bigint NOT NULL,
        PRIMARY KEY (namespace_id, kind)
    )""",
    """INSERT INTO chunk_counts (namespace_id, kind, n)
        SELECT namespace_id, kind, count(*) FROM chunks GROUP BY namespace_id, kind""",
    """CREATE FUNCTION docgraph_chunks_counted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM corpus_stats WHERE id = 1 FOR UPDATE;  -- writers queue here
        IF TG_OP = 'INSERT' THEN
            INSERT INTO chunk_counts (namespace_id, kind, n)
            SELECT namespace_id, kind, count(*) FROM new_chunks
            GROUP BY namespace_id, kind ORDER BY namespace_id, kind
            ON CONFLICT (namespace_id, kind) DO UPDATE SET n = chunk_counts.n + excluded.n;
        ELSE
            UPDATE chunk_counts c SET n = c.n - g.n FROM (
                SELECT namespace_id, kind, count(*) AS n FROM old_chunks
                GROUP BY namespace_id, kind
            ) g WHERE c.namespace_id = g.namespace_id AND c.kind = g.kind;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER chunks_counted_inserted AFTER INSERT ON chunks
        REFERENCING NEW TABLE AS new_chunks
        FOR EACH STATEMENT EXECUTE FUNCTION docgraph_chunks_counted()""",
    """CREATE TRIGGER chunks_counted_deleted AFTER DELETE ON chunks
        REFERENCING OLD TABLE AS old_chunks
        FOR EACH STATEMENT EXECUTE FUNCTION docgraph_chunks_counted()""",
)

# BM25 reads a term's postings by primary key; carrying tf and doc_len in the key's index
# lets it read them from the index alone (an index-only scan of the term's key range)
# instead of fetching rows scattered over the whole heap: at 1M chunks a term in 12% of the
# chunks read 106k heap pages (3.8 s) that way (bench/backends.py).
_V4: Final[tuple[str, ...]] = (
    "ALTER TABLE postings DROP CONSTRAINT postings_pkey",
    "ALTER TABLE postings ADD CONSTRAINT postings_pkey"
    " PRIMARY KEY (term, namespace_id, kind, chunk_id) INCLUDE (tf, doc_len)",
)

# The HNSW graph indexes vectors in half precision (pgvector's halfvec): half the pages to
# build, search and update, and results are re-scored from the full-precision column. An
# index of an older schema is rebuilt here (minutes at 1M chunks).
_V5: Final[tuple[str, ...]] = (
    """DO $$ DECLARE d integer; BEGIN
        SELECT value::integer INTO d FROM meta WHERE key = 'embed_dimension';
        IF d IS NOT NULL AND to_regclass('chunks_embedding_hnsw_' || d) IS NOT NULL THEN
            EXECUTE format('DROP INDEX chunks_embedding_hnsw_%s', d);
            EXECUTE format('CREATE INDEX chunks_embedding_hnsw_half_%s ON chunks'
                           ' USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops)', d, d);
        END IF;
    END $$""",
)

# Retrieval traces (stored by the governed service after its row filter, query hashed) and the
# audit log of governed requests: shared by every process serving this database.
_V6: Final = (
    "CREATE TABLE traces (id text PRIMARY KEY, created_at double precision NOT NULL,"
    " user_id text NOT NULL DEFAULT '', payload jsonb NOT NULL)",
    "CREATE INDEX traces_created ON traces (created_at)",
    "CREATE TABLE audit_log (id bigserial PRIMARY KEY, at double precision NOT NULL,"
    " user_id text NOT NULL, operation text NOT NULL, outcome text NOT NULL,"
    " payload jsonb NOT NULL)",
    "CREATE INDEX audit_log_at ON audit_log (at)",
)

# The entity graph (tables of the embedded schema, same keys and cascades): entities,
# chunk-entity links, co-occurrence edges, communities with members and the table rows their
# reports drew on; namespaces gain the rest of the build state (``graph_dirty`` is there since
# migration 1: a boolean, which shared SQL spells TRUE/FALSE, as SQLite reads them too).
_V7: Final = (
    "ALTER TABLE namespaces ADD COLUMN vocab_hash text NOT NULL DEFAULT ''",
    "ALTER TABLE namespaces ADD COLUMN graph_built_at double precision",
    """CREATE TABLE entities (
        id bigserial PRIMARY KEY,
        namespace_id integer NOT NULL REFERENCES namespaces(id),
        key text NOT NULL,
        name text NOT NULL,
        type text NOT NULL,
        UNIQUE (namespace_id, key)
    )""",
    """CREATE TABLE chunk_entities (
        chunk_id bigint NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
        entity_id bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
        frequency integer NOT NULL,
        first_position integer NOT NULL,
        score double precision NOT NULL,
        PRIMARY KEY (chunk_id, entity_id)
    )""",
    "CREATE INDEX chunk_entities_entity ON chunk_entities (entity_id, chunk_id)",
    """CREATE TABLE entity_edges (
        namespace_id integer NOT NULL,
        source bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
        target bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
        weight double precision NOT NULL,
        chunks integer NOT NULL,
        PRIMARY KEY (source, target)
    )""",
    "CREATE INDEX entity_edges_target ON entity_edges (target, source)",
    "CREATE INDEX entity_edges_namespace ON entity_edges (namespace_id)",
    """CREATE TABLE communities (
        id bigserial PRIMARY KEY,
        namespace_id integer NOT NULL REFERENCES namespaces(id),
        level integer NOT NULL,
        ordinal integer NOT NULL,
        parent_id bigint REFERENCES communities(id) ON DELETE CASCADE,
        size integer NOT NULL,
        title text NOT NULL,
        report_doc_id text,
        UNIQUE (namespace_id, level, ordinal)
    )""",
    # PostgreSQL checks the cascade of each deleted community through an index (or a scan)
    "CREATE INDEX communities_parent ON communities (parent_id)",
    """CREATE TABLE community_members (
        community_id bigint NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
        entity_id bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
        centrality double precision NOT NULL,
        PRIMARY KEY (community_id, entity_id)
    )""",
    "CREATE INDEX community_members_entity ON community_members (entity_id)",
    """CREATE TABLE community_row_sources (
        community_id bigint NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
        doc_id text NOT NULL,
        origin_source text NOT NULL,
        origin_schema text NOT NULL,
        origin_table text NOT NULL,
        origin_pk_column text NOT NULL,
        origin_pk_value text NOT NULL,
        PRIMARY KEY (community_id, doc_id)
    )""",
)

# The change feed an external chunk index (Milvus) follows (store/postgres/feed.py). Row ids
# come from a sequence and are not assigned in commit order, so the feed is a log whose
# sequence numbers are drawn while the writer holds the corpus_stats row lock (kept until
# commit): a log entry committed later always has a higher number. Entries are written only
# while some external index follows this database (a cursor in meta).
_FEED: Final = (
    """CREATE TABLE chunk_feed (
        seq bigserial PRIMARY KEY,
        chunk_id bigint NOT NULL,
        added boolean NOT NULL
    )""",
    """CREATE FUNCTION docgraph_chunks_fed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM corpus_stats WHERE id = 1 FOR UPDATE;  -- writers queue here
        IF NOT EXISTS (SELECT 1 FROM meta WHERE key LIKE 'index_cursor:%') THEN
            RETURN NULL;
        END IF;
        IF TG_OP = 'INSERT' THEN
            INSERT INTO chunk_feed (chunk_id, added) SELECT id, true FROM new_chunks ORDER BY id;
        ELSE
            INSERT INTO chunk_feed (chunk_id, added) SELECT id, false FROM old_chunks ORDER BY id;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER chunks_fed_inserted AFTER INSERT ON chunks
        REFERENCING NEW TABLE AS new_chunks
        FOR EACH STATEMENT EXECUTE FUNCTION docgraph_chunks_fed()""",
    """CREATE TRIGGER chunks_fed_deleted AFTER DELETE ON chunks
        REFERENCING OLD TABLE AS old_chunks
        FOR EACH STATEMENT EXECUTE FUNCTION docgraph_chunks_fed()""",
)

# Admin settings changed through the admin tab, shared by every server of the database
# (store/sql/settings.py).
_SETTINGS: Final = (
    """CREATE TABLE admin_settings (
        section text NOT NULL,
        key text NOT NULL,
        value text NOT NULL,
        revision bigint NOT NULL,
        changed_at double precision NOT NULL,
        PRIMARY KEY (section, key)
    )""",
    "CREATE INDEX admin_settings_revision ON admin_settings (revision)",
)

# The source registry (SQL sources without passwords, column tags) and the build history
# (each namespace build and its phase outcomes): shared by every process serving this
# database, so a refresher elected in any of them (see docgraph.store.postgres.leader)
# records builds the others report. No statement refers to tables of other migrations.
_LIFECYCLE: Final = (
    "CREATE TABLE sql_sources (name text PRIMARY KEY, url text NOT NULL,"
    " created_at double precision NOT NULL)",
    """CREATE TABLE column_tags (
        id bigserial PRIMARY KEY,
        source text NOT NULL REFERENCES sql_sources(name) ON DELETE CASCADE,
        schema_name text NOT NULL,
        table_name text NOT NULL,
        column_name text NOT NULL,
        pk_column text,
        tag text NOT NULL,
        domain text NOT NULL DEFAULT '',
        created_at double precision NOT NULL,
        UNIQUE (source, schema_name, table_name, column_name, tag, domain)
    )""",
    """CREATE TABLE build_runs (
        id bigserial PRIMARY KEY,
        namespace text NOT NULL,
        started_at double precision NOT NULL,
        finished_at double precision NOT NULL,
        outcome text NOT NULL,
        documents_changed bigint NOT NULL DEFAULT 0,
        chunks_embedded bigint NOT NULL DEFAULT 0,
        bodies_read bigint NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX build_runs_namespace ON build_runs (namespace, finished_at)",
    """CREATE TABLE build_phases (
        build_id bigint NOT NULL REFERENCES build_runs(id) ON DELETE CASCADE,
        ordinal integer NOT NULL,
        source text NOT NULL,
        phase text NOT NULL,
        outcome text NOT NULL,
        message text NOT NULL,
        items bigint NOT NULL,
        seconds double precision NOT NULL,
        PRIMARY KEY (build_id, ordinal)
    )""",
)

# Bearer tokens of `docgraph serve` (sha256 digests only; a revoked row is kept so the digest
# cannot come back) and the change counter every server polls per request
# (docgraph.store.tokens): shared by every process serving this database.
_TOKENS: Final = (
    "CREATE TABLE bearer_tokens (digest text PRIMARY KEY, user_id text NOT NULL, role text,"
    " created_at double precision NOT NULL, revoked_at double precision)",
    "CREATE TABLE bearer_token_version (id integer PRIMARY KEY CHECK (id = 1),"
    " n bigint NOT NULL)",
    "INSERT INTO bearer_token_version (id, n) VALUES (1, 0)",
)

# Pages and OCR per chunk, the format's metadata per document. PDF documents forget their
# content hash so the next build extracts them again with pages and section paths (vectors
# of unchanged embedded texts are reused); no chunk row is updated here.
_PAGES: Final = (
    "ALTER TABLE chunks ADD COLUMN page_first integer, ADD COLUMN page_last integer,"
    " ADD COLUMN ocr boolean NOT NULL DEFAULT false",
    "ALTER TABLE documents ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb",
    "UPDATE documents SET content_hash = '' WHERE kind = 'document'"
    " AND media_type = 'application/pdf'",
)

# How agents and users see a registered folder: its display name (unique per namespace,
# chosen at registration) and the public base URL citations link to (both nullable: a
# source registered before keeps a name derived from its URN and has no URL).
_SOURCE_NAMING: Final = (
    "ALTER TABLE sources ADD COLUMN display_name text",
    "ALTER TABLE sources ADD COLUMN public_url text",
)

# A mail's attachments are documents of their own, linked to their mail's row (deleted
# with it). Mail documents forget their content hash so the next build reads them again and
# writes their attachments apart (vectors of unchanged embedded texts are reused).
_ATTACHMENTS: Final = (
    "ALTER TABLE documents ADD COLUMN parent_id bigint REFERENCES documents(id)"
    " ON DELETE CASCADE",
    "CREATE INDEX documents_parent ON documents (parent_id) WHERE parent_id IS NOT NULL",
    "UPDATE documents SET content_hash = '' WHERE kind = 'document'"
    " AND media_type IN ('message/rfc822', 'application/mbox')",
)

# Each document's line fingerprints (its paragraphs and list items as extracted) and those
# dropped as repeated across its source (legal footers); NULL: not counted yet (a document
# written before counts once it is read again).
_REPEATED_LINES: Final = (
    "ALTER TABLE documents ADD COLUMN line_hashes jsonb,"
    " ADD COLUMN lines_dropped jsonb NOT NULL DEFAULT '[]'::jsonb",
)

# Console sessions (migration 16): the sha256 of each session id (never the id), its caller,
# the bearer token it was signed in with, its CSRF token, its times (idle and absolute expiry
# are judged on read, old rows purged at sign-in) and its messages to show once; shared by
# every server of this database, so a session survives restarts and load balancing
# (docgraph.store.sessions).
_CONSOLE_SESSIONS: Final = (
    """CREATE TABLE console_sessions (
        digest text PRIMARY KEY,
        user_id text NOT NULL,
        role text,
        token_digest text NOT NULL,
        csrf text NOT NULL,
        created_at double precision NOT NULL,
        last_seen double precision NOT NULL,
        flash text NOT NULL DEFAULT '[]'
    )""",
    "CREATE INDEX console_sessions_last_seen ON console_sessions (last_seen)",
)

# BM25 statistics per chunk kind (migration 17): document frequencies and corpus totals were
# counted over every chunk, community reports included, so rewriting reports (a graph build)
# moved the BM25 scores of unchanged text chunks. ``terms`` gains the kind in its key and
# ``corpus_kind_stats`` holds each kind's chunk count and summed length; both are backfilled
# from the existing rows (``terms`` from ``postings``, which hold one row per distinct lexeme
# of each chunk, exactly what df counts) while this transaction holds the corpus_stats row
# lock that every chunk writer takes first, so no write lands between the backfill and the
# new triggers. ``corpus_stats`` keeps the all-kinds totals and stays the writers' lock.
_KIND_STATISTICS: Final = (
    "SELECT 1 FROM corpus_stats WHERE id = 1 FOR UPDATE",  # chunk writers queue behind this
    """CREATE TABLE corpus_kind_stats (
        kind text PRIMARY KEY,
        n bigint NOT NULL,
        total_len bigint NOT NULL
    )""",
    """INSERT INTO corpus_kind_stats (kind, n, total_len)
        SELECT c.kind, count(*), coalesce(sum(l.len), 0) FROM chunks c
        CROSS JOIN LATERAL (SELECT sum(cardinality(u.positions)) AS len
                            FROM unnest(c.lexemes) AS u) l
        GROUP BY c.kind""",
    "TRUNCATE terms",
    "ALTER TABLE terms DROP CONSTRAINT terms_pkey, ADD COLUMN kind text NOT NULL",
    """INSERT INTO terms (kind, term, df)
        SELECT kind, term, count(*) FROM postings GROUP BY kind, term""",
    "ALTER TABLE terms ADD PRIMARY KEY (kind, term)",
    """CREATE OR REPLACE FUNCTION docgraph_chunks_inserted() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM new_chunks) THEN
            RETURN NULL;
        END IF;
        PERFORM 1 FROM corpus_stats WHERE id = 1 FOR UPDATE;  -- writers queue here
        WITH t AS MATERIALIZED (
            SELECT c.id AS chunk_id, c.namespace_id, c.kind, u.lexeme AS term,
                   cardinality(u.positions)::float8 AS tf,
                   cardinality(u.positions) AS n
            FROM new_chunks c, unnest(c.lexemes) AS u
        ), lens AS MATERIALIZED (
            SELECT chunk_id, sum(n)::integer AS len FROM t GROUP BY chunk_id
        ), posted AS (
            INSERT INTO postings (term, namespace_id, kind, chunk_id, tf, doc_len)
            SELECT t.term, t.namespace_id, t.kind, t.chunk_id, t.tf, lens.len
            FROM t JOIN lens USING (chunk_id)
        ), counted AS (
            INSERT INTO terms (kind, term, df)
            SELECT kind, term, count(*) FROM t GROUP BY kind, term ORDER BY kind, term
            ON CONFLICT (kind, term) DO UPDATE SET df = terms.df + excluded.df
        ), kinds AS (
            INSERT INTO corpus_kind_stats (kind, n, total_len)
            SELECT c.kind, count(*), coalesce(sum(lens.len), 0)
            FROM new_chunks c LEFT JOIN lens ON lens.chunk_id = c.id
            GROUP BY c.kind ORDER BY c.kind
            ON CONFLICT (kind) DO UPDATE SET n = corpus_kind_stats.n + excluded.n,
                total_len = corpus_kind_stats.total_len + excluded.total_len
        )
        UPDATE corpus_stats SET
            n = n + (SELECT count(*) FROM new_chunks),
            total_len = total_len + (SELECT coalesce(sum(n), 0) FROM t)
        WHERE id = 1;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION docgraph_chunks_deleted() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM old_chunks) THEN
            RETURN NULL;  -- a document's first write deletes nothing
        END IF;
        PERFORM 1 FROM corpus_stats WHERE id = 1 FOR UPDATE;  -- writers queue here
        WITH t AS MATERIALIZED (
            SELECT c.id AS chunk_id, c.namespace_id, c.kind, u.lexeme AS term,
                   cardinality(u.positions) AS n
            FROM old_chunks c, unnest(c.lexemes) AS u
        ), unposted AS (
            DELETE FROM postings p USING t
            WHERE p.term = t.term AND p.namespace_id = t.namespace_id
              AND p.kind = t.kind AND p.chunk_id = t.chunk_id
        ), gone AS (
            SELECT kind, term, count(*) AS df FROM t GROUP BY kind, term
        ), uncounted AS (
            UPDATE terms SET df = terms.df - gone.df FROM gone
            WHERE terms.kind = gone.kind AND terms.term = gone.term
        ), lens AS (
            SELECT chunk_id, sum(n) AS len FROM t GROUP BY chunk_id
        ), uncorpused AS (
            UPDATE corpus_kind_stats k SET n = k.n - g.n, total_len = k.total_len - g.len
            FROM (SELECT c.kind, count(*) AS n, coalesce(sum(lens.len), 0) AS len
                  FROM old_chunks c LEFT JOIN lens ON lens.chunk_id = c.id
                  GROUP BY c.kind) g
            WHERE k.kind = g.kind
        )
        UPDATE corpus_stats SET
            n = n - (SELECT count(*) FROM old_chunks),
            total_len = total_len - (SELECT coalesce(sum(n), 0) FROM t)
        WHERE id = 1;
        DELETE FROM terms t USING (
            SELECT DISTINCT c.kind, u.lexeme FROM old_chunks c, unnest(c.lexemes) AS u
        ) g WHERE t.kind = g.kind AND t.term = g.lexeme AND t.df <= 0;
        RETURN NULL;
    END $$""",
)

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7,
                                                   _FEED, _SETTINGS, _LIFECYCLE, _TOKENS,
                                                   _PAGES, _SOURCE_NAMING, _ATTACHMENTS,
                                                   _REPEATED_LINES, _CONSOLE_SESSIONS,
                                                   _KIND_STATISTICS)
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
