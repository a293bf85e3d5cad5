"""The store backends that ``tests/store/test_store_contract.py`` runs its contract against.

Every test there takes the ``backend`` fixture, parametrized over :data:`BACKENDS`. A backend
is a small class with a name, the ``[store]`` settings that make :class:`docgraph.DocGraph`
use it, a way to open its catalog + chunk index directly, and cleanup. Fixtures it needs (a
server) are taken with ``request.getfixturevalue``, so a backend whose server cannot start
skips (and fails under ``DOCGRAPH_REQUIRE_SERVICES=1``) only its own test cases.

Adding a backend is one class (like :class:`MilvusBackend`) and one line in :data:`BACKENDS`.

``open_store`` may be called more than once per test; each call must see the same data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
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
    # False where BM25 document frequencies are per segment, not index-wide (Milvus Lite
    # seals each sync into its own segment; see docs/milvus.md)
    global_bm25_statistics: bool = True


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


class MilvusBackend:
    """The SQLite catalog with its chunk index in Milvus (a Milvus Lite file, no server)."""

    name = "milvus"

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        pytest.importorskip("pymilvus")
        pytest.importorskip("milvus_lite")
        self.path = tmp_path / "index.db"
        self.uri = str(tmp_path / "milvus.db")
        self.opened: list[tuple[SQLiteCatalog, ChunkIndex]] = []

    def store_settings(self) -> dict[str, object]:
        return {"backend": "embedded", "path": self.path, "index": "milvus",
                "milvus_uri": self.uri}

    def open_store(self, dimension: int) -> StoreHandle:
        from docgraph.store.milvus.index import MilvusChunkIndex

        catalog = SQLiteCatalog(self.path)
        index = MilvusChunkIndex.over(catalog, dimension, self.uri)
        self.opened.append((catalog, index))
        return StoreHandle(catalog, index, global_bm25_statistics=False)

    def close(self) -> None:
        from milvus_lite.server_manager import server_manager_instance

        for catalog, index in self.opened:
            index.close()  # type: ignore[attr-defined]
            catalog.close()
        server_manager_instance.release_server(self.uri)


class MilvusPostgresBackend(PostgresBackend):
    """The PostgreSQL catalog with its chunk index in Milvus Lite, following the database's
    change feed."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        pytest.importorskip("pymilvus")
        pytest.importorskip("milvus_lite")
        super().__init__(request, tmp_path, name="milvus-postgres")
        self.uri = str(tmp_path / "milvus.db")
        self.indexes: list[ChunkIndex] = []

    def store_settings(self) -> dict[str, object]:
        return {**super().store_settings(), "index": "milvus", "milvus_uri": self.uri}

    def open_store(self, dimension: int) -> StoreHandle:
        from docgraph.store.milvus.index import MilvusChunkIndex
        from docgraph.store.postgres import PostgresCatalog

        catalog = PostgresCatalog(self.url)
        self.opened.append(catalog)
        index = MilvusChunkIndex.over(catalog, dimension, self.uri)
        self.indexes.append(index)
        return StoreHandle(catalog, index, global_bm25_statistics=False)

    def close(self) -> None:
        from milvus_lite.server_manager import server_manager_instance

        for index in self.indexes:
            index.close()  # type: ignore[attr-defined]
        super().close()
        server_manager_instance.release_server(self.uri)


#: A real Milvus server for the contract (``http://host:19530``), read once at import:
#: the tests run with every DOCGRAPH_* variable removed. Unset: the server backend is not
#: in :data:`BACKENDS` at all (neither run nor skipped): Milvus Lite stands in for it.
MILVUS_SERVER_URI = os.environ.get("DOCGRAPH_TEST_MILVUS_URI", "")
MILVUS_SERVER_TOKEN = os.environ.get("DOCGRAPH_TEST_MILVUS_TOKEN", "")


class MilvusServerBackend:
    """The SQLite catalog with its chunk index in a collection of its own on the Milvus
    server at ``DOCGRAPH_TEST_MILVUS_URI``, dropped afterwards."""

    name = "milvus-server"

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        pytest.importorskip("pymilvus")
        self.path = tmp_path / "index.db"
        self.collection = f"docgraph_test_{uuid.uuid4().hex[:12]}"
        self.opened: list[tuple[SQLiteCatalog, ChunkIndex]] = []

    def store_settings(self) -> dict[str, object]:
        return {"backend": "embedded", "path": self.path, "index": "milvus",
                "milvus_uri": MILVUS_SERVER_URI, "milvus_collection": self.collection}

    def open_store(self, dimension: int) -> StoreHandle:
        from docgraph.store.milvus.index import MilvusChunkIndex

        catalog = SQLiteCatalog(self.path)
        index = MilvusChunkIndex.over(catalog, dimension, MILVUS_SERVER_URI,
                                      collection=self.collection, token=MILVUS_SERVER_TOKEN)
        self.opened.append((catalog, index))
        # a server's BM25 statistics are the shard's (one shard: the whole collection)
        return StoreHandle(catalog, index, global_bm25_statistics=True)

    def close(self) -> None:
        from pymilvus import MilvusClient

        for catalog, index in self.opened:
            index.close()  # type: ignore[attr-defined]
            catalog.close()
        if not self.opened:  # nothing was created (e.g. the server could not be reached)
            return
        client = MilvusClient(uri=MILVUS_SERVER_URI, token=MILVUS_SERVER_TOKEN)
        try:
            client.drop_collection(self.collection)
        finally:
            client.close()


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Backend]] = {
    "embedded": EmbeddedBackend,
    "postgres": PostgresBackend,
    "milvus": MilvusBackend,
    "milvus-postgres": MilvusPostgresBackend,
}
if MILVUS_SERVER_URI:
    BACKENDS["milvus-server"] = MilvusServerBackend


@pytest.fixture(params=["embedded", "postgres"])
def product_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The two backends that hold the whole product, for tests that configure DocGraph (or
    a ``docgraph`` subprocess) themselves; a module uses it as ``backend =
    store_backends.product_backend``."""
    made = BACKENDS[request.param](request, tmp_path)
    try:
        yield made
    finally:
        made.close()
