"""The embedded backend: the SQLite catalog, its graph tables and logs, and the in-memory
chunk index that follows it."""

from docgraph.store.sqlite.catalog import SCHEMA_VERSION, SQLiteCatalog
from docgraph.store.sqlite.index import EmbeddedChunkIndex

__all__ = ["SCHEMA_VERSION", "EmbeddedChunkIndex", "SQLiteCatalog"]
