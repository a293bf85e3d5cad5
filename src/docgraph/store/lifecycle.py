"""The stores behind keeping an index fresh: the source registry's own records (SQL sources
and column tags), the build history, and the lock that elects one refresher.

Document folders are catalog sources (:class:`~docgraph.store.base.Catalog`); this module
holds what the registry and the refresher keep beside them. The relational ports are written
once in :mod:`docgraph.store.sql.registry` and :mod:`docgraph.store.sql.builds` over both
relational backends; the leader lock has one implementation per backend
(:mod:`docgraph.store.postgres.leader`, :mod:`docgraph.store.sqlite.leader`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredSqlSource:
    """A registered SQL database as stored: its name and URL (never with a password)."""

    name: str
    url: str
    created_at: float


@dataclass(frozen=True, slots=True)
class StoredColumnTag:
    """One tag on one column of a SQL source; ``domain`` is empty for entity tags."""

    source: str
    schema: str
    table: str
    column: str
    tag: str
    domain: str
    pk_column: str | None = None


class SourceRegistryStore(Protocol):
    """What the source registry persists beside the catalog's sources: SQL sources (URLs
    without passwords) and column tags."""

    def save_sql_source(self, source: StoredSqlSource) -> None:
        """Insert a SQL source, or re-point an existing one (its ``created_at`` is kept)."""
        ...

    def sql_source(self, name: str) -> StoredSqlSource | None:
        """The SQL source called ``name``, or None."""
        ...

    def sql_sources(self) -> list[StoredSqlSource]:
        """Every SQL source, by name."""
        ...

    def remove_sql_source(self, name: str) -> None:
        """Delete a SQL source and its tags (one transaction)."""
        ...

    def save_tag(self, tag: StoredColumnTag, created_at: float) -> None:
        """Insert a tag, or update the primary key column of the same tag."""
        ...

    def remove_tags(self, tags: Sequence[StoredColumnTag]) -> None:
        """Delete these tags (one transaction)."""
        ...

    def tags(self) -> list[StoredColumnTag]:
        """Every tag, by source, schema, table, column, tag and domain."""
        ...

    def last_indexed(self) -> dict[int, float | None]:
        """When each catalog source (by id) last finished a build (None: never)."""
        ...


@dataclass(frozen=True, slots=True)
class StoredPhase:
    """How one build phase went for one source (see :mod:`docgraph.lifecycle.history`)."""

    source: str
    phase: str
    outcome: str
    message: str
    items: int
    seconds: float


@dataclass(frozen=True, slots=True)
class StoredBuild:
    """One recorded namespace build; ``id`` is None until it is stored."""

    namespace: str
    started_at: float
    finished_at: float
    outcome: str
    documents_changed: int
    chunks_embedded: int
    bodies_read: int
    phases: tuple[StoredPhase, ...] = field(default=())
    id: int | None = None


class BuildHistoryStore(Protocol):
    """Recorded namespace builds (``build_runs``) with their phases (``build_phases``)."""

    def record(self, build: StoredBuild, keep: int) -> int:
        """Store a build with its phases and drop all but the newest ``keep`` of its
        namespace (one transaction); returns its id."""
        ...

    def update(self, build: StoredBuild, keep: int | None = None) -> None:
        """Rewrite the stored build ``build.id`` (its row and phases: a build in progress
        saying how far it got, or finishing) in one transaction; with ``keep``, then drop
        all but the newest ``keep`` of its namespace."""
        ...

    def recent(self, namespace: str | None = None, limit: int = 20) -> list[StoredBuild]:
        """The newest builds (of one namespace, or of all), newest first."""
        ...

    def last_success_at(self, namespace: str) -> float | None:
        """When the newest build that did not fail (``ok`` or ``partial``) finished."""
        ...

    def namespaces(self) -> list[str]:
        """Namespaces with at least one recorded build, by name."""
        ...


def process_identity() -> str:
    """``pid@host`` of this process: how a leader names itself."""
    return f"{os.getpid()}@{socket.gethostname()}"


class LeaderLock(Protocol):
    """Elects one refresher among every process on one index: whoever holds the lock leads.

    The lock dies with its holder (a killed process leads no more), so another process
    takes over at its next :meth:`try_acquire`."""

    identity: str

    def try_acquire(self) -> bool:
        """Lead if no process does; True when this process leads (also if it already did).
        Never blocks on another holder."""
        ...

    @property
    def held(self) -> bool:
        """Whether this process leads through this lock."""
        ...

    def holder(self) -> str | None:
        """Who leads (``pid@host``), or None when no process does."""
        ...

    def release(self) -> None:
        """Stop leading (a no-op when not leading)."""
        ...

    def close(self) -> None:
        """Release and free the lock's resources (its connection or file)."""
        ...
