"""A build survives a document the store refuses to write, on SQLite and PostgreSQL.

The refused file is reported failed with the store's reason naming it (``report.failed``,
``docgraph status``), every other document is written, the build ends as a build does
(files gone deleted, permission changes stored, the source marked indexed) and the next
build, once the file is fixed, indexes it. What is not one document's fault (a lost
connection) still ends the build. Characters no store can keep (NUL, lone surrogates) are
taken out before anything is written, so such files index on both backends.
"""

from __future__ import annotations

import random
import sqlite3
import string
from collections.abc import Callable
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.errors import ReadOnlyIndex, StoreError, StoreFull, StoreUnavailable
from docgraph.ingest.storable import storable_document
from docgraph.lifecycle.outcomes import phases_of_report
from docgraph.model import AttachedDocument, Block, BlockKind, ExtractedDocument
from docgraph.store.outages import store_unavailable
from docgraph.store.refusals import refused_write
from docgraph.store.sql.dialect import run
from tests import backend_graphs, malformed, office_fixtures
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

SIDECAR = ".docgraph-access.yaml"
MakeGraph = Callable[..., DocGraph]
postgres_only = pytest.mark.parametrize("make_graph", ["postgres"], indirect=True)


def _refuse_titles(graph: DocGraph, word: str, message: str) -> None:
    """Install a rule in the store itself (as an operator's retention policy might) that
    refuses every document whose title contains ``word``: a real refusal by the database,
    raised inside the build's write transaction."""
    if graph.backend == "postgres":
        run(graph.store, f"""CREATE FUNCTION refuse_titles() RETURNS trigger
            LANGUAGE plpgsql AS $$ BEGIN
              IF NEW.title LIKE '%{word}%' THEN RAISE EXCEPTION '{message}'; END IF;
              RETURN NEW; END $$""")
        run(graph.store, "CREATE TRIGGER refuse_titles BEFORE INSERT OR UPDATE ON documents"
                         " FOR EACH ROW EXECUTE FUNCTION refuse_titles()")
        return
    for event in ("INSERT", "UPDATE"):
        run(graph.store, f"CREATE TRIGGER refuse_titles_{event} BEFORE {event} ON documents"
                         f" WHEN NEW.title LIKE '%{word}%'"
                         f" BEGIN SELECT RAISE(ABORT, '{message}'); END")


def _texts(graph: DocGraph, query: str) -> str:
    return " ".join(h.text for h in graph.search(query, namespaces=["ops"], k=10))


def _last_indexed(graph: DocGraph) -> float:
    return float(run(graph.store, "SELECT last_indexed_at FROM sources").fetchone()[0])


def test_a_refused_document_fails_alone_and_the_build_finishes(
        tmp_path: Path, make_graph: MakeGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_files(tmp_path / "docs", {
        "a.md": "# Depot log\n\nThe Rotterdam depot runs twelve Tern T3 robots.\n",
        "gone.md": "# Old note\n\nThe Vexholm pallet scheme is retired.\n",
        "team/plan.md": "# Plan\n\nThe Tern T3 codeword is Zephyrquartz.\n",
        f"team/{SIDECAR}": "files:\n  plan.md: [group:finance]\n",
    })
    graph = make_graph()
    first = graph.index(folder, namespace="ops")
    assert sorted(first.added) == ["a.md", "gone.md", "team/plan.md"] and not first.failed
    before = _last_indexed(graph)

    _refuse_titles(graph, "Quarantined", "refused by the retention policy")
    (folder / "gone.md").unlink()
    (folder / "bad.md").write_text("# Quarantined notes\n\nThe Brackwater audit found "
                                   "corrosion on dock D-7.\n")
    # after bad.md in the batch: today's write left these out and ended the build
    (folder / "c.md").write_text("# Gdansk\n\nThe Gdansk depot reported error E-417.\n")
    (folder / "z.md").write_text("# Valencia\n\nThe Valencia depot runs the Kestrel K2.\n")
    (folder / "team" / SIDECAR).write_text("files:\n  plan.md: [group:finance, user:bob]\n")
    report = graph.index(folder, namespace="ops")

    [(path, reason)] = report.failed
    assert path == "bad.md" and reason.startswith("bad.md: ")
    assert "refused by the retention policy" in reason
    assert report.failed_phases["bad.md"] == "store"
    # the build history files it under the phase that refused it, not under extraction
    phases = {p.phase: p for p in phases_of_report("src", report)}
    assert phases["extract"].outcome == "ok" and "bad.md" not in phases["extract"].message
    assert phases["store"].outcome == "partial" and "refused by the store" in \
        phases["store"].message and "bad.md" in phases["store"].message
    assert sorted(report.added) == ["c.md", "z.md"] and report.unchanged == 2
    assert report.removed == ["gone.md"] and report.access_changed == 1
    documents = graph.store.documents_for_source(graph.store.list_sources()[0])
    assert sorted(documents) == ["a.md", "c.md", "team/plan.md", "z.md"]
    assert documents["team/plan.md"].access == frozenset({"group:finance", "user:bob"})
    # the build's counts are those of what it wrote, not of the refused file
    assert report.chunks_written == documents["c.md"].chunk_count + documents["z.md"].chunk_count
    assert "E-417" in _texts(graph, "Gdansk depot error") and "Kestrel" in _texts(
        graph, "Valencia depot Kestrel")
    assert "Vexholm" not in _texts(graph, "Vexholm pallet scheme")
    assert "Brackwater" not in _texts(graph, "Brackwater audit corrosion")
    assert _last_indexed(graph) > before  # the build ended as a build does
    status = backend_graphs.cli_status(graph, monkeypatch)
    assert [(f["path"], f["reason"]) for f in status["failures"]] == [("bad.md", reason)]

    (folder / "bad.md").write_text("# Dock notes\n\nThe Brackwater audit found corrosion on "
                                   "dock D-7.\n")
    fixed = graph.index(folder, namespace="ops")
    assert fixed.added == ["bad.md"] and not fixed.failed and fixed.unchanged == 4
    assert "Brackwater" in _texts(graph, "Brackwater audit corrosion")
    assert backend_graphs.cli_status(graph, monkeypatch)["failures"] == []


@postgres_only
def test_a_lost_connection_still_ends_the_build(tmp_path: Path, make_graph: MakeGraph) -> None:
    """Not one document's fault: the build stops (as before) instead of reporting the
    file failed and carrying on against a store it cannot reach. (SQLite has no
    connection to lose; its full disk and read-only file end a build alike:
    ``tests/store/test_disk_full.py``, ``tests/store/test_read_only_index.py``.)"""
    graph = make_graph()
    folder = write_files(tmp_path / "docs", {
        "a.md": "# Depot log\n\nThe Rotterdam depot runs twelve Tern T3 robots.\n",
        "cut.md": "# Severed link\n\nThis write loses its connection.\n",
    })
    run(graph.store, """CREATE FUNCTION sever() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.title LIKE '%Severed%' THEN
          PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
        RETURN NEW; END $$""")
    run(graph.store, "CREATE TRIGGER sever BEFORE INSERT ON documents"
                     " FOR EACH ROW EXECUTE FUNCTION sever()")
    with pytest.raises(Exception) as ended:
        graph.index(folder, namespace="ops")
    assert store_unavailable(ended.value) is not None
    assert not any(f.path == "cut.md" for f in graph.store.failures())


@postgres_only
def test_a_path_too_long_for_postgresql_keys_fails_alone(
        tmp_path: Path, make_graph: MakeGraph) -> None:
    """A document id over the 2704 bytes of a btree key (nested folders make a path of
    2.6 KB; Linux allows 4 KB) is refused by PostgreSQL's unique index: that file fails, its
    failure recorded. A path too long for the failures' key itself fails alike, reported by
    the build (and logged) though not recorded."""
    rnd = random.Random(7)

    def deep(letters: int) -> str:  # folders of 199 letters (of at most 255)
        text = "".join(rnd.choice(string.ascii_letters) for _ in range(letters))
        return "/".join(text[i:i + 199] for i in range(0, letters, 199)) + "/deep.md"

    # 2661 characters: its failure's key fits (2688 bytes), its document id does not
    recordable, too_long = deep(2640), deep(3000)
    assert len(recordable) == 2661
    folder = write_files(tmp_path / "docs", {
        "a.md": "# Depot log\n\nThe Rotterdam depot runs twelve Tern T3 robots.\n",
        recordable: "# Deep\n\nA deeply filed note on pier P-4.\n",
        too_long: "# Deeper\n\nAn even deeper note on pier P-5.\n",
        "z.md": "# Valencia\n\nThe Valencia depot runs the Kestrel K2.\n",
    })
    graph = make_graph()
    report = graph.index(folder, namespace="ops")
    assert sorted(report.added) == ["a.md", "z.md"]
    reasons = dict(report.failed)
    assert set(reasons) == {recordable, too_long}
    assert reasons[recordable].startswith(f"{recordable}: ")
    assert "exceeds btree" in reasons[recordable]
    assert [f.path for f in graph.store.failures()] == [recordable]
    assert "Kestrel" in _texts(graph, "Valencia depot Kestrel")


def test_which_write_errors_are_one_documents_fault() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (x TEXT NOT NULL)")
    with pytest.raises(sqlite3.IntegrityError) as constraint:
        db.execute("INSERT INTO t VALUES (NULL)")
    with pytest.raises(UnicodeEncodeError) as surrogate:
        db.execute("INSERT INTO t VALUES (?)", ("\ud800",))
    assert refused_write(constraint.value) and refused_write(surrogate.value)
    assert refused_write(StoreError("notes.md#chunk-0: invalid vector"))
    for ends in (StoreFull("disk full"), StoreUnavailable("PostgreSQL unavailable"),
                 ReadOnlyIndex("index.db is opened read-only"), KeyboardInterrupt(),
                 sqlite3.OperationalError("database is locked"),
                 sqlite3.DatabaseError("database disk image is malformed"),
                 RuntimeError("a defect")):
        assert not refused_write(ends), ends


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


def test_a_failed_new_version_keeps_the_permissions_the_folder_now_sets(
        tmp_path: Path, make_graph: MakeGraph) -> None:
    """A file indexed open, then restricted by a sidecar in the same build as its new
    version fails (refused by the store; unextractable): the old version stays searchable,
    but only by those the folder now lets in. Before, the old, open permission set stood,
    so the whole namespace kept reading what its owner had just restricted."""
    folder = write_files(tmp_path / "docs", {
        "team/plan.md": "# Plan\n\nThe Tern T3 codeword is Zephyrquartz.\n",
        "team/scan.pdf": malformed.text_pdf("The Kelvar budget is 40."),
        "team/other.md": "# Other\n\nNothing here.\n",
    })
    graph = make_graph()
    graph.index(folder, namespace="ops")
    docs = graph.store.documents_for_source(graph.store.list_sources()[0])
    assert docs["team/plan.md"].access is None and docs["team/scan.pdf"].access is None

    _refuse_titles(graph, "Quarantined", "refused by the retention policy")
    (folder / "team" / SIDECAR).write_text(
        "files:\n  plan.md: [group:finance]\n  scan.pdf: [group:finance]\n")
    (folder / "team/plan.md").write_text("# Quarantined plan\n\nThe codeword changed.\n")
    (folder / "team/scan.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    report = graph.index(folder, namespace="ops")

    assert sorted(path for path, _ in report.failed) == ["team/plan.md", "team/scan.pdf"]
    assert report.failed_phases == {"team/plan.md": "store", "team/scan.pdf": "extract"}
    docs = graph.store.documents_for_source(graph.store.list_sources()[0])
    assert docs["team/plan.md"].access == frozenset({"group:finance"})
    assert docs["team/scan.pdf"].access == frozenset({"group:finance"})
    assert docs["team/other.md"].access is None


def test_a_batch_refused_whole_for_one_reason_ends_the_build(
        tmp_path: Path, make_graph: MakeGraph) -> None:
    """Every document of a batch refused with the same message is the store's fault (a
    rule that refuses everything), not each file's: the build ends with the store's error
    instead of reporting a broken store as a partial build of N failed files."""
    folder = write_files(tmp_path / "docs", {
        f"n{i}.md": f"# Note {i}\n\nDepot {i} runs Tern T3 robots.\n" for i in range(3)})
    graph = make_graph()
    _refuse_titles(graph, "Note", "every document refused")
    with pytest.raises(Exception, match="every document refused"):
        graph.index(folder, namespace="ops")


def test_a_permission_failure_after_a_written_batch_is_filed_under_extraction(
        tmp_path: Path, make_graph: MakeGraph) -> None:
    """The build's phase is left at "store" by a batch write; a file whose permission
    source cannot be read afterwards must not be reported as refused by the store."""
    files = {f"a{i:02}.md": f"# Note {i}\n\nDepot {i} runs Tern T3 robots.\n" for i in range(16)}
    files["z/secret.md"] = "# Secret\n\nThe vault code is Quillmoss.\n"
    files[f"z/{SIDECAR}"] = "files: [unclosed\n"  # after a00..a15: written at once
    folder = write_files(tmp_path / "docs", files)
    graph = make_graph()
    report = graph.index(folder, namespace="ops")
    assert [path for path, _ in report.failed] == ["z/secret.md"]
    assert report.failed_phases["z/secret.md"] == "extract"
    phases = {p.phase: p for p in phases_of_report("src", report)}
    assert phases["store"].outcome == "ok" and phases["extract"].outcome == "partial"
