"""Backup and restore of the embedded index (``store/sqlite/backup.py``, ``restore.py``) on
real SQLite files.

What must hold: a backup is one snapshot even when writers commit after it began (and they
are not blocked by it), is checked before it is reported, is one self-contained file and
leaves the chunk index's sidecar out; a restore puts the previous index (file, -wal, -shm,
sidecar) aside, rebuilds the sidecar, answers as the backed-up index did, refuses while a
process holds the index (naming it) unless forced, puts the previous index back when the
restored one does not open, and refuses bad input naming the file (missing, not SQLite, not
docgraph's, newer schema, damaged). A replica this process cannot write is backed up
without a write to it.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from docgraph.errors import StoreError
from docgraph.sources.urn import normalize_urn
from docgraph.store.dense_lists import lists_path
from docgraph.store.sqlite import SCHEMA_VERSION, EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite.backup import backup_index, inspect_index_file
from docgraph.store.sqlite.index import sidecar_path
from docgraph.store.sqlite.leader import FileLeaderLock, leader_lock_path
from docgraph.store.sqlite.restore import index_holders, restore_index
from tests.conftest import REPO
from tests.store.test_read_only_index import (  # noqa: F401  (fixture)
    _as_other_user,
    _build,
    shared_folder,
)
from tests.store.test_store import _write
from tests.store.test_store_sidecar import DIM, _answers, _catalog, _opened, _saved, _unit


def _state(db: sqlite3.Connection) -> tuple[int, int]:
    return tuple(db.execute("SELECT (SELECT count(*) FROM documents), "
                            "(SELECT count(*) FROM chunks)").fetchone())  # type: ignore[return-value]


def _add_documents(path: Path, names: list[str]) -> None:
    catalog = SQLiteCatalog(path)
    try:
        source = catalog.add_source(normalize_urn(path.parent / "a"), "a")
        rng = np.random.default_rng(len(names))
        for name in names:
            _write(catalog, source, name, [f"late {name} words", "more late words"],
                   _unit(rng, 2))
    finally:
        catalog.close()


@pytest.fixture
def index(tmp_path: Path) -> Path:
    """An index of 6 documents (150 chunks) with a saved sidecar."""
    path = tmp_path / "live" / "index.db"
    path.parent.mkdir()
    _catalog(path).close()
    _saved(path)
    assert sidecar_path(path).exists()
    return path


def test_a_backup_holds_its_snapshot_while_writers_commit_and_restores_in_place(
        index: Path, tmp_path: Path) -> None:
    opened, catalog = _opened(index)
    want = _answers(opened)
    catalog.close()
    seen: list[tuple[int, int]] = []

    def writes_after_the_snapshot(db: sqlite3.Connection) -> None:
        seen.append(_state(db))
        writer = threading.Thread(target=_add_documents, args=(index, ["late1.txt",
                                                                      "late2.txt"]))
        writer.start()
        writer.join(20)  # committed while the backup's read transaction is open
        assert not writer.is_alive(), "a writer was blocked by the backup"

    backup = tmp_path / "backups" / "b.db"
    backup.parent.mkdir()
    report = backup_index(index, backup, pages_per_step=4, on_snapshot=writes_after_the_snapshot)
    assert report.steps > 1
    assert (report.info.documents, report.info.chunks) == seen[0] == (6, 150)
    with sqlite3.connect(index) as live:
        assert _state(live) == (8, 154)  # the writes did land in the source
    assert sorted(p.name for p in backup.parent.iterdir()) == ["b.db"]  # no -wal, no sidecar
    assert inspect_index_file(backup).schema_version == SCHEMA_VERSION

    lists_path(index).write_bytes(b"the dense lists of the replaced rows")
    done = restore_index(backup, index)
    assert done.previous is not None and done.previous.parent == index.parent
    kept = sorted(p.name for p in done.previous.iterdir())
    assert {"index.db", "index.db.chunk-index", "index.db.chunk-lists"} <= set(kept)
    assert not sidecar_path(index).exists() and not lists_path(index).exists()
    restored, catalog = _opened(index)
    assert restored.sidecar_status == "missing"  # rebuilt from the restored catalog
    assert _answers(restored) == want
    catalog.close()
    assert _state(sqlite3.connect(done.previous / "index.db")) == (8, 154)


def test_a_backup_never_overwrites_and_names_a_missing_index(index: Path,
                                                             tmp_path: Path) -> None:
    taken = tmp_path / "taken.db"
    taken.write_text("mine")
    with pytest.raises(StoreError, match=f"{taken} already exists"):
        backup_index(index, taken)
    assert taken.read_text() == "mine"
    with pytest.raises(StoreError, match=f"no index at {tmp_path / 'none.db'}"):
        backup_index(tmp_path / "none.db", tmp_path / "b.db")
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "b.db").exists()
    into = backup_index(index, tmp_path).info.path  # a folder: the index's name inside it
    assert into == tmp_path / "index.db"


def test_restore_refuses_bad_input_naming_it(index: Path, tmp_path: Path) -> None:
    good = backup_index(index, tmp_path / "good.db").info.path
    before = index.read_bytes()
    cases: dict[str, str] = {}
    cases["missing.db"] = "no backup at .*missing.db: no such file"
    (tmp_path / "text.db").write_text("not a database at all, just some text" * 100)
    cases["text.db"] = r"text.db is not a docgraph backup \(file is not a database\)"
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()
    cases["other.db"] = "other.db is not a docgraph backup: an SQLite database without"
    newer = shutil.copy(good, tmp_path / "newer.db")
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                   (str(SCHEMA_VERSION + 1),))
    db.close()
    cases["newer.db"] = (f"newer.db was written by a newer docgraph \\(index schema "
                         f"{SCHEMA_VERSION + 1}; this docgraph reads schema {SCHEMA_VERSION}")
    damaged = Path(shutil.copy(good, tmp_path / "damaged.db"))
    data = bytearray(damaged.read_bytes())
    page = 8192
    for offset in range(3 * page, len(data) - page, 5 * page):  # b-tree pages, not page 1
        data[offset:offset + 64] = b"\xff" * 64
    damaged.write_bytes(bytes(data))
    cases["damaged.db"] = "damaged.db is (damaged|not a docgraph backup)"
    for name, message in cases.items():
        with pytest.raises(StoreError, match=message):
            restore_index(tmp_path / name, index)
    assert index.read_bytes() == before
    assert not [p for p in index.parent.iterdir() if "before-restore" in p.name]


def test_restore_refuses_an_index_a_process_holds_unless_forced(
        index: Path, tmp_path: Path) -> None:
    backup = backup_index(index, tmp_path / "b.db").info.path
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from docgraph.store.sqlite import "
         "SQLiteCatalog; c = SQLiteCatalog(sys.argv[1]); c.connection().execute("
         "'SELECT 1 FROM meta').fetchall(); print('open', flush=True); time.sleep(60)",
         str(index)], stdout=subprocess.PIPE, env={"PYTHONPATH": str(REPO / "src")})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
        assert index_holders(index) == [f"process {holder.pid}"]
        with pytest.raises(StoreError) as refused:
            restore_index(backup, index)
        message = str(refused.value)
        assert str(index) in message and f"process {holder.pid}" in message
        assert "stop it first" in message and "--force" in message
        assert restore_index(backup, index, force=True).previous is not None
    finally:
        holder.kill()
        holder.wait()
    leader = FileLeaderLock(leader_lock_path(index), identity="4242@elsewhere")
    assert leader.try_acquire()
    try:
        with pytest.raises(StoreError, match="the refresh leader 4242@elsewhere"):
            restore_index(backup, index)
    finally:
        leader.release()
    assert index_holders(index) == []


def test_a_restored_index_that_does_not_open_puts_the_previous_one_back(
        index: Path, tmp_path: Path) -> None:
    unsupported = backup_index(index, tmp_path / "b.db").info.path
    with sqlite3.connect(unsupported) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    db.close()
    _add_documents(index, ["only-in-the-live-index.txt"])
    files = sorted(p.name for p in index.parent.iterdir())
    with pytest.raises(StoreError, match=f"the restored index {index} does not open"):
        restore_index(unsupported, index)
    assert sorted(p.name for p in index.parent.iterdir()) == files  # no -wal of the attempt
    with sqlite3.connect(index) as live:
        assert _state(live) == (7, 152)
    live.close()
    assert sidecar_path(index).exists()
    assert not [p for p in index.parent.iterdir() if "before-restore" in p.name]


def test_a_sidecar_of_the_target_index_does_not_survive_a_restore(index: Path,
                                                                   tmp_path: Path) -> None:
    catalog = SQLiteCatalog(index)
    EmbeddedChunkIndex(catalog, DIM, sidecar_after_rows=1).wait_for_sidecar()
    catalog.close()
    backup = backup_index(index, tmp_path / "b.db").info.path
    target = tmp_path / "fresh" / "index.db"
    target.parent.mkdir()
    shutil.copy(sidecar_path(index), sidecar_path(target))  # a stray cache at the target
    assert restore_index(backup, target).previous is not None
    assert not sidecar_path(target).exists()


def test_a_replica_this_process_cannot_write_is_backed_up_without_writing_to_it(
        shared_folder: Path) -> None:  # noqa: F811
    """A read-only replica (file and folder not writable by this user, no ``-shm``) is
    opened read-only and immutable, as the catalog opens it; the backup holds its documents
    and nothing is created beside the file."""
    index = shared_folder / "index" / "index.db"
    _build(index, shared_folder / "docs")
    (shared_folder / "index" / "index.db.refresh-lock").unlink()
    index.chmod(0o444)
    index.parent.chmod(0o555)
    out = shared_folder / "out"
    out.mkdir()
    out.chmod(0o777)
    before = sorted(p.name for p in index.parent.iterdir())
    with _as_other_user():
        report = backup_index(index, out / "replica.db")
    assert sorted(p.name for p in index.parent.iterdir()) == before
    with sqlite3.connect(f"{index.resolve().as_uri()}?immutable=1", uri=True) as db:
        assert report.info.documents == _state(db)[0] > 0
    db.close()
