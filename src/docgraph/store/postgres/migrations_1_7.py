"""PostgreSQL migrations 1 to 7 (:mod:`docgraph.store.postgres.schema` applies them in
order): the catalog tables with the chunk triggers that keep the BM25 statistics (1), accent
folding (2), chunk counts per namespace and kind (3), index-only posting reads (4), the HNSW
index in half precision (5), traces and audit (6) and the entity graph (7)."""

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

#: Migrations 1 to 7, in order.
MIGRATIONS_1_7: Final[tuple[tuple[str, ...], ...]] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
