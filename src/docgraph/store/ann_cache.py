"""What the dense lane's two ANN caches beside the catalog share: faiss imported on first
use, and one background update at a time.

The partition (:mod:`docgraph.store.dense_lists`) and the HNSW graph
(:mod:`docgraph.store.graph_ann`) are both caches the index keeps current by itself: when
one is due, it is rebuilt or extended in a background thread from an immutable snapshot of
the matrix while the exact scan (or the previous file) answers. The thread is a daemon: a
short process (a CLI search) never waits at its exit for a build it does not need (minutes
at 1M rows), and the file is written crash-safe, so a build cut short leaves none.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from docgraph.store.sidecar import SidecarError, read_arrays

log = logging.getLogger(__name__)


def load_faiss() -> Any:
    """faiss, imported on first use: an index without an ANN cache never pays its import
    (0.1 s, 15 MB of RSS, measured). Missing, it is a RuntimeError naming the extra, which
    the caches' callers log and answer with the exact scan."""
    try:
        import faiss
    except ImportError as exc:
        raise RuntimeError(
            f"[store] dense_graph_min_rows needs faiss-cpu (the 'ann' extra): {exc}") from exc
    return faiss


class BackgroundUpdates:
    """One background update at a time of an ANN cache file (``path``) of one catalog, and
    what both caches keep of it: the rows they wait for (``min_rows``), the share of rows a
    filter must allow (``min_share``), the tail that triggers an update (``update_rows``),
    how the file was found (``status``), whether updates are written (``persist``) and
    what the last update took. Subclasses give
    :meth:`update` and name themselves in ``what`` for the log."""

    what = "ANN cache"

    def __init__(self, path: Path, dimension: int, catalog_id: str, *, min_rows: int,
                 min_share: float, update_rows: int, persist: bool = True) -> None:
        self.path = path
        #: False for a read-only index: what an update builds is kept in memory, never
        #: written beside the catalog (a file found there is still read).
        self.persist = persist
        self.dimension = dimension
        self.catalog_id = catalog_id
        self.min_rows, self.min_share, self.update_rows = min_rows, min_share, update_rows
        self.status = "missing"
        self.last_build_s = 0.0  # seconds the last update took (0: none in this process)
        self.answered = 0  # queries whose candidates came from the cache (tests, benches)
        self._writer: threading.Thread | None = None

    def read_file(self, expected: dict[str, Any]
                  ) -> tuple[str, dict[str, Any], dict[str, npt.NDArray[Any]]]:
        """The cache file's (status, meta, arrays), mapped: status "missing" (none),
        "corrupt" (unreadable, logged), "foreign" (its meta differs from ``expected``: another
        catalog, format or dimension) or "read"; meta and arrays are empty unless read."""
        try:
            meta, arrays = read_arrays(self.path)
        except SidecarError as exc:
            if not self.path.exists():
                return "missing", {}, {}
            log.warning("%s ignored: %s", self.what, exc)
            return "corrupt", {}, {}
        if any(meta.get(k) != v for k, v in expected.items()):
            return "foreign", {}, {}
        return "read", meta, arrays

    def update(self, rowids: npt.NDArray[np.int64], alive: npt.NDArray[np.bool_],
               codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], n: int,
               threads: int) -> None:
        """Bring the cache to the matrix's live rows ``[0, n)`` (the subclass's)."""
        raise NotImplementedError

    def check_writable(self) -> None:
        """Raise :class:`OSError` where updates are kept in memory, not written (``persist``
        False: a read-only index)."""
        if not self.persist:
            raise OSError("the index is read-only (copy this file with it to spare the build "
                          "at every start)")

    def busy(self) -> bool:
        """Whether a background update is running."""
        return self._writer is not None and self._writer.is_alive()

    def state(self, live: int) -> str:
        """How the cache answers a matrix of ``live`` rows now, for an operator: "loaded"
        (its file mapped; "updating" while a newer one is built behind it), "building"
        (none yet, one being built: the exact scan answers meanwhile), "below_min_rows"
        (fewer live rows than ``min_rows``: the scan answers, by design), "unavailable"
        (faiss missing: the scan answers), else how its file was found ("missing",
        "stale", "corrupt", "foreign"; the next update due replaces it)."""
        if self.busy():
            return "updating" if self.status == "loaded" else "building"
        if self.status in ("loaded", "unavailable"):
            return self.status
        return "below_min_rows" if live < self.min_rows else self.status

    def start_update(self, rowids: npt.NDArray[np.int64], alive: npt.NDArray[np.bool_],
                     codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], n: int,
                     threads: int) -> None:
        """Run :meth:`update` in a daemon thread (see the module) from the matrix's rows
        ``[0, n)`` (arrays of an immutable snapshot; ``alive`` a copy); a failure is logged,
        never raised: the scan answers meanwhile."""

        def run() -> None:
            try:
                self.update(rowids, alive, codes, scales, n, threads)
            except (OSError, RuntimeError, ValueError, MemoryError) as exc:
                log.warning("%s not updated: %s: %s", self.what, self.path, exc)

        self._writer = threading.Thread(target=run, name=f"docgraph-{self.what.replace(' ', '-')}",
                                        daemon=True)
        self._writer.start()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a background update (if any) to finish."""
        if self._writer is not None:
            self._writer.join(timeout)
