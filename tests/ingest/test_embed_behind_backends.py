"""Searchable before embedded, on both backends: a build commits each document's chunks
before it embeds them, so another DocGraph on the same index (a server) finds a new document
by BM25 while its vectors are still being computed and says the dense lane is partial; once
the build stored the vectors, that same long-lived DocGraph finds it by meaning and the note
is gone. A build interrupted while embedding keeps its chunks searchable, and the next build
embeds exactly the pending ones without reading any file again. The build's embedder is the
deterministic hashing one, held on an event (or interrupted) at its first batch."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.errors import BuildInterrupted
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.model import Vector
from docgraph.serve.setup import local_governance
from docgraph.serve.tools import DocgraphTools
from tests import backend_graphs
from tests.helpers import CountingEmbedder, write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

FILES = {f"notes/zephyr-{i}.md": f"# Zephyr turbine {i}\n\nThe zephyr turbine {i} at the "
                                 f"Marlow quay runs on kelp oil grade {i}.\n"
         for i in range(3)}
QUERY = "zephyr turbine kelp oil"


class GatedEmbedder(CountingEmbedder):
    """The counting hashing embedder; its next document batch after :meth:`arm` signals
    ``entered`` and waits for ``release`` (``interrupt``: raises KeyboardInterrupt instead,
    as Ctrl-C would). Queries are never held."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.interrupt = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def arm(self, interrupt: bool = False) -> None:
        self.armed, self.interrupt = True, interrupt

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        self.calls += 1
        if self.armed:
            self.armed = False
            self.entered.set()
            if self.interrupt:
                raise KeyboardInterrupt
            assert self.release.wait(60), "the test never released the build"
        return super().embed_documents(texts)  # type: ignore[no-any-return]


@pytest.fixture
def embedder() -> GatedEmbedder:
    return GatedEmbedder()


def _tools(graph: DocGraph) -> DocgraphTools:
    return DocgraphTools(Governance(
        graph, StaticEntitlements([RoleAssignment("agent", "reader", "ops")])))


def _found(payload: dict[str, Any]) -> list[str]:
    return [r["source"] for r in payload["results"]]


def test_a_new_document_is_found_by_bm25_before_it_is_embedded(tmp_path: Path, make_graph,
                                                              embedder: GatedEmbedder) -> None:
    folder = write_files(tmp_path / "docs", {"other.md": "# Other\n\nNothing to see.\n"})
    builder = make_graph()
    builder.index(folder, namespace="ops")
    server = make_graph()  # a second DocGraph on the same index: a long-lived server
    tools, agent = _tools(server), Caller("agent")
    before = tools.call("search_documents", agent, {"query_text": QUERY})
    assert "lanes" not in before  # its chunk index is open, nothing is pending

    write_files(folder, FILES)
    embedder.arm()
    failed: list[BaseException] = []

    def build() -> None:
        try:
            builder.index(folder, namespace="ops")
        except BaseException as exc:  # re-raised in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=build)
    thread.start()
    try:
        assert embedder.entered.wait(60), failed
        pending = {"dense": {"pending_chunks": 3}}
        found = tools.call("search_documents", agent, {"query_text": QUERY})
        assert set(_found(found)) >= set(FILES) and found["lanes"] == pending
        assert "not embedded yet" in found["lanes_note"]
        dense = tools.governance.retrieve(agent, QUERY, mode="dense")
        assert not {h.source_path for h in dense.hits} & set(FILES)  # no made-up vector
        assert dense.pending_chunks == 3
        hybrid = tools.governance.retrieve(agent, QUERY, mode="hybrid")
        assert {h.source_path for h in hybrid.hits} >= set(FILES)  # by BM25
        lookup = tools.call("lookup_knowledge", agent, {"query": QUERY})
        assert lookup["lanes"] == pending
        assert {e["source"] for e in lookup["evidence"]} & set(FILES)
        status = tools.call("index_status", agent, {})
        assert [n["pending_chunks"] for n in status["namespaces"]] == [3]
    finally:
        embedder.release.set()
        thread.join(60)
    assert not failed, failed

    dense = tools.governance.retrieve(agent, QUERY, mode="dense")
    assert {h.source_path for h in dense.hits} >= set(FILES) and dense.pending_chunks == 0
    found = tools.call("search_documents", agent, {"query_text": QUERY})
    assert set(_found(found)) >= set(FILES) and "lanes" not in found
    status = tools.call("index_status", agent, {})
    assert "pending_chunks" not in status["namespaces"][0]


def test_an_interrupted_build_embeds_only_the_pending_chunks_next_time(
        tmp_path: Path, make_graph, embedder: GatedEmbedder) -> None:
    folder = write_files(tmp_path / "docs", FILES)
    graph = make_graph()
    embedder.arm(interrupt=True)  # Ctrl-C while the build embeds its first batch
    with pytest.raises(BuildInterrupted):
        graph.index(folder, namespace="ops")
    assert graph.store.pending_counts() == {"ops": 3}
    hits = graph.search(QUERY, namespaces={"ops"}, mode="hybrid", k=5)
    assert {h.source_path for h in hits} == set(FILES)  # kept and found by BM25
    assert not graph.search(QUERY, namespaces={"ops"}, mode="dense", k=5)
    assert graph.retrieve(QUERY, namespaces={"ops"}).pending_chunks == 3

    embedder.embedded = 0
    report = graph.index(folder, namespace="ops")
    assert report.bodies_read == 0 and report.unchanged == 3  # nothing read again
    assert report.chunks_written == 0 and report.pending_filled == 3
    assert embedder.embedded == report.passages_embedded == 3  # just the pending ones
    assert graph.store.pending_counts() == {}
    assert graph.retrieve(QUERY, namespaces={"ops"}).pending_chunks == 0
    dense = graph.search(QUERY, namespaces={"ops"}, mode="dense", k=5)
    assert {h.source_path for h in dense} == set(FILES)


@backend_graphs.embedded_only
def test_a_migration_keeps_pending_chunks_pending(tmp_path: Path, make_graph,
                                                  embedder: GatedEmbedder,
                                                  pgvector_server) -> None:
    """An index an interrupted build left with chunks pending moves to PostgreSQL with
    them pending (no vector made up), where they can be filled in."""
    from docgraph.store.migrate import migrate_to_postgres
    from docgraph.store.postgres import PostgresCatalog

    folder = write_files(tmp_path / "docs", FILES)
    graph = make_graph()
    embedder.arm(interrupt=True)
    with pytest.raises(BuildInterrupted):
        graph.index(folder, namespace="ops")
    url = pgvector_server.create_database("moved")
    target = PostgresCatalog(url)
    try:
        migrate_to_postgres(graph.store, target)  # type: ignore[arg-type]
        assert target.pending_counts() == {"ops": 3}
        pending = target.pending_chunks(None, 10)
        vectors = embedder.embed_documents([f"{c.breadcrumb} {c.text}" for c in pending])
        assert target.fill_vectors(list(zip([c.rowid for c in pending], vectors,
                                            strict=True))) == 3
        assert target.pending_counts() == {}
    finally:
        target.close()


def test_pending_chunks_of_a_document_the_caller_may_not_read_are_not_counted(
        tmp_path: Path, make_graph, embedder: GatedEmbedder) -> None:
    """The lanes note and index_status count only chunks every reader of the namespace may
    see: bob, who may read the namespace but not the auditors' memo, must not learn from the
    count that a hidden document (and how large) is being written."""
    folder = write_files(tmp_path / "docs", {"other.md": "# Other\n\nNothing to see.\n"})
    builder = make_graph()
    builder.index(folder, namespace="ops")
    server = make_graph()
    tools = DocgraphTools(Governance(server, StaticEntitlements([
        RoleAssignment("bob", "reader", "ops"), RoleAssignment("carol", "reader", "ops")])))
    memo = "".join(f"Paragraph {i} of the zephyr audit names kelp oil grade {i}.\n\n"
                   for i in range(40))
    write_files(folder, {"memo.md": f"---\naccess: [user:carol]\n---\n# Audit memo\n\n{memo}",
                         "public.md": "# Public\n\nThe zephyr turbine runs on kelp oil.\n"})
    embedder.arm()
    failed: list[BaseException] = []

    def build() -> None:
        try:
            builder.index(folder, namespace="ops")
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=build)
    thread.start()
    try:
        assert embedder.entered.wait(60), failed
        assert builder.store.pending_counts()["ops"] > 1  # the memo chunks are pending too
        for who in ("bob", "carol"):
            found = tools.call("search_documents", Caller(who), {"query_text": QUERY})
            assert found["lanes"] == {"dense": {"pending_chunks": 1}}, who  # public.md only
            status = tools.call("index_status", Caller(who), {})
            assert [n["pending_chunks"] for n in status["namespaces"]] == [1], who
        assert "memo.md" not in _found(tools.call("search_documents", Caller("bob"),
                                                  {"query_text": QUERY}))
        # the index file's owner (`docgraph status` without [governance]) is told of all
        owner, caller = local_governance(server)
        (ops,) = owner.index_status(caller).builds
        assert ops.pending_chunks == builder.store.pending_counts()["ops"] > 1
    finally:
        embedder.release.set()
        thread.join(60)
    assert not failed, failed
