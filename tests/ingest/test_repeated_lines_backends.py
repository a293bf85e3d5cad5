"""Lines repeated across a large share of one folder's documents (legal footers) are left
out of every document, on every backend: not in any chunk, not BM25-searchable, not linked
to entities; a first build already leaves them out, documents indexed before a line became
repeated lose it (and get it back when it stops being repeated), a line in too few
documents stays, and an unchanged folder reads nothing."""

from __future__ import annotations

from docgraph import DocGraph
from docgraph.ingest.boilerplate import (
    REPEATED_MIN_DOCUMENTS,
    REPEATED_SHARE,
    line_fingerprint,
)
from tests import backend_graphs
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

FOOTER = ("Halyard Robotics B.V., Kanaalweg 12, Eindhoven, registered under KvK 17263514. "
          "Questions: legal@halyard.example. This document is confidential.")
SITES = ["Rotterdam", "Gdansk", "Valencia", "Antwerp", "Tallinn", "Daventry", "Lyon", "Porto",
         "Bremen", "Malmo", "Turin", "Leeds"]


def _note(i: int, footer: bool = True) -> str:
    site = SITES[i % len(SITES)]
    text = (f"# Site note {i}\n\nThe {site} depot runs {10 + i} Tern T3 robots and reported "
            f"error E-{400 + i} after the firmware rollout.\n\n- Follow-up {i} is planned for "
            f"the {site} audit.\n")
    return text + (f"\n{FOOTER}\n" if footer else "")


def _texts(graph: DocGraph, namespace: str = "ops") -> dict[str, str]:
    rowids = [rowid for rowid, _ in graph.graph_store.chunk_texts(namespace)]
    out: dict[str, str] = {}
    for chunk in graph.store.chunks_by_rowid(rowids).values():
        out[chunk.source_path] = out.get(chunk.source_path, "") + "\n" + chunk.text
    return out


def _linked_keys(graph: DocGraph, namespace: str = "ops") -> set[str]:
    rowids = [rowid for rowid, _ in graph.graph_store.chunk_texts(namespace)]
    links = graph.graph_store.chunk_links(rowids)
    ids = {entity for found in links.values() for entity, _, _ in found}
    return {info.key for info in graph.graph_store.entities_by_id(ids).values()}


def test_the_thresholds_make_a_footer_of_most_documents_repeated():
    assert REPEATED_MIN_DOCUMENTS == 5 and 0 < REPEATED_SHARE <= 0.5


def test_a_first_build_leaves_a_repeated_footer_out_of_every_chunk(tmp_path, make_graph):
    files = {f"notes/note-{i:02d}.md": _note(i, footer=i < 8) for i in range(10)}
    files["misc/rare.md"] = "# Rare\n\nOnly two files say this line about the Tilburg depot.\n"
    files["misc/rare-2.md"] = "# Rare 2\n\nOnly two files say this line about the Tilburg depot.\n"
    folder = write_files(tmp_path / "docs", files)
    graph = make_graph()
    report = graph.index(folder, namespace="ops")
    assert report.failed == [] and len(report.added) == 12 and report.updated == []
    assert report.bodies_read == 12 + 8  # the eight with the footer: read again, left out

    texts = _texts(graph)
    assert not any("KvK 17263514" in t for t in texts.values())
    assert all(f"runs {10 + i} Tern T3 robots" in texts[f"notes/note-{i:02d}.md"]
               for i in range(10))
    assert "Tilburg depot" in texts["misc/rare.md"]  # in 2 of 12 documents: kept
    hits = graph.search("Kanaalweg KvK registered confidential", namespaces={"ops"}, k=10,
                        mode="hybrid")
    assert all("Kanaalweg" not in h.text for h in hits)
    assert "legal@halyard.example" not in _linked_keys(graph)
    assert "e-403" in _linked_keys(graph)

    # The catalog counts: only the footer is held by 5 or more documents, and only the
    # documents that dropped it (or hold a given line) come back.
    (source,) = graph.store.list_sources()
    footer = line_fingerprint(FOOTER)
    assert footer is not None and graph.store.line_counts(source, 5) == {footer: 8}
    dropping = graph.store.line_fingerprints(source, ())
    assert sorted(dropping) == [f"notes/note-{i:02d}.md" for i in range(8)]
    assert all(dropped == {footer} and footer in hashes for hashes, dropped in dropping.values())
    rare = line_fingerprint("Only two files say this line about the Tilburg depot.")
    assert sorted(graph.store.line_fingerprints(source, {rare})) == [
        "misc/rare-2.md", "misc/rare.md", *dropping]

    again = graph.index(folder, namespace="ops")
    assert (again.bodies_read, again.updated, again.chunks_embedded) == (0, [], 0)


def test_documents_lose_a_line_once_it_is_repeated_and_regain_it_when_it_is_not(
        tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {f"note-{i:02d}.md": _note(i) for i in range(3)})
    graph = make_graph()
    graph.index(folder, namespace="ops")
    assert all("KvK 17263514" in t for t in _texts(graph).values())  # 3 documents: kept

    write_files(folder, {f"note-{i:02d}.md": _note(i) for i in range(3, 7)})
    report = graph.index(folder, namespace="ops")
    assert sorted(report.added) == [f"note-{i:02d}.md" for i in range(3, 7)]
    # The footer became repeated in this build: every note holding it is read again (the
    # four new ones a second time) to leave it out.
    assert sorted(report.updated) == [f"note-{i:02d}.md" for i in range(3)]
    assert report.unchanged == 0 and report.bodies_read == 4 + 7
    texts = _texts(graph)
    assert len(texts) == 7 and not any("KvK 17263514" in t for t in texts.values())
    settled = graph.index(folder, namespace="ops")
    assert (settled.bodies_read, settled.updated) == (0, [])

    for i in range(2, 7):  # two notes left: the footer is theirs again
        (folder / f"note-{i:02d}.md").unlink()
    report = graph.index(folder, namespace="ops")
    assert sorted(report.updated) == ["note-00.md", "note-01.md"]
    assert all("KvK 17263514" in t for t in _texts(graph).values())


def test_an_index_from_before_line_counts_keeps_its_documents_until_they_are_read(
        tmp_path, make_graph):
    """A document written before lines were counted (no fingerprints) counts no line and
    is not read again for it; once it changes it is counted like any other."""
    folder = write_files(tmp_path / "docs", {f"note-{i:02d}.md": _note(i) for i in range(6)})
    graph = make_graph()
    graph.index(folder, namespace="ops")
    db = graph.store.connection()
    db.execute("UPDATE documents SET line_hashes = NULL, lines_dropped = '[]'")
    report = graph.index(folder, namespace="ops")
    assert (report.bodies_read, report.updated) == (0, [])
    write_files(folder, {"note-00.md": _note(0) + "\nA new line about dock D-14.\n"})
    report = graph.index(folder, namespace="ops")
    assert report.updated == ["note-00.md"]  # counted alone: 1 of 6 documents, kept
    assert "KvK 17263514" in _texts(graph)["note-00.md"]

