"""Incremental indexing: unchanged, changed, removed, failures, model mismatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from docgraph.embedding.embedders import HashingEmbedder
from docgraph.errors import EmbeddingModelMismatch, SourceError
from docgraph.store.lexical import decode_terms
from tests import backend_graphs, office_fixtures
from tests.helpers import write_files
from tests.pdf_fixtures import manual_pdf

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

HANDBOOK = {
    "leave.md": "# Leave\n\n## Parental leave\n\nStaff get twenty weeks of parental leave.\n\n"
    "## Sick leave\n\nUp to ten paid sick days a year.\n",
    "robots/kestrel.txt": "The Kestrel K2 picker runs firmware 4.2.1.\n\nError E-417 means the "
    "lidar is blocked.\n",
    "notes.html": "<html><body><h1>Standup</h1><p>Ticket OPS-1432 is closed.</p></body></html>",
}


def _bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_first_build_indexes_every_file(tmp_path, make_graph, embedder):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    report = graph.index(folder, namespace="hr")
    assert sorted(report.added) == ["leave.md", "notes.html", "robots/kestrel.txt"]
    assert report.failed == []
    reports_embedded = sum(g.reports_embedded for g in graph.last_graph_reports)
    assert report.chunks_written + reports_embedded == embedder.embedded
    assert report.chunks_written > 0
    hits = graph.search("parental leave weeks", namespaces={"hr"}, k=1)
    assert hits[0].source_path == "leave.md"
    assert hits[0].section_path == ("Leave", "Parental leave")


def test_rerun_over_unchanged_files_embeds_and_reads_nothing(tmp_path, make_graph, embedder):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    before = embedder.embedded
    report = graph.index(folder, namespace="hr")
    assert embedder.embedded == before
    assert report.unchanged == 3 and report.bodies_read == 0
    assert not (report.added or report.updated or report.removed)


def test_touched_but_identical_file_is_read_not_embedded(tmp_path, make_graph, embedder):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    _bump_mtime(folder / "leave.md")
    before = embedder.embedded
    report = graph.index(folder, namespace="hr")
    assert report.bodies_read == 1 and report.unchanged == 3
    assert embedder.embedded == before
    # The new change token is remembered: a third run reads nothing.
    assert graph.index(folder, namespace="hr").bodies_read == 0


def test_changed_file_replaces_its_chunks_and_reuses_unchanged_ones(tmp_path, make_graph, embedder):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    (folder / "leave.md").write_text(
        "# Leave\n\n## Parental leave\n\nStaff get twenty weeks of parental leave.\n\n"
        "## Sick leave\n\nUp to fifteen paid sick days a year, from March 2026.\n",
        encoding="utf-8",
    )
    _bump_mtime(folder / "leave.md")
    before = embedder.embedded
    report = graph.index(folder, namespace="hr")
    assert report.updated == ["leave.md"]
    assert report.chunks_reused == 1 and report.chunks_embedded == 1
    assert embedder.embedded == before + 1
    texts = [h.text for h in graph.search("sick days", namespaces={"hr"}, k=10)]
    assert any("fifteen" in t for t in texts)
    assert not any("ten paid sick days" in t for t in texts)


def test_removed_file_is_deleted_from_the_index(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    (folder / "robots" / "kestrel.txt").unlink()
    report = graph.index(folder, namespace="hr")
    assert report.removed == ["robots/kestrel.txt"]
    hits = graph.search("Kestrel lidar E-417", namespaces={"hr"}, k=10)
    assert all(h.source_path != "robots/kestrel.txt" for h in hits)
    assert graph.status().namespaces[0].documents == 2


def test_unreadable_file_is_reported_and_the_build_goes_on(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {**HANDBOOK, "broken.pdf": b"%PDF-1.4 not really"})
    graph = make_graph()
    report = graph.index(folder, namespace="hr")
    assert [p for p, _ in report.failed] == ["broken.pdf"]
    assert "broken.pdf" in report.failed[0][1]
    assert len(report.added) == 3
    failures = graph.status().failures
    assert [f.path for f in failures] == ["broken.pdf"]


def test_file_that_turns_bad_keeps_its_indexed_version(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {**HANDBOOK, "data.json": '{"title": "Sites",'
                                             ' "sites": [{"name": "Rotterdam DC"}]}'})
    graph = make_graph()
    graph.index(folder, namespace="hr")
    (folder / "data.json").write_text('{"title": broken', encoding="utf-8")
    _bump_mtime(folder / "data.json")
    report = graph.index(folder, namespace="hr")
    assert [p for p, _ in report.failed] == ["data.json"]
    hits = graph.search("Rotterdam DC", namespaces={"hr"}, k=3)
    assert hits and hits[0].source_path == "data.json"


def test_missing_folder_is_a_clear_error_and_changes_nothing(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    with pytest.raises(SourceError, match="nowhere"):
        graph.index(tmp_path / "nowhere", namespace="hr")
    assert graph.status().namespaces[0].documents == 3


def test_folder_removed_entirely_is_not_mistaken_for_empty(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    os.rename(folder, tmp_path / "moved")
    with pytest.raises(SourceError):
        graph.index(folder, namespace="hr")
    assert graph.status().namespaces[0].documents == 3


def test_same_folder_spelled_differently_registers_once(tmp_path, make_graph, monkeypatch):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    monkeypatch.chdir(tmp_path)
    report = graph.index("./docs/../docs/", namespace="hr")
    assert report.unchanged == 3
    assert len(graph.status().sources) == 1


def test_the_embedding_model_is_checked_once_not_per_query(tmp_path, make_graph,
                                                           monkeypatch):
    """The root checks the index's model when the chunk index opens, then not per query
    (again only for another embedder, or after SYNC_INTERVAL_S)."""
    graph = make_graph()
    graph.index(write_files(tmp_path / "docs", HANDBOOK), namespace="hr")
    checks = []
    real = graph.store.embedding_model
    monkeypatch.setattr(graph.store, "embedding_model",
                        lambda: checks.append(1) or real())
    for mode in ("hybrid", "dense", "vector_first", "hybrid"):
        assert graph.search("parental leave", namespaces={"hr"}, k=1, mode=mode)
    assert len(checks) == 1


def test_a_different_embedding_model_is_refused(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")

    class OtherModel(HashingEmbedder):
        name = "other-model"

    from docgraph import DocGraph

    other = DocGraph(graph.settings, OtherModel())
    with pytest.raises(EmbeddingModelMismatch, match=r"reindex --full"):
        other.index(folder, namespace="hr")
    with pytest.raises(EmbeddingModelMismatch, match="hashing-256"):
        other.search("leave", namespaces={"hr"})
    # Nothing was lost: the original model still answers.
    assert graph.search("parental leave", namespaces={"hr"}, k=1)[0].source_path == "leave.md"
    # An explicit full reindex switches the model.
    other.reindex_full()
    assert other.store.embedding_model() == ("other-model", 256)
    assert other.search("parental leave", namespaces={"hr"}, k=1)[0].source_path == "leave.md"
    other.close()


def test_chunk_ids_derive_from_document_and_index_not_text(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph()
    graph.index(folder, namespace="hr")
    hit = graph.search("sick days", namespaces={"hr"}, k=1)[0]
    assert hit.chunk_id == f"{hit.doc_id}#chunk-{hit.chunk_index}"
    assert hit.doc_id.startswith("file://") and hit.doc_id.endswith("/docs/leave.md")


def test_folder_with_spaces_and_non_ascii_in_its_path(tmp_path, make_graph):
    folder = write_files(tmp_path / "my docs — Gdańsk", {"notes 100%.md": "# N\n\nlidar text\n"})
    graph = make_graph()
    report = graph.index(folder, namespace="x")
    assert report.added == ["notes 100%.md"]
    hit = graph.search("lidar", namespaces={"x"}, k=1)[0]
    assert hit.doc_id.endswith("/my%20docs%20%E2%80%94%20Gda%C5%84sk/notes%20100%25.md")
    assert graph.index(folder, namespace="x").unchanged == 1


INDEX_PROBES = ("Rotterdam", "Escalated gateway", "Résolution", "Priya Raman", "E-403",
                "firmware rolled out", "Ticket T-1007 summary")


def _index_rows(graph, namespace: str) -> tuple[list[tuple], dict[str, list]]:  # type: ignore[no-untyped-def]
    """Every text chunk as the store holds it, with its entity links, and the BM25 ranking
    (chunk and score) of a few probe queries: the lexical statistics the build wrote (terms
    and lengths on SQLite, lexemes on PostgreSQL) show in the scores. Read through the
    ports, so it holds on every backend."""
    rowids = [rowid for rowid, _ in graph.graph_store.chunk_texts(namespace)]
    chunks = graph.store.chunks_by_rowid(rowids)
    links = graph.graph_store.chunk_links(rowids)
    entities = graph.graph_store.entities_by_id(
        {entity for found in links.values() for entity, _, _ in found})
    rows = sorted(
        (c.source_path, c.index, c.text, c.title, c.section_path, c.prev_index, c.next_index,
         sorted((entities[e].key, entities[e].type, round(score, 6), first)
                for e, score, first in links[c.rowid]), c.pages, c.ocr)
        for c in chunks.values())
    index = graph.chunk_index()
    ranked = {probe: [(chunks[r.rowid].chunk_id, round(r.score, 5)) for r in index.lexical_search(
        probe, 20, frozenset({namespace}))] for probe in INDEX_PROBES}
    return rows, ranked


def _embedded_terms(graph) -> list[tuple]:  # type: ignore[no-untyped-def]
    """Each chunk's BM25 terms and weights as the build computed them in Python: only the
    embedded catalog stores those (PostgreSQL derives its lexemes from the text itself)."""
    db = graph.catalog.connection()
    terms = dict(db.execute("SELECT id, term FROM terms"))
    return [(path, index, length, sorted(zip((terms[int(i)] for i in ids), weights.tolist(),
                                             strict=True)))
            for path, index, length, (ids, weights) in (
                (path, index, length, decode_terms(blob)) for path, index, blob, length in
                db.execute("SELECT d.path, c.chunk_index, c.terms, c.term_count FROM chunks c"
                           " JOIN documents d ON d.id = c.document_id"
                           " ORDER BY d.path, c.chunk_index"))]


def test_bulk_build_in_worker_processes_equals_an_inline_build(tmp_path, make_graph):
    people = ["Priya Raman", "Tomas Berg", "Aiko Tanaka", "Lena Fischer"]
    files: dict[str, str | bytes] = {
        f"notes/ticket-{i:02d}.md": (
            f"# Ticket T-{1000 + i}\n\n## Summary\n\n{people[i % 4]} reported error E-{400 + i % 7}"
            f" at the Rotterdam site after firmware 2.{i}.1 was rolled out.\n\n## Résolution\n\n"
            f"- Escalated to {people[(i + 1) % 4]}.\n- Workaround: restart the gateway.\n"
        )
        for i in range(45)
    }
    files["zz-broken.pdf"] = b"%PDF-1.4 not really"  # listed last: prepared by a worker
    files["zz-manual.pdf"] = manual_pdf()  # pages, sections and metadata from a worker
    files["zz-parts.eml"] = bytes(office_fixtures.mail_message(  # attachment from a worker
        "Priya Raman <priya@halyard.example>", "Joost <joost@nordhaven.example>",
        "Spring kit prices", "Fri, 28 Mar 2025 10:00:00 +0100", "The prices are attached.\n",
        "<parts@halyard.example>", {"parts.csv": b"Part,Price\nPLV-CS-220-B,186\n"}))
    folder = write_files(tmp_path / "docs", files)

    inline = make_graph("inline.db", loader={"workers": 1})
    pooled = make_graph("pooled.db", loader={"workers": 2})
    inline_report = inline.index(folder, namespace="ops")
    pooled_report = pooled.index(folder, namespace="ops")

    assert (inline_report.workers, pooled_report.workers) == (1, 2)
    assert pooled_report.added == inline_report.added and len(pooled_report.added) == 47
    assert pooled_report.failed == inline_report.failed
    assert [p for p, _ in pooled_report.failed] == ["zz-broken.pdf"]
    rows, ranked = _index_rows(pooled, "ops")
    assert (rows, ranked) == _index_rows(inline, "ops")
    assert len(rows) >= 45 and all(ranked.values())
    if pooled.backend == "embedded":
        assert _embedded_terms(pooled) == _embedded_terms(inline)
    assert [row[2] for row in rows if row[0] == "zz-parts.eml/parts.csv"] == [
        "Part: PLV-CS-220-B; Price: 186"]
    assert {(row[4], row[8]) for row in rows if row[0] == "zz-manual.pdf"} >= {
        (("Kestrel K2 Service Manual", "Maintenance", "Battery"), (2, 2))}
    assert ([d.metadata for d in pooled.store.list_documents({"ops"})]
            == [d.metadata for d in inline.store.list_documents({"ops"})])
    assert any(d.metadata.get("author") == "Ada Lovelace"
               for d in pooled.store.list_documents({"ops"}))
    linked = {link[0] for row in rows for link in row[7]}
    assert {"priya raman", "e-403", "rotterdam"} <= linked  # entities found in the workers
    hits = pooled.search("Rotterdam firmware E-403", namespaces={"ops"}, k=3)
    assert [h.chunk_id for h in hits] == [
        h.chunk_id for h in inline.search("Rotterdam firmware E-403", namespaces={"ops"}, k=3)]


def test_small_change_is_prepared_inline_without_workers(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", HANDBOOK)
    graph = make_graph(loader={"workers": 4})
    assert graph.index(folder, namespace="hr").workers == 1  # under PARALLEL_AFTER_FILES


def test_script_without_main_guard_still_indexes_everything_once(tmp_path, make_graph):
    """``spawn`` workers re-import the caller's script: a script that indexes at module level
    must neither index twice nor fail; the build finishes inline with a warning."""
    import subprocess
    import sys

    opened = make_graph()  # this test's index on its backend (the script builds it)
    store = {"backend": opened.backend, "path": str(opened.settings.store.path),
             **({"url": opened.settings.store.url} if opened.settings.store.url else {})}

    folder = write_files(tmp_path / "docs", {
        f"doc-{i:02d}.md": f"# Note {i}\n\nThe Kestrel K{i} picker reported error E-{i}."
        for i in range(40)
    })
    script = tmp_path / "build.py"
    script.write_text(
        "from docgraph.app import DocGraph\n"
        "from docgraph.config import load_settings\n"
        f"settings = load_settings(embed={{'model': 'hashing'}}, loader={{'workers': 2}},"
        f" store={store!r})\n"
        "graph = DocGraph(settings)\n"
        f"report = graph.index({str(folder)!r}, namespace='notes')\n"
        "print('ADDED', len(report.added), 'FAILED', len(report.failed))\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("ADDED") == 1  # the workers did not run the build again
    assert "ADDED 40 FAILED 0" in done.stdout
    assert "__main__" in done.stderr  # the warning says how to fix the script
    assert sum(n.documents for n in opened.store.stats() if n.namespace == "notes") == 40
