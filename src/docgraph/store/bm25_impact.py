"""The long posting lists in impact order, as MaxScore (:func:`docgraph.store.bm25._pruned`)
reads them: each list's top scored first for a threshold, then the list only down to where
its addends can no longer lift a row to the threshold.

MaxScore reads every posting of each list it walks. For a query of one common word that is
the whole list (1.7M postings at 10M chunks) to return 100 rows. Every list of
``IMPACT_MIN`` postings or more is also kept in *impact order*
(:func:`docgraph.store.bm25_bounds.impact_orders`): its postings sorted by their
length-normalised frequency, in blocks with a bound each. When MaxScore comes to walk
such a list:

- *Seed*: its first ``SEED`` postings are read and their rows scored exactly (every term
  looked up), which raises the threshold.
- *Prefix*: the list is then walked only as far as its blocks' bounds reach the threshold
  less what the other terms can add to a row not met yet (their residuals: a full bound
  for a list not read yet, the bound past what was read of one read in part, 0 for one
  read whole). A row past that cannot reach the threshold through this term; if another
  list meets it, its addend here is looked up there like any term's. A list read in part
  keeps the bound of its first unread block as its residual, and MaxScore stops when the
  residuals add up to less than the threshold, as before.

A list is seeded only when it is walked: seeding every long list of a query first scored
the common words' tops, whose lists MaxScore never walks (1M: 7-19 % slower at the median).
Rows are scored by the same expression in the same order whichever list meets them: the
answer is bit-identical to the exhaustive way's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from docgraph.store import posting_lookup

if TYPE_CHECKING:
    from docgraph.store.lexical import _Snapshot

# Postings of an impact-ordered list scored before MaxScore walks the rest of it.
SEED = 1024
# A list whose prefix would hold more than this share of it is walked whole, in row order
# (sorting most of a list's offsets costs more than reading the rest: 15 ms for 440k).
PREFIX_SHARE = 0.5


@dataclass(frozen=True)
class Order:
    """One query term's list in impact order: its offsets ``s.impact_order[start:start +
    size]``, its blocks' bounds ``s.impact_bound[blocks:]``; of those, a search reads the
    offsets in [``first``, ``last``) (a row range's part of the list,
    :mod:`docgraph.store.bm25_parts`; the whole list by default), and is given them as
    offsets into that part."""

    start: int
    size: int
    blocks: int
    first: int = 0
    last: int | None = None  # (None: ``size``)

    def part(self, first: int, last: int) -> Order | None:
        """The same order read only at offsets [``first``, ``last``); None when empty."""
        return replace(self, first=first, last=last) if last > first else None

    def residual(self, s: _Snapshot, read: int) -> float:
        """The largest length-normalised frequency past the first ``read`` postings (0 past
        the end)."""
        if read >= self.size:
            return 0.0
        return float(s.impact_bound[self.blocks + read // s.impact_block])

    def rounded(self, s: _Snapshot, count: int) -> int:
        """``count`` postings rounded up to whole blocks (at most the list)."""
        return min(self.size, -(-count // s.impact_block) * s.impact_block)

    def prefix(self, s: _Snapshot, scale: float, need: float) -> int:
        """Postings in the blocks whose bound, times ``scale`` (a term's bound per unit of
        frequency), reaches ``need``: every posting past them adds less."""
        count = -(-self.size // s.impact_block)
        bounds = s.impact_bound[self.blocks:self.blocks + count].astype(np.float64)
        return self.rounded(s, int(np.count_nonzero(bounds * scale >= need)) * s.impact_block)

    def offsets(self, s: _Snapshot, count: int) -> npt.NDArray[np.int64]:
        """Offsets into the part read of the first ``count`` postings in impact order
        that lie in it, ascending (so their rows are ascending too)."""
        found = s.impact_order[self.start:self.start + count]
        last = self.size if self.last is None else self.last
        if self.first > 0 or last < self.size:
            found = found[(found >= self.first) & (found < last)] - self.first
        return np.sort(found).astype(np.int64)


def orders(s: _Snapshot, terms: list[int],
           lists: list[tuple[int, int]]) -> list[Order | None]:
    """Each term's list in impact order, or None (no order, or an empty list)."""
    found: list[Order | None] = [None] * len(terms)
    if len(s.impact_terms) == 0:
        return found
    at = np.searchsorted(s.impact_terms, np.asarray(terms, np.int64))
    for i, (term, (lo, hi)) in enumerate(zip(terms, lists, strict=True)):
        j = int(at[i])
        if hi > lo and j < len(s.impact_terms) and int(s.impact_terms[j]) == term:
            found[i] = Order(int(s.impact_ptr[j]), hi - lo, int(s.impact_block_ptr[j]))
    return found


def parts(found: list[Order | None], lists: list[tuple[int, int]],
          spans: list[tuple[int, int]]) -> list[Order | None]:
    """The orders ``found`` for ``lists`` (each [lo, hi) of the term-major copy), each read
    only in its part ``spans`` (a row range's [lo, hi) of the same list)."""
    return [None if order is None else order.part(part_lo - lo, part_hi - lo)
            for order, (lo, _), (part_lo, part_hi) in zip(found, lists, spans, strict=True)]


def seed(s: _Snapshot, lo: int, order: Order,
         met: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], int]:
    """(the rows of the list's first ``SEED`` postings in impact order that lie in the part
    read (which starts at ``lo`` in the term-major copy) and are not in ``met``, ascending;
    how many postings that read)."""
    count = order.rounded(s, SEED)
    rows = s.term_rows[lo + order.offsets(s, count)].astype(np.int64)
    if len(met):
        rows = rows[~posting_lookup.contains(met, rows)]
    return rows, count
