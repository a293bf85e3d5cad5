"""PostgreSQL migrations 8 to 17 (:mod:`docgraph.store.postgres.schema` applies them in
order): the change feed (8), admin settings (9), the source registry and build history (10),
bearer tokens (11), pages and document metadata (12), source naming (13), attachments (14),
line fingerprints (15), console sessions (16) and BM25 statistics per chunk kind (17)."""

from __future__ import annotations

from typing import Final

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

#: Migrations 8 to 17, in order.
MIGRATIONS_8_17: Final[tuple[tuple[str, ...], ...]] = (
    _FEED, _SETTINGS, _LIFECYCLE, _TOKENS, _PAGES, _SOURCE_NAMING, _ATTACHMENTS,
    _REPEATED_LINES, _CONSOLE_SESSIONS, _KIND_STATISTICS)
