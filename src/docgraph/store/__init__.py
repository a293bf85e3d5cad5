"""Storage: the catalog (system of record) and the chunk index (search accelerators)."""

from docgraph.store.base import Catalog, ChunkIndex, DocumentWrite, require_namespaces
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog

__all__ = [
    "Catalog",
    "ChunkIndex",
    "DocumentWrite",
    "EmbeddedChunkIndex",
    "SQLiteCatalog",
    "require_namespaces",
]
