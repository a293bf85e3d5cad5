"""A build's numbers add up: chunks written == the chunks the index holds for the files it
wrote, embedded + reused == written (a first build reuses nothing, even when its
repeated-lines pass writes documents a second time), and ``docgraph status`` counts an
``index`` run as a build (no "never built" right after one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docgraph import DocGraph
from docgraph.serve.cli import app
from tests.helpers import CountingEmbedder, write_files

FOOTER = ("Halyard Robotics B.V., Kanaalweg 12, Eindhoven, registered under KvK 17263514. "
          "Questions: legal@halyard.example. This document is confidential.")
SITES = ["Rotterdam", "Gdansk", "Valencia", "Antwerp", "Tallinn", "Daventry", "Lyon", "Porto"]


def _folder(root: Path) -> Path:
    """Twelve notes, ten with the same footer: the footer becomes repeated only once the
    first pass has written them, so the build's repeated-lines pass writes them again."""
    return write_files(root, {
        f"notes/note-{i:02d}.md": (
            f"# Site note {i}\n\nThe {SITES[i % 8]} depot runs {10 + i} Tern T3 robots and "
            f"reported error E-{400 + i} after the firmware rollout.\n\n"
            + "".join(f"## Part {p}\n\nPart {p} of note {i} covers the {SITES[(i + p) % 8]} "
                      f"audit, follow-up {i * 10 + p}.\n\n" for p in range(3))
            + (f"{FOOTER}\n" if i < 10 else ""))
        for i in range(12)})


def test_first_build_counts_add_up_to_what_the_index_holds(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "docs")
    embedder = CountingEmbedder()
    graph = DocGraph.open(tmp_path / "i.db", embedder=embedder)
    try:
        report = graph.index(folder, namespace="ops")
        held = {s.namespace: s.chunks for s in graph.store.stats()}["ops"]
        assert report.updated == [] and len(report.added) == 12
        # the repeated-lines pass wrote documents again before their chunks, written
        # pending, were embedded: nothing is embedded twice (docgraph.ingest.embed_behind)
        assert report.passages_embedded == report.chunks_written
        assert report.chunks_written == held
        assert report.chunks_embedded + report.chunks_reused == report.chunks_written
        assert report.chunks_reused == 0  # nothing was indexed before this build
        assert embedder.embedded == report.passages_embedded
        status = graph.index_status()[0]
        assert status.last_outcome == "ok" and status.staleness_seconds is not None
        assert status.in_progress is None
    finally:
        graph.close()


def test_status_counts_an_index_run_as_a_build(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path / "docs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    runner = CliRunner()
    index = str(tmp_path / "i.db")
    built = runner.invoke(app, ["--index", index, "index", str(folder), "-n", "ops"])
    assert built.exit_code == 0, built.output
    shown = runner.invoke(app, ["--index", index, "status", "--json"])
    assert shown.exit_code == 0, shown.output
    builds = json.loads(shown.stdout)["builds"]
    assert [b["last_outcome"] for b in builds] == ["ok"]
    assert builds[0]["last_build_at"] and builds[0]["staleness_seconds"] is not None
    table = runner.invoke(app, ["--index", index, "status"])
    assert "never built" not in table.output and "never" not in table.output
