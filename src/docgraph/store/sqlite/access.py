"""How the embedded catalog file is reached, and what a failure to reach it means.

Read-only opening: a file on a read-only mount, a replica copied without write permission,
or an index the operator declares read-only (``store.read_only``) is opened with SQLite's
``mode=ro`` URI, so no connection ever writes to it. WAL databases need their ``-shm`` file
to be read (https://sqlite.org/wal.html, "Read-Only Databases"): where the folder cannot
take one and none exists, the file is opened ``immutable=1`` (SQLite then takes no locks
and reads the file as it is, which is right for a file nothing can change).

Failures say why: a file this process may not read is "permission denied" (with its mode
and owner), not "not a docgraph index"; a full disk names the file system holding the
index and its free space (:func:`disk_full`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from docgraph.errors import StoreError, StoreFull


@dataclass(frozen=True)
class OpenMode:
    """How one catalog file is opened: writable, or read-only (``reason`` says why) and
    then ``immutable`` where SQLite cannot keep its shared-memory file beside it."""

    reason: str = ""  # empty: writable
    immutable: bool = False

    @property
    def read_only(self) -> bool:
        """Opened read-only: every write is refused (:class:`~docgraph.errors.ReadOnlyIndex`)."""
        return bool(self.reason)


def _writable(path: Path) -> bool:
    """Whether this process may write ``path`` (its effective user where the platform can
    check that; a read-only mount says no even to root)."""
    effective = os.access in os.supports_effective_ids
    return os.access(path, os.W_OK, effective_ids=effective)


def open_mode(path: Path, declared: bool = False) -> OpenMode:
    """How to open the catalog at ``path``: read-only when ``declared``
    (``store.read_only``) or when the existing file or its folder is not writable; a new
    file (none there yet) is always opened writable, so it can be created."""
    if not path.is_file():
        return OpenMode()
    folder = path.parent
    folder_writable = _writable(folder)
    immutable = not folder_writable and not Path(f"{path}-shm").exists()
    if declared:
        return OpenMode("store.read_only = true", immutable)
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        return OpenMode(f"its folder {folder} is on a read-only mount", immutable)
    if not _writable(path):
        return OpenMode("the file is not writable", immutable)
    if not folder_writable:
        return OpenMode(f"its folder {folder} is not writable", immutable)
    return OpenMode()


def read_only_uri(path: Path, mode: OpenMode) -> str:
    """The SQLite URI opening ``path`` read-only (and immutable, where ``mode`` says)."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    return uri + "&immutable=1" if mode.immutable else uri


def cannot_open(path: Path, exc: sqlite3.Error) -> StoreError:
    """The error for a catalog file SQLite could not open or read, saying why: permission
    denied (with the file's mode and owner), a missing folder, or not a docgraph index."""
    if not path.exists() and path.parent.is_dir() and not _writable(path.parent):
        return StoreError(f"{path}: cannot create the index: its folder {path.parent} is not "
                          f"writable by this process (uid {os.geteuid()}) or is on a "
                          f"read-only mount ({exc})")
    reason = _unreadable(path)
    if reason:
        return StoreError(f"{path}: cannot read the index: {reason} ({exc})")
    return StoreError(f"{path}: not a docgraph index ({exc})")


def _unreadable(path: Path) -> str:
    """Why this process cannot read ``path`` (empty when it can open it)."""
    try:
        with path.open("rb"):
            return ""
    except PermissionError:
        pass
    except FileNotFoundError:
        return "the file or its folder does not exist"
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        info = path.stat()
    except PermissionError:
        return f"permission denied on its folder {path.parent} (uid {os.geteuid()})"
    return (f"permission denied (mode {stat.filemode(info.st_mode)}, owner uid "
            f"{info.st_uid}, this process runs as uid {os.geteuid()})")


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database or disk is full" (``SQLITE_FULL``)."""
    return (isinstance(exc, sqlite3.OperationalError)
            and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL)


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (the nearest folder above it
    that is one)."""
    current = path.resolve().parent
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


def disk_full(path: Path, db: sqlite3.Connection | None, exc: sqlite3.Error) -> StoreFull:
    """The error for a write that found the disk full (``SQLITE_FULL``, raised after the
    write was rolled back): names the index file, the file system holding it and its free
    space, and SQLite's page limit where that was the limit reached."""
    mount = mount_point(path)
    try:
        free = f"{_size(shutil.disk_usage(path.parent).free)} free"
    except OSError as error:
        free = f"free space unknown: {error.strerror or error}"
    limit = ""
    if db is not None:
        try:
            most = int(db.execute("PRAGMA max_page_count").fetchone()[0])
            if most < _default_max_pages():
                pages = int(db.execute("PRAGMA page_count").fetchone()[0])
                limit = (f"; the connection's SQLite page limit is max_page_count = {most},"
                         f" the file holds {pages} pages")
        except sqlite3.Error:
            pass
    return StoreFull(
        f"the disk is full: index {path} on the file system mounted at {mount} ({free}"
        f"{limit}; SQLite: {exc}). The write was rolled back: the index keeps everything "
        "committed before it")


def _default_max_pages() -> int:
    """SQLite's page limit when none is set (its build's ``SQLITE_MAX_PAGE_COUNT``)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        return int(db.execute("PRAGMA max_page_count").fetchone()[0])


def _size(count: int) -> str:
    """``count`` bytes for people (binary units)."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} bytes"
