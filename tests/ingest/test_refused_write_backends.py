"""Characters no store can keep (NUL, lone surrogates) are taken out of extracted text before
anything is written, so such files index alike on SQLite and PostgreSQL (PostgreSQL refused
NUL and ended the build; a lone surrogate failed the file everywhere)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from docgraph import DocGraph
from docgraph.ingest.storable import storable_document
from docgraph.model import AttachedDocument, Block, BlockKind, ExtractedDocument
from tests import backend_graphs, office_fixtures
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

MakeGraph = Callable[..., DocGraph]


def _texts(graph: DocGraph, query: str) -> str:
    return " ".join(h.text for h in graph.search(query, namespaces=["ops"], k=10))


def test_nul_and_lone_surrogates_are_taken_out_before_the_write(
        tmp_path: Path, make_graph: MakeGraph) -> None:
    """PostgreSQL refuses NUL in text and JSON (the build ended there); UTF-8 cannot hold a
    lone surrogate (the file failed on every backend). Both index now, alike everywhere."""
    folder = write_files(tmp_path / "docs", {
        "front.md": b'---\ntitle: "Dock\\0 manual"\nauthor: "Ada\\0 Lovelace"\n---\n\n'
                    b"The dock D-14 spring kit is rev A.\n",
        "front.toml.md": b'+++\ntitle = "Pier\\u0000 guide"\n+++\n\nPier P-2 takes 40 t.\n',
        "record.json": b'{"title": "Sluice\\u0000 \\ud800record", "body": "Sluice S-9 '
                       b'opens at\\u0000 dawn \\udc80 daily"}',
        "mail.eml": bytes(office_fixtures.mail_message(
            "Priya <priya@halyard.example>", "Joost <joost@nordhaven.example>",
            "Crane\x00 schedule", "Fri, 28 Mar 2025 10:00:00 +0100",
            "Crane C-3 is serviced on Friday.\n", "<crane-1@halyard.example>")),
    })
    graph = make_graph()
    report = graph.index(folder, namespace="ops")
    assert not report.failed and len(report.added) == 4
    documents = graph.store.documents_for_source(graph.store.list_sources()[0])
    titles = {path: d.title for path, d in documents.items()}
    assert titles == {"front.md": "Dock manual", "front.toml.md": "Pier guide",
                      "record.json": "Sluice \ufffdrecord", "mail.eml": "Crane schedule"}
    assert documents["front.md"].metadata["author"] == "Ada Lovelace"
    assert "opens at dawn \ufffd daily" in _texts(graph, "Sluice S-9 opens dawn")


def test_names_keep_a_mark_where_text_loses_the_character() -> None:
    """Text loses its NULs; a metadata key or attachment name gets U+FFFD instead, so
    ``acc\\0ess`` never becomes the ``access`` key that says who may read a document, and
    two attachments never merge into one path."""
    inner = ExtractedDocument("Note\x00", (Block(BlockKind.PARAGRAPH, "x\ud800y"),),
                              "text/plain")
    document = ExtractedDocument(
        "Dock\x00 log", (Block(BlockKind.PARAGRAPH, "Pier\x00 P-4"),), "message/rfc822",
        metadata={"acc\x00ess": '["group:x"]', "author": "Ada\x00"},
        attachments=(AttachedDocument("a\x00.txt", "h1", inner),
                     AttachedDocument("a.txt", "h2", inner)))
    stored = storable_document(document)
    assert stored.title == "Dock log" and stored.blocks[0].text == "Pier P-4"
    assert stored.metadata == {"acc\ufffdess": '["group:x"]', "author": "Ada"}
    assert [a.name for a in stored.attachments] == ["a\ufffd.txt", "a.txt"]
    assert stored.attachments[0].document.title == "Note"
    assert stored.attachments[0].document.blocks[0].text == "x\ufffdy"
    clean = ExtractedDocument("Déjà vu", (Block(BlockKind.PARAGRAPH, "naïve"),), "text/plain")
    assert storable_document(clean) is clean
