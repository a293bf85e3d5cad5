"""A file that fails to index is told of (its path, the extractor's or store's message,
the counts) only to callers its permission set lets in, on the embedded file and on
PostgreSQL.

Before, ``index_status`` listed every failed file of a namespace to every reader of the
namespace, so a restricted file's name (``hr/2027-layoffs-list.pdf``) reached callers who
may not read it. Now each failure is recorded with the set the file has at its source (its
folder's sidecar; nobody but the index's owner where that cannot be read, and for a failure
recorded before failures carried a set) and the governed status filters by it; the index's
owner (a local ``docgraph status`` without ``[governance]``) still sees every failure.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.serve.tools import DocgraphTools
from tests import backend_graphs
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

MakeGraph = Callable[..., DocGraph]
SIDECAR = ".docgraph-access.yaml"
MEMBERS = {"hr": ["alice"], "ops": ["bob"]}
USERS = ("alice", "bob", "dave")
BROKEN_PDF = b"%PDF-1.4 this is not really a pdf"
SECRET = "hr/2027-layoffs-list.pdf"
OPEN = "open/broken-scan.pdf"


def _tools(graph: DocGraph) -> DocgraphTools:
    grants = [RoleAssignment(u, "agent", "ops") for u in USERS]
    return DocgraphTools(Governance(graph, StaticEntitlements(grants, members=MEMBERS)))


def _index_status(tools: DocgraphTools, user: str) -> dict[str, Any]:
    shown: dict[str, Any] = tools.call("index_status", Caller(user), {})
    return shown


def _failed(shown: dict[str, Any]) -> list[str]:
    return sorted(f["path"] for f in shown["failed_files"])


def test_a_restricted_files_failure_is_told_only_to_its_readers(
        tmp_path: Path, make_graph: MakeGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_files(tmp_path / "docs", {
        f"hr/{SIDECAR}": "access: [group:hr]\n",
        SECRET: BROKEN_PDF,
        "hr/handbook.md": "# Handbook\n\nThe Tern T3 handbook.\n",
        OPEN: BROKEN_PDF,
        "open/notes.md": "# Notes\n\nThe Tern T3 ships in May.\n",
    })
    graph = make_graph()
    report = graph.index(folder, namespace="ops")
    assert sorted(p for p, _ in report.failed) == [SECRET, OPEN]
    tools = _tools(graph)

    alice = _index_status(tools, "alice")  # in group:hr
    assert _failed(alice) == [SECRET, OPEN]
    assert alice["namespaces"][0]["failed_documents"] == 2
    for user in ("bob", "dave"):  # readers of the namespace, not of hr/
        shown = _index_status(tools, user)
        assert "layoffs" not in json.dumps(shown), user  # not its path, not its reason
        assert _failed(shown) == [OPEN]  # an open file's failure is told to every reader
        assert shown["namespaces"][0]["failed_documents"] == 1
        assert shown["namespaces"][0]["documents"] == 1  # as documents already were
    # `docgraph status`: the owner sees both, with the per-namespace count
    owner = backend_graphs.cli_status(graph, monkeypatch)
    assert sorted(f["path"] for f in owner["failures"]) == [SECRET, OPEN]
    assert owner["namespaces"][0]["failures"] == 2


def test_an_unreadable_sidecars_failures_are_the_owners_only(
        tmp_path: Path, make_graph: MakeGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_files(tmp_path / "docs", {
        f"hr/{SIDECAR}": "access: [group:hr\n",  # cannot be parsed: fails closed
        "hr/2027-layoffs-plan.md": "# Plan\n\nWho goes.\n",
        "open/notes.md": "# Notes\n\nThe Tern T3 ships in May.\n",
    })
    graph = make_graph()
    report = graph.index(folder, namespace="ops")
    assert [p for p, _ in report.failed] == ["hr/2027-layoffs-plan.md"]
    tools = _tools(graph)
    for user in USERS:  # nobody the sidecar might have named is told: it cannot be read
        shown = _index_status(tools, user)
        assert "layoffs" not in json.dumps(shown), user
        assert _failed(shown) == [] and shown["namespaces"][0]["failed_documents"] == 0
    owner = backend_graphs.cli_status(graph, monkeypatch)
    assert [f["path"] for f in owner["failures"]] == ["hr/2027-layoffs-plan.md"]


@backend_graphs.embedded_only
def test_failures_recorded_before_the_upgrade_are_the_owners_only_until_rebuilt(
        tmp_path: Path, make_graph: MakeGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index file written before failures carried their permission set opens (the
    column is added) and its failures are withheld from every governed caller, whose set
    is unknown, until the next build records them again."""
    folder = write_files(tmp_path / "docs", {
        OPEN: BROKEN_PDF, "open/notes.md": "# Notes\n\nThe Tern T3 ships in May.\n"})
    graph = make_graph()
    graph.index(folder, namespace="ops")
    graph.close()
    with sqlite3.connect(graph.settings.store.path) as db:  # as an older docgraph wrote it
        if "access" in {r[1] for r in db.execute("PRAGMA table_info(failures)")}:
            db.execute("ALTER TABLE failures DROP COLUMN access")
    db.close()
    upgraded = make_graph()
    tools = _tools(upgraded)
    shown = _index_status(tools, "bob")
    assert _failed(shown) == [] and shown["namespaces"][0]["failed_documents"] == 0
    owner = backend_graphs.cli_status(upgraded, monkeypatch)
    assert [f["path"] for f in owner["failures"]] == [OPEN]
    upgraded.index(folder, namespace="ops")  # recorded again, with the file's (open) set
    assert _failed(_index_status(tools, "bob")) == [OPEN]


def test_a_file_its_front_matter_restricts_keeps_that_set_when_its_new_version_fails(
        tmp_path: Path, make_graph: MakeGraph) -> None:
    """A file indexed under its own front matter's set, whose new version fails before it
    is read (over the size limit): its failure is told to that set's readers only, not to
    the open folder's."""
    memo = "---\naccess: [group:hr]\n---\n# Memo\n\nThe 2027 layoffs memo.\n"
    folder = write_files(tmp_path / "docs", {"open/layoffs-memo.md": memo})
    graph = make_graph(loader={"max_file_bytes": 4096})
    graph.index(folder, namespace="ops")
    (folder / "open/layoffs-memo.md").write_text(memo + "More.\n" * 1000)
    report = graph.index(folder, namespace="ops")
    assert [p for p, _ in report.failed] == ["open/layoffs-memo.md"]
    tools = _tools(graph)
    assert _failed(_index_status(tools, "alice")) == ["open/layoffs-memo.md"]
    shown = _index_status(tools, "bob")
    assert "layoffs" not in json.dumps(shown) and _failed(shown) == []


def test_a_never_indexed_file_restricted_by_its_front_matter_is_not_told_to_its_folder(
        tmp_path: Path, make_graph: MakeGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Markdown or HTML file names its own readers. When it fails before it was ever
    indexed, its failure goes to the readers its bytes name where they were read (a body
    that cannot be extracted), and to the index's owner only where they were not (over
    the size limit: what it says of its readers is unknown), never to its open folder's
    readers. Before, both went to everyone who reads the folder."""
    restricted = b"---\ntitle: Layoffs\naccess: [group:hr]\n---\n"
    binary = bytes(range(256)) * 8  # NUL bytes after the block: not text, not extracted
    folder = write_files(tmp_path / "docs", {
        "open/2027-layoffs-list.md": restricted + binary,
        "open/2027-layoffs-memo.md": restricted + b"# Memo\n\n" + b"Who goes.\n" * 600,
        "open/layoffs-page.html": b'<html><head><meta name="docgraph-access" '
                                  b'content="group:hr"></head><body>' + binary,
        "open/broken-notes.md": b"# Notes\n\n" + binary,  # names no readers: the folder's
        "open/notes.md": "# Notes\n\nThe Tern T3 ships in May.\n",
    })
    graph = make_graph(loader={"max_file_bytes": 4096})
    report = graph.index(folder, namespace="ops")
    assert sorted(p for p, _ in report.failed) == [
        "open/2027-layoffs-list.md", "open/2027-layoffs-memo.md", "open/broken-notes.md",
        "open/layoffs-page.html"]
    reasons = dict(report.failed)
    assert "binary" in reasons["open/2027-layoffs-list.md"]  # read, then not extracted
    assert "too large" in reasons["open/2027-layoffs-memo.md"]  # never read
    tools = _tools(graph)
    alice = _index_status(tools, "alice")  # group:hr, whom the list names
    assert _failed(alice) == ["open/2027-layoffs-list.md", "open/broken-notes.md"]
    for user in ("bob", "dave"):
        shown = _index_status(tools, user)
        assert "layoffs" not in json.dumps(shown), user
        assert _failed(shown) == ["open/broken-notes.md"]
        assert shown["namespaces"][0]["failed_documents"] == 1
    owner = backend_graphs.cli_status(graph, monkeypatch)
    assert len(owner["failures"]) == 4


def test_the_consoles_build_phases_do_not_name_a_failure_the_admin_may_not_read(
        tmp_path: Path, make_graph: MakeGraph) -> None:
    """A console admin administers every domain but reads restricted documents only where
    their sets say so. The Status page lists the last build's phases, whose messages quote
    a failure ("first: <path>: <reason>"); before, those came unfiltered from the build
    history, so an admin outside group:hr read the restricted file's name there."""
    from docgraph.serve.console.status import RefreshJob, status_page

    folder = write_files(tmp_path / "docs", {
        f"hr/{SIDECAR}": "access: [group:hr]\n",
        SECRET: BROKEN_PDF,
        "open/notes.md": "# Notes\n\nThe Tern T3 ships in May.\n",
    })
    graph = make_graph()
    graph.index(folder, namespace="ops")
    latest = graph.build_history.latest("ops")
    assert latest is not None and "layoffs" in json.dumps([p.message for p in latest.phases])
    admins = [RoleAssignment("root", "admin", "*"), RoleAssignment("carol", "admin", "*")]
    governance = Governance(graph, StaticEntitlements(
        admins, members={"hr": ["carol"]}))
    job = RefreshJob(graph)  # type: ignore[arg-type]
    outside = status_page(governance, Caller("root"), job)  # type: ignore[arg-type]
    shown = json.dumps(outside, default=str)
    assert "layoffs" not in shown and "(a file you may not read)" in shown
    inside = status_page(governance, Caller("carol"), job)  # type: ignore[arg-type]
    assert "layoffs" in json.dumps(inside["namespaces"], default=str)  # group:hr is told
