"""The catalog's document and chunk rows, written once for SQLite and PostgreSQL: the batch
document write (one transaction, one savepoint per document), delete, chunk reads by row id
and the full re-index reset.

:class:`SqlCatalogDocuments` is a base class of :class:`~docgraph.store.sqlite.SQLiteCatalog`
and :class:`~docgraph.store.postgres.PostgresCatalog`. What each backend stores its own way
stays behind small hooks: the chunk rows of a batch (:class:`ChunkRows`: SQLite writes float16
vector blobs and BM25 term blobs, PostgreSQL a ``vector`` column whose postings its triggers
keep), the vector dimension a write must have (PostgreSQL's HNSW index is per dimension) and
the vector index dropped with every chunk. Placeholders, JSON and id lists are the
:class:`~docgraph.store.sql.dialect.Dialect`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from docgraph.errors import StoreError
from docgraph.languages import ENGLISH
from docgraph.model import Access, DocumentRecord, RowOrigin, StoredChunk
from docgraph.store.base import ChunkPlace, DocumentWrite
from docgraph.store.sql.catalog import SqlCatalogRecords
from docgraph.store.sql.links import write_links
from docgraph.text import text_hash

_CHUNK_COLUMNS = (
    "c.id, d.doc_id, n.name, c.chunk_index, c.text, c.section_path, d.title, d.path,"
    " c.prev_index, c.next_index, c.parent_index, d.origin_source, d.origin_schema,"
    " d.origin_table, d.origin_pk_column, d.origin_pk_value, c.page_first, c.page_last, c.ocr,"
    " d.access"
)


class ChunkRows(Protocol):
    """How one backend stores the chunk rows of one batch write; made before the batch's
    transaction starts (so costly preparation holds no lock)."""

    def begin(self, db: Any) -> None:
        """Inside the batch's transaction, before its first document."""
        ...

    def insert(self, db: Any, position: int, document_id: int, ns_id: int,
               write: DocumentWrite, hashes: Sequence[str]) -> None:
        """Insert the chunk rows of ``write``, the batch's ``position``-th write (counting
        each document, then its attachments), for document row ``document_id``; ``hashes``
        are its chunks' embedded-text hashes."""
        ...

    def failed(self, db: Any, units_written: int) -> None:
        """Inside the transaction, after a document was rolled back to its savepoint; the
        batch's first ``units_written`` documents (with their attachments) stay written."""
        ...

    def committed(self) -> None:
        """After the batch's transaction committed."""
        ...


def embed_hashes(write: DocumentWrite) -> list[str]:
    """The embedded-text hashes a write's chunks record: ``write.embed_hashes`` when given
    (an index copied by hash), else the hash of each embedded text."""
    if write.embed_hashes is not None:
        return list(write.embed_hashes)
    return [text_hash(t) for t in write.embedded_texts]


def check_write(write: DocumentWrite, hashes: Sequence[str], dimension: int | None) -> None:
    """Reject a write whose chunks, hashes, vectors and entity links do not line up, or whose
    vectors are not finite (or not ``dimension`` wide, when given)."""
    n = len(write.chunks)
    if not (n == len(write.breadcrumbs) == len(hashes) == len(write.vectors)):
        raise StoreError(f"{write.doc_id}: {n} chunks but {len(write.vectors)} vectors")
    if write.entity_links and len(write.entity_links) != n:
        raise StoreError(f"{write.doc_id}: entity links for {len(write.entity_links)} of "
                         f"{n} chunks")
    if write.missing is not None and len(write.missing) != n:
        raise StoreError(f"{write.doc_id}: {n} chunks but {len(write.missing)} pending flags")
    vectors = write.vectors
    given = (np.ones(n, dtype=bool) if write.missing is None
             else ~np.asarray(write.missing, dtype=bool))  # pending rows carry no vector
    if n and (vectors.ndim != 2 or (dimension is not None and vectors.shape[1] != dimension)
              or not np.isfinite(vectors[given]).all()):
        finite = (np.isfinite(vectors).reshape(n, -1).all(axis=1) | ~given
                  if vectors.ndim >= 1 else np.zeros(n, dtype=bool))
        bad = int(np.flatnonzero(~finite)[0]) if not finite.all() else 0
        raise StoreError(f"{write.doc_id}#chunk-{write.chunks[bad].index}: invalid vector")


class SqlCatalogDocuments(SqlCatalogRecords):
    """Document writes, deletes and chunk reads whose SQL is the same on every relational
    backend; the backend implements :meth:`_chunk_rows` (and, where it has them, the
    :meth:`_vector_dimension` and :meth:`_drop_vector_index` hooks)."""

    # -- hooks ---------------------------------------------------------------

    def _chunk_rows(self, units: Sequence[Sequence[DocumentWrite]]) -> ChunkRows:
        """The chunk rows of a batch of ``units`` (each a document, then its attachments),
        prepared before the transaction (implemented by the backend)."""
        raise NotImplementedError

    def _vector_dimension(self) -> int | None:
        """The width every written vector must have (None: any, as the backend stores any)."""
        return None

    def _ends_batch(self, db: Any, exc: Exception) -> bool:
        """Whether ``exc``, raised while writing a document, ends the whole batch (rolled
        back, no document of it written) instead of that document alone: the database
        already rolled the transaction back, or it cannot take more (a full disk). None
        does by default."""
        return False

    def _drop_vector_index(self, db: Any) -> None:
        """Drop what indexes the chunks' vectors, inside :meth:`clear_all_chunks`'
        transaction before the chunks go (nothing by default)."""

    # -- writes --------------------------------------------------------------

    def write_document(self, write: DocumentWrite) -> DocumentRecord:
        """Replace the document's row and every chunk (with its attachments) in one
        transaction: either the new version is fully stored or, on any error, the old one
        stays."""
        return self.write_documents([write])[0]

    def import_document(self, write: DocumentWrite, embed_hashes: Sequence[str]) -> DocumentRecord:
        """:meth:`write_document` with the embedded-text hashes given instead of computed
        (``write.embedded_texts`` is ignored): for copying an index whose embedded texts are
        known only by hash. Attachments give theirs in their own ``embed_hashes``."""
        return self.write_document(replace(write, embed_hashes=list(embed_hashes)))

    def write_documents(self, writes: Sequence[DocumentWrite]) -> list[DocumentRecord]:
        """Replace several documents in one transaction, each one atomically (see
        :meth:`docgraph.store.base.Catalog.write_documents`).

        Every write is checked first: one that does not line up is refused before anything
        is written. Then every document (with its attachments) is written inside its own
        savepoint: if one fails, it keeps its old version, the documents before it are
        committed, the ones after it are not written, and the error propagates. A crash or an
        interrupt before the commit leaves every old version. One transaction per batch
        (instead of per document) is what makes bulk ingest fast: the commit and the
        statement setup are paid once.
        """
        if not writes:
            return []
        units = [[w, *w.attachments] for w in writes]  # a document and its attachments
        flat = [w for unit in units for w in unit]
        hashes = [embed_hashes(w) for w in flat]
        dimension = self._vector_dimension()
        for write, write_hashes in zip(flat, hashes, strict=True):
            check_write(write, write_hashes, dimension)
        if len({(w.source.id, w.path) for w in flat}) < len(flat):
            raise StoreError("a batch of document writes names one document twice")
        rows = self._chunk_rows(units)
        now = time.time()
        done: list[DocumentRecord] = []
        failure: Exception | None = None
        with self.transaction() as db:
            rows.begin(db)
            ns_ids: dict[str, int] = {}
            position = 0
            for write in writes:
                namespace = write.source.namespace
                if namespace not in ns_ids:
                    ns_ids[namespace] = self._namespace_id(db, namespace)
                db.execute("SAVEPOINT document")
                try:
                    record = self._write_one(db, ns_ids[namespace], write, position, hashes,
                                             rows, now)
                except Exception as exc:  # this document keeps its old version
                    if self._ends_batch(db, exc):  # so does every document of the batch
                        raise
                    db.execute("ROLLBACK TO SAVEPOINT document")
                    db.execute("RELEASE SAVEPOINT document")
                    failure = exc
                    break
                db.execute("RELEASE SAVEPOINT document")
                done.append(record)
                position += 1 + len(write.attachments)
            if failure is not None:
                rows.failed(db, len(done))
            self.dialect.executemany(db, "DELETE FROM failures WHERE source_id = ? AND path = ?",
                                     [(d.source_id, d.path) for d in done])
            self.dialect.executemany(db, "UPDATE namespaces SET graph_dirty = TRUE WHERE id = ?",
                                     [(ns_ids[n],) for n in dict.fromkeys(d.namespace
                                                                          for d in done)])
        rows.committed()
        if failure is not None:
            raise failure
        return done

    def _write_one(self, db: Any, ns_id: int, write: DocumentWrite, position: int,
                   hashes: Sequence[Sequence[str]], rows: ChunkRows, now: float
                   ) -> DocumentRecord:
        """The statements of one document write and its attachments' (inside the caller's
        savepoint); the write is the batch's ``position``-th, its attachments the next ones.
        Attachments the document had before that are not among them are deleted."""
        record = self._write_row(db, ns_id, write, position, hashes[position], rows, now, None)
        for offset, attachment in enumerate(write.attachments, 1):
            self._write_row(db, ns_id, attachment, position + offset, hashes[position + offset],
                            rows, now, record.id)
        stale = self._stale_attachments(db, record.id, [a.path for a in write.attachments])
        sql = self.dialect.sql
        for match, params in self.dialect.in_ids(stale):
            db.execute(sql(f"DELETE FROM chunks WHERE document_id{match}"), params)
            db.execute(sql(f"DELETE FROM documents WHERE id{match}"), params)
        return record

    def _write_row(self, db: Any, ns_id: int, write: DocumentWrite, position: int,
                   hashes: Sequence[str], rows: ChunkRows, now: float, parent_id: int | None
                   ) -> DocumentRecord:
        """One document row, its chunks and their entity links (a file's document, or one of
        its attachments with ``parent_id`` its row)."""
        chunks = list(write.chunks)
        sql = self.dialect.sql
        document_id = self._upsert_document(db, write, ns_id, len(chunks), now, parent_id)
        self._record_language(db, ns_id, write.language)
        # the communities its old chunks fed know its new permission set before they go
        self._record_community_access(db, document_id, write.doc_id, write.access)
        db.execute(sql("DELETE FROM chunks WHERE document_id = ?"), (document_id,))
        rows.insert(db, position, document_id, ns_id, write, hashes)
        if any(write.entity_links):
            rowids = dict(db.execute(
                sql("SELECT chunk_index, id FROM chunks WHERE document_id = ?"), (document_id,)
            ).fetchall())
            write_links(self.dialect, db, ns_id, [
                (int(rowids[chunk.index]), link)
                for chunk, links in zip(chunks, write.entity_links, strict=True)
                for link in links
            ])
        self._record_community_access(db, document_id, write.doc_id, write.access)
        return DocumentRecord(
            document_id, write.doc_id, write.source.id, write.source.namespace, write.path,
            write.title, write.content_hash, write.change_token, write.media_type, len(chunks),
            now, dict(write.metadata), access=write.access, language=write.language,
        )

    def _record_language(self, db: Any, ns_id: int, language: str) -> None:
        """Add a document's language to its namespace's (inside the caller's transaction),
        so queries of the namespace are read in it too (English always is)."""
        if language == ENGLISH:
            return
        sql = self.dialect.sql
        row = db.execute(sql("SELECT languages FROM namespaces WHERE id = ?"), (ns_id,)).fetchone()
        present = {c for c in str(row[0]).split(",") if c} if row is not None else set()
        if language not in present:
            db.execute(sql("UPDATE namespaces SET languages = ? WHERE id = ?"),
                       (",".join(sorted(present | {language})), ns_id))

    def _upsert_document(self, db: Any, write: DocumentWrite, ns_id: int, chunk_count: int,
                         now: float, parent_id: int | None = None) -> int:
        """Insert or replace the document row of ``write`` (inside the caller's transaction);
        returns its id. Its chunks are the caller's to write.

        ``parent_id`` is the row of the document carrying this one (an attachment's mail).
        A file's document may take over the row of an attachment of the same path (the file
        wins; its mail is read again by the pipeline); an attachment never takes over a
        file's document or another mail's attachment (:class:`StoreError`)."""
        origin = write.origin
        origin_columns = ((None,) * 5 if origin is None else
                          (origin.source, origin.schema, origin.table, origin.pk_column,
                           origin.pk_value))
        row = db.execute(self.dialect.sql(
            "INSERT INTO documents(source_id, namespace_id, doc_id, path, title, content_hash,"
            " change_token, media_type, chunk_count, updated_at, origin_source,"
            " origin_schema, origin_table, origin_pk_column, origin_pk_value, metadata,"
            " parent_id, line_hashes, lines_dropped, access, language)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (source_id, path) DO UPDATE SET title = excluded.title,"
            " content_hash = excluded.content_hash, change_token = excluded.change_token,"
            " media_type = excluded.media_type, chunk_count = excluded.chunk_count,"
            " updated_at = excluded.updated_at, origin_source = excluded.origin_source,"
            " origin_schema = excluded.origin_schema, origin_table = excluded.origin_table,"
            " origin_pk_column = excluded.origin_pk_column,"
            " origin_pk_value = excluded.origin_pk_value, metadata = excluded.metadata,"
            " parent_id = excluded.parent_id, line_hashes = excluded.line_hashes,"
            " lines_dropped = excluded.lines_dropped, access = excluded.access,"
            " language = excluded.language"
            " WHERE excluded.parent_id IS NULL OR documents.parent_id = excluded.parent_id"
            " RETURNING id"),
            (write.source.id, ns_id, write.doc_id, write.path, write.title, write.content_hash,
             write.change_token, write.media_type, chunk_count, now, *origin_columns,
             self.dialect.json_param(dict(write.metadata)), parent_id,
             None if write.line_hashes is None else self.dialect.json_param(
                 list(write.line_hashes)),
             self.dialect.json_param(list(write.lines_dropped)),
             self.dialect.access_param(write.access), write.language),
        ).fetchone()
        if row is None:
            raise StoreError(f"{write.source.urn}/{write.path}: an attachment cannot replace "
                             "the document of a file or of another mail's attachment")
        return int(row[0])

    def _record_community_access(self, db: Any, document_id: int, doc_id: str,
                                 access: Access) -> None:
        """Keep ``community_access_sources`` true for one document (inside the caller's
        transaction): every community already recording it gets its new set (none: the row
        goes, the document is open to the namespace now), and with a set, every community
        with a member its chunks link records it. Called before a rewrite drops the old
        chunks and after the new links are written, so a report drawing on either version
        is guarded; the graph build records the rest (:meth:`SqlGraphStore.replace_graph`)."""
        sql = self.dialect.sql
        if access is None:
            db.execute(sql("DELETE FROM community_access_sources WHERE doc_id = ?"), (doc_id,))
            return
        stored = self.dialect.access_param(access)
        db.execute(sql("UPDATE community_access_sources SET access = ? WHERE doc_id = ?"),
                   (stored, doc_id))
        db.execute(sql(
            "INSERT INTO community_access_sources(community_id, doc_id, access)"
            " SELECT DISTINCT cm.community_id, ?, ? FROM chunks c"
            " JOIN chunk_entities ce ON ce.chunk_id = c.id"
            " JOIN community_members cm ON cm.entity_id = ce.entity_id"
            " WHERE c.document_id = ?"
            " ON CONFLICT (community_id, doc_id) DO UPDATE SET access = excluded.access"),
            (doc_id, stored, document_id))

    def set_document_access(self, changes: Mapping[int, Access]) -> int:
        """Store new permission sets without touching text or vectors (see the port)."""
        if not changes:
            return 0
        sql = self.dialect.sql
        changed = 0
        with self.transaction() as db:
            for document_id, access in changes.items():
                rows = db.execute(sql(
                    "SELECT id, doc_id FROM documents WHERE id = ? OR parent_id = ?"),
                    (int(document_id), int(document_id))).fetchall()
                for row_id, doc_id in rows:
                    db.execute(sql("UPDATE documents SET access = ? WHERE id = ?"),
                               (self.dialect.access_param(access), int(row_id)))
                    self._record_community_access(db, int(row_id), str(doc_id), access)
                    changed += 1
            if changed:
                self._access_changed(db)
        return changed

    def _access_changed(self, db: Any) -> None:
        """Note, in the write transaction, that permission sets changed without any chunk
        changing (an index that keeps the restricted rows in memory re-reads them); nothing
        by default: an index that reads permissions with each query needs no note."""

    def _stale_attachments(self, db: Any, parent_id: int, kept: Sequence[str]) -> list[int]:
        """Row ids of the attachments of document ``parent_id`` whose paths are not in
        ``kept`` (gone from the new version of their mail)."""
        rows = db.execute(self.dialect.sql("SELECT id, path FROM documents WHERE parent_id = ?"),
                          (parent_id,)).fetchall()
        keep = set(kept)
        return [int(r[0]) for r in rows if str(r[1]) not in keep]

    def delete_document(self, document: DocumentRecord) -> None:
        """Delete a document, its chunks and its attachments in one transaction."""
        sql = self.dialect.sql
        with self.transaction() as db:
            db.execute(sql("DELETE FROM chunks WHERE document_id IN"
                           " (SELECT id FROM documents WHERE parent_id = ?)"), (document.id,))
            db.execute(sql("DELETE FROM documents WHERE parent_id = ?"), (document.id,))
            db.execute(sql("DELETE FROM chunks WHERE document_id = ?"), (document.id,))
            db.execute(sql("DELETE FROM documents WHERE id = ?"), (document.id,))
            db.execute(sql("UPDATE namespaces SET graph_dirty = TRUE WHERE name = ?"),
                       (document.namespace,))

    def clear_all_chunks(self) -> None:
        """Drop every chunk and forget content hashes, so the next build re-embeds all."""
        with self.transaction() as db:
            self._drop_vector_index(db)
            db.execute("DELETE FROM chunks")
            db.execute("UPDATE documents SET content_hash = '', change_token = '', chunk_count = 0")
            db.execute("DELETE FROM meta WHERE key IN ('embed_model', 'embed_dimension')")

    # -- chunks --------------------------------------------------------------

    def chunks_by_rowid(self, rowids: Sequence[int]) -> dict[int, StoredChunk]:
        """Stored chunks (with document identity and title) for the given row ids."""
        return {rowid: chunk for rowid, (chunk, _) in self._read_chunks(rowids, "").items()}

    def chunk_places(self, rowids: Sequence[int]) -> dict[int, ChunkPlace]:
        """Where each chunk lives, without its text (see the port)."""
        out: dict[int, ChunkPlace] = {}
        ids = list(dict.fromkeys(int(r) for r in rowids))
        db = self.connection()
        for match, params in self.dialect.in_ids(ids):
            for r, n, kind, d, t in db.execute(self.dialect.sql(
                    "SELECT c.id, c.namespace_id, c.kind, c.document_id, d.title FROM chunks c"
                    f" JOIN documents d ON d.id = c.document_id WHERE c.id{match}"),
                    params).fetchall():
                out[int(r)] = ChunkPlace(int(n), str(kind), int(d), str(t))
        return out

    def placed_chunks(self, rowids: Sequence[int]
                      ) -> dict[int, tuple[StoredChunk, ChunkPlace]]:
        """Stored chunks with their namespace id, kind and document row id, in one read
        (see :meth:`~docgraph.store.base.StoreCatalog.placed_chunks`)."""
        return {rowid: (chunk, place) for rowid, (chunk, place) in self._read_chunks(
            rowids, ", c.namespace_id, c.kind, c.document_id").items() if place is not None}

    def _read_chunks(self, rowids: Sequence[int], places: str
                     ) -> dict[int, tuple[StoredChunk, ChunkPlace | None]]:
        """The chunks of ``rowids``; with ``places`` (its extra columns) where each lives."""
        out: dict[int, tuple[StoredChunk, ChunkPlace | None]] = {}
        ids = list(dict.fromkeys(int(r) for r in rowids))
        db = self.connection()
        json_value = self.dialect.json_value
        for match, params in self.dialect.in_ids(ids):
            for row in db.execute(self.dialect.sql(
                    f"SELECT {_CHUNK_COLUMNS}{places} FROM chunks c"
                    " JOIN documents d ON d.id = c.document_id"
                    f" JOIN namespaces n ON n.id = c.namespace_id WHERE c.id{match}"),
                    params).fetchall():
                chunk = StoredChunk(
                    rowid=int(row[0]), chunk_id=f"{row[1]}#chunk-{row[3]}", doc_id=row[1],
                    namespace=row[2], index=int(row[3]), text=row[4],
                    section_path=tuple(json_value(row[5])), title=row[6], source_path=row[7],
                    prev_index=row[8], next_index=row[9], parent_index=row[10],
                    origin=None if row[11] is None else RowOrigin(*row[11:16]),
                    pages=None if row[16] is None else (int(row[16]), int(row[17])),
                    ocr=bool(row[18]), access=self.dialect.access_value(row[19]),
                )
                place = ChunkPlace(int(row[20]), str(row[21]), int(row[22]), str(row[6])) \
                    if places else None
                out[chunk.rowid] = (chunk, place)
        return out
