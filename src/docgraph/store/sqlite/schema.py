"""The embedded catalog's schema and its migrations: the tables of a new file, and the steps
that bring a file written by an older docgraph up to :data:`SCHEMA_VERSION` inside the
opening transaction (:func:`prepare`)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from docgraph.errors import StoreError
from docgraph.store.lexical import TermDictionary
from docgraph.store.sqlite.vectors import STORED, float32_to_stored

SCHEMA_VERSION = 7

#: Columns a docgraph added to a table without a version step: ``(table, column, its
#: declaration, what a row written before holds)``. A writable open adds the ones a file
#: lacks (:func:`prepare`); a read-only open, which cannot, reads the table through a
#: ``TEMP`` view giving them that value (``readonly.stand_in_columns``), so an older file
#: copied or mounted read-only reads as the upgrade would have made it.
ADDED_COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    # a source's display name and public URL: none until set
    ("sources", "display_name", "TEXT", "NULL"),
    ("sources", "public_url", "TEXT", "NULL"),
    # the fingerprints of a document's lines and those dropped as repeated across its
    # source: a document written before counts no line until it is read again
    ("documents", "line_hashes", "TEXT", "NULL"),
    ("documents", "lines_dropped", "TEXT NOT NULL DEFAULT '[]'", "'[]'"),
    # the language a document was analysed in (NULL: English) and the languages other
    # than English a namespace's documents were analysed in ('': English only, as it was)
    ("documents", "language", "TEXT", "NULL"),
    ("namespaces", "languages", "TEXT NOT NULL DEFAULT ''", "''"),
    # a failed file's permission set (NULL: every reader of the namespace may be told of
    # it); a failure recorded before reads as [], the index's owner only, until the next
    # build records it again: a restricted file's name is not shown to readers it does not
    # let in
    ("failures", "access", "TEXT DEFAULT '[]'", "'[]'"),
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    graph_dirty INTEGER NOT NULL DEFAULT 0,
    vocab_hash TEXT NOT NULL DEFAULT '',
    graph_built_at REAL,
    languages TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY,
    urn TEXT NOT NULL,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    scheme TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_indexed_at REAL,
    display_name TEXT,
    public_url TEXT,
    UNIQUE (urn, namespace_id)
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    source_id INTEGER REFERENCES sources(id) ON DELETE CASCADE,
    kind TEXT NOT NULL DEFAULT 'document',
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    doc_id TEXT NOT NULL,
    path TEXT NOT NULL,
    title TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    change_token TEXT NOT NULL,
    media_type TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    origin_source TEXT,
    origin_schema TEXT,
    origin_table TEXT,
    origin_pk_column TEXT,
    origin_pk_value TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    parent_id INTEGER REFERENCES documents(id) ON DELETE CASCADE,
    line_hashes TEXT,
    lines_dropped TEXT NOT NULL DEFAULT '[]',
    access TEXT,
    language TEXT,
    UNIQUE (namespace_id, doc_id),
    UNIQUE (source_id, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    namespace_id INTEGER NOT NULL,
    chunk_index INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT 'text',
    text TEXT NOT NULL,
    breadcrumb TEXT NOT NULL,
    section_path TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    prev_index INTEGER,
    next_index INTEGER,
    parent_index INTEGER,
    embed_hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    terms BLOB NOT NULL DEFAULT x'',
    term_count INTEGER NOT NULL DEFAULT 0,
    page_first INTEGER,
    page_last INTEGER,
    ocr INTEGER NOT NULL DEFAULT 0,
    UNIQUE (document_id, chunk_index)
);
CREATE TABLE IF NOT EXISTS terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
CREATE INDEX IF NOT EXISTS chunks_namespace ON chunks(namespace_id);
-- Chunks stored before their vector (an empty blob: docgraph.store.sqlite.pending); empty
-- when every chunk is embedded, so counting them costs one probe.
CREATE INDEX IF NOT EXISTS chunks_pending ON chunks(namespace_id) WHERE vector = x'';
CREATE TABLE IF NOT EXISTS chunk_tombstones (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_id INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunk_tombstones(chunk_id) VALUES (old.id);
END;
-- Its sequence counts permission changes made without touching chunks (the chunk index
-- re-reads the restricted rows when it moves); one row is kept. A table an older docgraph
-- ignores safely: the governed path decides every hit on its own.
CREATE TABLE IF NOT EXISTS access_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT);
CREATE TABLE IF NOT EXISTS entities (
    id INTEGER PRIMARY KEY,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    key TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    UNIQUE (namespace_id, key)
);
CREATE TABLE IF NOT EXISTS chunk_entities (
    chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    frequency INTEGER NOT NULL,
    first_position INTEGER NOT NULL,
    score REAL NOT NULL,
    PRIMARY KEY (chunk_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS chunk_entities_entity ON chunk_entities(entity_id, chunk_id);
CREATE TABLE IF NOT EXISTS entity_edges (
    namespace_id INTEGER NOT NULL,
    source INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    target INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    weight REAL NOT NULL,
    chunks INTEGER NOT NULL,
    PRIMARY KEY (source, target)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entity_edges_target ON entity_edges(target, source);
CREATE INDEX IF NOT EXISTS entity_edges_namespace ON entity_edges(namespace_id);
CREATE TABLE IF NOT EXISTS communities (
    id INTEGER PRIMARY KEY,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    level INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    parent_id INTEGER REFERENCES communities(id) ON DELETE CASCADE,
    size INTEGER NOT NULL,
    title TEXT NOT NULL,
    report_doc_id TEXT,
    UNIQUE (namespace_id, level, ordinal)
);
CREATE TABLE IF NOT EXISTS community_members (
    community_id INTEGER NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
    entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    centrality REAL NOT NULL,
    PRIMARY KEY (community_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS community_members_entity ON community_members(entity_id);
CREATE TABLE IF NOT EXISTS community_row_sources (
    community_id INTEGER NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
    doc_id TEXT NOT NULL,
    origin_source TEXT NOT NULL,
    origin_schema TEXT NOT NULL,
    origin_table TEXT NOT NULL,
    origin_pk_column TEXT NOT NULL,
    origin_pk_value TEXT NOT NULL,
    PRIMARY KEY (community_id, doc_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS community_access_sources (
    community_id INTEGER NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
    doc_id TEXT NOT NULL,
    access TEXT NOT NULL,
    PRIMARY KEY (community_id, doc_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS community_access_sources_doc ON community_access_sources(doc_id);
CREATE TABLE IF NOT EXISTS failures (
    source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL,
    access TEXT DEFAULT '[]',
    PRIMARY KEY (source_id, path)
);
"""


def prepare(db: sqlite3.Connection, terms: TermDictionary, path: Path) -> None:
    """Inside the opening write transaction: record the version of a new file, or bring an
    older one up to :data:`SCHEMA_VERSION`; then give the file an identity and the columns
    added without a version step. A newer file is refused (:class:`StoreError`)."""
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        db.execute(
            "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        db.execute("INSERT INTO meta VALUES ('vector_dtype', ?)", (STORED.str,))
    elif int(row[0]) in (1, 2, 3, 4, 5, 6):
        if int(row[0]) == 1:
            _migrate_1_to_2(db, terms)
        if int(row[0]) <= 2:
            _migrate_2_to_3(db)
        if int(row[0]) <= 3:
            _migrate_3_to_4(db)
        if int(row[0]) <= 4:
            _migrate_4_to_5(db)
        if int(row[0]) <= 5:
            _migrate_5_to_6(db)
        _migrate_6_to_7(db)
    elif int(row[0]) != SCHEMA_VERSION:
        raise StoreError(
            f"{path}: index schema version {row[0]} is not supported "
            f"(this docgraph reads version {SCHEMA_VERSION})"
        )
    db.execute("INSERT OR IGNORE INTO meta VALUES ('catalog_id', ?)",
                (uuid.uuid4().hex,))
    _add_document_parents(db)
    _add_columns(db)


def _migrate_1_to_2(db: sqlite3.Connection, terms: TermDictionary) -> None:
    """Schema 1 -> 2 (inside the caller's transaction): BM25 moves from an FTS5 table to term
    ids stored with each chunk; every chunk is tokenized once here."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)").fetchall()}
    if "terms" not in columns:
        db.execute("ALTER TABLE chunks ADD COLUMN terms BLOB NOT NULL DEFAULT x''")
        db.execute("ALTER TABLE chunks ADD COLUMN term_count INTEGER NOT NULL DEFAULT 0")
    db.execute("DROP TRIGGER IF EXISTS chunks_ai")
    db.execute("DROP TRIGGER IF EXISTS chunks_ad")
    db.execute("DROP TABLE IF EXISTS chunks_fts")
    db.execute("CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN"
               " INSERT INTO chunk_tombstones(chunk_id) VALUES (old.id); END")
    last = 0
    while True:
        rows = db.execute("SELECT id, breadcrumb, text FROM chunks WHERE id > ? ORDER BY id"
                          " LIMIT 2000", (last,)).fetchall()
        if not rows:
            break
        encoded, _ = terms.encode(db, [(r[1], r[2]) for r in rows])
        db.executemany("UPDATE chunks SET terms = ?, term_count = ? WHERE id = ?",
                       [(e.blob, e.length, r[0]) for e, r in zip(encoded, rows, strict=True)])
        last = int(rows[-1][0])
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def _migrate_2_to_3(db: sqlite3.Connection) -> None:
    """Schema 2 -> 3 (inside the caller's transaction): community reports record the table
    rows they were built from (``community_row_sources``). For reports built before, the rows
    their members link to now are recorded, and every namespace with communities is marked
    for a graph rebuild, which records the exact set."""
    db.execute(
        "INSERT OR IGNORE INTO community_row_sources SELECT DISTINCT cm.community_id, d.doc_id,"
        " d.origin_source, d.origin_schema, d.origin_table, d.origin_pk_column,"
        " d.origin_pk_value FROM community_members cm"
        " JOIN chunk_entities ce ON ce.entity_id = cm.entity_id"
        " JOIN chunks c ON c.id = ce.chunk_id JOIN documents d ON d.id = c.document_id"
        " WHERE d.origin_source IS NOT NULL"
    )
    db.execute("UPDATE namespaces SET graph_dirty = 1"
               " WHERE id IN (SELECT namespace_id FROM communities)")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")




#: Media types whose documents gained structure the index lacks before schema 4.
RE_EXTRACTED_AT_4 = ("application/pdf",)


def _migrate_3_to_4(db: sqlite3.Connection) -> None:
    """Schema 3 -> 4 (inside the caller's transaction): chunks record the first and last page
    of their text and whether it was OCR'd; documents keep the metadata of their format.
    PDF documents forget their content hash, so the next build reads and extracts them
    again and gains pages and section paths; vectors of chunks whose embedded text did not
    change are reused then, as for any edited file."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)").fetchall()}
    for name, ddl in (("page_first", "INTEGER"), ("page_last", "INTEGER"),
                      ("ocr", "INTEGER NOT NULL DEFAULT 0")):
        if name not in columns:
            db.execute(f"ALTER TABLE chunks ADD COLUMN {name} {ddl}")
    if "metadata" not in {r[1] for r in db.execute("PRAGMA table_info(documents)")}:
        db.execute("ALTER TABLE documents ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'")
    marks = ",".join("?" * len(RE_EXTRACTED_AT_4))
    db.execute(f"UPDATE documents SET content_hash = '' WHERE kind = 'document'"
               f" AND media_type IN ({marks})", RE_EXTRACTED_AT_4)
    db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")


#: Media types whose documents carried their attachments as sections before schema 5.
RE_EXTRACTED_AT_5 = ("message/rfc822", "application/mbox")


def _add_document_parents(db: sqlite3.Connection) -> None:
    """Give ``documents`` its ``parent_id`` column (an attachment's mail) and its index
    where the file lacks them (nullable: documents written before have no parent)."""
    if "parent_id" not in {r[1] for r in db.execute("PRAGMA table_info(documents)")}:
        db.execute("ALTER TABLE documents ADD COLUMN parent_id INTEGER"
                   " REFERENCES documents(id) ON DELETE CASCADE")
    db.execute("CREATE INDEX IF NOT EXISTS documents_parent ON documents(parent_id)"
               " WHERE parent_id IS NOT NULL")


def _migrate_4_to_5(db: sqlite3.Connection) -> None:
    """Schema 4 -> 5 (inside the caller's transaction): a mail's attachments become
    documents of their own, linked to their mail by ``documents.parent_id``. Mail
    documents forget their content hash, so the next build reads them again and writes
    their attachments apart (vectors of unchanged embedded texts are reused)."""
    _add_document_parents(db)
    marks = ",".join("?" * len(RE_EXTRACTED_AT_5))
    db.execute(f"UPDATE documents SET content_hash = '' WHERE kind = 'document'"
               f" AND media_type IN ({marks})", RE_EXTRACTED_AT_5)
    db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")


def _migrate_5_to_6(db: sqlite3.Connection) -> None:
    """Schema 5 -> 6 (inside the caller's transaction): chunk vectors are stored as float16
    (:mod:`docgraph.store.sqlite.vectors`), converted in place from float32 without
    re-embedding. The freed pages stay in the file for later writes (``VACUUM`` returns
    them to the file system). The catalog gets a new identity, which retires any sidecar
    of the index (``docgraph.store.sqlite.index``)."""
    stored = db.execute("SELECT value FROM meta WHERE key = 'vector_dtype'").fetchone()
    if stored is None:  # written before schema 6: float32 (a file that says so is not)
        db.create_function("docgraph_f32_to_stored", 1, float32_to_stored, deterministic=True)
        db.execute("UPDATE chunks SET vector = docgraph_f32_to_stored(vector)")
        db.execute("INSERT INTO meta VALUES ('vector_dtype', ?)", (STORED.str,))
        # Rows rewritten in place: a new identity, so no sidecar of the old rows is used.
        db.execute("DELETE FROM meta WHERE key = 'catalog_id'")
    db.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")


def _migrate_6_to_7(db: sqlite3.Connection) -> None:
    """Schema 6 -> 7 (inside the caller's transaction): documents carry who may read them
    (``access``, NULL for every document written before: everyone the namespace is granted
    to), and communities the permission sets of the documents they draw on
    (``community_access_sources``, created with the other tables). A version step, not a
    column added quietly: a docgraph that does not know permissions must refuse the file
    rather than show a restricted document to everyone."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(documents)")}
    if "access" not in columns:
        db.execute("ALTER TABLE documents ADD COLUMN access TEXT")
    db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")


def missing_columns(db: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    """The entries of :data:`ADDED_COLUMNS` whose table the file has without that column
    (a table the file lacks altogether is left out)."""
    present: dict[str, set[str]] = {}
    missing = []
    for table, column, declaration, before in ADDED_COLUMNS:
        if table not in present:
            present[table] = {str(r[1]) for r in db.execute(
                f"PRAGMA main.table_info({table})")}
        if present[table] and column not in present[table]:
            missing.append((table, column, declaration, before))
    return missing


def _add_columns(db: sqlite3.Connection) -> None:
    """Add each of :data:`ADDED_COLUMNS` the file lacks (no version step: an older docgraph
    ignores them and reads as it always did)."""
    for table, column, declaration, _ in missing_columns(db):
        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
