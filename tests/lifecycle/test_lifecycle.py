"""The refresher (phases recorded per source, failures logged and kept, one global interval,
a background loop that stops cleanly), index_status and the admin settings.

Tests taking ``make_any_graph`` run on the embedded and the PostgreSQL backend; the graph
phases are asserted where the backend builds the entity graph."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from docgraph.config import load_settings
from docgraph.embedding.embedders import HashingEmbedder
from docgraph.errors import ConfigError, EmbeddingModelMismatch
from docgraph.lifecycle import PHASES, AdminRequired, Refresher, index_status
from docgraph.sources.urn import normalize_urn
from tests import backend_graphs, store_backends
from tests.helpers import write_files

HR = {
    "leave.md": "# Leave\n\n## Parental leave\n\nStaff get twenty weeks of parental leave.\n",
    "travel.md": "# Travel\n\nBook trains to Rotterdam through the Heron portal.\n",
}
OPS = {"runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n"}


# On the embedded file and on PostgreSQL: one name is one index.
make_any_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server


def _graph_with_two_namespaces(tmp_path, make_graph):
    graph = make_graph()
    hr = write_files(tmp_path / "hr", HR)
    ops = write_files(tmp_path / "ops", OPS)
    graph.sources.add_folder(hr, "hr")
    graph.sources.add_folder(ops, "ops")
    return graph, hr, ops


def test_run_once_builds_every_namespace_and_records_each_phase(tmp_path, make_any_graph, embedder):
    graph, hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    result = graph.refresher.run_once()
    assert [b.namespace for b in result.builds] == ["hr", "ops"]
    assert result.ok and all(b.outcome == "ok" for b in result.builds)
    hr_build = result.builds[0]
    source = normalize_urn(hr)
    assert [p.phase for p in hr_build.phases if p.source == source] == list(PHASES[:6])
    graph_phases = ["graph", "communities"] if graph.extractor is not None else []
    assert [p.phase for p in hr_build.phases if p.source == "*"] == graph_phases
    crawl = next(p for p in hr_build.phases if p.phase == "crawl")
    assert crawl.message == "2 listed, 2 fetched" and crawl.items == 2
    assert hr_build.documents_changed == 2 and hr_build.chunks_embedded >= 2

    # Persisted in the catalog: a reopened index sees the same record.
    reopened = make_any_graph()
    stored = reopened.build_history.latest("hr")
    assert stored is not None and stored.id == hr_build.id
    assert [(p.source, p.phase, p.outcome) for p in stored.phases] == \
        [(p.source, p.phase, p.outcome) for p in hr_build.phases]

    # An unchanged rerun embeds and fetches nothing; the graph is up to date.
    before = embedder.embedded
    again = graph.refresher.run_once()
    assert embedder.embedded == before
    assert sum(b.bodies_read for b in again.builds) == 0
    assert [p.message for p in again.builds[0].phases if p.source == "*"] == \
        ["up to date"] * len(graph_phases)


def test_a_failing_source_is_an_error_logged_and_keeps_its_documents(tmp_path, make_any_graph,
                                                                    caplog):
    graph, hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    graph.refresher.run_once()
    gone = tmp_path / "hr-moved"
    hr.rename(gone)  # the folder vanishes: listing fails
    with caplog.at_level(logging.ERROR, logger="docgraph"):
        result = graph.refresher.run_once()
    hr_build, ops_build = result.builds
    assert hr_build.outcome == "error" and ops_build.outcome == "ok"
    crawl = next(p for p in hr_build.phases if p.phase == "crawl")
    assert crawl.outcome == "error"
    assert "folder not found" in crawl.message and normalize_urn(hr) in crawl.message
    assert [p.outcome for p in hr_build.phases if p.source == normalize_urn(hr)] == \
        ["error"] + ["skipped"] * 5
    assert "folder not found" in caplog.text  # logged, not swallowed
    # Never an empty source: the documents stay searchable.
    hits = graph.search("parental leave", namespaces={"hr"}, k=1)
    assert hits and hits[0].source_path == "leave.md"
    assert len(graph.store.documents_for_source(graph.sources.folders()[0])) == 2


def test_unreadable_documents_make_a_partial_build(tmp_path, make_any_graph):
    graph, hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    (hr / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    build = graph.refresher.run_once().builds[0]
    assert build.outcome == "partial"
    extract = next(p for p in build.phases if p.phase == "extract")
    assert extract.outcome == "partial" and "broken.pdf" in extract.message
    (status,) = [s for s in graph.index_status() if s.namespace == "hr"]
    assert status.last_outcome == "partial" and status.failed_documents == 1
    assert status.staleness_seconds is not None  # a partial build still counts as fresh


def test_graph_phase_failures_are_attributed(tmp_path, make_graph, monkeypatch):
    graph, _hr, _ops = _graph_with_two_namespaces(tmp_path, make_graph)

    def boom(*args, **kwargs):
        raise RuntimeError("leiden exploded")

    monkeypatch.setattr("docgraph.graph.build.detect_communities", boom)
    build = graph.refresher.run_once(namespaces=["ops"]).builds[0]
    phases = {p.phase: p for p in build.phases if p.source == "*"}
    assert phases["communities"].outcome == "error"
    assert "leiden exploded" in phases["communities"].message
    assert phases["graph"].outcome == "ok"
    assert graph.search("lidar blocked", namespaces={"ops"}, k=1)  # documents are in


def test_index_status_reports_staleness_outcome_and_counts(tmp_path, make_any_graph):
    graph, _hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    assert {s.namespace: s.last_outcome for s in graph.index_status()} == \
        {"hr": None, "ops": None}
    assert all(s.overdue and s.staleness_seconds is None for s in graph.index_status())
    graph.refresher.run_once()
    later = time.time() + 100
    by_name = {s.namespace: s for s in graph.index_status()}
    status = {s.namespace: s for s in index_status(graph, now=later)}
    assert by_name["hr"].documents == 2 and by_name["hr"].chunks >= 2
    assert 99 < status["hr"].staleness_seconds < 110
    assert not status["hr"].overdue
    far = {s.namespace: s for s in index_status(
        graph, now=later + 2 * graph.settings.refresh.interval_seconds)}
    assert far["hr"].overdue
    info = graph.status()
    assert {b.namespace for b in info.builds} == {"hr", "ops"}


def test_build_history_is_pruned(tmp_path, make_any_graph):
    graph, _hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    graph.settings.refresh.keep_builds = 2
    for _ in range(4):
        graph.refresher.run_once(namespaces=["ops"])
    assert len(graph.build_history.recent("ops", limit=10)) == 2


def test_background_loop_refreshes_on_one_interval_and_stops_cleanly(tmp_path, make_any_graph):
    graph, hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    refresher = Refresher(graph, interval_seconds=0.2)
    refresher.start()
    try:
        deadline = time.monotonic() + 20
        while refresher.runs < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refresher.runs >= 1
        (hr / "new.md").write_text("# New\n\nThe Quasar policy starts in May.\n")
        seen = refresher.runs
        while refresher.runs < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refresher.runs >= seen + 2
    finally:
        assert refresher.stop(timeout=30)
    assert not refresher.running
    assert graph.search("Quasar policy", namespaces={"hr"}, k=1)[0].source_path == "new.md"
    assert refresher.last_error is None


def test_the_interval_is_one_global_setting_read_every_cycle(make_graph):
    graph = make_graph()
    refresher = graph.refresher
    assert refresher.interval_seconds == 900
    graph.admin.update({"refresh.interval_seconds": 30}, is_admin=True, persist=False)
    assert refresher.interval_seconds == 30


def test_loop_survives_a_run_that_cannot_build(tmp_path, make_any_graph, monkeypatch):
    graph, _hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    graph.refresher.run_once()

    class Other(HashingEmbedder):
        name = "other-model"

    graph.embedder = Other()
    with pytest.raises(EmbeddingModelMismatch):
        graph.refresher.run_once()
    refresher = Refresher(graph, interval_seconds=0.05)
    refresher.start()
    deadline = time.monotonic() + 10
    while refresher.last_error is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert refresher.running
    assert refresher.stop(timeout=10)
    assert "was built with embedding model" in (refresher.last_error or "")


# -- admin settings --------------------------------------------------------------------


def test_admin_settings_are_validated_applied_and_written_back(tmp_path, make_graph,
                                                               monkeypatch):
    config = tmp_path / "docgraph.toml"
    config.write_text("# deployment settings\n[rag]\nreturn_n = 3\n\n[loader]\n"
                      "chunk_tokens = 200  # tokens\n", encoding="utf-8")
    graph = make_graph()
    admin = type(graph.admin)(graph, config)
    with pytest.raises(AdminRequired):
        admin.update({"loader.chunk_tokens": 300}, is_admin=False)
    with pytest.raises(ConfigError, match="chunk_tokens"):
        admin.update({"loader.chunk_tokens": 3}, is_admin=True)
    with pytest.raises(ConfigError, match="not an admin setting section"):
        admin.update({"rag.return_n": 9}, is_admin=True)
    with pytest.raises(ConfigError):
        admin.update({"index.no_such_knob": 1}, is_admin=True)
    assert graph.settings.loader.chunk_tokens == 200  # nothing changed by the failures

    monkeypatch.setenv("DOCGRAPH_INDEX__RRF_K", "10")
    result = admin.update({"loader.chunk_tokens": "300", "index": {"rrf_k": 30},
                           "refresh.interval_seconds": 60, "store.path": str(tmp_path / "b.db")},
                          is_admin=True)
    assert result.changed == {"loader": {"chunk_tokens": 300}, "index": {"rrf_k": 30},
                              "refresh": {"interval_seconds": 60.0},
                              "store": {"path": str(tmp_path / "b.db")}}
    assert graph.settings.loader.chunk_tokens == 300 and graph.settings.index.rrf_k == 30
    assert graph.settings.refresh.interval_seconds == 60
    assert result.restart_required == ["store"]
    assert graph.settings.store.path != tmp_path / "b.db"  # applies at the next start
    assert any("DOCGRAPH_INDEX__RRF_K" in w for w in result.warnings)
    text = config.read_text(encoding="utf-8")
    assert "# deployment settings" in text and "# tokens" in text and "return_n = 3" in text
    monkeypatch.delenv("DOCGRAPH_INDEX__RRF_K")

    reloaded = load_settings(config)
    assert (reloaded.loader.chunk_tokens, reloaded.index.rrf_k,
            reloaded.refresh.interval_seconds) == (300, 30, 60)
    assert admin.view()["refresh"]["interval_seconds"] == 60


def test_changing_the_embedding_model_needs_an_explicit_full_reindex(tmp_path, make_any_graph,
                                                                      monkeypatch):
    graph, _hr, _ops = _graph_with_two_namespaces(tmp_path, make_any_graph)
    graph.refresher.run_once()
    chunks = sum(ns.chunks for ns in graph.store.stats())
    with pytest.raises(EmbeddingModelMismatch, match=rf"all {chunks} chunks") as info:
        graph.admin.update({"embed.model": "e5-small-4bit"}, is_admin=True, persist=False)
    assert "full_reindex" in str(info.value)
    assert graph.settings.embed.model != "e5-small-4bit"

    class Replacement(HashingEmbedder):
        name = "replacement"

    monkeypatch.setattr("docgraph.embedding.embedders.make_embedder",
                        lambda settings: Replacement())
    result = graph.admin.update({"embed.model": "e5-small-4bit"}, is_admin=True,
                                full_reindex=True, persist=False)
    assert result.warnings and "re-embedded" in result.warnings[0]
    assert result.reindexed_chunks == chunks
    assert graph.store.embedding_model() == ("replacement", graph.embedder.dimension)
    assert graph.search("parental leave", namespaces={"hr"}, k=1)[0].source_path == "leave.md"


def test_config_sections_have_defaults_and_env_overrides(monkeypatch):

    settings = load_settings()
    assert settings.refresh.interval_seconds == 900 and settings.sources.secrets_file is None
    monkeypatch.setenv("DOCGRAPH_REFRESH__INTERVAL_SECONDS", "120")
    assert load_settings().refresh.interval_seconds == 120
    monkeypatch.setenv("DOCGRAPH_REFRESH__INTERVAL_SECONDS", "0")
    with pytest.raises(ConfigError):
        load_settings()
    assert os.environ["DOCGRAPH_REFRESH__INTERVAL_SECONDS"] == "0"


# On the embedded file and on PostgreSQL.
backend = store_backends.product_backend


def test_cli_sources_tags_refresh_status_admin(backend, tmp_path, monkeypatch):
    import json

    import sqlalchemy as sa
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    store = backend.store_settings()
    index: list[str] = []
    if store["backend"] == "postgres":
        monkeypatch.setenv("DOCGRAPH_STORE__BACKEND", "postgres")
        monkeypatch.setenv("DOCGRAPH_STORE__URL", str(store["url"]))
    else:
        index = ["--index", str(store["path"])]
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    monkeypatch.setenv("DOCGRAPH_CONFIG", str(tmp_path / "docgraph.toml"))
    folder = write_files(tmp_path / "docs", HR)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'crm.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE tickets (id INTEGER PRIMARY KEY, body TEXT)")
        conn.exec_driver_sql("INSERT INTO tickets VALUES (1, 'Heron portal is down again.')")
    engine.dispose()
    runner = CliRunner()

    def run(*args: str) -> str:
        done = runner.invoke(app, [*index, *args])
        assert done.exit_code == 0, (args, done.output)
        return done.output

    run("sources", "add", str(folder), "--domain", "hr")
    run("sources", "add-sql", "crm", f"sqlite:///{tmp_path / 'crm.db'}")
    run("tags", "set", "crm", "tickets.body", "natural_language", "--domain", "support")
    listed = json.loads(run("sources", "list", "--json"))
    assert {(s["kind"], s["domain"]) for s in listed} == {
        ("documents", "hr"), ("relational", None), ("table", "support")}
    assert json.loads(run("tags", "list", "--json"))[0]["pk_column"] == "id"
    run("refresh")
    status = json.loads(run("status", "--json"))
    assert {b["namespace"]: b["last_outcome"] for b in status["builds"]} == {
        "hr": "ok", "support": "ok"}
    assert {b["namespace"]: b["documents"] for b in status["builds"]} == {"hr": 2, "support": 1}
    run("admin", "set", "refresh.interval_seconds=120")
    assert json.loads(run("admin", "show"))["refresh"]["interval_seconds"] == 120
    assert "interval_seconds = 120" in (tmp_path / "docgraph.toml").read_text()
    refused = runner.invoke(app, [*index, "admin", "set", "embed.model=minilm-l6-int8"])
    assert refused.exit_code != 0
    run("tags", "remove", "crm", "tickets.body", "natural_language")
    run("sources", "remove", str(folder), "--domain", "hr")
    assert json.loads(run("sources", "list", "--json")) == [
        {"kind": "relational", "type": "sqlite", "urn": f"sqlite:///{tmp_path / 'crm.db'}",
         "domain": None, "read_only": False, "credential_env": "DOCGRAPH_SOURCE_CRM_",
         "id": None, "last_indexed_at": None, "display_name": None, "public_url": None}]
    # A source that fails makes `refresh` exit non-zero and say why.
    gone = Path(folder)
    run("sources", "add", str(gone), "--domain", "hr")
    gone.rename(tmp_path / "elsewhere")
    failed = runner.invoke(app, [*index, "refresh"])
    assert failed.exit_code == 1
    assert "folder not found" in failed.output
