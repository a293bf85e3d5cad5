"""Putting a backup of the embedded index in place: who holds the index now, the previous
index kept aside, and the restored file opened before the restore is called done.

:func:`index_holders` finds the processes that have the index open. SQLite holds a shared
lock on one byte of ``<index>-shm`` (its "dead man switch", offset 128) for as long as a
connection to a WAL database is open, in every process; Linux lists it in ``/proc/locks``
with the holder's pid, so the check opens nothing (a second descriptor on that file, once
closed, would drop the locks this process's own SQLite connections hold there). The refresh
leader's lock file names its ``pid@host`` too, which also covers a leader on another host of
a shared file system. Elsewhere than Linux only the leader is seen.

:func:`restore_index` checks the backup (:func:`~docgraph.store.sqlite.backup.inspect_index_file`),
refuses a target that a process holds unless forced, copies the backup beside the target,
moves the previous index (the file, its ``-wal`` and ``-shm``, and the chunk index's sidecar,
which describes the old file and must be rebuilt for the new one) into a folder beside it,
renames the copy into place and opens it (which migrates an older backup's schema forward).
If that open fails, the restored file is removed and the previous index put back.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from docgraph.errors import StoreError
from docgraph.store.dense_lists import lists_path
from docgraph.store.sqlite.backup import IndexFileInfo, inspect_index_file
from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.index import sidecar_path
from docgraph.store.sqlite.leader import FileLeaderLock, leader_lock_path

#: The byte of the ``-shm`` file every open connection holds a shared lock on (SQLite's
#: ``UNIX_SHM_DMS``: 120 bytes of lock slots' base plus 8 lock slots).
SHM_DMS_OFFSET = 128


@dataclass(frozen=True)
class RestoreReport:
    """A finished restore: the backup, the index it is now, and where the previous one is."""

    backup: IndexFileInfo
    target: Path
    previous: Path | None


def _shm_lockers(shm: Path) -> set[int]:
    """Pids (other than this process) holding a lock on ``shm``'s dead-man-switch byte, from
    ``/proc/locks``; empty where that file does not exist."""
    try:
        st = shm.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return set()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = set()
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter, listed under the lock it waits for
            fields.remove("->")
        # "1: POSIX ADVISORY READ <pid> <maj:min:inode> <start> <end>"
        if len(fields) >= 8 and fields[1] == "POSIX" and fields[5] == inode:
            start, end = int(fields[6]), fields[7]
            if start <= SHM_DMS_OFFSET and (end == "EOF" or int(end) >= SHM_DMS_OFFSET):
                pids.add(int(fields[4]))
    pids.discard(os.getpid())
    return pids


def index_holders(index: Path) -> list[str]:
    """Who has the embedded index at ``index`` open now, each as a phrase naming its pid
    (``"process 1234"``, ``"the refresh leader 1234@host"``); empty when nobody does. Why:
    a restore must not replace the file under a server that keeps serving the old one."""
    index = Path(index)
    found = [f"process {pid}" for pid in sorted(_shm_lockers(Path(f"{index}-shm")))]
    lock = leader_lock_path(index)
    if lock.exists():
        leader = FileLeaderLock(lock).holder()
        if leader is not None:
            found.append(f"the refresh leader {leader}")
    return found


def _files_of(index: Path) -> Iterator[Path]:
    """The files an embedded index is made of beside its main file, when present."""
    for path in (index, Path(f"{index}-wal"), Path(f"{index}-shm"), sidecar_path(index),
                 lists_path(index)):  # the dense lists are a cache of the old rows too
        if path.exists():
            yield path


def _copy(backup: Path, to: Path) -> None:
    """Copy the backup file with SQLite's backup API (consistent even were it in WAL mode)
    and fsync the copy."""
    source = sqlite3.connect(f"{backup.resolve().as_uri()}?mode=ro", uri=True)
    try:
        copy = sqlite3.connect(to)
        try:
            source.backup(copy)
        finally:
            copy.close()
    except sqlite3.Error as exc:
        with contextlib.suppress(OSError):
            to.unlink()
        raise StoreError(f"copying the backup {backup} to {to} failed: {exc}") from exc
    finally:
        source.close()
    fd = os.open(to, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _opens(index: Path) -> None:
    """Open the restored index as docgraph does (migrating an older schema), then close."""
    catalog = SQLiteCatalog(index)
    catalog.close()


def restore_index(backup: Path, target: Path, *, force: bool = False) -> RestoreReport:
    """Make the backup at ``backup`` the embedded index at ``target`` (see the module
    docstring). Refuses, naming the processes, while a process has ``target`` open, unless
    ``force`` (those processes keep the previous file open until they are restarted).
    Every error names the paths it concerns."""
    backup, target = Path(backup), Path(target)
    info = inspect_index_file(backup)
    if target.resolve() == backup.resolve():
        raise StoreError(f"{backup} is the index itself: restore a backup into another path")
    if not target.parent.is_dir():
        raise StoreError(f"cannot restore to {target}: no folder {target.parent}")
    holders = index_holders(target) if target.exists() else []
    if holders and not force:
        raise StoreError(
            f"{target} is in use by {', '.join(holders)}: stop it first (Ctrl-C or "
            f"`kill <pid>` ends `docgraph serve` cleanly), then run the restore again; "
            "--force replaces the file anyway, and the running processes keep serving the "
            "previous one until they are restarted")
    restoring = target.with_name(f".{target.name}.restoring-{os.getpid()}")
    _copy(backup, restoring)
    previous: Path | None = None
    moved: list[tuple[Path, Path]] = []
    placed = False
    try:
        present = list(_files_of(target))
        if present:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            previous = target.with_name(f"{target.name}.before-restore-{stamp}")
            try:
                previous.mkdir()
            except OSError as exc:
                raise StoreError(f"cannot keep the previous index aside in {previous}: "
                                 f"{exc}") from exc
            for path in present:
                path.rename(previous / path.name)
                moved.append((previous / path.name, path))
        restoring.rename(target)
        placed = True
        try:
            _opens(target)
        except StoreError as exc:
            raise StoreError(f"the restored index {target} does not open ({exc}); the "
                             "previous index was put back") from exc
    except BaseException:
        if placed:  # what the failed open left (the file, a -wal, a -shm) is not kept
            for path in list(_files_of(target)):
                with contextlib.suppress(OSError):
                    path.unlink()
        for kept, original in reversed(moved):
            with contextlib.suppress(OSError):
                kept.rename(original)
        if previous is not None:
            with contextlib.suppress(OSError):
                previous.rmdir()
        with contextlib.suppress(OSError):
            restoring.unlink()
        raise
    return RestoreReport(info, target, previous)
