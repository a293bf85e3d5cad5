"""The PostgreSQL backend's ports: one database holds them all (versioned migrations create
every table when the catalog opens), shared by every process serving it."""

from __future__ import annotations

from functools import cached_property

from docgraph.config import StoreSettings
from docgraph.store.base import (
    AuditStore,
    ChunkIndex,
    ReplicaStatus,
    SettingsStore,
    TraceLog,
)
from docgraph.store.graph import GraphStore
from docgraph.store.lifecycle import BuildHistoryStore, LeaderLock, SourceRegistryStore
from docgraph.store.policy import PolicyStore
from docgraph.store.ports import milvus_index
from docgraph.store.postgres.catalog import PostgresCatalog
from docgraph.store.postgres.graph import PostgresGraphStore
from docgraph.store.postgres.index import PostgresChunkIndex
from docgraph.store.postgres.leader import PostgresLeaderLock
from docgraph.store.postgres.replicas import ReplicaCatalog
from docgraph.store.sessions import ConsoleSessionStore
from docgraph.store.signin import SignInLimitStore
from docgraph.store.sql.builds import SqlBuildHistoryStore
from docgraph.store.sql.logs import SqlAuditStore, SqlTraceLog
from docgraph.store.sql.policy import SqlPolicyStore
from docgraph.store.sql.registry import SqlSourceRegistryStore
from docgraph.store.sql.sessions import SqlConsoleSessionStore
from docgraph.store.sql.settings import SqlSettingsStore
from docgraph.store.sql.signin import SqlSignInLimitStore
from docgraph.store.sql.tokens import SqlTokenStore
from docgraph.store.tokens import TokenStore


class PostgresPorts:
    """Every store of an index kept in one PostgreSQL database."""

    #: Never read-only here (the database's own permissions govern writes).
    read_only = ""

    def __init__(self, settings: StoreSettings) -> None:
        assert settings.url is not None  # checked by StoreSettings
        self.store_settings = settings
        self.catalog: PostgresCatalog = PostgresCatalog(settings.url)
        self.location = self.catalog.display_url
        #: The query side's catalog: the replicas of ``[store] read_urls``, else the primary.
        self.query_catalog: PostgresCatalog = (
            ReplicaCatalog(self.catalog, settings.read_urls, settings.read_policy,
                           settings.read_wait_s, settings.read_max_lag_s)
            if settings.read_urls else self.catalog)

    @cached_property
    def graph(self) -> GraphStore:
        """Entities, links, edges, communities and reports (migration 7)."""
        return PostgresGraphStore(self.catalog)

    @cached_property
    def query_graph(self) -> GraphStore:
        """The graph as queries read it: from the replicas when there are some."""
        if self.query_catalog is self.catalog:
            return self.graph
        return PostgresGraphStore(self.query_catalog)

    def replicas(self) -> list[ReplicaStatus]:
        """Each read replica's lag behind the primary (none without ``read_urls``)."""
        if isinstance(self.query_catalog, ReplicaCatalog):
            return self.query_catalog.replica_status()
        return []

    @cached_property
    def traces(self) -> TraceLog:
        """Retrieval traces, shared by every server of the database."""
        return SqlTraceLog(self.catalog.unmarked())

    @cached_property
    def audit(self) -> AuditStore:
        """The audit log, shared by every server of the database."""
        return SqlAuditStore(self.catalog.unmarked())

    @cached_property
    def tokens(self) -> TokenStore:
        """Bearer-token digests, shared by every server of the database."""
        return SqlTokenStore(self.catalog.unmarked())

    @cached_property
    def console_sessions(self) -> ConsoleSessionStore:
        """Console sessions, shared by every server of the database (migration 16)."""
        return SqlConsoleSessionStore(self.catalog.unmarked())

    @cached_property
    def signin_limits(self) -> SignInLimitStore:
        """Console sign-in buckets, shared by every server of the database (migration
        18)."""
        return SqlSignInLimitStore(self.catalog.unmarked())

    @cached_property
    def settings(self) -> SettingsStore:
        """Admin settings changed at run time, shared by every server of the database."""
        return SqlSettingsStore(self.catalog)

    @cached_property
    def policy(self) -> PolicyStore:
        """The access policy every server of the database serves (a ``meta`` row)."""
        return SqlPolicyStore(self.catalog.unmarked())

    @cached_property
    def registry(self) -> SourceRegistryStore:
        """SQL sources and column tags."""
        return SqlSourceRegistryStore(self.catalog)

    @cached_property
    def builds(self) -> BuildHistoryStore:
        """Build history."""
        return SqlBuildHistoryStore(self.catalog)

    @cached_property
    def leader(self) -> LeaderLock:
        """A session advisory lock on a connection of its own (any machine sees it)."""
        return PostgresLeaderLock(self.catalog.url)

    def chunk_index(self, dimension: int) -> ChunkIndex:
        """pgvector + BM25 in the database (read from the replicas when there are some), or
        Milvus following the primary (``[store] index``)."""
        if self.store_settings.index == "milvus":
            return milvus_index(self.catalog, dimension, self.store_settings)
        return PostgresChunkIndex(self.query_catalog, dimension,
                                  ef_search=self.store_settings.pg_ef_search)

    def close(self) -> None:
        """Release the refresh lock (if taken) and close every connection."""
        lock = self.__dict__.get("leader")
        if lock is not None:
            lock.close()
        if self.query_catalog is not self.catalog:
            self.query_catalog.close()
        self.catalog.close()
