"""Shared sizing and lazily started thread pools for the parallel parts of docgraph."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def core_count(limit: int = 8) -> int:
    """Cores this process may run on (its CPU affinity, which a container or ``taskset``
    may set below the machine's count), at least 1 and at most ``limit``."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this platform
        usable = os.cpu_count() or 1
    return max(1, min(usable, limit))


def scan_threads() -> int:
    """Threads one query may use at once for a large scan (the dense matrix's row ranges,
    a heavy BM25 query's): ``DOCGRAPH_SCAN_THREADS``, default the cores (<= 8); read once,
    when the first such pool starts."""
    configured = os.environ.get("DOCGRAPH_SCAN_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return core_count()


class LazyThreadPool:
    """A process-wide thread pool started on first use; ``size`` is asked once, then."""

    def __init__(self, size: Callable[[], int], name: str) -> None:
        self._size = size
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._workers = 0
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        """The pool (started now if it is not running yet)."""
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._workers = self._size()
                    self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix=self._name)
                pool = self._pool
        return pool

    @property
    def workers(self) -> int:
        """Threads of the pool (starting it)."""
        self.get()
        return self._workers
