"""The change feed port: how a chunk index outside the catalog (Milvus) follows it.

An external index outlives the process, so its position in the catalog's feed (a *cursor*)
is stored in the catalog itself, together with the *generation* that identifies the external
collection it was applied to. Each backend implements :class:`ChangeFeed` in its folder
(``store/sqlite/feed.py``: row ids + tombstones; ``store/postgres/feed.py``: a
commit-ordered change log). Applying a batch twice (a crash after the external write, before
the cursor commit) is harmless: the external writes are upserts and deletes by chunk row id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from docgraph.model import Vector


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far an external index has followed the catalog."""

    generation: str
    rowid: int = 0
    tombstone_seq: int = 0


@dataclass(frozen=True, slots=True)
class FeedRow:
    """One chunk as an external index needs it."""

    rowid: int
    namespace_id: int
    kind: int
    text: str
    vector: Vector


@dataclass(frozen=True, slots=True)
class FeedBatch:
    """Chunks added and chunk row ids deleted since the cursor (in row id / log order)."""

    rows: list[FeedRow]
    deleted: list[int]


class ChangeFeed(Protocol):
    """A catalog's chunk changes for one named external index."""

    #: Names the catalog in messages (a file path or a redacted database URL).
    display_name: str

    def marks(self) -> tuple[int, int]:
        """A cheap fingerprint that changes whenever a chunk is added or deleted."""
        ...

    def cursor(self) -> Cursor | None:
        """The stored cursor, or None if this index has never followed the catalog."""
        ...

    def reset(self, generation: str) -> None:
        """Start following from the beginning into a new (empty) external collection."""
        ...

    def live_chunks(self) -> int:
        """Chunks in the catalog now (all namespaces and kinds)."""
        ...

    def apply_next(self, limit: int, apply: Callable[[FeedBatch], None]) -> bool:
        """Read the next batch (at most ``limit`` added chunks and pending deletes), call
        ``apply`` with it while followers of this cursor are held off, then advance the
        cursor. Returns whether anything was applied; if ``apply`` raises, the cursor stays."""
        ...

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Stored unit vectors of the given chunks (absent: deleted)."""
        ...
