"""Pages and document metadata from extraction to the agent, on every backend: stored with
each chunk, shown in search hits, evidence blocks, tool outputs and context; moved pages
re-use vectors; an index from before pages were stored is upgraded and its PDFs
re-extracted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docgraph import DocGraph
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.serve.tools import DocgraphTools
from tests import backend_graphs, pg
from tests.helpers import write_files
from tests.pdf_fixtures import manual_pdf

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

PDF = "manuals/kestrel-k2.pdf"
NOTES = {"notes.md": "# Fleet notes\n\nThe Kestrel K2 fleet works the Rotterdam site.\n"}
BATTERY = ("Kestrel K2 Service Manual", "Maintenance", "Battery")


def _folder(tmp_path: Path, **pdf: Any) -> Path:
    return write_files(tmp_path / "docs", {PDF: manual_pdf(**pdf), **NOTES})


def _hit_pages(graph: DocGraph) -> dict[str, tuple[tuple[int, int] | None, bool]]:
    """Pages and OCR flag of every text chunk, by chunk id, as the store gives them."""
    rowids = [rowid for rowid, _ in graph.graph_store.chunk_texts("ops")]
    return {c.chunk_id: (c.pages, c.ocr) for c in graph.store.chunks_by_rowid(rowids).values()}


def _tools(graph: DocGraph) -> DocgraphTools:
    return DocgraphTools(Governance(
        graph, StaticEntitlements([RoleAssignment("agent", "reader", "ops")])))


def test_pages_and_metadata_reach_hits_evidence_and_tools(tmp_path, make_graph):
    graph = make_graph()
    graph.index(_folder(tmp_path), namespace="ops")

    hits = graph.search("battery pack BAT-48 charging cycles", namespaces={"ops"}, k=5)
    battery = next(h for h in hits if "BAT-48" in h.text)
    assert (battery.source_path, battery.section_path, battery.pages, battery.ocr) == (
        PDF, BATTERY, (2, 2), False)
    assert battery.title == "Kestrel K2 Manual"
    pages = _hit_pages(graph)
    assert sorted(p for p, _ in pages.values() if p) == [(1, 1), (1, 1), (2, 2), (3, 3)]
    assert [p for cid, (p, _) in pages.items() if "notes.md" in cid] == [None]
    [pdf_doc] = [d for d in graph.store.list_documents({"ops"}) if d.path == PDF]
    assert (pdf_doc.metadata["author"], pdf_doc.metadata["pages"]) == ("Ada Lovelace", "3")

    tools, agent = _tools(graph), Caller("agent")
    found = tools.call("lookup_knowledge", agent,
                       {"query": "How often is the battery pack BAT-48 replaced?"})
    block = next(e for e in found["evidence"] if "BAT-48" in e["excerpt"])
    assert block["pages"] == [2] and "ocr" not in block
    assert block["section"] == " > ".join(BATTERY)
    assert set(block) == {"document_id", "source", "title", "section", "excerpt", "pages"}
    notes = tools.call("lookup_knowledge", agent, {"query": "Which site does the fleet work?"})
    assert all("pages" in e for e in notes["evidence"] if e["source"] == PDF)
    assert all("pages" not in e for e in notes["evidence"] if e["source"] == "notes.md")

    listed = {d["path"]: d for d in tools.call("list_documents", agent, {})["documents"]}
    assert listed[PDF]["metadata"]["author"] == "Ada Lovelace"
    assert "metadata" not in listed["notes.md"]
    results = tools.call("search_documents", agent,
                         {"query_text": "firmware 4.2.1 upgrade Roost console", "k": 5})
    firmware = next(r for r in results["results"] if "4.2.1" in r["text"])
    assert firmware["pages"] == [3]
    mentions = tools.call("search_entities", agent, {"query_text": "E-417", "k": 3})
    assert [c["pages"] for e in mentions["entities"] for c in e["chunks"]
            if c["source"] == PDF] == [[1]]
    context = tools.call("document_context", agent,
                         {"query_text": "battery pack BAT-48", "token_budget": 2000})
    rows = context["sections"]["Source Text"]
    assert any(row.split("\n")[0].endswith("> Battery (p. 2)") for row in rows)


def test_pages_that_move_change_without_re_embedding(tmp_path, make_graph, embedder):
    graph = make_graph()
    folder = _folder(tmp_path)
    graph.index(folder, namespace="ops")
    before = _hit_pages(graph)
    (folder / PDF).write_bytes(manual_pdf(blank_first_page=True))  # everything one page down
    embedded = embedder.embedded
    report = graph.index(folder, namespace="ops")
    assert report.updated == [PDF] and report.chunks_embedded == 0
    assert embedder.embedded == embedded
    after = _hit_pages(graph)
    assert after == {cid: ((p[0] + 1, p[1] + 1) if p else None, ocr)
                     for cid, (p, ocr) in before.items()}


def _make_old(graph: DocGraph) -> None:
    """Turn ``graph``'s index into one written before pages and metadata were stored."""
    db = graph.store.connection()
    if graph.backend == "embedded":
        for statement in ("ALTER TABLE chunks DROP COLUMN page_first",
                          "ALTER TABLE chunks DROP COLUMN page_last",
                          "ALTER TABLE chunks DROP COLUMN ocr",
                          "ALTER TABLE documents DROP COLUMN metadata",
                          "UPDATE meta SET value = '3' WHERE key = 'schema_version'"):
            db.execute(statement)
    else:  # migration 12 added pages; it and every later one are undone
        pg.roll_back_migrations(db, 11)


def test_an_index_from_before_pages_re_extracts_its_pdfs_reusing_vectors(
        tmp_path, make_graph, embedder):
    folder = _folder(tmp_path)
    graph = make_graph("old")
    graph.index(folder, namespace="ops")
    expected = _hit_pages(graph)
    _make_old(graph)
    graph.close()

    upgraded = make_graph("old")
    stored = {d.path: d for d in upgraded.store.list_documents({"ops"})}
    assert stored[PDF].content_hash == "" and stored["notes.md"].content_hash
    assert stored[PDF].metadata == {}
    assert {p for p, _ in _hit_pages(upgraded).values()} == {None}
    embedded = embedder.embedded
    report = upgraded.index(folder, namespace="ops")
    assert (report.updated, report.unchanged, report.chunks_embedded) == ([PDF], 1, 0)
    assert embedder.embedded == embedded
    assert _hit_pages(upgraded) == expected
    [pdf_doc] = [d for d in upgraded.store.list_documents({"ops"}) if d.path == PDF]
    assert pdf_doc.metadata["author"] == "Ada Lovelace"
    again = upgraded.index(folder, namespace="ops")
    assert (again.updated, again.bodies_read) == ([], 0)


def test_the_cli_shows_pages(tmp_path, make_graph, monkeypatch):
    import json
    import re

    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    graph = make_graph()
    graph.index(_folder(tmp_path), namespace="ops")
    path = graph.settings.store.path
    graph.close()
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    backend_graphs.point_the_cli_at(graph, monkeypatch)
    runner = CliRunner()
    query = ["--index", str(path), "search", "battery pack BAT-48 charging cycles", "-k", "3"]
    shown = runner.invoke(app, query)
    assert shown.exit_code == 0, shown.output
    # the id `docgraph read` accepts, then the section and its page
    line = re.compile(r"manuals/kestrel-k2\.pdf#chunk-\d+ > Kestrel K2 Service Manual > "
                      r"Maintenance > Battery \(p\. 2\)")
    assert line.search(" ".join(shown.output.split())), shown.output
    hits = json.loads(runner.invoke(app, [*query, "--json"]).stdout)
    assert [h["pages"] for h in hits if "BAT-48" in h["text"]] == [[2]]
    evidence = json.loads(runner.invoke(app, ["--index", str(path), "lookup",
                                              "How often is the battery pack replaced?"]).stdout)
    assert [e["pages"] for e in evidence["evidence"] if "BAT-48" in e["excerpt"]] == [[2]]


def test_citation_links_open_a_pdf_at_the_cited_page(tmp_path, make_graph):
    graph = make_graph()
    folder = _folder(tmp_path)
    graph.sources.add_folder(folder, "ops", public_url="https://intra.example/docs/")
    graph.index(folder, namespace="ops")
    tools, agent = _tools(graph), Caller("agent")
    base = "https://intra.example/docs/manuals/kestrel-k2.pdf"

    found = tools.call("lookup_knowledge", agent,
                       {"query": "How often is the battery pack BAT-48 replaced?"})
    block = next(e for e in found["evidence"] if "BAT-48" in e["excerpt"])
    assert block["url"] == f"{base}#page=2"
    results = tools.call("search_documents", agent,
                         {"query_text": "firmware 4.2.1 upgrade Roost console", "k": 5})
    firmware = next(r for r in results["results"] if "4.2.1" in r["text"])
    assert firmware["url"] == f"{base}#page=3"
    notes = next(r for r in tools.call("search_documents", agent,
                                       {"query_text": "Rotterdam site", "k": 5})["results"]
                 if r["source"] == "notes.md")
    assert notes["url"] == "https://intra.example/docs/notes.md"  # no pages, no fragment
    listed = {d["path"]: d for d in tools.call("list_documents", agent, {})["documents"]}
    assert listed[PDF]["url"] == base  # a whole document opens at its start

    hit = next(r for r in tools.call("search", agent, {"query": "battery pack BAT-48"})["results"]
               if "BAT-48" in r["text"])
    assert hit["url"] == f"{base}#page=2"
    fetched = tools.call("fetch", agent, {"id": hit["id"]})
    assert fetched["url"].startswith(f"{base}#page=")
    read = tools.call("read_document", agent, {"id": block["document_id"], "scope": "chunk"})
    assert read["url"] == f"{base}#page=2"
    assert [c["pages"] for c in read["chunks"]] == [[2]]
