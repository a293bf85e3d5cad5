"""The PostgreSQL backend: catalog, chunk index (pgvector + BM25 in SQL), logs and
versioned migrations in one database. Needs the ``postgres`` extra."""

from docgraph.store.postgres.catalog import PostgresCatalog, connection_url, redacted
from docgraph.store.postgres.index import PostgresChunkIndex

__all__ = ["PostgresCatalog", "PostgresChunkIndex", "connection_url", "redacted"]
