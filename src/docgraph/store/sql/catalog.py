"""The catalog's records that both relational backends keep alike, written once: the
embedding model, namespaces, sources, document listings, failures, row origins and the
per-namespace counts.

:class:`SqlCatalogRecords` is the base of
:class:`~docgraph.store.sql.documents.SqlCatalogDocuments` (the document and chunk writes,
also written once), which :class:`~docgraph.store.sqlite.SQLiteCatalog` and
:class:`~docgraph.store.postgres.PostgresCatalog` extend; what differs (how chunk rows store
vectors and BM25 terms, connections, migrations) stays in each backend's folder.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Any

from docgraph.errors import StoreError
from docgraph.languages import ENGLISH
from docgraph.model import (
    Access,
    DocGate,
    DocumentRecord,
    RowOrigin,
    SourceRecord,
    StoredChunk,
    urn_scheme,
)
from docgraph.store.base import (
    FailureRecord,
    NamespaceStats,
    require_namespaces,
)
from docgraph.store.sql.dialect import Dialect, marks

_IN_BATCH = 500  # values per IN (...) list


class SqlCatalogRecords:
    """Catalog methods whose SQL is the same on every relational backend."""

    dialect: Dialect

    _DOC_COLUMNS = (
        "d.id, d.doc_id, d.source_id, n.name, d.path, d.title, d.content_hash,"
        " d.change_token, d.media_type, d.chunk_count, d.updated_at, d.metadata,"
        " (SELECT p.path FROM documents p WHERE p.id = d.parent_id), d.access, d.language"
    )

    def connection(self) -> Any:
        """This thread's connection (implemented by the backend)."""
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction on this thread's connection (implemented by the backend)."""
        raise NotImplementedError

    def _run(self, text: str, params: Sequence[Any] = ()) -> Any:
        return self.connection().execute(self.dialect.sql(text), params)

    # -- model ---------------------------------------------------------------

    def embedding_model(self) -> tuple[str, int] | None:
        """(model name, dimension) recorded for this index, if any."""
        rows = dict(self._run(
            "SELECT key, value FROM meta WHERE key IN ('embed_model', 'embed_dimension')"
        ).fetchall())
        if "embed_model" not in rows:
            return None
        return str(rows["embed_model"]), int(rows["embed_dimension"])

    # -- namespaces and sources ----------------------------------------------

    def _namespace_id(self, db: Any, name: str) -> int:
        sql = self.dialect.sql
        db.execute(sql("INSERT INTO namespaces(name) VALUES (?) ON CONFLICT (name) DO NOTHING"),
                   (name,))
        return int(db.execute(sql("SELECT id FROM namespaces WHERE name = ?"), (name,))
                   .fetchone()[0])

    @cached_property
    def _namespace_id_cache(self) -> dict[str, int]:
        """Namespace ids by name, as read outside any transaction (:meth:`namespace_ids`)."""
        return {}

    def namespace_ids(self, names: Iterable[str]) -> dict[str, int]:
        """Ids of the named namespaces that exist (unknown names are absent).

        Ids once read are kept: a namespace row is created by a build and never deleted or
        renamed (no statement of docgraph deletes one) and its id never changes, so a name
        resolves to the same id for as long as the catalog is open; a query then reads none
        (it asked four times per lookup). A name not kept is read every time, so a
        namespace another process created since (a CLI build beside a server) is found and
        one that does not exist never resolves. Only ids read outside a transaction are
        kept: a row inserted by a transaction that is rolled back never existed, and SQLite
        gives its id to the next namespace created."""
        wanted = list(dict.fromkeys(names))
        known = self._namespace_id_cache
        found = {n: known[n] for n in wanted if n in known}
        missing = [n for n in wanted if n not in found]
        if missing:
            db = self.connection()
            read: dict[str, int] = {}
            for start in range(0, len(missing), _IN_BATCH):
                part = missing[start:start + _IN_BATCH]
                read.update((str(n), int(i)) for n, i in db.execute(self.dialect.sql(
                    f"SELECT name, id FROM namespaces WHERE name IN ({marks(len(part))})"),
                    part))
            if read and not self.dialect.in_transaction(db):
                known.update(read)
            found.update(read)
        return {n: found[n] for n in wanted if n in found}

    def namespace_languages(self, namespace_ids: Sequence[int]) -> frozenset[str]:
        """The languages a query of these namespaces is read in: English, and every other
        language their documents were analysed in (recorded as documents are written, never
        forgotten: a reading no document needs any more only adds terms that match nothing)."""
        found = {ENGLISH}
        for match, params in self.dialect.in_ids(list(namespace_ids)):
            for (value,) in self._run(
                    f"SELECT languages FROM namespaces WHERE id{match}", params).fetchall():
                found.update(c for c in str(value).split(",") if c)
        return frozenset(found)

    def namespaces(self) -> list[str]:
        """Names of namespaces that have at least one source."""
        rows = self._run(
            "SELECT n.name FROM namespaces n WHERE EXISTS"
            " (SELECT 1 FROM sources s WHERE s.namespace_id = n.id)"
            f" ORDER BY n.name{self.dialect.binary_order}").fetchall()
        return [str(r[0]) for r in rows]

    def add_source(self, urn: str, namespace: str, display_name: str | None = None,
                   public_url: str | None = None) -> SourceRecord:
        """Register a normalized folder URN in ``namespace`` with its display name and
        public URL; returns the existing one (unchanged) if any."""
        if not namespace or not namespace.strip():
            raise StoreError("namespace name must not be empty")
        sql = self.dialect.sql
        with self.transaction() as db:
            ns_id = self._namespace_id(db, namespace)
            db.execute(sql(
                "INSERT INTO sources(urn, namespace_id, scheme, created_at, display_name,"
                " public_url) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (urn, namespace_id) DO NOTHING"),
                (urn, ns_id, urn_scheme(urn), time.time(), display_name or None, public_url))
            row = db.execute(sql("SELECT id, display_name, public_url FROM sources"
                                 " WHERE urn = ? AND namespace_id = ?"), (urn, ns_id)).fetchone()
        return SourceRecord(int(row[0]), urn, namespace, urn_scheme(urn), row[1] or "", row[2])

    def update_source(self, source: SourceRecord, *, display_name: str | None = None,
                      public_url: str | None = None, clear_public_url: bool = False
                      ) -> SourceRecord:
        """Change a source's display name and/or public URL (None keeps the value;
        ``clear_public_url`` removes the URL)."""
        sql = self.dialect.sql
        with self.transaction() as db:
            if display_name is not None:
                db.execute(sql("UPDATE sources SET display_name = ? WHERE id = ?"),
                           (display_name, source.id))
            if public_url is not None or clear_public_url:
                db.execute(sql("UPDATE sources SET public_url = ? WHERE id = ?"),
                           (None if clear_public_url else public_url, source.id))
        for current in self.list_sources():
            if current.id == source.id:
                return current
        raise StoreError(f"source {source.urn} in {source.namespace!r} is not registered")

    def list_sources(self) -> list[SourceRecord]:
        """Every registered source, ordered by namespace then URN."""
        order = self.dialect.binary_order
        rows = self._run(
            "SELECT s.id, s.urn, n.name, s.scheme, s.display_name, s.public_url FROM sources s"
            f" JOIN namespaces n ON n.id = s.namespace_id ORDER BY n.name{order}, s.urn{order}"
        ).fetchall()
        return [SourceRecord(int(i), str(u), str(n), str(sc), d or "", p)
                for i, u, n, sc, d, p in rows]

    def remove_source(self, source: SourceRecord) -> int:
        """Delete a source with its documents, chunks and failures, in one transaction."""
        sql = self.dialect.sql
        with self.transaction() as db:
            count = int(db.execute(sql("SELECT count(*) FROM documents WHERE source_id = ?"),
                                   (source.id,)).fetchone()[0])
            db.execute(sql("DELETE FROM chunks WHERE document_id IN"
                           " (SELECT id FROM documents WHERE source_id = ?)"), (source.id,))
            db.execute(sql("DELETE FROM documents WHERE source_id = ?"), (source.id,))
            db.execute(sql("DELETE FROM failures WHERE source_id = ?"), (source.id,))
            db.execute(sql("UPDATE namespaces SET graph_dirty = TRUE WHERE name = ?"),
                       (source.namespace,))
            db.execute(sql("DELETE FROM sources WHERE id = ?"), (source.id,))
        return count

    def mark_indexed(self, source: SourceRecord) -> None:
        """Record that a build of this source just finished."""
        with self.transaction() as db:
            db.execute(self.dialect.sql("UPDATE sources SET last_indexed_at = ? WHERE id = ?"),
                       (time.time(), source.id))

    # -- documents -----------------------------------------------------------

    def _document(self, row: Sequence[Any]) -> DocumentRecord:
        metadata = self.dialect.json_value(row[11]) if row[11] is not None else {}
        return DocumentRecord(
            int(row[0]), str(row[1]), 0 if row[2] is None else int(row[2]), str(row[3]),
            str(row[4]), str(row[5]), str(row[6]), str(row[7]), str(row[8]), int(row[9]),
            float(row[10]), {str(k): str(v) for k, v in dict(metadata).items()},
            None if row[12] is None else str(row[12]),
            self.dialect.access_value(row[13]),
            None if row[14] is None else str(row[14]),
        )

    def documents_for_source(self, source: SourceRecord) -> dict[str, DocumentRecord]:
        """The source's documents keyed by relative path."""
        rows = self._run(
            f"SELECT {self._DOC_COLUMNS} FROM documents d"
            " JOIN namespaces n ON n.id = d.namespace_id WHERE d.source_id = ?",
            (source.id,)).fetchall()
        return {str(r[4]): self._document(r) for r in rows}

    def line_counts(self, source: SourceRecord, floor: int) -> dict[str, int]:
        """The line fingerprints held by at least ``floor`` counted documents of the source,
        with how many hold each (counted by the database: only these rows come back)."""
        elements = ("json_each(d.line_hashes) j" if self.dialect.name == "sqlite"
                    else "jsonb_array_elements_text(d.line_hashes) j(value)")
        rows = self._run(
            f"SELECT j.value, count(*) FROM documents d, {elements}"
            " WHERE d.source_id = ? AND d.line_hashes IS NOT NULL"
            " GROUP BY j.value HAVING count(*) >= ?", (source.id, floor)).fetchall()
        return {str(f): int(n) for f, n in rows}

    def line_fingerprints(self, source: SourceRecord, holding: Iterable[str]
                          ) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        """(line fingerprints, fingerprints dropped) of the source's counted documents that
        hold any of ``holding`` or dropped any line, keyed by path (attachments included)."""
        wanted = sorted(set(holding))
        if self.dialect.name == "sqlite":
            dropped_any = "d.lines_dropped <> '[]'"
            holds = ("EXISTS (SELECT 1 FROM json_each(d.line_hashes) j"
                     " WHERE j.value IN (SELECT value FROM json_each(?)))")
        else:
            dropped_any = "d.lines_dropped <> '[]'::jsonb"
            holds = ("EXISTS (SELECT 1 FROM jsonb_array_elements_text(d.line_hashes) j(value)"
                     " WHERE j.value IN (SELECT jsonb_array_elements_text(?)))")
        rows = self._run(
            "SELECT d.path, d.line_hashes, d.lines_dropped FROM documents d"
            " WHERE d.source_id = ? AND d.line_hashes IS NOT NULL"
            f" AND ({dropped_any} OR {holds})",
            (source.id, self.dialect.json_param(wanted))).fetchall()
        value = self.dialect.json_value
        return {str(path): (frozenset(value(hashes)),
                            frozenset(value(dropped) if dropped is not None else ()))
                for path, hashes, dropped in rows}

    def list_documents(
        self, namespaces: Iterable[str], after_id: int = 0, limit: int = 100
    ) -> list[DocumentRecord]:
        """Documents of the given namespaces, ordered by internal id, for cursor paging."""
        names = sorted(require_namespaces(namespaces))
        rows = self._run(
            f"SELECT {self._DOC_COLUMNS} FROM documents d"
            f" JOIN namespaces n ON n.id = d.namespace_id WHERE n.name IN ({marks(len(names))})"
            " AND d.kind = 'document' AND d.id > ? ORDER BY d.id LIMIT ?",
            [*names, after_id, limit]).fetchall()
        return [self._document(r) for r in rows]

    def touch_document(self, document: DocumentRecord, change_token: str) -> None:
        """Store a new change token for a document whose content hash did not change, and
        for its attachments (they follow their mail's token)."""
        with self.transaction() as db:
            db.execute(self.dialect.sql(
                "UPDATE documents SET change_token = ? WHERE id = ? OR parent_id = ?"),
                (change_token, document.id, document.id))

    def gates_for(self, doc_ids: Iterable[str]) -> dict[str, DocGate]:
        """Row origins and permission sets of the given documents (documents with neither
        are absent)."""
        ids = list(dict.fromkeys(doc_ids))
        out: dict[str, DocGate] = {}
        for start in range(0, len(ids), _IN_BATCH):
            part = ids[start:start + _IN_BATCH]
            for row in self._run(
                "SELECT doc_id, origin_source, origin_schema, origin_table, origin_pk_column,"
                " origin_pk_value, access FROM documents"
                " WHERE (origin_source IS NOT NULL OR access IS NOT NULL)"
                f" AND doc_id IN ({marks(len(part))})", part):
                out[str(row[0])] = DocGate(
                    None if row[1] is None else RowOrigin(*(str(v) for v in row[1:6])),
                    self.dialect.access_value(row[6]))
        return out

    def row_table(self, source_id: int) -> RowOrigin | None:
        """The table (source, schema, table, primary key column) one row document of
        source ``source_id`` comes from, as an origin with an empty key value."""
        row = self._run(
            "SELECT origin_source, origin_schema, origin_table, origin_pk_column FROM"
            " documents WHERE source_id = ? AND origin_source IS NOT NULL LIMIT 1",
            [source_id]).fetchone()
        if row is None:
            return None
        source, schema, table, pk_column = (str(v) for v in row)
        return RowOrigin(source, schema, table, pk_column, "")

    def document_metadata(self, namespace: str, doc_id: str) -> dict[str, str]:
        """What the format said about one document (empty when nothing, or no such
        document in ``namespace``)."""
        row = self._run(
            "SELECT d.metadata FROM documents d JOIN namespaces n ON n.id = d.namespace_id"
            " WHERE n.name = ? AND d.doc_id = ?", [namespace, doc_id]).fetchone()
        if row is None or row[0] is None:
            return {}
        return {str(k): str(v) for k, v in dict(self.dialect.json_value(row[0])).items()}

    # -- failures ------------------------------------------------------------

    def document_chunks(self, doc_ids: Iterable[str], namespaces: Iterable[str]
                        ) -> list[StoredChunk]:
        """The text chunks of the given documents in the given namespaces, by namespace,
        document and chunk index (community reports are not documents)."""
        names = sorted(require_namespaces(namespaces))
        wanted = list(dict.fromkeys(doc_ids))
        rowids: list[int] = []
        for start in range(0, len(wanted), _IN_BATCH):
            part = wanted[start:start + _IN_BATCH]
            rowids.extend(int(r[0]) for r in self._run(
                "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
                " JOIN namespaces n ON n.id = d.namespace_id"
                f" WHERE c.kind = 'text' AND d.doc_id IN ({marks(len(part))})"
                f" AND n.name IN ({marks(len(names))})", [*part, *names]))
        chunks = self.chunks_by_rowid(rowids).values()
        return sorted(chunks, key=lambda c: (c.namespace, c.doc_id, c.index))

    def chunks_by_rowid(self, rowids: Sequence[int]) -> dict[int, StoredChunk]:
        """Stored chunks for the given row ids (:mod:`docgraph.store.sql.documents`)."""
        raise NotImplementedError

    def record_failure(self, source: SourceRecord, path: str, reason: str,
                       access: Access = frozenset()) -> None:
        """Remember that ``path`` under ``source`` could not be indexed, why, and who may
        be told so (``access``, the file's permission set)."""
        with self.transaction() as db:
            db.execute(self.dialect.sql(
                "INSERT INTO failures (source_id, path, reason, at, access)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (source_id, path)"
                " DO UPDATE SET reason = excluded.reason, at = excluded.at,"
                " access = excluded.access"),
                (source.id, path, reason, time.time(), self.dialect.access_param(access)))

    def clear_failure(self, source: SourceRecord, path: str) -> None:
        """Forget a recorded failure."""
        with self.transaction() as db:
            db.execute(self.dialect.sql("DELETE FROM failures WHERE source_id = ? AND path = ?"),
                       (source.id, path))

    def failures(self) -> list[FailureRecord]:
        """Every recorded failure, newest first, with who may be told of it."""
        rows = self._run(
            "SELECT n.name, s.urn, f.path, f.reason, f.at, f.access FROM failures f"
            " JOIN sources s ON s.id = f.source_id JOIN namespaces n ON n.id = s.namespace_id"
            " ORDER BY f.at DESC").fetchall()
        return [FailureRecord(str(n), str(u), str(p), str(r), float(a),
                              self.dialect.access_value(access))
                for n, u, p, r, a, access in rows]

    # -- counts --------------------------------------------------------------

    def restricted_counts(self, namespaces: Iterable[str]
                          ) -> list[tuple[str, frozenset[str], int, int]]:
        """Per namespace and permission set, the documents and text chunks that have it
        (see the port)."""
        names = sorted(set(namespaces))
        if not names:
            return []
        counted: dict[tuple[str, frozenset[str]], list[int]] = {}
        for name, access, chunks in self._run(
                "SELECT n.name, d.access, d.chunk_count FROM documents d"
                " JOIN namespaces n ON n.id = d.namespace_id"
                f" WHERE d.access IS NOT NULL AND d.kind = 'document'"
                f" AND n.name IN ({marks(len(names))})", names):
            key = (str(name), self.dialect.principals_value(access))
            totals = counted.setdefault(key, [0, 0])
            totals[0] += 1
            totals[1] += int(chunks)
        return [(name, access, documents, chunks)
                for (name, access), (documents, chunks) in sorted(
                    counted.items(), key=lambda item: (item[0][0], sorted(item[0][1])))]

    def stats(self) -> list[NamespaceStats]:
        """Sources, documents, chunks, failures, entities and communities per namespace."""
        rows = self._run(
            "SELECT n.name,"
            " (SELECT count(*) FROM sources s WHERE s.namespace_id = n.id),"
            " (SELECT count(*) FROM documents d WHERE d.namespace_id = n.id"
            "   AND d.kind = 'document'),"
            " (SELECT count(*) FROM chunks c WHERE c.namespace_id = n.id AND c.kind = 'text'),"
            " (SELECT count(*) FROM failures f JOIN sources s ON s.id = f.source_id"
            "   WHERE s.namespace_id = n.id),"
            " (SELECT max(last_indexed_at) FROM sources s WHERE s.namespace_id = n.id),"
            " (SELECT count(*) FROM entities e WHERE e.namespace_id = n.id),"
            " (SELECT count(*) FROM communities c WHERE c.namespace_id = n.id),"
            " n.graph_built_at"
            f" FROM namespaces n ORDER BY n.name{self.dialect.binary_order}").fetchall()
        return [
            NamespaceStats(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]),
                           None if r[5] is None else float(r[5]), int(r[6]), int(r[7]),
                           None if r[8] is None else float(r[8]))
            for r in rows
        ]
