"""Preparing documents in worker processes while the pipeline embeds and writes.

Extraction, chunking, entity extraction and BM25 term counting are pure Python and hold the
GIL, so threads cannot overlap them with the catalog writes; processes can. A
:class:`PreparePool` runs :func:`docgraph.ingest.prepare.prepare_bytes` in ``spawn``-ed
processes (safe beside onnxruntime's and SQLite's threads) and hands results back in
submission order, so row ids and reports are the same as an inline build.

Only what a worker needs crosses the process boundary: the :class:`PrepareSpec` once per
worker, then (path, bytes) per file and the prepared document back. The catalog, the
embedder and every connection stay in the pipeline's process.

Workers never outlive the pipeline's process, however it ends (a ``kill -9`` included):
on Linux the kernel kills them when it dies (``PR_SET_PDEATHSIG``), and everywhere a
watchdog thread in each worker exits when a pipe only the parent holds open reaches end of
file or the worker is re-parented. ``spawn`` closes every inherited descriptor but the
standard ones; a worker points its stdin and stdout at the null device at start-up, so a
supervisor reading the caller's output sees end of file as soon as the caller is gone
(stderr stays, for a worker's own crash report, and closes with the worker).

``spawn`` re-imports the caller's main module in every worker. A script that indexes at
module level, without an ``if __name__ == "__main__":`` guard, would index again inside each
worker: :func:`in_worker_bootstrap` lets the pipeline refuse that (so the worker exits
without touching the index), the pool reports itself broken, and the build finishes inline
with a warning.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import pickle
import signal
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from docgraph.errors import ExtractionError
from docgraph.ingest.chunk import TokenCounter
from docgraph.ingest.prepare import PreparedDocument, PrepareSpec, prepare_bytes
from docgraph.parallel import core_count
from docgraph.telemetry.metrics import PREPARE_QUEUE

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

_SPEC: PrepareSpec | None = None  # set once in each worker process

# linux/prctl.h: deliver a signal to this process when its parent dies.
_PR_SET_PDEATHSIG = 1
# How often a worker's watchdog also checks that it was not re-parented (seconds).
PARENT_CHECK_SECONDS = 0.5

BOOTSTRAP_MESSAGE = (
    "docgraph was asked to index while a worker process was importing the main module: "
    "put the script's indexing under `if __name__ == \"__main__\":`, or set "
    "loader.workers = 1 (DOCGRAPH_LOADER__WORKERS=1) to prepare documents inline"
)


def in_worker_bootstrap() -> bool:
    """True while a ``spawn``-ed worker is importing the parent's main module."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def refuse_in_worker_bootstrap() -> None:
    """Stop a build started while a worker process imports the caller's main module (a
    script indexing without an ``if __name__ == "__main__":`` guard): print
    :data:`BOOTSTRAP_MESSAGE` and end the worker quietly (``SystemExit``, no traceback),
    before it touches the index or its leader lock. The parent's pool then reports itself
    broken and its build finishes inline. Does nothing anywhere else."""
    if in_worker_bootstrap():
        print(f"docgraph: {BOOTSTRAP_MESSAGE}", file=sys.stderr, flush=True)
        raise SystemExit(1)


@dataclass(frozen=True)
class PrepareFailure:
    """A file a worker could not extract (it is recorded and skipped, like inline)."""

    reason: str


@dataclass(frozen=True)
class PrepareCrash:
    """An unexpected error inside a worker, re-raised in the pipeline's process."""

    error: BaseException


PrepareOutcome = PreparedDocument | PrepareFailure | PrepareCrash


def portable_token_counter(embedder: Any) -> TokenCounter | None:
    """The embedder's token counter in a form a worker process can load (its
    ``token_counter()``), or None when the embedder offers none or it does not pickle:
    documents are then prepared inline."""
    factory = getattr(embedder, "token_counter", None)
    if not callable(factory):
        return None
    counter = factory()
    try:
        pickle.dumps(counter)
    except Exception:  # any pickling failure: not portable
        return None
    return counter if callable(counter) else None


def worker_count(configured: int) -> int:
    """Worker processes for ``loader.workers`` (0 = one per core, at most 8); 1 = inline."""
    return configured if configured > 0 else core_count()


#: CPU seconds one prepare process spends before its first document: ``spawn``, importing
#: docgraph and loading py3langid's model on its first document (0.57 s + 0.48 s of CPU
#: measured on the 2-core bench machine).
WORKER_START_SECONDS = 1.0


class PoolTrigger:
    """When a build starts its prepare processes.

    Never before more than ``after_files`` files of the build need preparing. With
    ``loader.workers`` set (``configured`` > 1) they start then. By default (0, one per
    core) they start only once they would pay: their start-up costs
    :data:`WORKER_START_SECONDS` of CPU each, taken from the cores the model embeds on, and
    they save at most ``1 - 1/workers`` of the preparing still to do. That is estimated from
    the files prepared inline so far (their median seconds per file: the first file of a
    fresh process also pays one-off loads, py3langid's model and the tokenizer's, that the
    rest will not) times the listed files not yet visited, scaled by the share of visited
    files that needed preparing (an incremental build skips unchanged ones). A folder of
    small text files (200 SciFact passages: 0.7 s of preparing in all) is then prepared
    inline instead of paying 2 s of start-up; a folder of heavy files still gets its
    processes after ``after_files`` files."""

    def __init__(self, configured: int, workers: int, total: int, after_files: int) -> None:
        self.configured, self.workers, self.total = configured, workers, total
        self.after_files = after_files
        self.fetched = 0  # files of the build that needed preparing so far
        self.seconds: list[float] = []  # each file prepared inline so far

    def due(self, visited: int) -> bool:
        """Count one more file to prepare (the ``visited``-th listed file); True when the
        prepare processes should start before it."""
        self.fetched += 1
        if self.workers < 2 or self.fetched <= self.after_files:
            return False
        if self.configured > 1:
            return True
        if not self.seconds:
            return False
        left = statistics.median(self.seconds) * (self.total - visited + 1) \
            * (self.fetched / visited)
        return left * (1 - 1 / self.workers) > self.workers * WORKER_START_SECONDS

    def inline(self, prepare: Callable[[T], R], item: T) -> R:
        """``prepare(item)`` in this process, its time counted for :meth:`due`."""
        started = time.perf_counter()
        try:
            return prepare(item)
        finally:
            self.seconds.append(time.perf_counter() - started)


def _init(spec_bytes: bytes, parent_pid: int, parent_alive: Connection) -> None:
    global _SPEC
    _die_with_parent(parent_pid, parent_alive)
    _detach_stdio()
    # Ctrl-C reaches the whole process group: the pipeline's process handles it (keeps
    # what it committed, stops the pool); a worker would only print a traceback. It was
    # started with SIGINT blocked (see PreparePool.submit), so none arrived while it started.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # Parallel across processes already: the tokenizer's own thread pool only contends.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _SPEC = pickle.loads(spec_bytes)


def _die_with_parent(parent_pid: int, parent_alive: Connection) -> None:
    """Make this worker exit as soon as the process that started it is gone.

    An orphaned worker would wait for work forever (it holds the write end of its own task
    queue, so that read never ends) and keep the caller's stderr open. The kernel's signal
    follows the thread that spawned the worker: the one submitting to the pool, which
    outlives it. A parent that dies while the worker is still starting (re-importing the
    caller's modules) is noticed here, once the start-up is done."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
                       ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        except (OSError, AttributeError):  # no libc prctl: the watchdog still applies
            pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid, parent_alive),
                     name="docgraph-parent-watchdog", daemon=True).start()


def _watch_parent(parent_pid: int, parent_alive: Connection) -> None:
    """Exit the worker when ``parent_alive`` reaches end of file (only the parent holds its
    other end, so it closes when the parent dies) or the worker is re-parented."""
    while True:
        try:
            if parent_alive.poll(PARENT_CHECK_SECONDS):
                parent_alive.recv_bytes()  # nothing is ever sent: readable means closed
        except (EOFError, OSError):
            break
        if os.getppid() != parent_pid:
            break
    os._exit(1)


def _detach_stdio() -> None:
    """Point stdin and stdout at the null device: a worker reads and prints nothing, and
    must not keep the caller's pipes open."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    try:
        for fd in (0, 1):
            os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


def _prepare(path: str, data: bytes) -> PrepareOutcome:
    assert _SPEC is not None, "worker not initialised"
    try:
        return prepare_bytes(_SPEC, data, path)
    except ExtractionError as exc:
        return PrepareFailure(str(exc))
    except Exception as exc:  # re-raised in the parent, type kept
        return PrepareCrash(exc)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread for the body: the executor starts worker processes
    while submitting, and a worker must not get Ctrl-C before it ignores it (it would print
    a traceback while importing). A Ctrl-C in between is delivered here when the body ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class PreparePool:
    """Up to ``window`` files in flight over ``workers`` processes, results in order.

    An outcome of None means "prepare this one inline": the pool broke (a worker died or
    could not start; :attr:`broken` is then set and every later file also comes back as
    None). Use as a context manager; leaving it stops the processes.
    """

    def __init__(self, spec: PrepareSpec, workers: int, window: int | None = None) -> None:
        self.workers = workers
        self.window = window or 4 * workers
        context = multiprocessing.get_context("spawn")
        # Each worker gets the read end; only this process holds the write end, so the
        # workers see end of file the moment this process dies.
        self._alive_reader, self._alive_writer = context.Pipe(duplex=False)
        self._executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init,
            initargs=(pickle.dumps(spec), os.getpid(), self._alive_reader),
        )
        self._queue: deque[tuple[Any, Future[PrepareOutcome] | None]] = deque()
        self.broken = False

    def __enter__(self) -> PreparePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(
        self, key: Any, path: str, data: bytes
    ) -> Iterator[tuple[Any, PrepareOutcome | None]]:
        """Queue one file; yields the (key, outcome) pairs that must be taken now to keep
        at most ``window`` files in flight (in submission order)."""
        future: Future[PrepareOutcome] | None = None
        if not self.broken:
            try:
                with _sigint_blocked():  # a worker it starts inherits the blocked mask
                    future = self._executor.submit(_prepare, path, data)
            except BrokenProcessPool:
                self._broke()
        self._queue.append((key, future))
        PREPARE_QUEUE.set(len(self._queue))
        limit = 0 if self.broken else self.window
        while len(self._queue) > limit:
            yield self._take()

    def drain(self) -> Iterator[tuple[Any, PrepareOutcome | None]]:
        """Every outcome still in flight, in submission order."""
        while self._queue:
            yield self._take()

    def _take(self) -> tuple[Any, PrepareOutcome | None]:
        key, future = self._queue.popleft()
        PREPARE_QUEUE.set(len(self._queue))
        if future is None or self.broken:
            return key, None
        try:
            return key, future.result()
        except BrokenProcessPool:
            self._broke()
            return key, None

    def _broke(self) -> None:
        if not self.broken:
            self.broken = True
            log.warning("ingest worker processes stopped; preparing the remaining documents "
                        "inline. If a script runs this build, check it has an "
                        "`if __name__ == \"__main__\":` guard (or set loader.workers = 1)")

    def close(self) -> None:
        """Stop the worker processes."""
        for _, future in self._queue:
            if future is not None:
                future.cancel()
        self._queue.clear()
        PREPARE_QUEUE.set(0)
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._alive_writer.close()
        self._alive_reader.close()
