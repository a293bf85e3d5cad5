"""The refresh leader of an embedded index: an OS file lock beside the SQLite file.

:meth:`FileLeaderLock.try_acquire` takes ``flock(LOCK_EX | LOCK_NB)`` on
``<index>.refresh-lock`` and keeps the file open while it leads; the leader writes its
``pid@host`` into the file. The kernel drops the lock when the holder closes the file or
dies, so another process's next ``try_acquire`` takes over. ``flock`` locks belong to the
open file, so two opens in one process exclude each other too. (POSIX only; a local file
system - ``flock`` over NFS may not exclude processes on other hosts.)
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from docgraph.errors import StoreError
from docgraph.store.lifecycle import process_identity


def leader_lock_path(index_path: Path) -> Path:
    """The lock file of the index at ``index_path``."""
    return index_path.with_name(index_path.name + ".refresh-lock")


class FileLeaderLock:
    """The :class:`~docgraph.store.lifecycle.LeaderLock` port on a lock file."""

    def __init__(self, path: Path, identity: str | None = None) -> None:
        self.path = Path(path)
        self.identity = identity or process_identity()
        self._fd: int | None = None
        self._lock = threading.Lock()

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot open the refresh lock file {self.path}: {exc}") from exc

    def try_acquire(self) -> bool:
        """Lead if no process does; True when this process leads."""
        with self._lock:
            if self._fd is not None:
                return True
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.identity.encode(), 0)
            self._fd = fd
            return True

    @property
    def held(self) -> bool:
        """Whether this process leads through this lock."""
        return self._fd is not None

    def holder(self) -> str | None:
        """Who leads (``pid@host``), or None when no process does."""
        if self._fd is not None:
            return self.identity
        if not self.path.exists():
            return None
        fd = self._open()
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                text = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
                return text or "unknown process"
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def release(self) -> None:
        """Stop leading (a no-op when not leading)."""
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            try:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Release the lock (the file stays for the next leader)."""
        self.release()
