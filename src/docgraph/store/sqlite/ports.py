"""The embedded backend's ports: one SQLite file holds them all (the tables each shared-SQL
store needs are created when the store is first used)."""

from __future__ import annotations

from functools import cached_property

from docgraph.config import StoreSettings
from docgraph.errors import ReadOnlyIndex
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
from docgraph.store.ports import milvus_index
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
from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.graph import SQLiteGraphStore
from docgraph.store.sqlite.index import EmbeddedChunkIndex
from docgraph.store.sqlite.leader import FileLeaderLock, leader_lock_path
from docgraph.store.sqlite.lifecycle import create_build_tables, create_registry_tables
from docgraph.store.sqlite.logs import create_log_tables
from docgraph.store.sqlite.readonly import (
    ReadOnlyLeaderLock,
    UnrecordedAudit,
    UnrecordedTraces,
)
from docgraph.store.sqlite.sessions import create_session_table
from docgraph.store.sqlite.settings import create_settings_table
from docgraph.store.sqlite.signin import create_signin_table
from docgraph.store.sqlite.tokens import create_token_tables
from docgraph.store.tokens import TokenStore


class SQLitePorts:
    """Every store of an embedded index, over one :class:`SQLiteCatalog` file."""

    def __init__(self, settings: StoreSettings) -> None:
        self.store_settings = settings
        self.catalog: SQLiteCatalog = SQLiteCatalog(settings.path, settings.read_only)
        self.location = str(settings.path)

    @property
    def read_only(self) -> str:
        """Why the index is read-only (empty when writable): builds and the refresher are
        not started on it, and its traces and audit are not recorded."""
        return self.catalog.read_only

    @cached_property
    def graph(self) -> GraphStore:
        """Entities, links, edges, communities and reports in the catalog file."""
        return SQLiteGraphStore(self.catalog)

    @property
    def query_catalog(self) -> StoreCatalog:
        """Queries read the one file: the catalog itself."""
        return self.catalog

    @property
    def query_graph(self) -> GraphStore:
        """Queries read the one file: the graph store itself."""
        return self.graph

    def replicas(self) -> list[ReplicaStatus]:
        """An embedded index has no read replicas."""
        return []

    @cached_property
    def traces(self) -> TraceLog:
        """Retrieval traces in the catalog file (read-only index: those there are read,
        none recorded)."""
        create_log_tables(self.catalog)
        if self.catalog.read_only:
            return UnrecordedTraces(self.catalog)
        return SqlTraceLog(self.catalog)

    @cached_property
    def audit(self) -> AuditStore:
        """The audit log in the catalog file. A read-only index records none (it said so
        when it opened), or refuses here with ``store.require_audit``."""
        create_log_tables(self.catalog)
        if not self.catalog.read_only:
            return SqlAuditStore(self.catalog)
        if self.store_settings.require_audit:
            raise ReadOnlyIndex(
                f"{self.catalog.path} is opened read-only ({self.catalog.read_only}) and "
                "cannot record the audit log, which store.require_audit = true requires: "
                "open it writable, or set store.require_audit = false to serve without audit")
        return UnrecordedAudit(self.catalog)

    @cached_property
    def tokens(self) -> TokenStore:
        """Bearer-token digests in the catalog file."""
        create_token_tables(self.catalog)
        return SqlTokenStore(self.catalog)

    @cached_property
    def console_sessions(self) -> ConsoleSessionStore:
        """Console sessions in the catalog file."""
        create_session_table(self.catalog)
        return SqlConsoleSessionStore(self.catalog)

    @cached_property
    def signin_limits(self) -> SignInLimitStore:
        """Console sign-in buckets in the catalog file."""
        create_signin_table(self.catalog)
        return SqlSignInLimitStore(self.catalog)

    @cached_property
    def settings(self) -> SettingsStore:
        """Admin settings changed at run time, in the catalog file."""
        create_settings_table(self.catalog)
        return SqlSettingsStore(self.catalog)

    @cached_property
    def policy(self) -> PolicyStore:
        """The access policy every server of the database serves (a ``meta`` row)."""
        return SqlPolicyStore(self.catalog)

    @cached_property
    def registry(self) -> SourceRegistryStore:
        """SQL sources and column tags in the catalog file."""
        create_registry_tables(self.catalog)
        return SqlSourceRegistryStore(self.catalog)

    @cached_property
    def builds(self) -> BuildHistoryStore:
        """Build history in the catalog file."""
        create_build_tables(self.catalog)
        return SqlBuildHistoryStore(self.catalog)

    @cached_property
    def leader(self) -> LeaderLock:
        """A file lock beside the catalog file (every process on this machine sees it). A
        read-only index has no builds to elect a leader for: it refuses, naming itself."""
        if self.catalog.read_only:
            return ReadOnlyLeaderLock(
                f"{self.catalog.path} is opened read-only ({self.catalog.read_only}): builds "
                "and refreshes need it writable (searches and reads work)")
        return FileLeaderLock(leader_lock_path(self.catalog.path))

    def chunk_index(self, dimension: int) -> ChunkIndex:
        """The in-memory index following the file, or Milvus (``[store] index``)."""
        if self.store_settings.index == "milvus":
            return milvus_index(self.catalog, dimension, self.store_settings)
        graph = self.store_settings.dense_graph_min_rows or None  # 0: the exact scan
        ann = self.store_settings.dense_ann
        # A read-only index reads the sidecar and lists found beside it, never writes them.
        return EmbeddedChunkIndex(self.catalog, dimension, graph_min_rows=graph, ann=ann,
                                  write_caches=not self.catalog.read_only)

    def close(self) -> None:
        """Release the refresh lock (if taken) and close every connection."""
        lock = self.__dict__.get("leader")
        if lock is not None:
            lock.close()
        self.catalog.close()
