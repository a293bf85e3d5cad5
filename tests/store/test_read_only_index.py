"""A read-only index (a read-only mount, a replica copy, ``store.read_only``) is searchable,
refuses changes naming itself, and a file that cannot be read says why.

Root (as CI runs) ignores file modes, so "this process cannot write the folder" is made
real by switching the effective user to ``nobody`` for the open (``seteuid``, undone after),
on a folder under the system temp dir that ``nobody`` may enter; as any other user a
``chmod`` does it. A read-only mount behaves the same (checked by hand with a read-only
bind mount: the file system's read-only flag is what ``open_mode`` reads first).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from docgraph import DocGraph
from docgraph.embedding.embedders import HashingEmbedder
from docgraph.errors import ReadOnlyIndex, StoreError
from tests.deployment import Deployment, embedded_store
from tests.helpers import write_files

POLICY = "assignments:\n  - {user: root, role: admin, domain: \"*\"}\n"
DOCS = {"runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n",
        "pump.md": "# Pump\n\nThe Zephyrine coolant pump is serviced yearly.\n"}
NOBODY = 65534


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def _as_other_user() -> Iterator[None]:
    """Run the block as a user that owns nothing here (root: ``nobody``; others: as is)."""
    if os.geteuid() != 0:
        yield
        return
    # The block imports lazily (and reads package data) as that user: a clone in a 0700
    # folder (``mktemp -d``) would hide this Python installation and the sources from it, so
    # the folders above them are opened for passing through (not reading) while it runs.
    import docgraph

    closed = {folder: folder.stat().st_mode for place in (sys.prefix, docgraph.__file__)
              for folder in Path(place).resolve().parents
              if not folder.stat().st_mode & stat.S_IXOTH}
    for folder, mode in closed.items():
        folder.chmod(mode | stat.S_IXOTH)
    try:
        try:
            os.setegid(NOBODY)
            os.seteuid(NOBODY)
        except PermissionError as exc:  # root without CAP_SETUID (a locked-down container)
            os.setegid(0)
            pytest.skip(f"root cannot act as another user here, so file modes do not bind: "
                        f"{exc}")
        try:
            yield
        finally:
            os.seteuid(0)
            os.setegid(0)
    finally:
        for folder, mode in closed.items():
            folder.chmod(stat.S_IMODE(mode))


@pytest.fixture
def shared_folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder outside pytest's private temp dir (0700), so ``nobody`` may enter it, with
    the settings file the index is opened with."""
    folder = Path(tempfile.mkdtemp(prefix="docgraph-ro-"))
    folder.chmod(0o755)
    closed = [p for p in folder.parents if not p.stat().st_mode & stat.S_IXOTH]
    if os.geteuid() == 0 and closed:
        shutil.rmtree(folder)
        pytest.skip(f"{closed[0]} (the temp dir's parent) is closed to other users")
    (folder / "docgraph.toml").write_text('[embed]\nmodel = "hashing"\n', encoding="utf-8")
    monkeypatch.setenv("DOCGRAPH_CONFIG", str(folder / "docgraph.toml"))
    try:
        yield folder
    finally:
        for path in (folder, *folder.rglob("*")):
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(folder)


def _build(index: Path, docs: Path) -> None:
    with DocGraph.open(index, embedder=HashingEmbedder()) as graph:
        graph.index(write_files(docs, DOCS), "ops")


def test_read_only_setting_serves_reads_and_refuses_changes(tmp_path: Path) -> None:
    """``store.read_only = true``: search and the read commands answer, leaving the file as
    it was; a build and a token change fail naming the index; the start says once that
    traces and audit are off; ``store.require_audit`` refuses instead."""
    index = tmp_path / "index" / "index.db"
    writable = Deployment(tmp_path, embedded_store(index), POLICY)
    writable.run("index", str(write_files(tmp_path / "ops", DOCS)), "-n", "ops")
    token = writable.run("token", "add", "root").strip()
    before = _digest(index)
    replica = Deployment(tmp_path, embedded_store(index) + "read_only = true\n", POLICY)

    found = replica.attempt("--user", "root", "search", "Kestrel lidar", "-n", "ops")
    assert found.returncode == 0, found.stderr[-3000:]
    assert "runbook.md" in found.stdout
    said = " ".join(found.stderr.split())
    assert said.count("opened read-only (store.read_only = true)") == 1, said
    assert "traces and audit are not recorded" in said
    for read in (("--user", "root", "status"), ("--user", "root", "entities", "-n", "ops"),
                 ("--user", "root", "lookup", "pump")):
        done = replica.attempt(*read)
        assert done.returncode == 0, (read, done.stderr[-3000:])

    for change in (("index", str(tmp_path / "ops"), "-n", "ops"), ("token", "add", "bob"),
                   ("refresh",)):
        done = replica.attempt(*change)
        refused = " ".join(done.stderr.split())
        assert done.returncode == 1, (change, done.stderr[-3000:])
        assert "Traceback" not in done.stderr
        assert f"{index} is opened read-only (store.read_only = true)" in refused, refused

    url = replica.serve()  # serves, without a refresher
    try:
        answer = httpx.post(url + "/api/v1/search_documents", timeout=60,
                            json={"query_text": "Zephyrine coolant pump", "k": 3},
                            headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        assert "pump.md" in answer.text
    finally:
        replica.stop()
    assert _digest(index) == before  # nothing written, not even a trace or an audit row

    strict = Deployment(tmp_path, embedded_store(index) + "read_only = true\n"
                        "require_audit = true\n", POLICY)
    refused = strict.attempt("--user", "root", "search", "Kestrel lidar")
    assert refused.returncode == 1
    assert "store.require_audit" in refused.stderr and "Traceback" not in refused.stderr


def test_index_in_a_folder_it_cannot_write_is_searched_read_only(shared_folder: Path) -> None:
    """A file and folder this process cannot write (a read-only mount, a replica owned by
    another user) open read-only and immutable: search answers, nothing is created beside
    the file, and a build is refused naming the index."""
    index = shared_folder / "index" / "index.db"
    _build(index, shared_folder / "docs")
    (shared_folder / "index" / "index.db.refresh-lock").unlink()
    index.chmod(0o444)
    index.parent.chmod(0o555)
    before = sorted(p.name for p in index.parent.iterdir())
    with _as_other_user(), DocGraph.open(index, embedder=HashingEmbedder()) as graph:
        assert graph.catalog.read_only == "the file is not writable"
        assert graph.catalog.mode.immutable  # no -shm can be made beside it
        hits = graph.search("Kestrel lidar", namespaces=["ops"])
        assert hits and hits[0].doc_id.endswith("runbook.md"), hits
        with pytest.raises(ReadOnlyIndex, match="opened read-only"):
            graph.index(shared_folder / "docs", "ops")
    assert sorted(p.name for p in index.parent.iterdir()) == before  # no -wal, -shm, lock


def test_an_unreadable_index_says_why(shared_folder: Path) -> None:
    """A file this process may not read is "permission denied" with its mode and owner; a
    file that is not SQLite is "not a docgraph index"."""
    index = shared_folder / "index" / "index.db"
    _build(index, shared_folder / "docs")
    index.chmod(0)
    with _as_other_user(), pytest.raises(StoreError) as denied:
        DocGraph.open(index, embedder=HashingEmbedder())
    message = str(denied.value)
    assert "permission denied" in message and stat.filemode(0o100000) in message, message
    assert "not a docgraph index" not in message

    junk = shared_folder / "junk.db"
    junk.write_bytes(b"this is not a database file, just text " * 200)
    with pytest.raises(StoreError, match="not a docgraph index"):
        DocGraph.open(junk, embedder=HashingEmbedder())


def test_a_read_only_index_from_before_the_added_columns_reads_as_upgraded(
        tmp_path: Path) -> None:
    """A file written before the columns added without a version step (every one of
    ``ADDED_COLUMNS``, so a column added later is covered too), opened read-only (it cannot
    gain them): status, search and the source list answer instead of a traceback,
    and each column reads as the writable upgrade makes it: a failure recorded before is the
    owner's to see only (a governed caller is told a file failed, not its path)."""
    import sqlite3

    from docgraph.store.sqlite.schema import ADDED_COLUMNS

    index = tmp_path / "index" / "index.db"
    docs = write_files(tmp_path / "ops", {**DOCS, "broken.pdf": "%PDF-1.4 not a pdf"})
    with DocGraph.open(index, embedder=HashingEmbedder()) as graph:
        graph.index(docs, "ops")
    with sqlite3.connect(index) as con:
        for table, column, _, _ in ADDED_COLUMNS:
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.close()
    before = _digest(index)
    with DocGraph.open(index, embedder=HashingEmbedder(),
                       store={"path": index, "read_only": True}) as graph:
        failures = graph.status().failures
        hits = graph.search("Zephyrine coolant pump", k=1, namespaces=["ops"])
    assert [(f.path, f.access) for f in failures] == [("broken.pdf", frozenset())]
    assert hits and hits[0].source_path.endswith("pump.md")
    replica = Deployment(tmp_path, embedded_store(index) + "read_only = true\n", POLICY)
    for read in (("status",), ("search", "Kestrel lidar", "-n", "ops"), ("sources", "list")):
        done = replica.attempt("--user", "root", *read)
        assert done.returncode == 0, (read, done.stderr[-3000:])
        assert "Traceback" not in done.stderr, read
        told = " ".join((done.stdout + done.stderr).split())
        assert "broken.pdf" not in told, read
        if read == ("status",):
            assert "first: (a file you may not read)" in told
        if read[0] == "search":
            assert "runbook.md" in told
    assert _digest(index) == before
