"""Storage: the catalog (system of record) and the chunk index (search accelerators)."""

from docgraph.store.base import (
    Catalog,
    ChunkIndex,
    DocumentWrite,
    StoreCatalog,
    require_namespaces,
)
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog

__all__ = [
    "Catalog",
    "ChunkIndex",
    "DocumentWrite",
    "EmbeddedChunkIndex",
    "SQLiteCatalog",
    "StoreCatalog",
    "require_namespaces",
]
