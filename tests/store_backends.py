"""The store backends that ``tests/test_store_contract.py`` runs its contract against.

Every test there takes the ``backend`` fixture, parametrized over :data:`BACKENDS`. A backend
is a small class with a name, the ``[store]`` settings that make :class:`docgraph.DocGraph`
use it, a way to open its catalog + chunk index directly, and cleanup. Fixtures it needs (a
server) are taken with ``request.getfixturevalue``, so a backend whose server cannot start
skips (and fails under ``DOCGRAPH_REQUIRE_SERVICES=1``) only its own test cases.

Adding a backend (e.g. Milvus, chunk index in Milvus Lite, catalog in SQLite) is one class
and one line::

    class MilvusBackend:
        name = "milvus"

        def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
            self.tmp_path = tmp_path                  # Milvus Lite: a local file, no server

        def store_settings(self) -> dict[str, object]:
            return {"backend": "milvus", "path": self.tmp_path / "catalog.db",
                    "url": str(self.tmp_path / "milvus.db")}

        def open_store(self, dimension: int) -> StoreHandle:
            catalog = SQLiteCatalog(self.tmp_path / "catalog.db")
            index = MilvusChunkIndex(catalog, str(self.tmp_path / "milvus.db"), dimension)
            return StoreHandle(catalog, index)

        def close(self) -> None:
            pass

    BACKENDS["milvus"] = MilvusBackend

``open_store`` may be called more than once per test; each call must see the same data.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest

from docgraph.store.base import ChunkIndex, StoreCatalog
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog


@dataclass
class StoreHandle:
    """A catalog and the chunk index over it, opened on one backend's data."""

    catalog: StoreCatalog
    index: ChunkIndex


class Backend(Protocol):
    """One store backend under test."""

    name: str

    def store_settings(self) -> dict[str, object]:
        """The ``[store]`` section that makes DocGraph use this backend's data."""
        ...

    def open_store(self, dimension: int) -> StoreHandle:
        """Open the catalog and chunk index (``dimension``-d vectors) directly."""
        ...

    def close(self) -> None:
        """Release everything the backend created for the test."""
        ...


class EmbeddedBackend:
    """The default: a SQLite catalog file and the in-process chunk index."""

    name = "embedded"

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.path = tmp_path / "index.db"
        self.opened: list[SQLiteCatalog] = []

    def store_settings(self) -> dict[str, object]:
        return {"backend": "embedded", "path": self.path}

    def open_store(self, dimension: int) -> StoreHandle:
        catalog = SQLiteCatalog(self.path)
        self.opened.append(catalog)
        return StoreHandle(catalog, EmbeddedChunkIndex(catalog, dimension))

    def close(self) -> None:
        for catalog in self.opened:
            catalog.close()


@dataclass
class PostgresBackend:
    """Catalog and chunk index in a fresh database on a throwaway PostgreSQL 18 + pgvector."""

    request: pytest.FixtureRequest
    tmp_path: Path
    name: str = "postgres"
    opened: list[StoreCatalog] = field(default_factory=list)

    def __post_init__(self) -> None:
        from tests.pg import PostgresServer

        server: PostgresServer = self.request.getfixturevalue("pgvector_server")
        self.server = server
        self.database = f"t_{uuid.uuid4().hex[:12]}"
        self.url = server.create_database(self.database)

    def store_settings(self) -> dict[str, object]:
        return {"backend": "postgres", "url": self.url}

    def open_store(self, dimension: int) -> StoreHandle:
        from docgraph.store.postgres import PostgresCatalog, PostgresChunkIndex

        catalog = PostgresCatalog(self.url)
        self.opened.append(catalog)
        return StoreHandle(catalog, PostgresChunkIndex(catalog, dimension))

    def close(self) -> None:
        for catalog in self.opened:
            catalog.close()
        self.server.drop_database(self.database)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Backend]] = {
    "embedded": EmbeddedBackend,
    "postgres": PostgresBackend,
}
