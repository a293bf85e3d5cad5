"""A chunk index in Milvus (a cluster, or Milvus Lite in a local file) that follows the
catalog (SQLite or PostgreSQL) through its change feed.

One collection holds every chunk: ``id`` (the catalog's chunk row id, primary key),
``namespace_id`` (the **partition key**, so a namespace filter prunes partitions), ``kind``,
the unit ``vector`` (HNSW, cosine) and ``text``: breadcrumb + chunk text *already analyzed by
docgraph* (:func:`docgraph.text.index_terms`: Porter stems, stopwords dropped,
diacritics folded, joined by single spaces; one filler token per stopword keeps the length
equal), from which the engine's BM25 Function derives the ``sparse`` vector that full-text
search ranks. The field's analyzer only splits on whitespace and queries are sent as their
:func:`~docgraph.text.query_terms`, so Milvus ranks exactly the terms the embedded
BM25 ranks, whatever analyzers the engine offers (Milvus Lite ignores stemmer filters; a
server's Snowball stemmer is not Porter). Filters are built only from integers the catalog
returned (namespace ids, kind codes, row ids); query text is only ever search *data*, never
part of an expression.

The catalog stays the system of record: the index follows it through its
:class:`~docgraph.store.feed.ChangeFeed` (added chunks are upserted, deleted ones deleted),
so a document replace or delete in the catalog becomes visible in Milvus at the next search.
The collection records a *generation* (a collection property)
that must match the catalog's cursor, so an index is never mixed with chunks of another
catalog; a collection of this catalog whose vector dimension or text layout (collection
property ``docgraph.text_layout``) no longer matches is dropped and rebuilt from the catalog.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
from pymilvus import (
    AnnSearchRequest,
    DataType,
    Function,
    FunctionType,
    MilvusClient,
    MilvusException,
    RRFRanker,
)

from docgraph.errors import InvalidQuery, StoreError
from docgraph.model import CHUNK_KINDS, ChunkKind, ScoredRow, Vector
from docgraph.store.base import StoreCatalog, require_namespaces
from docgraph.store.feed import ChangeFeed, FeedBatch
from docgraph.store.lexical import K1, B
from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.feed import SQLiteChangeFeed
from docgraph.text import index_terms, query_terms

GENERATION_PROPERTY = "docgraph.generation"
# What the ``text`` field holds. Collections without it (raw text under Milvus' own English
# analyzer, before docgraph analyzed the text itself) are rebuilt from the catalog.
LAYOUT_PROPERTY = "docgraph.text_layout"
TEXT_LAYOUT = f"index_terms-v1;bm25-{K1}-{B}"  # a change of either rebuilds the collection
# Stands for each stopword in the text field (see analyzed_text); not a word (words never
# contain "_"), so no query ever searches for it.
STOPWORD_FILLER = "_"
MAX_TEXT_BYTES = 65_535          # Milvus VARCHAR limit
MAX_TOPK = 16_384                # Milvus search limit
HNSW_PARAMS = {"M": 16, "efConstruction": 200}
HNSW_MIN_EF = 200                # search-time candidate list; at least k
BM25_PARAMS = {"bm25_k1": K1, "bm25_b": B}    # the embedded index's constants
_T = TypeVar("_T")

SYNC_BATCH = 2_000
DELETE_BATCH = 5_000

# The text field holds docgraph's own terms separated by single spaces: the analyzer must
# only split on whitespace. A server has the ``whitespace`` tokenizer; Milvus Lite knows only
# ``standard`` (a ``\w+`` split), which splits these terms identically (each is a run of
# Unicode letters and digits, see docgraph.text).
SERVER_ANALYZER: dict[str, Any] = {"tokenizer": "whitespace"}
LITE_ANALYZER: dict[str, Any] = {"tokenizer": "standard"}


def is_lite_uri(uri: str) -> bool:
    """Whether ``uri`` names a Milvus Lite file (``*.db``) rather than a server."""
    return uri.endswith(".db")


class MilvusChunkIndex:
    """Dense (HNSW, cosine) and lexical (BM25 Function) search in one Milvus collection,
    kept in step with a catalog through its change feed. Thread-safe; syncs are serialized."""

    def __init__(
        self,
        catalog: StoreCatalog,
        feed: ChangeFeed,
        dimension: int,
        uri: str,
        *,
        collection: str = "docgraph_chunks",
        token: str = "",
        consistency_level: str = "Strong",
        timeout_s: float = 10.0,
    ) -> None:
        self.catalog = catalog
        self.dimension = dimension
        self.uri = uri
        self.collection = collection
        self.consistency_level = consistency_level
        self.feed = feed
        try:
            self.client = MilvusClient(uri=uri, token=token, timeout=timeout_s)
        except Exception as exc:  # MilvusException, or plain errors for unreachable servers
            raise StoreError(f"cannot connect to Milvus at {uri}: {exc}") from exc
        self._sync_lock = threading.Lock()
        self._synced_marks: tuple[int, int] | None = None
        self._live = 0
        self._milvus(self._open_collection)
        self.sync()

    @classmethod
    def over(cls, catalog: StoreCatalog, dimension: int, uri: str, *,
             collection: str = "docgraph_chunks", **options: Any) -> MilvusChunkIndex:
        """The index over ``catalog`` (SQLite or PostgreSQL), following that catalog's own
        change feed; ``options`` as for the constructor."""
        name = f"milvus:{collection}"
        feed: ChangeFeed
        if isinstance(catalog, SQLiteCatalog):
            feed = SQLiteChangeFeed(catalog, name, dimension)
        else:
            from docgraph.store.postgres.catalog import PostgresCatalog
            from docgraph.store.postgres.feed import PostgresChangeFeed

            if not isinstance(catalog, PostgresCatalog):
                raise StoreError(f"Milvus cannot follow a {type(catalog).__name__} catalog")
            feed = PostgresChangeFeed(catalog, name, dimension)
        return cls(catalog, feed, dimension, uri, collection=collection, **options)

    # -- collection -----------------------------------------------------------

    def _open_collection(self) -> None:
        cursor = self.feed.cursor()
        if self.client.has_collection(self.collection):
            info = self.client.describe_collection(self.collection)
            generation = str(info.get("properties", {}).get(GENERATION_PROPERTY, ""))
            if cursor is None or not generation or cursor.generation != generation:
                raise StoreError(
                    f"Milvus collection {self.collection!r} at {self.uri} was not built from "
                    f"the catalog {self.feed.display_name}; set [store] milvus_collection to "
                    "another name, or drop that collection if it is stale"
                )
            layout = str(info.get("properties", {}).get(LAYOUT_PROPERTY, ""))
            if _vector_dimension(info) == self.dimension and layout == TEXT_LAYOUT:
                self.client.load_collection(self.collection)
                return
            # Ours but built for another model or text layout; derived data: rebuilt below.
            self.client.drop_collection(self.collection)
        self._create_collection()

    def _create_collection(self) -> None:
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("namespace_id", DataType.INT64, is_partition_key=True)
        schema.add_field("kind", DataType.INT8)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dimension)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT_BYTES,
                         enable_analyzer=True,
                         analyzer_params=LITE_ANALYZER if is_lite_uri(self.uri)
                         else SERVER_ANALYZER)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(
            name="text_bm25", function_type=FunctionType.BM25,
            input_field_names=["text"], output_field_names=["sparse"],
        ))
        index = self.client.prepare_index_params()
        index.add_index("vector", index_type="HNSW", metric_type="COSINE", params=HNSW_PARAMS)
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                        params=BM25_PARAMS)
        generation = uuid.uuid4().hex
        self.client.create_collection(
            self.collection, schema=schema, index_params=index,
            consistency_level=self.consistency_level,
        )
        self.client.alter_collection_properties(
            self.collection,
            properties={GENERATION_PROPERTY: generation, LAYOUT_PROPERTY: TEXT_LAYOUT},
        )
        self.client.load_collection(self.collection)
        self.feed.reset(generation)

    def close(self) -> None:
        """Close the client connection."""
        self.client.close()

    # -- following the catalog ------------------------------------------------

    def sync(self) -> None:
        """Apply catalog changes since the last sync (one tiny query when there are none)."""
        marks = self.feed.marks()
        if marks == self._synced_marks:
            return
        with self._sync_lock:
            if marks == self._synced_marks:
                return
            applied = False
            while self.feed.apply_next(SYNC_BATCH, self._apply):
                applied = True
            if applied:
                # Seal what was written into segments: searches then use each segment's
                # built indexes instead of scanning the growing buffer.
                self._milvus(lambda: self.client.flush(self.collection))
            self._live = self.feed.live_chunks()
            self._synced_marks = marks

    def _apply(self, batch: FeedBatch) -> None:
        def write() -> None:
            for start in range(0, len(batch.deleted), DELETE_BATCH):
                self.client.delete(self.collection, ids=batch.deleted[start:start + DELETE_BATCH])
            if batch.rows:
                self.client.upsert(self.collection, data=[
                    {"id": r.rowid, "namespace_id": r.namespace_id, "kind": r.kind,
                     "vector": r.vector.tolist(), "text": analyzed_text(r.text)}
                    for r in batch.rows
                ])
        self._milvus(write)

    def for_query(self, readers: frozenset[str] | None = None) -> MilvusChunkIndex:
        """This index (each search follows the catalog's feed itself). ``readers`` is not
        applied here: Milvus holds no permission sets, so a governed caller's hits are
        filtered after ranking (the governed search widens and asks again while fewer than
        ``k`` remain)."""
        return self

    def pending_counts(self, namespaces: Iterable[str]) -> dict[str, int]:
        """Chunks of ``namespaces``' open documents stored but not embedded yet, per
        namespace (the catalog's count; see :meth:`ChunkIndex.pending_counts`)."""
        return self.catalog.pending_counts(namespaces, open_only=True)

    def __len__(self) -> int:
        """Live chunks (all namespaces and kinds) as of the last sync."""
        self.sync()
        return self._live

    # -- search ---------------------------------------------------------------

    def dense_search(
        self, vector: Vector, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of ``kind`` in ``namespaces`` by cosine similarity (HNSW)."""
        expression = self._filter(namespaces, kind)
        if expression is None or k <= 0:
            return []
        self.sync()
        limit = min(k, MAX_TOPK)
        hits = self._milvus(lambda: self.client.search(
            self.collection, data=[_floats(vector)], anns_field="vector", limit=limit,
            filter=expression, output_fields=["id"],
            search_params={"metric_type": "COSINE", "params": {"ef": max(limit, HNSW_MIN_EF)}},
        ))
        return _rows(hits[0], lexical=False)

    def lexical_search(
        self, text: str, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of ``kind`` in ``namespaces`` by BM25 over breadcrumb + text."""
        expression = self._filter(namespaces, kind)
        query = _query_text(text)
        if expression is None or query is None or k <= 0:
            return []
        self.sync()
        hits = self._milvus(lambda: self.client.search(
            self.collection, data=[query], anns_field="sparse", limit=min(k, MAX_TOPK),
            filter=expression, output_fields=["id"], search_params={"metric_type": "BM25"},
        ))
        return _rows(hits[0], lexical=True)

    def lexical_scores(
        self, text: str, rowids: Sequence[int], namespaces: frozenset[str]
    ) -> dict[int, float]:
        """BM25 scores of ``text`` for the given chunks only (absent: no term matched)."""
        ns_ids = self._namespace_ids(namespaces)
        ids = list(dict.fromkeys(int(r) for r in rowids))
        query = _query_text(text)
        if not ns_ids or not ids or query is None:
            return {}
        self.sync()
        expression = f"namespace_id in {_int_list(ns_ids)} and id in {_int_list(ids)}"
        hits = self._milvus(lambda: self.client.search(
            self.collection, data=[query], anns_field="sparse", limit=min(len(ids), MAX_TOPK),
            filter=expression, output_fields=["id"], search_params={"metric_type": "BM25"},
        ))
        return {r.rowid: r.score for r in _rows(hits[0], lexical=True)}

    def hybrid_search(
        self, text: str, vector: Vector, k: int, namespaces: frozenset[str], *,
        depth: int = 100, rrf_k: int = 60, kind: ChunkKind = "text",
    ) -> list[ScoredRow]:
        """Top ``k`` chunks by Milvus' own RRF (``RRFRanker(rrf_k)``) of a dense and a BM25
        search, each ``depth`` deep, in one request. Scores are the fused RRF scores; the
        per-lane similarities are not returned (see :class:`MilvusChunkIndex` docs)."""
        expression = self._filter(namespaces, kind)
        if expression is None or k <= 0:
            return []
        query = _query_text(text)
        depth = min(max(depth, k), MAX_TOPK)
        requests = [AnnSearchRequest(
            data=[_floats(vector)], anns_field="vector", limit=depth, expr=expression,
            param={"metric_type": "COSINE", "params": {"ef": max(depth, HNSW_MIN_EF)}},
        )]
        if query is not None:
            requests.append(AnnSearchRequest(
                data=[query], anns_field="sparse", limit=depth, expr=expression,
                param={"metric_type": "BM25"},
            ))
        self.sync()
        hits = self._milvus(lambda: self.client.hybrid_search(
            self.collection, requests, ranker=RRFRanker(rrf_k), limit=min(k, MAX_TOPK),
            output_fields=["id"],
        ))
        return _rows(hits[0], lexical=False)

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Unit vectors of the given chunks, read from the catalog (the system of record
        holds the same vectors; absent: deleted)."""
        return self.feed.vectors(rowids)

    # -- helpers --------------------------------------------------------------

    def _namespace_ids(self, namespaces: frozenset[str]) -> list[int]:
        return sorted(self.catalog.namespace_ids(require_namespaces(namespaces)).values())

    def _filter(self, namespaces: frozenset[str], kind: ChunkKind) -> str | None:
        """The pre-filter expression, from catalog ids and a kind code only (None: no
        allowed namespace exists, so nothing may match)."""
        ns_ids = self._namespace_ids(namespaces)
        if kind not in CHUNK_KINDS:
            raise InvalidQuery(f"kind must be one of {CHUNK_KINDS}, got {kind!r}")
        if not ns_ids:
            return None
        return f"namespace_id in {_int_list(ns_ids)} and kind == {CHUNK_KINDS.index(kind)}"

    def _milvus(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except MilvusException as exc:
            raise StoreError(f"Milvus ({self.uri}, {self.collection}): {exc.message}") from exc


def _int_list(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _floats(vector: Vector) -> list[float]:
    return [float(x) for x in np.asarray(vector, dtype=np.float32)]


def analyzed_text(text: str) -> str:
    """What the ``text`` field stores for a chunk's breadcrumb + text: its indexed terms
    (:func:`~docgraph.text.index_terms`, with repeats), then one
    :data:`STOPWORD_FILLER` per stopword, joined by single spaces and cut at a term boundary
    to fit a VARCHAR field.

    The embedded BM25 does not index stopwords but counts them in a chunk's length; Milvus
    takes the length from the terms it sees. The filler keeps the lengths equal, and since it
    is not a word it never occurs in a query, so it changes no score but through the length."""
    terms, length = index_terms(text)
    joined = " ".join(terms + [STOPWORD_FILLER] * (length - len(terms)))
    if len(joined.encode("utf-8")) <= MAX_TEXT_BYTES:
        return joined
    head = _clip_utf8(joined, MAX_TEXT_BYTES + 1).rsplit(" ", 1)[0]
    return head if len(head.encode("utf-8")) <= MAX_TEXT_BYTES else ""


def _query_text(text: str) -> str | None:
    """The query's terms (:func:`~docgraph.text.query_terms`: distinct, stemmed,
    no stopwords) joined by spaces, the BM25 query data; None when it has none."""
    terms = query_terms(text)
    return " ".join(terms) if terms else None


def _rows(hits: Any, *, lexical: bool) -> list[ScoredRow]:
    """Hits as rows, best first, ties by row id. BM25 hits carry a positive score on a
    server and its negation on Milvus Lite: the magnitude is the BM25 score either way."""
    rows = [
        ScoredRow(int(h["id"]), abs(float(h["distance"])) if lexical else float(h["distance"]))
        for h in hits
    ]
    rows.sort(key=lambda r: (-r.score, r.rowid))
    return rows


def _vector_dimension(info: dict[str, Any]) -> int | None:
    for field in info.get("fields", []):
        if field.get("name") == "vector":
            return int(field.get("params", {}).get("dim", 0))
    return None


def _clip_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes at a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")
