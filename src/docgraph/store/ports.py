"""Every storage port of one index, opened for the configured backend.

:func:`open_ports` is the composition root of storage: the one place that picks concrete
stores (``store/sqlite/ports.py`` or ``store/postgres/ports.py``). Everything above
``store/`` sees only the protocols a :class:`StorePorts` hands out.
"""

from __future__ import annotations

from typing import Protocol

from docgraph.config import StoreSettings
from docgraph.store.base import (
    AuditStore,
    ChunkIndex,
    ReplicaStatus,
    SettingsStore,
    StoreCatalog,
    TraceLog,
)
from docgraph.store.graph import GraphStore
from docgraph.store.lifecycle import BuildHistoryStore, LeaderLock, SourceRegistryStore
from docgraph.store.policy import PolicyStore
from docgraph.store.sessions import ConsoleSessionStore
from docgraph.store.signin import SignInLimitStore
from docgraph.store.tokens import TokenStore


class StorePorts(Protocol):
    """The stores of one index in one backend; each created on first use."""

    @property
    def catalog(self) -> StoreCatalog:
        """Documents, chunks, sources, failures: the system of record."""
        ...

    @property
    def query_catalog(self) -> StoreCatalog:
        """The catalog as queries read it (search lanes, chunk and document reads): the
        read replicas of ``[store] read_urls`` when there are some, else :attr:`catalog`.
        Builds and every other write use :attr:`catalog`."""
        ...

    @property
    def query_graph(self) -> GraphStore:
        """The graph store as queries read it (over :attr:`query_catalog`)."""
        ...

    def replicas(self) -> list[ReplicaStatus]:
        """Each read replica's lag behind the primary (empty without replicas)."""
        ...

    @property
    def location(self) -> str:
        """Where the index lives, for people: a file path or a redacted database URL."""
        ...

    @property
    def read_only(self) -> str:
        """Why the index was opened read-only (empty when writable): no builds, refresher,
        traces or audit records then."""
        ...

    @property
    def graph(self) -> GraphStore:
        """Entities, links, edges, communities and their reports."""
        ...

    @property
    def traces(self) -> TraceLog:
        """Retrieval traces."""
        ...

    @property
    def audit(self) -> AuditStore:
        """The audit log of governed requests."""
        ...

    @property
    def tokens(self) -> TokenStore:
        """Bearer-token digests of ``docgraph serve``."""
        ...

    @property
    def console_sessions(self) -> ConsoleSessionStore:
        """Sessions of the web console (digests of their ids only)."""
        ...

    @property
    def signin_limits(self) -> SignInLimitStore:
        """The console's sign-in buckets, shared by every process of the database."""
        ...

    @property
    def settings(self) -> SettingsStore:
        """Admin settings changed at run time."""
        ...

    @property
    def policy(self) -> PolicyStore:
        """The access policy every server of the database serves."""
        ...

    @property
    def registry(self) -> SourceRegistryStore:
        """SQL sources and column tags."""
        ...

    @property
    def builds(self) -> BuildHistoryStore:
        """Recorded namespace builds and their phases."""
        ...

    @property
    def leader(self) -> LeaderLock:
        """Elects the one process that refreshes the index."""
        ...

    def chunk_index(self, dimension: int) -> ChunkIndex:
        """A new chunk index over the catalog, as ``[store] index`` says."""
        ...

    def close(self) -> None:
        """Release every connection and lock the ports opened."""
        ...


def open_ports(settings: StoreSettings) -> StorePorts:
    """The stores of the index ``settings`` describe (the database is created or migrated)."""
    if settings.backend == "postgres":
        from docgraph.store.postgres.ports import PostgresPorts

        return PostgresPorts(settings)
    from docgraph.store.sqlite.ports import SQLitePorts

    return SQLitePorts(settings)


def milvus_index(catalog: StoreCatalog, dimension: int, settings: StoreSettings) -> ChunkIndex:
    """The Milvus chunk index over either catalog (``[store] index = "milvus"``)."""
    import os

    from docgraph.errors import ConfigError

    try:
        from docgraph.store.milvus.index import MilvusChunkIndex
    except ImportError as exc:
        raise ConfigError(
            "[store] index = 'milvus' needs pymilvus: pip install 'docgraph[milvus]'"
        ) from exc
    return MilvusChunkIndex.over(
        catalog, dimension, settings.resolved_milvus_uri(),
        collection=settings.milvus_collection,
        token=os.environ.get(settings.milvus_token_env, ""),
    )
