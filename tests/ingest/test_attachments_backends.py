"""A mail's attachments are documents of their own, named ``<mail>/<attachment>``, on every
backend: own document ids, parent link and change token of their mail, replaced with it in
one write, deleted with it or when they leave it, governed like it, and an unchanged mail
is not read again. An index from before attachments were documents is upgraded and its
mails read again."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from docgraph import DocGraph
from docgraph.errors import NotFound, StoreError
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.model import ChunkDraft, DocumentRecord
from docgraph.serve.tools import DocgraphTools
from docgraph.sources.credentials import credential_key
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from tests import backend_graphs, office_fixtures, pg
from tests.helpers import write_files
from tests.servers import S3Server

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

PARTS = b"Part,Price\nPLV-CS-220-B,186 EUR\nPLV-RL-310,42 EUR\n"
AUDIT = b"Dock,Serial,Spring\nD-03,PLV2-0401,rev A\nD-11,PLV2-0433,rev A\n"
MAIL = "support/dock.eml"


def _mail(attachments: dict[str, bytes], body: str = "The spring kits are attached.\n") -> bytes:
    return bytes(office_fixtures.mail_message(
        "Priya Raman <priya.raman@halyard.example>", "Joost van Dijk <joost@nordhaven.example>",
        "Dock D-14 parts", "Fri, 28 Mar 2025 10:00:00 +0100", body,
        "<parts-1@halyard.example>", attachments))


def _folder(tmp_path: Path, attachments: dict[str, bytes] | None = None) -> Path:
    return write_files(tmp_path / "docs", {
        MAIL: _mail({"parts.csv": PARTS} if attachments is None else attachments),
        "notes.md": "# Fleet notes\n\nThe Kestrel K2 fleet works the Rotterdam site.\n",
    })


def _documents(graph: DocGraph) -> dict[str, DocumentRecord]:
    (source,) = graph.store.list_sources()
    return graph.store.documents_for_source(source)


def _texts(graph: DocGraph) -> dict[str, list[str]]:
    """Chunk texts by document path, every text chunk the store holds."""
    rowids = [rowid for rowid, _ in graph.graph_store.chunk_texts("ops")]
    out: dict[str, list[str]] = {}
    for chunk in graph.store.chunks_by_rowid(rowids).values():
        out.setdefault(chunk.source_path, []).append(chunk.text)
    return out


def test_an_attachment_is_a_document_of_its_own_governed_like_its_mail(tmp_path, make_graph):
    graph = make_graph()
    folder = _folder(tmp_path)
    graph.sources.add_folder(folder, "ops", public_url="https://intra.example/docs/")
    report = graph.index(folder, namespace="ops")
    assert report.failed == [] and sorted(report.added) == ["notes.md", MAIL]

    documents = _documents(graph)
    assert sorted(documents) == ["notes.md", MAIL, f"{MAIL}/parts.csv"]
    mail, parts = documents[MAIL], documents[f"{MAIL}/parts.csv"]
    urn = normalize_urn(folder)
    assert parts.doc_id == document_id(urn, f"{MAIL}/parts.csv") != mail.doc_id
    assert (parts.parent, mail.parent, documents["notes.md"].parent) == (MAIL, None, None)
    assert (parts.namespace, parts.change_token) == ("ops", mail.change_token)
    assert parts.media_type == "text/csv" and mail.metadata["attachments"] == "parts.csv"
    assert parts.metadata["attached_to"] == "Priya Raman, 28 Mar 2025 10:00"
    texts = _texts(graph)
    assert any("PLV-CS-220-B; Price: 186 EUR" in t for t in texts[f"{MAIL}/parts.csv"])
    assert not any("PLV-CS-220-B" in t for t in texts[MAIL])  # not also inside the mail
    assert any("Attachment: parts.csv" in t for t in texts[MAIL])

    hits = graph.search("price of the PLV-CS-220-B spring kit", namespaces={"ops"}, k=3)
    assert hits[0].source_path == f"{MAIL}/parts.csv"
    assert hits[0].doc_id == parts.doc_id

    tools = DocgraphTools(Governance(graph, StaticEntitlements(
        [RoleAssignment("agent", "reader", "ops"), RoleAssignment("other", "reader", "hr")])))
    agent, other = Caller("agent"), Caller("other")
    found = tools.call("lookup_knowledge", agent, {"query": "price of the PLV-CS-220-B kit"})
    assert found["evidence"][0]["source"] == f"{MAIL}/parts.csv"
    # No file of its own to open: its citation link opens its mail.
    assert found["evidence"][0]["url"] == f"https://intra.example/docs/{MAIL}"
    listed = {d["path"] for d in tools.call("list_documents", agent, {})["documents"]}
    assert f"{MAIL}/parts.csv" in listed
    read = tools.call("read_document", agent, {"id": f"docs/{MAIL}/parts.csv"})
    assert any("PLV-RL-310" in c["text"] for c in read["chunks"])
    with pytest.raises(NotFound):  # another namespace's caller: as if it did not exist
        tools.call("read_document", other, {"id": f"docs/{MAIL}/parts.csv"})
    assert tools.call("list_documents", other, {})["documents"] == []


def test_an_unchanged_mail_is_not_read_and_its_attachments_follow_its_token(
        tmp_path, make_graph, embedder):
    graph = make_graph()
    folder = _folder(tmp_path)
    graph.index(folder, namespace="ops")
    before = _documents(graph)
    embedded = embedder.embedded
    again = graph.index(folder, namespace="ops")
    assert (again.bodies_read, again.unchanged, again.added, again.removed) == (0, 2, [], [])
    assert embedder.embedded == embedded and _documents(graph) == before

    stat = (folder / MAIL).stat()  # touched: same bytes, a later modification time
    os.utime(folder / MAIL, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    touched = graph.index(folder, namespace="ops")
    assert (touched.bodies_read, touched.updated, touched.chunks_embedded) == (1, [], 0)
    after = _documents(graph)
    assert after[MAIL].change_token != before[MAIL].change_token
    assert after[f"{MAIL}/parts.csv"].change_token == after[MAIL].change_token


def test_attachments_are_replaced_with_their_mail_and_deleted_when_gone(
        tmp_path, make_graph, embedder):
    graph = make_graph()
    folder = _folder(tmp_path)
    graph.index(folder, namespace="ops")
    old_parts = _documents(graph)[f"{MAIL}/parts.csv"]

    # The mail now carries a changed parts list and an audit; the parts document keeps its
    # identity and row, and only its changed chunk is embedded again.
    changed = PARTS.replace(b"42 EUR", b"44 EUR")
    (folder / MAIL).write_bytes(_mail({"parts.csv": changed, "audit.csv": AUDIT}))
    report = graph.index(folder, namespace="ops")
    assert (report.updated, report.added, report.removed) == ([MAIL], [], [])
    documents = _documents(graph)
    assert sorted(documents) == ["notes.md", MAIL, f"{MAIL}/audit.csv", f"{MAIL}/parts.csv"]
    parts = documents[f"{MAIL}/parts.csv"]
    assert (parts.id, parts.doc_id) == (old_parts.id, old_parts.doc_id)
    assert parts.content_hash != old_parts.content_hash
    texts = _texts(graph)
    assert any("44 EUR" in t for t in texts[f"{MAIL}/parts.csv"])
    assert not any("42 EUR" in t for ts in texts.values() for t in ts)
    assert any("PLV2-0433" in t for t in texts[f"{MAIL}/audit.csv"])

    (folder / MAIL).write_bytes(_mail({"audit.csv": AUDIT}))  # parts.csv left the mail
    graph.index(folder, namespace="ops")
    assert sorted(_documents(graph)) == ["notes.md", MAIL, f"{MAIL}/audit.csv"]
    assert not any("PLV-CS-220-B" in t for ts in _texts(graph).values() for t in ts)
    hits = graph.search("price of the PLV-CS-220-B spring kit", namespaces={"ops"}, k=5)
    assert all(not h.source_path.endswith("parts.csv") for h in hits)

    (folder / MAIL).unlink()  # the mail is deleted: its attachments go with it
    gone = graph.index(folder, namespace="ops")
    assert gone.removed == [MAIL]
    assert sorted(_documents(graph)) == ["notes.md"]
    assert set(_texts(graph)) == {"notes.md"}


def test_an_attachment_never_takes_a_files_path_and_a_file_takes_an_attachments(
        tmp_path, make_graph):
    """Object stores can hold ``x.eml`` and ``x.eml/a.csv`` both: the file's document wins
    the path (the store refuses the reverse); the pipeline leaves such an attachment out."""
    graph = make_graph()
    folder = _folder(tmp_path)
    graph.index(folder, namespace="ops")
    (source,) = graph.store.list_sources()
    catalog = graph.store
    dimension = graph.embedder.dimension

    def write(path: str, text: str, attachments: tuple[DocumentWrite, ...] = ()
              ) -> DocumentWrite:
        vector = np.zeros((1, dimension), dtype=np.float32)
        vector[0, 0] = 1.0
        return DocumentWrite(
            source=source, path=path, doc_id=document_id(source.urn, path), title=path,
            content_hash=text, change_token="t", media_type="text/plain",
            chunks=[ChunkDraft(0, text, (), 3, None, None, None)], breadcrumbs=[f"[{path}]"],
            embedded_texts=[text], vectors=vector, attachments=attachments)

    # notes.md is a file's document: no mail's attachment may replace it.
    with pytest.raises(StoreError, match="attachment cannot replace"):
        catalog.write_documents([write("other.eml", "mail", (write("notes.md", "x"),))])
    documents = _documents(graph)
    assert "other.eml" not in documents and documents["notes.md"].parent is None
    assert any("Kestrel" in t for t in _texts(graph)["notes.md"])

    # A file listed at an attachment's path takes its row over: no parent any more.
    catalog.write_documents([write(f"{MAIL}/parts.csv", "a file of its own")])
    documents = _documents(graph)
    assert documents[f"{MAIL}/parts.csv"].parent is None
    assert _texts(graph)[f"{MAIL}/parts.csv"] == ["a file of its own"]
    # The mail written again (without it) leaves that file alone.
    catalog.write_documents([write(MAIL, "the mail again")])
    assert _texts(graph)[f"{MAIL}/parts.csv"] == ["a file of its own"]


def test_an_index_from_before_attachments_were_documents_reads_its_mails_again(
        tmp_path, make_graph, embedder):
    folder = _folder(tmp_path)
    graph = make_graph("old")
    graph.index(folder, namespace="ops")
    db = graph.store.connection()
    # What earlier versions held: no attachment documents, no parent column or index.
    db.execute("DELETE FROM chunks WHERE document_id IN"
               " (SELECT id FROM documents WHERE parent_id IS NOT NULL)")
    db.execute("DELETE FROM documents WHERE parent_id IS NOT NULL")
    if graph.backend == "embedded":  # (SQLite cannot drop a column with a foreign key)
        db.execute("DROP INDEX documents_parent")
        db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    else:  # migration 14 added the parent link; it and every later one are undone
        pg.roll_back_migrations(db, 13)
    graph.close()

    upgraded = make_graph("old")
    documents = _documents(upgraded)
    assert sorted(documents) == ["notes.md", MAIL]
    assert documents[MAIL].content_hash == "" and documents["notes.md"].content_hash
    embedded = embedder.embedded
    report = upgraded.index(folder, namespace="ops")
    assert (report.updated, report.unchanged, report.bodies_read) == ([MAIL], 1, 1)
    assert embedder.embedded - embedded == report.chunks_embedded
    assert report.chunks_reused >= 1  # the mail's own chunks kept their vectors
    assert sorted(_documents(upgraded)) == ["notes.md", MAIL, f"{MAIL}/parts.csv"]
    again = upgraded.index(folder, namespace="ops")
    assert (again.updated, again.bodies_read) == ([], 0)


def test_on_an_object_store_a_file_at_an_attachments_path_wins_it_and_gives_it_back(
        make_graph, monkeypatch):
    """S3 (moto) can hold ``box.eml`` and ``box.eml/parts.csv`` at once. The listed file is
    the document of that path: the mail is read again (though unchanged) without that
    attachment, and once the file is gone the mail is read again and the attachment is its
    own document again."""
    server = S3Server()
    bucket = f"docs-{uuid.uuid4().hex[:10]}"
    client = server.client()
    client.create_bucket(Bucket=bucket)
    urn = normalize_urn(f"s3://{bucket}/docs")
    key = credential_key(urn)
    for name, value in (("KEY", "test"), ("SECRET", "test"), ("REGION", "us-east-1"),
                        ("ENDPOINT_URL", server.endpoint), ("RETRIES", "1")):
        monkeypatch.setenv(f"DOCGRAPH_SOURCE_{key}_{name}", value)
    try:
        client.put_object(Bucket=bucket, Key="docs/box.eml",
                          Body=_mail({"parts.csv": PARTS, "audit.csv": AUDIT}))
        graph = make_graph()
        graph.sources.add_folder(urn, "ops")

        def build() -> tuple[Any, dict[str, DocumentRecord]]:
            (report,) = graph.refresher.run_once().reports
            return report, _documents(graph)

        _, documents = build()
        assert {p: d.parent for p, d in documents.items()} == {
            "box.eml": None, "box.eml/parts.csv": "box.eml", "box.eml/audit.csv": "box.eml"}
        mail_hash = documents["box.eml"].content_hash

        client.put_object(Bucket=bucket, Key="docs/box.eml/parts.csv",
                          Body=b"Part,Price\nFILE-ONLY-9,1 EUR\n")
        report, documents = build()
        assert report.failed == [] and sorted(report.updated) == ["box.eml"]
        assert report.added == ["box.eml/parts.csv"]
        assert {p: d.parent for p, d in documents.items()} == {
            "box.eml": None, "box.eml/parts.csv": None, "box.eml/audit.csv": "box.eml"}
        assert documents["box.eml"].content_hash == mail_hash  # read again, not changed
        assert documents["box.eml"].metadata["attachments"] == "audit.csv"
        assert "parts.csv (a file of the same path exists)" in \
            documents["box.eml"].metadata["attachments_skipped"]
        texts = _texts(graph)
        assert any("FILE-ONLY-9" in t for t in texts["box.eml/parts.csv"])
        assert not any("PLV-CS-220-B" in t for ts in texts.values() for t in ts)

        again, _ = build()  # settled: nothing is read
        assert (again.bodies_read, again.updated, again.added) == (0, [], [])

        client.delete_object(Bucket=bucket, Key="docs/box.eml/parts.csv")
        report, documents = build()
        assert report.removed == ["box.eml/parts.csv"] and report.updated == ["box.eml"]
        assert {p: d.parent for p, d in documents.items()} == {
            "box.eml": None, "box.eml/parts.csv": "box.eml", "box.eml/audit.csv": "box.eml"}
        assert any("PLV-CS-220-B" in t for t in _texts(graph)["box.eml/parts.csv"])
    finally:
        server.stop()
