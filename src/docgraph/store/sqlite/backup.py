"""An online, consistent copy of the embedded index, and the checks a copy must pass before
it is called a backup (or restored).

:func:`backup_index` copies the catalog file with SQLite's backup API while servers keep
serving and refreshing it. The copy reads one snapshot: the source connection opens a read
transaction first and holds it across every step, so the backup never restarts when a
writer commits (SQLite restarts a backup whose source changed under it) and, the file being
in WAL mode, the writers are never blocked by it (a WAL reader blocks no writer; it only
keeps a checkpoint from recycling the pages it reads). The pages are copied
``pages_per_step`` at a time, so other threads run between steps and a caller sees progress.
Only the SQLite file is copied: the chunk index's sidecar (``<index>.chunk-index``, a cache
of the in-memory search arrays, :mod:`docgraph.store.sidecar`) and the refresh lock file
are left out; the sidecar is rebuilt from the catalog when the restored index is first
searched. The copy is written beside the target under a temporary name, checked
(:func:`inspect_index_file`: ``PRAGMA integrity_check``, docgraph's meta table, a schema
version this docgraph reads), made a single self-contained file (rollback journal mode, no
``-wal``), fsynced and only then renamed to the target: a failed backup leaves no file that
looks like one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from docgraph.errors import StoreError
from docgraph.store.sqlite.access import open_mode, read_only_uri
from docgraph.store.sqlite.catalog import UNREAD_WAL
from docgraph.store.sqlite.schema import SCHEMA_VERSION

#: Pages copied per backup step (8 KB pages: 8 MB a step).
PAGES_PER_STEP = 1024
#: The files SQLite may keep beside a database while it is written.
_SIDE_FILES = ("-journal", "-wal", "-shm")


@dataclass(frozen=True)
class IndexFileInfo:
    """What a checked index file holds: enough to say which index a backup is of."""

    path: Path
    schema_version: int
    catalog_id: str
    documents: int
    chunks: int
    size_bytes: int


@dataclass(frozen=True)
class BackupReport:
    """A finished, verified backup: the file, what it holds and how the copy went."""

    source: Path
    info: IndexFileInfo
    steps: int
    seconds: float


def _count(db: sqlite3.Connection, table: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {table}").fetchone()  # a fixed table name
    return int(row[0])


def _schema_version(db: sqlite3.Connection, path: Path, what: str) -> tuple[int, str]:
    """The schema version and catalog id recorded in ``db``; a :class:`StoreError` naming
    ``path`` when the file is not an SQLite database or not docgraph's."""
    try:
        tables = {row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables or "chunks" not in tables:
            raise StoreError(f"{path} is not a docgraph {what}: an SQLite database without "
                             "docgraph's meta and chunks tables")
        meta = dict(db.execute(
            "SELECT key, value FROM meta WHERE key IN ('schema_version', 'catalog_id')"))
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a docgraph {what} ({exc})") from exc
    if "schema_version" not in meta:
        raise StoreError(f"{path} is not a docgraph {what}: its meta table has no "
                         "schema_version")
    version = int(meta["schema_version"])
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer docgraph (index schema {version}; this docgraph "
            f"reads schema {SCHEMA_VERSION} and older): use that docgraph's version, or "
            "upgrade docgraph")
    return version, str(meta.get("catalog_id", ""))


def inspect_index_file(path: Path, what: str = "backup") -> IndexFileInfo:
    """Check that ``path`` is an intact docgraph index of a schema this docgraph reads
    (``PRAGMA integrity_check`` reads every page) and say what it holds; a
    :class:`StoreError` naming ``path`` and what is wrong otherwise (missing, not an SQLite
    database, not docgraph's, written by a newer docgraph, damaged). ``what`` names the file
    in those errors ("backup", "index"). Why: a backup is only reported done, and a restore
    only begins, once the file has been read back whole."""
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"no {what} at {path}: no such file" if not path.exists()
                         else f"{path} is not a file")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open it ({exc})") from exc
    try:
        version, catalog_id = _schema_version(db, path, what)
        try:
            problems = [row[0] for row in db.execute("PRAGMA integrity_check(20)")]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path} is damaged: integrity_check failed ({exc})") from exc
        if problems != ["ok"]:
            raise StoreError(f"{path} is damaged: integrity_check found "
                             f"{'; '.join(problems[:5])}")
        return IndexFileInfo(path, version, catalog_id, _count(db, "documents"),
                             _count(db, "chunks"), path.stat().st_size)
    finally:
        db.close()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_source(source: Path, read_only: bool) -> sqlite3.Connection:
    """A connection to the live index that never creates or writes a file: ``mode=rw`` where
    the index is writable (so it shares the servers' ``-shm``), else read-only as the catalog
    opens it (:func:`~docgraph.store.sqlite.access.open_mode`: a replica, a read-only mount,
    ``store.read_only``)."""
    if not source.is_file():
        raise StoreError(f"no index at {source}: nothing to back up")
    mode = open_mode(source, read_only)
    wal = Path(f"{source}-wal")
    if mode.immutable and wal.is_file() and wal.stat().st_size > 0:
        raise StoreError(f"cannot back up {source}: {wal} holds changes it would miss, which "
                         f"{UNREAD_WAL}")
    uri = (read_only_uri(source, mode) if mode.read_only
           else f"{source.resolve().as_uri()}?mode=rw")
    try:
        db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None,
                             check_same_thread=False)
        db.execute("PRAGMA busy_timeout = 30000")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the index {source} to back it up ({exc})") from exc
    return db


def backup_index(source: Path, target: Path, *, pages_per_step: int = PAGES_PER_STEP,
                 pause_s: float = 0.0, read_only: bool = False,
                 on_snapshot: Callable[[sqlite3.Connection], None] | None = None
                 ) -> BackupReport:
    """Copy the embedded index at ``source`` to the new file ``target`` while other
    processes read and write it, and verify the copy before returning (see the module
    docstring). ``pause_s``: seconds to wait between two steps, leaving the disk to the
    servers on a busy machine (the snapshot stays the same). ``read_only``: the index is
    declared read-only (``store.read_only``; an index this process cannot write is opened
    read-only anyway). ``on_snapshot`` is called with the source connection once the
    snapshot the copy holds is fixed (what it holds may be read through that connection,
    inside its transaction). Refuses an existing ``target`` (a backup never overwrites a
    file) and names every path in its errors; a failed backup leaves no file behind."""
    source, target = Path(source), Path(target)
    if target.is_dir():
        target = target / source.name
    if target.exists():
        raise StoreError(f"{target} already exists: a backup never overwrites a file; "
                         "choose a new path or delete it")
    if not target.parent.is_dir():
        raise StoreError(f"cannot write the backup {target}: no folder {target.parent}")
    started = time.monotonic()
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    db = _open_source(source, read_only)
    steps = 0
    try:
        db.execute("BEGIN")  # the read transaction every step reads: one snapshot
        _schema_version(db, source, "index")
        if on_snapshot is not None:
            on_snapshot(db)

        def progress(status: int, remaining: int, total: int) -> None:
            nonlocal steps
            steps += 1
            if pause_s > 0 and remaining > 0:
                time.sleep(pause_s)

        try:
            copy = sqlite3.connect(partial)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write the backup {partial} ({exc})") from exc
        try:
            db.backup(copy, pages=max(1, pages_per_step), progress=progress)
            copy.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
        except sqlite3.Error as exc:
            raise StoreError(f"backing up {source} to {partial} failed: {exc}") from exc
        finally:
            copy.close()
        db.execute("COMMIT")
        info = inspect_index_file(partial)
        _fsync(partial)
        partial.rename(target)
        _fsync(target.parent)
    except BaseException:
        for leftover in (partial, *(Path(f"{partial}{end}") for end in _SIDE_FILES)):
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise
    finally:
        db.close()
    return BackupReport(source, dataclasses.replace(info, path=target), steps,
                        time.monotonic() - started)
