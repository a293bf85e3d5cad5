"""Who may build an index: the one process holding its leader lock.

Every build of an index - the refresher's rounds, ``DocGraph.index``, ``remove_folder``,
``build_graph``, a full re-index - runs inside :meth:`Leadership.elected`: under the
process's build lock (builds of one process are serialized) *and* as the leader of the
index (builds of different processes are too). A process that already leads - its
background refresh loop holds the lock, or it is inside another elected build - goes
straight on; nothing waits on itself. A process that does not lead takes the lock for the
build and lets it go afterwards, unless its background loop has come to keep it (the loop
then goes on leading). When another process leads, the build waits up to ``wait_seconds``
for the lock and then raises :class:`~docgraph.errors.RefreshBusy` naming the leader,
having changed nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from docgraph.errors import RefreshBusy
from docgraph.ingest.workers import refuse_in_worker_bootstrap
from docgraph.store.lifecycle import LeaderLock

_WAIT_POLL_SECONDS = 0.25


class Leadership:
    """The leader lock of one index together with the build lock of this process."""

    def __init__(self, lock: LeaderLock, build_lock: threading.RLock) -> None:
        self.lock = lock
        self.build_lock = build_lock
        self._keepers = 0
        self._keepers_lock = threading.Lock()

    @property
    def identity(self) -> str:
        """``pid@host`` of this process, as the lock names it."""
        return self.lock.identity

    @property
    def leading(self) -> bool:
        """Whether this process leads (holds the lock) right now."""
        return self.lock.held

    def leader(self) -> str | None:
        """Which process leads (``pid@host``), or None when none does."""
        return self.lock.holder()

    @property
    def kept(self) -> bool:
        """Whether a background loop of this process keeps the leadership between builds."""
        return self._keepers > 0

    def keep(self) -> None:
        """A background loop starts: leadership taken from now on stays until it ends."""
        with self._keepers_lock:
            self._keepers += 1

    def let_go(self) -> None:
        """A background loop ended: stop leading unless another loop of this process still
        keeps it. Waits for a build running in this process to finish first."""
        with self._keepers_lock:
            self._keepers = max(0, self._keepers - 1)
            last = self._keepers == 0
        if last:
            with self.build_lock:
                if not self.kept:
                    self.lock.release()

    def try_lead(self) -> bool:
        """Take (or confirm) the leadership without waiting; True while this process leads.
        Raises only if the lock's store cannot be reached (see :class:`LeaderLock`)."""
        return self.lock.try_acquire()

    def acquire(self, wait_seconds: float = 0.0) -> bool:
        """Lead, trying for up to ``wait_seconds``; False if another process kept leading."""
        deadline = time.monotonic() + max(0.0, wait_seconds)
        while True:
            if self.lock.try_acquire():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(_WAIT_POLL_SECONDS, left))

    @contextmanager
    def elected(self, what: str, wait_seconds: float = 0.0, hint: str = "") -> Iterator[None]:
        """Run the body as this index's only builder (see the module docstring).

        ``what`` names the build in the :class:`RefreshBusy` message, ``hint`` tells the
        caller what to do instead (the message always names the leader).

        In a worker process importing the caller's main module (a script that builds
        without an ``if __name__ == "__main__":`` guard) this ends the worker with the
        guard's message before anything else: the parent leads, so the build would only
        fail with a misleading :class:`RefreshBusy`."""
        refuse_in_worker_bootstrap()
        with self.build_lock:
            was_leading = self.lock.held
            if not self.acquire(wait_seconds):
                holder = self.lock.holder() or "another process (it just stopped leading)"
                waited = f" (waited {wait_seconds:g}s)" if wait_seconds > 0 else ""
                raise RefreshBusy(
                    f"the refresh of this index is led by {holder}{waited}; {what} would "
                    "build concurrently with it, so nothing was changed"
                    + (f" - {hint}" if hint else ""))
            try:
                yield
            finally:
                if not was_leading and not self.kept:
                    self.lock.release()
