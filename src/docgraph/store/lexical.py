"""BM25 for the embedded store: a persistent term dictionary and an in-memory term-major
posting index that follows the catalog like the dense matrix does.

Not SQLite FTS5: its OR-query scores every matching row, ~200 ms at 100k chunks
(``bench/speed.py``). Here a chunk's terms are integer ids stored with it (``chunks.terms``)
and a search walks only the query terms' posting lists with numpy: a few ms at 100k chunks;
the scoring and the exact top ``k`` (MaxScore, which leaves the long lists of common words
unread) are :mod:`docgraph.store.bm25`'s.

The scoring is FTS5's ``bm25(fts, 1.0, 1.0)`` with k1 = 1.5 and b = 0.5 (FTS5: 1.2 and
0.75; the weaker length normalisation suits short passages and lifts hybrid quality on both
SciFact and 2Wiki, see ``bench/results/quality.json``),
``idf = log((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, term frequency = occurrences
in the breadcrumb + occurrences in the text, document length = all tokens of both columns,
and N, n and the average length over the live chunks *of the kind searched*: text chunks
are scored against text-chunk statistics only and community reports against report
statistics, so writing, rewriting or deleting reports (a graph build) never moves a text
chunk's score. Terms are :func:`docgraph.languages.language_terms` (English: FTS5's
``porter unicode61 remove_diacritics 2``: Unicode letters and digits, diacritics removed,
lower case, Porter-stemmed; others: their own stems). Stop words are not indexed (they count in
the document length) and never reach a query. A search may take a row filter (a caller's
readable rows, :mod:`docgraph.store.restricted`) applied with the namespace filter.

Query text is data: word tokens looked up in a dictionary, never syntax, never in SQL.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse

from docgraph.languages import language_terms
from docgraph.store import bm25, bm25_bounds
from docgraph.store.bm25 import IDF_FLOOR as IDF_FLOOR  # BM25's constants, re-exported
from docgraph.store.bm25 import K1 as K1
from docgraph.store.bm25 import B as B
from docgraph.store.bm25 import Strategy
from docgraph.store.matching import LaneFilter, MatchingRows
from docgraph.store.restricted import RowFilter
from docgraph.store.rows import RowIndex, compaction_due, grow, positions
from docgraph.store.rows import fit as _fit

# Postings a row is assumed to hold when reserving room for a load into an empty index.
RESERVED_POSTINGS_PER_ROW = 64
BREADCRUMB_WEIGHT = TEXT_WEIGHT = 1.0


# ---------------------------------------------------------------- term dictionary (catalog)

@dataclass(frozen=True)
class EncodedTerms:
    """One chunk's lexical columns: ``blob`` = int32 term ids then float32 weighted term
    frequencies (sorted by id), ``length`` = its token count (both columns)."""

    blob: bytes
    length: int


def decode_terms(blob: bytes) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    """(term ids, weighted frequencies) of one chunk's ``terms`` blob."""
    n = len(blob) // 8
    return (np.frombuffer(blob, dtype=np.int32, count=n),
            np.frombuffer(blob, dtype=np.float32, count=n, offset=4 * n))


CountedTerms = tuple[dict[str, float], int]


def count_terms(columns: Sequence[tuple[str, str]], language: str = "en") -> list[CountedTerms]:
    """Per (breadcrumb, text) pair: weighted frequency of each indexed term (read as the
    document's ``language``), and the token count of both columns."""
    counted: list[CountedTerms] = []
    for crumb, text in columns:
        crumb_terms, crumb_len = language_terms(crumb, language)
        text_terms, text_len = language_terms(text, language)
        tf = {t: n * TEXT_WEIGHT for t, n in Counter(text_terms).items()}
        for t, n in Counter(crumb_terms).items():
            tf[t] = tf.get(t, 0.0) + n * BREADCRUMB_WEIGHT
        counted.append((tf, crumb_len + text_len))
    return counted


class TermDictionary:
    """Term -> id, persisted in the catalog's ``terms`` table (ids never change once
    committed). Writers call :meth:`encode` inside their transaction and :meth:`committed`
    after it commits; only committed ids are cached, so a rolled-back transaction leaves no
    trace here."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def encode(
        self, db: sqlite3.Connection, columns: Sequence[tuple[str, str]]
    ) -> tuple[list[EncodedTerms], dict[str, int]]:
        """Encode (breadcrumb, text) pairs; new terms are inserted through ``db`` (which must
        be in a write transaction). Returns the encodings and the ids learnt in this
        transaction, to pass to :meth:`committed` once it has committed."""
        encoded, learnt, _ = self.encode_counted(db, count_terms(columns))
        return encoded, learnt

    def encode_counted(
        self, db: sqlite3.Connection, counted: Sequence[CountedTerms]
    ) -> tuple[list[EncodedTerms], dict[str, int], set[str]]:
        """:meth:`encode` for chunks already counted by :func:`count_terms` (tokenizing is
        the costly part and needs no transaction). Also returns the terms this call
        inserted (the others of the learnt ids were in the database already)."""
        ids = self._ids
        unknown = sorted({t for tf, _ in counted for t in tf if t not in ids})
        pending: dict[str, int] = {}
        inserted: set[str] = set()
        if unknown:  # known to the database already (not cached yet), or new
            pending.update(term_ids(db, unknown))
            new = [t for t in unknown if t not in pending]
            if new:
                db.executemany("INSERT INTO terms(term) VALUES (?)", [(t,) for t in new])
                pending.update(term_ids(db, new))
                inserted.update(new)
        out: list[EncodedTerms] = []
        for tf, length in counted:
            ids_array = np.array([ids.get(t) or pending[t] for t in tf] if pending
                                 else [ids[t] for t in tf], dtype=np.int32)
            weights = np.array(list(tf.values()), dtype=np.float32)
            order = np.argsort(ids_array, kind="stable")
            out.append(EncodedTerms(ids_array[order].tobytes() + weights[order].tobytes(),
                                    length))
        return out, pending, inserted

    def committed(self, learnt: dict[str, int]) -> None:
        """Cache ids learnt by a transaction that has committed."""
        if learnt:
            with self._lock:
                self._ids.update(learnt)


def term_ids(db: sqlite3.Connection, terms: Sequence[str]) -> dict[str, int]:
    """The stored ids of those of ``terms`` that have one (terms are bound parameters)."""
    found: dict[str, int] = {}
    for start in range(0, len(terms), 500):
        part = list(terms[start:start + 500])
        found.update(db.execute(
            f"SELECT term, id FROM terms WHERE term IN ({','.join('?' * len(part))})", part
        ).fetchall())
    return found


# ---------------------------------------------------------------- in-memory posting index


@dataclass(frozen=True)
class _Snapshot:
    rowids: npt.NDArray[np.int64]
    namespaces: npt.NDArray[np.int32]
    kinds: npt.NDArray[np.int8]
    alive: npt.NDArray[np.bool_]
    lengths: npt.NDArray[np.float32]
    row_ptr: npt.NDArray[np.int64]  # postings of row i: [row_ptr[i], row_ptr[i+1])
    terms: npt.NDArray[np.int32]  # row-major postings
    weights: npt.NDArray[np.float32]
    df: npt.NDArray[np.int32]  # [kind, term id]: live rows of that kind containing the term
    n: int
    nnz: int
    dead: int
    live_rows: npt.NDArray[np.int64]  # [kind]: live rows of each kind
    live_length: npt.NDArray[np.float64]  # [kind]: their summed lengths
    # term-major copy of the postings of rows [0, main_rows)
    main_rows: int
    term_ptr: npt.NDArray[np.int64]
    term_rows: npt.NDArray[np.int32]
    term_weights: npt.NDArray[np.float32]
    # per term: bound on its length-normalised frequency at average length bound_average
    term_bound: npt.NDArray[np.float32]
    bound_average: float
    # the long lists' postings in impact order (bm25_bounds.ImpactOrders)
    impact_terms: npt.NDArray[np.int32]
    impact_ptr: npt.NDArray[np.int64]
    impact_order: npt.NDArray[np.int32]
    impact_block_ptr: npt.NDArray[np.int64]
    impact_bound: npt.NDArray[np.float32]
    impact_block: int


def _empty() -> _Snapshot:
    return _Snapshot(
        np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int8), np.zeros(0, bool),
        np.zeros(0, np.float32), np.zeros(1, np.int64), np.zeros(0, np.int32),
        np.zeros(0, np.float32), np.zeros((0, 0), np.int32), 0, 0, 0,
        np.zeros(0, np.int64), np.zeros(0, np.float64),
        0, np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32),
        np.zeros(0, np.float32), 0.0, *bm25_bounds.ImpactOrders.none().fields().values(),
    )


#: Filter masks kept per snapshot for the BM25 lane (:mod:`docgraph.store.matching`).
MATCHING_MASKS = 4


class PostingIndex(RowIndex[_Snapshot]):
    """BM25 over in-memory posting lists; append-only rows with tombstones, thread-safe reads
    through immutable snapshots (writers build a new snapshot under a lock).

    Document frequencies, live row counts and live lengths are kept per row kind (kind codes
    are small non-negative integers), so a search of one kind is scored with that kind's
    statistics only and rows of another kind never move its scores.

    Rows are kept in row-major order (cheap appends); a term-major copy of the older rows
    answers queries, and rows appended since it was built (the *tail*) are scanned directly
    until the tail outgrows 1/32 of the index, when the term-major copy is rebuilt (with
    each term's score bound, which lets :meth:`search` skip rows that cannot reach its top
    ``k``). Row
    bookkeeping (lock, snapshot, finding rows by id, growth) is
    :class:`~docgraph.store.rows.RowIndex`'s.
    """

    #: Tail postings always tolerated before a rebuild of the term-major copy (tests lower
    #: it to get term-major lists, a tail and tombstones in a small index).
    tail_postings = 65_536
    #: How :meth:`search` finds the top ``k`` when not told (benchmarks compare the ways).
    strategy: Strategy = "auto"

    def __init__(self) -> None:
        super().__init__()
        self._snap = _empty()
        self._matching = MatchingRows(MATCHING_MASKS)  # per snapshot: rows a filter lets in

    def export_state(self) -> tuple[dict[str, np.ndarray], dict[str, int | float]]:
        """(arrays trimmed to what is used, scalars) of the current snapshot, to persist;
        pass them to :meth:`restore_state` to get this snapshot back. Every field of the
        snapshot is included, whatever the scoring statistics are."""
        with self._lock:
            s = self._snap
        arrays: dict[str, np.ndarray] = {}
        scalars: dict[str, int | float] = {}
        for f in fields(s):
            value = getattr(s, f.name)
            if isinstance(value, np.ndarray):
                used = _USED_LENGTH.get(f.name)
                arrays[f.name] = value[: used(s)] if used else value
            else:
                scalars[f.name] = value.item() if isinstance(value, np.generic) else value
        return arrays, scalars

    def restore_state(
        self, arrays: dict[str, np.ndarray], scalars: dict[str, int | float]
    ) -> None:
        """Replace the contents with a state from :meth:`export_state` (arrays may be
        memory-mapped, and the per-row and per-posting ones (:data:`APPENDABLE`) longer than
        they are used: appends fill that room in place, then copy them into memory)."""
        values: dict[str, Any] = {**arrays, **scalars}
        snap = replace(_empty(), **values)
        n, nnz = snap.n, snap.nnz
        if (any(len(getattr(snap, k)) < used(snap) for k, used in _USED_LENGTH.items())
                or (n and (int(snap.row_ptr[n]) != nnz or int(snap.row_ptr[0]) != 0))
                or not 0 <= snap.main_rows <= n
                or len(snap.term_bound) != len(snap.term_ptr) - 1
                or not bm25_bounds.ImpactOrders.of(snap).fits(snap.term_ptr)):
            raise ValueError("posting index: array lengths do not match")
        with self._lock:
            self._snap = snap
            self._staged = None

    def order_by_impact(self) -> bool:
        """Give a snapshot restored without impact orders (saved before them) its long
        lists' orders, as a rebuild of the term-major copy would; whether any were added."""
        with self._lock:
            s = self._snap
            found = bm25_bounds.ImpactOrders.added(s)
            self._snap = replace(s, **found.fields()) if found else s
        return found is not None

    def append(
        self,
        rowids: npt.NDArray[np.int64],
        namespaces: npt.NDArray[np.int32],
        kinds: npt.NDArray[np.int8],
        blobs: Sequence[bytes],
        lengths: npt.NDArray[np.float32],
        publish: bool = True,
    ) -> None:
        """Add rows (ascending row ids above every loaded one) with their ``terms`` blobs,
        visible at once (now, or with every staged row at :meth:`publish` when ``publish``
        is false)."""
        if len(rowids) == 0:
            if publish:
                self.publish()
            return
        decoded = [decode_terms(b) for b in blobs]
        counts = np.fromiter((len(t) for t, _ in decoded), dtype=np.int64, count=len(decoded))
        new_terms = (np.concatenate([t for t, _ in decoded]) if decoded
                     else np.zeros(0, np.int32))
        new_weights = (np.concatenate([w for _, w in decoded]) if decoded
                       else np.zeros(0, np.float32))
        with self._lock:
            s = self._head()
            n, nnz = s.n + len(rowids), s.nnz + len(new_terms)
            ids, nss = _fit(s.rowids, s.n, n), _fit(s.namespaces, s.n, n)
            kind_codes, alive = _fit(s.kinds, s.n, n), _fit(s.alive, s.n, n)
            row_lengths = _fit(s.lengths, s.n, n)
            ids[s.n:n] = rowids
            nss[s.n:n] = namespaces
            kind_codes[s.n:n] = kinds
            alive[s.n:n] = True
            row_lengths[s.n:n] = lengths
            row_ptr = _fit(s.row_ptr, s.n + 1, n + 1)
            row_ptr[s.n + 1:n + 1] = s.nnz + np.cumsum(counts)
            terms = _fit(s.terms, s.nnz, nnz)
            weights = _fit(s.weights, s.nnz, nnz)
            terms[s.nnz:nnz] = new_terms
            weights[s.nnz:nnz] = new_weights
            df, live_rows, live_length = _add_statistics(
                s, kinds.astype(np.int64), counts, new_terms, lengths, sign=1)
            snap = replace(
                s, n=n, nnz=nnz, row_ptr=row_ptr, terms=terms, weights=weights, df=df,
                live_rows=live_rows, live_length=live_length, rowids=ids, namespaces=nss,
                kinds=kind_codes, alive=alive, lengths=row_lengths,
            )
            self._set_head(snap, publish)

    def _published(self, s: _Snapshot) -> _Snapshot:
        return _maybe_reindex(s, self.tail_postings)

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` more rows and their postings (at the mean per row so
        far, a tenth more) before a large load; zero-filled, so memory is committed only
        as rows are written."""
        with self._lock:
            s = self._head()
            per_row = s.nnz / s.n if s.n else RESERVED_POSTINGS_PER_ROW
            target = replace(s, n=s.n + rows, nnz=s.nnz + int(rows * per_row * 1.1))
            arrays: dict[str, Any] = {}
            for name, used in _USED_LENGTH.items():  # one too short: grown to exactly that
                a = getattr(s, name)
                arrays[name] = a if used(target) <= len(a) else grow(a, used(target), used(s))
            if any(a is not getattr(s, name) for name, a in arrays.items()):
                self._set_head(replace(s, **arrays), self._staged is None)

    def remove(self, rowids: npt.NDArray[np.int64]) -> None:
        """Mark rows dead (unknown row ids are ignored); compacts when a quarter is dead."""
        if len(rowids) == 0:
            return
        with self._lock:
            s = self._settled()
            pos = positions(s.rowids, s.n, rowids)
            pos = pos[s.alive[pos]]
            if len(pos) == 0:
                return
            alive = s.alive.copy()
            alive[pos] = False
            gone = np.concatenate([s.terms[s.row_ptr[p]:s.row_ptr[p + 1]] for p in pos])
            counts = s.row_ptr[pos + 1] - s.row_ptr[pos]
            df, live_rows, live_length = _add_statistics(
                s, s.kinds[pos].astype(np.int64), counts, gone, s.lengths[pos], sign=-1)
            snap = replace(s, alive=alive, df=df, dead=s.dead + len(pos),
                           live_rows=live_rows, live_length=live_length)
            if compaction_due(snap.dead, snap.n):
                snap = _compact(snap)
            self._snap = snap

    def search(
        self, term_ids: Sequence[int], k: int, namespace_ids: list[int], kind: int = 0,
        keep: RowFilter | None = None, strategy: Strategy | None = None,
        cost: bm25.Cost | None = None,
    ) -> list[tuple[int, float]]:
        """Top ``k`` live rows of the given namespaces and kind among those ``keep`` lets
        through (all when None): (row id, BM25 score), best first, ties by row id. Exact
        whatever the ``strategy`` (:func:`docgraph.store.bm25.top_k`: ``auto`` skips the
        rows that cannot reach the top ``k``; ``exhaustive`` scores every matching row;
        ``cost`` is told what it read)."""
        s = self._snap
        q = bm25.prepare(s, term_ids, kind)
        if k <= 0 or not namespace_ids or q is None:
            return []
        mask = keep(s.rowids, s.n) if keep is not None else None
        return bm25.top_k(s, q, k, namespace_ids, mask, strategy or self.strategy, cost,
                          lambda: self._matching.allowed(s, namespace_ids, kind)[0])

    def scores_for(
        self, term_ids: Sequence[int], rowids: npt.NDArray[np.int64], namespace_ids: list[int],
        kind: int = 0, keep: RowFilter | None = None,
    ) -> dict[int, float]:
        """BM25 scores (``kind``'s statistics) of the given rows of ``kind`` that match a term,
        are in the namespaces and pass ``keep`` (all when None); only those rows are scored."""
        s = self._snap
        q = bm25.prepare(s, term_ids, kind)
        if s.n == 0 or len(rowids) == 0 or q is None or not namespace_ids:
            return {}
        pos = np.clip(np.searchsorted(s.rowids[: s.n], rowids), 0, s.n - 1)
        mask = keep(s.rowids, s.n) if keep is not None else None
        ok = (s.rowids[pos] == rowids) & LaneFilter(s, kind, namespace_ids, mask)(pos)
        wanted, where = np.unique(pos[ok], return_index=True)
        scores, matched = bm25.exact_scores(s, q, wanted)
        ids = rowids[ok][where]
        return {int(r): float(v) for r, v, m in zip(ids, scores, matched, strict=True) if m}


# How much of each per-row or per-posting array a snapshot uses (the rest is capacity).
_USED_LENGTH: dict[str, Callable[[_Snapshot], int]] = {
    **{name: (lambda s: s.n) for name in ("rowids", "namespaces", "kinds", "alive", "lengths")},
    "row_ptr": lambda s: s.n + 1,
    **{name: (lambda s: s.nnz) for name in ("terms", "weights")},
}


# The arrays appends write into (the others are replaced whole or rebuilt by a reindex).
APPENDABLE = frozenset(_USED_LENGTH)


def _add_statistics(
    s: _Snapshot,
    row_kinds: npt.NDArray[np.int64],
    row_counts: npt.NDArray[np.int64],
    postings: npt.NDArray[np.int32],
    row_lengths: npt.NDArray[np.float32],
    sign: int,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The per-kind statistics of ``s`` with rows added (``sign`` 1) or removed (-1): each
    row's kind, posting count and length, and the rows' postings (term ids) in order.
    Returns (df, live rows, live length); the arrays of ``s`` are not modified."""
    kinds = max(s.df.shape[0], int(row_kinds.max()) + 1 if len(row_kinds) else 0)
    vocabulary = max(s.df.shape[1], int(postings.max()) + 1 if len(postings) else 0)
    df = np.zeros((kinds, vocabulary), np.int32)
    df[: s.df.shape[0], : s.df.shape[1]] = s.df
    posting_kinds = np.repeat(row_kinds, row_counts)
    df += sign * np.bincount(posting_kinds * vocabulary + postings,
                             minlength=kinds * vocabulary).reshape(kinds, vocabulary
                                                                   ).astype(np.int32)
    live_rows = np.zeros(kinds, np.int64)
    live_rows[: len(s.live_rows)] = s.live_rows
    live_rows += sign * np.bincount(row_kinds, minlength=kinds)
    live_length = np.zeros(kinds, np.float64)
    live_length[: len(s.live_length)] = s.live_length
    live_length += sign * np.bincount(row_kinds, weights=row_lengths.astype(np.float64),
                                      minlength=kinds)
    return df, live_rows, live_length


def _maybe_reindex(s: _Snapshot, tail_postings: int) -> _Snapshot:
    tail = s.nnz - int(s.row_ptr[s.main_rows])
    if tail <= max(tail_postings, s.nnz // 32):
        return s
    return _reindex(s)


def _reindex(s: _Snapshot) -> _Snapshot:
    """Rebuild the term-major copy over every row: the row-major postings are a sparse
    rows x terms matrix in CSR form, the term-major copy its CSC form, which scipy builds
    by a counting sort (rows ascending within each term) with no temporary array beyond
    the result (an ``argsort`` needed 12 more bytes a posting: 5 GB at 10M chunks)."""
    vocabulary = s.df.shape[1]
    if s.nnz == 0:
        return replace(s, main_rows=s.n, term_ptr=np.zeros(vocabulary + 1, np.int64),
                       term_rows=np.zeros(0, np.int32), term_weights=np.zeros(0, np.float32),
                       term_bound=np.zeros(vocabulary, np.float32), bound_average=1.0,
                       **bm25_bounds.ImpactOrders.none().fields())
    row_ptr = s.row_ptr[: s.n + 1]
    if s.nnz < np.iinfo(np.int32).max:  # 32-bit offsets: scipy then copies no index array
        row_ptr = row_ptr.astype(np.int32)
    by_row = scipy.sparse.csr_array(
        (s.weights[: s.nnz], s.terms[: s.nnz], row_ptr), shape=(s.n, vocabulary))
    by_term = by_row.tocsc()
    term_ptr = by_term.indptr.astype(np.int64)
    term_rows = by_term.indices.astype(np.int32, copy=False)
    term_weights = by_term.data.astype(np.float32, copy=False)
    average = float(s.lengths[: s.n].mean(dtype=np.float64)) if s.n else 1.0
    return replace(s, main_rows=s.n, term_ptr=term_ptr, term_rows=term_rows,
                   term_weights=term_weights, **bm25_bounds.derived(
                       term_ptr, term_rows, term_weights, s.lengths[: s.n],
                       average if average > 0 else 1.0))


def _compact(s: _Snapshot) -> _Snapshot:
    """Drop dead rows and their postings, then rebuild the term-major copy."""
    keep = np.flatnonzero(s.alive[: s.n])
    counts = np.diff(s.row_ptr[: s.n + 1])[keep]
    posting_keep = np.repeat(s.alive[: s.n], np.diff(s.row_ptr[: s.n + 1]))
    row_ptr = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(counts, out=row_ptr[1:])
    terms = s.terms[: s.nnz][posting_keep]
    snap = replace(
        s, rowids=s.rowids[keep].copy(), namespaces=s.namespaces[keep].copy(),
        kinds=s.kinds[keep].copy(), alive=np.ones(len(keep), bool),
        lengths=s.lengths[keep].copy(), row_ptr=row_ptr, terms=terms,
        weights=s.weights[: s.nnz][posting_keep], n=len(keep), nnz=len(terms), dead=0,
        main_rows=0, term_ptr=np.zeros(1, np.int64), term_bound=np.zeros(0, np.float32),
    )
    return _reindex(snap)
