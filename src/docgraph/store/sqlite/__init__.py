"""The embedded backend: the SQLite catalog, its graph tables and logs, and the in-memory
chunk index that follows it."""

from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.index import EmbeddedChunkIndex
from docgraph.store.sqlite.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "EmbeddedChunkIndex", "SQLiteCatalog"]
