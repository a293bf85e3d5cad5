"""Row bookkeeping shared by the embedded chunk index's in-memory indexes (the exact and the
compact dense matrices, the BM25 posting lists).

Each holds per-row arrays keyed by the catalog's chunk row ids, which only grow: rows are
appended in ascending row-id order, removed by row id (tombstones, marked dead in an
``alive`` array), and compacted away once a quarter of the rows is dead. Readers take the
current immutable snapshot without a lock (a snapshot's rows ``[0, n)`` never change except
``alive`` flags turning false); writers build the next one under a lock and swap it in.

A large load (opening a catalog of millions of chunks) appends batch by batch with
``publish=False``, into arrays reserved once for all of it (:meth:`RowMatrix.reserve`:
zero-filled, so the operating system commits pages only as rows are written), and makes the
rows visible at once with :meth:`RowIndex.publish`: no batch is held twice, no array is
copied to grow.

:class:`RowIndex` is that base (lock, snapshot, ``len``, ``max_rowid``, finding rows by id);
:class:`RowMatrix` adds the generic append, remove, compaction and persistence for indexes
whose snapshot is only per-row arrays plus ``n`` and ``dead`` (the dense matrices). Each index
supplies its arrays and its scoring.
"""

from __future__ import annotations

import threading
from dataclasses import fields, replace
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

# Compaction: once more than this many rows and a quarter of all rows are dead.
COMPACT_MIN_DEAD = 1024


class Snapshot(Protocol):
    """What :class:`RowIndex` needs of a snapshot."""

    @property
    def rowids(self) -> npt.NDArray[np.int64]: ...  # (capacity,); rows [0, n) are filled

    @property
    def alive(self) -> npt.NDArray[np.bool_]: ...  # (capacity,)

    @property
    def n(self) -> int: ...

    @property
    def dead(self) -> int: ...


S = TypeVar("S", bound=Snapshot)
T = TypeVar("T")


def plain(snapshot: T) -> T:
    """``snapshot`` (a dataclass) with its memory-mapped arrays seen as plain arrays:
    slicing a ``np.memmap`` costs a Python-level wrapper each time (a fifth of a pruned BM25
    query at 100k chunks, measured), a plain view of the same memory none."""
    arrays = {f.name: getattr(snapshot, f.name).view(np.ndarray)
              for f in fields(snapshot)  # type: ignore[arg-type]
              if isinstance(getattr(snapshot, f.name), np.memmap)}
    return replace(snapshot, **arrays) if arrays else snapshot  # type: ignore[type-var]


def compaction_due(dead: int, n: int) -> bool:
    """Whether a snapshot with ``dead`` of ``n`` rows dead should be compacted."""
    return dead > COMPACT_MIN_DEAD and dead * 4 > n


def grow(array: np.ndarray, capacity: int, n: int) -> np.ndarray:
    """A zeroed array of ``capacity`` rows holding ``array``'s first ``n`` rows."""
    out = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    out[:n] = array[:n]
    return out


def fit(array: np.ndarray, used: int, need: int) -> np.ndarray:
    """``array`` if it can hold ``need`` items, else a copy with doubled capacity."""
    if need <= len(array):
        return array
    return grow(array, max(need, 2 * len(array), 1024), used)


def positions(rowids: npt.NDArray[np.int64], n: int,
              wanted: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    """Positions in ``rowids[:n]`` (ascending) of those of ``wanted`` that are there."""
    pos = np.searchsorted(rowids[:n], wanted)
    inside = pos < n
    pos, wanted = pos[inside], wanted[inside]
    found: npt.NDArray[np.intp] = pos[rowids[pos] == wanted]
    return found


def in_namespaces(namespaces: npt.NDArray[np.int32],
                  namespace_ids: list[int]) -> npt.NDArray[np.bool_]:
    """Whether each row's namespace id is one of ``namespace_ids`` (ids are small
    non-negative integers: a lookup table, half the time of ``np.isin``)."""
    top = max(namespace_ids)
    table = np.zeros(top + 2, dtype=bool)  # the last slot stands for every larger id
    table[[i for i in namespace_ids if i >= 0]] = True
    return table[np.minimum(namespaces, top + 1)]


class RowIndex(Generic[S]):
    """Lock + current snapshot of an index following the catalog by row id."""

    _snap: S

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Rows appended with publish=False: the next snapshot, not yet visible to readers.
        self._staged: S | None = None

    def _head(self) -> S:
        """The snapshot writers build on: the staged one if rows are staged."""
        return self._snap if self._staged is None else self._staged

    def _published(self, s: S) -> S:
        """``s`` as it becomes visible (indexes that keep derived structures finish them
        here)."""
        return s

    def _set_head(self, s: S, publish: bool) -> None:
        """Make ``s`` the next snapshot: visible now, or staged until :meth:`publish`."""
        if publish:
            self._snap = self._published(s)
            self._staged = None
        else:
            self._staged = s

    def _settled(self) -> S:
        """The current snapshot, with any staged rows published first (under the lock)."""
        if self._staged is not None:
            self._set_head(self._staged, True)
        return self._snap

    def publish(self) -> None:
        """Make the rows appended with ``publish=False`` visible to searches, all at once."""
        with self._lock:
            self._settled()

    def discard(self) -> None:
        """Forget the rows appended with ``publish=False`` (a load that failed midway)."""
        with self._lock:
            self._staged = None

    def __len__(self) -> int:
        s = self._snap
        return s.n - s.dead

    @property
    def max_rowid(self) -> int:
        """The highest row id loaded (0 when empty)."""
        s = self._snap
        return int(s.rowids[s.n - 1]) if s.n else 0


class RowMatrix(RowIndex[S]):
    """A :class:`RowIndex` whose snapshot is per-row arrays (one of them ``rowids``, one
    ``alive``) plus ``n`` and ``dead``: append, remove, compaction and persistence are
    generic over those arrays."""

    growth = 2.0  # capacity multiplier when appends outgrow the arrays

    def _array_names(self) -> list[str]:
        return [f.name for f in fields(self._snap)  # type: ignore[arg-type]
                if isinstance(getattr(self._snap, f.name), np.ndarray)]

    def _grown(self, s: S, need: int) -> S:
        """``s`` with room for ``need`` rows (arrays grown by ``growth`` at least)."""
        if need <= len(s.rowids):
            return s
        capacity = max(need, int(len(s.rowids) * self.growth), 1024)
        return replace(s, **{k: grow(getattr(s, k), capacity, s.n)  # type: ignore[type-var]
                             for k in self._array_names()})

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` more rows at once (before a large load; the room is
        zero-filled, so memory is committed only as rows are written)."""
        with self._lock:
            s = self._head()
            grown = self._grown(s, s.n + rows)
            if grown is not s:
                self._set_head(grown, self._staged is None)

    def _append(self, count: int, columns: dict[str, Any], publish: bool = True) -> None:
        """Append ``count`` rows given per array (every array but ``alive``); row ids must
        be ascending and above every loaded one. All become visible at once: now, or with
        every other staged row at :meth:`publish` when ``publish`` is false."""
        with self._lock:
            s = self._head()
            need = s.n + count
            if count:
                s = self._grown(s, need)
                for name in self._array_names():
                    getattr(s, name)[s.n:need] = True if name == "alive" else columns[name]
            self._set_head(replace(s, n=need), publish)  # type: ignore[type-var]

    def remove(self, rowids: npt.NDArray[np.int64]) -> None:
        """Mark rows dead (unknown row ids are ignored; staged rows are published first);
        compacts when a quarter is dead."""
        if len(rowids) == 0:
            return
        with self._lock:
            s = self._settled()
            hit = positions(s.rowids, s.n, rowids)
            alive = s.alive
            dead = s.dead + int(alive[hit].sum())
            alive[hit] = False
            if compaction_due(dead, s.n):
                keep = np.flatnonzero(alive[: s.n])
                compacted = {k: getattr(s, k)[keep].copy() for k in self._array_names()}
                compacted["alive"] = np.ones(len(keep), dtype=bool)
                self._snap = replace(s, n=len(keep), dead=0,  # type: ignore[type-var]
                                     **compacted)
            else:
                self._snap = replace(s, dead=dead)  # type: ignore[type-var]

    def export_state(self) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """(per-row arrays trimmed to the loaded rows, scalars) of the current snapshot, to
        persist; :meth:`restore_state` gets this snapshot back."""
        with self._lock:
            s = self._snap
            arrays = {k: getattr(s, k)[: s.n] for k in self._array_names()}
            arrays["alive"] = arrays["alive"].copy()  # marked dead in place by remove()
            return arrays, {"n": s.n, "dead": s.dead}

    def restore_state(self, arrays: dict[str, np.ndarray], scalars: dict[str, int]) -> None:
        """Replace the contents with a state from :meth:`export_state` (arrays may be
        memory-mapped and longer than ``n``: rows past ``n`` are room that appends fill in
        place; appends beyond it copy them into memory). Raises :class:`ValueError` when
        the arrays do not fit this index."""
        n, dead = int(scalars["n"]), int(scalars["dead"])
        s = self._snap
        names = self._array_names()
        if sorted(arrays) != sorted(names):
            raise ValueError(f"{type(self).__name__}: arrays {sorted(arrays)} != {names}")
        capacity = len(arrays[names[0]])  # rows past n are room for appends, alike in all
        for name in names:
            a, empty = arrays[name], getattr(s, name)
            if (len(a) < n or len(a) != capacity or a.shape[1:] != empty.shape[1:]
                    or a.dtype != empty.dtype):
                raise ValueError(f"{type(self).__name__}: array {name} does not fit")
        if not 0 <= dead <= n:
            raise ValueError(f"{type(self).__name__}: {dead} dead of {n} rows")
        with self._lock:
            self._snap = replace(s, n=n, dead=dead, **arrays)  # type: ignore[type-var]
            self._staged = None
