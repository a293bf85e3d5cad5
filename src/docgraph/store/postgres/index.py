"""The PostgreSQL store: catalog tables and a chunk index in one database (pgvector + BM25).

* Dense: a namespace filter that allows at most :data:`EXACT_SCAN_ROWS` chunks is answered
  by an exact scan of those rows (counted per namespace and kind by a trigger), because a
  graph index loses recall when most of what it visits is filtered out. Broader queries use
  pgvector HNSW (cosine) over ``embedding::halfvec(d)``, the hits re-scored in full
  precision. Filtered queries run with
  ``hnsw.iterative_scan = relaxed_order`` (results re-sorted exactly), so a namespace filter
  keeps scanning the graph until ``k`` rows pass it; should the scan still stop short
  (``hnsw.max_scan_tuples``), the query is answered exactly from the namespace's rows, so a
  selective filter can never return fewer than ``k`` rows that exist.
* Lexical: Okapi BM25 (the embedded index's k1, b and IDF, breadcrumb and text
  weighted alike) computed in SQL from term statistics that triggers keep in the same transaction
  as the chunk write (see :mod:`docgraph.store.postgres.schema`), per chunk kind: a search of
  text chunks is scored with the text chunks' document frequencies, count and average length
  only, a search of community reports with the reports'. PostgreSQL's ``ts_rank`` has no IDF,
  so it is not used.
* Every value, query text included, is a bound parameter; the only interpolated values are
  integers (the vector dimension) and fixed identifiers.

Requires the ``postgres`` extra (psycopg 3, pgvector) and a server with the ``vector``
extension (0.8 or newer for iterative scans).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from docgraph.config import DEFAULT_PG_EF_SEARCH
from docgraph.errors import StoreError
from docgraph.languages import ENGLISH, query_terms_for
from docgraph.model import (
    ChunkKind,
    ScoredRow,
    Vector,
)
from docgraph.store.base import (
    require_namespaces,
)
from docgraph.store.lexical import IDF_FLOOR as BM25_IDF_FLOOR
from docgraph.store.lexical import K1 as BM25_K1
from docgraph.store.lexical import B as BM25_B
from docgraph.store.postgres.catalog import PostgresCatalog, _array
from docgraph.store.postgres.pending import CHUNKS_AND_PENDING_SQL, SeenPending
from docgraph.store.postgres.replicas import ReplicaCatalog
from docgraph.store.postgres.schema import (
    TS_CONFIG,
)
from docgraph.text import plain_query_words

# A dense search whose namespaces hold at most this many chunks of the kind scans them
# exactly instead of walking the HNSW graph: ~20k 384-d vectors are read in about the time
# an HNSW query takes here (bench/backends.py), and the answer is exact.
EXACT_SCAN_ROWS = 20_000

FULL_SCORE_POSTINGS = 20_000
# ... and only while the essential terms hold at most this share of the query's postings.
PRUNE_SHARE = 0.5

# BM25 of one posting, given the term's idf (w.idf) and the corpus' average length.
_BM25_TERM = ("w.idf * p.tf * (%(k1)s + 1)"
              " / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.doc_len / %(avgdl)s))")
_QUERY_TERMS = ("SELECT * FROM unnest(%(terms)s::text[], %(idf)s::float8[])"
                " AS w(term, idf)")

# A caller's permission filter, applied before ranking (None as ``readers``: no filter). Its
# first test runs once per statement (an InitPlan on the small index of restricted
# documents, migration 20): namespaces without one skip the per-chunk check.
_NO_RESTRICTED = ("NOT EXISTS (SELECT 1 FROM documents rd0 WHERE rd0.access IS NOT NULL"
                  " AND rd0.namespace_id = ANY(%(ns)s))")
_READABLE_DOCUMENT = ("NOT EXISTS (SELECT 1 FROM documents rd WHERE rd.id = {document}"
                      " AND rd.access IS NOT NULL AND NOT rd.access ?| %(readers)s::text[])")
# ... of a chunk row (``chunks`` in the statement) and of a chunk id (the postings).
_READABLE_ROW = (f" AND (%(readers)s::text[] IS NULL OR {_NO_RESTRICTED}"
                 f" OR {_READABLE_DOCUMENT.format(document='chunks.document_id')})")
_READABLE_ID = (f"%(readers)s::text[] IS NULL OR {_NO_RESTRICTED}"
                " OR NOT EXISTS (SELECT 1 FROM chunks rc JOIN documents rd"
                " ON rd.id = rc.document_id WHERE rc.id = p.chunk_id AND rd.access IS NOT NULL"
                " AND NOT rd.access ?| %(readers)s::text[])")

# Every chunk that holds a query term (and that the caller may read), scored.
_BM25_ALL_SQL = (
    f"WITH w AS ({_QUERY_TERMS})"
    f" SELECT p.chunk_id, sum({_BM25_TERM}) AS score"
    " FROM w JOIN postings p ON p.term = w.term"
    " WHERE p.namespace_id = ANY(%(ns)s) AND p.kind = %(kind)s"
    f" GROUP BY p.chunk_id HAVING {_READABLE_ID}"
    " ORDER BY score DESC, p.chunk_id LIMIT %(k)s")

# MaxScore: candidates are the chunks with an essential term (partial score ``ps``); the k
# best of them by ``ps``, fully scored, give a lower bound ``theta`` on the k-th best score;
# a candidate is fully scored only if ``ps`` plus the bound ``rest`` on the other terms'
# contribution can reach ``theta``. Those survivors' other terms are looked up by primary key
# when that reads fewer entries than scanning the other terms' postings (``probe_limit``),
# else the other terms' postings are scanned once and joined. The last row is (NULL, theta);
# when theta <= rest no candidate is scored (the caller widens the plan).
_BM25_OTHER_TERMS = (
    f"SELECT sum({_BM25_TERM}) AS s FROM w JOIN postings p ON p.term = w.term"
    " AND p.namespace_id = c.namespace_id AND p.kind = %(kind)s AND p.chunk_id = c.chunk_id"
    " WHERE NOT w.essential")
_BM25_MAXSCORE_SQL = (
    "WITH w AS (SELECT * FROM unnest(%(terms)s::text[], %(idf)s::float8[],"
    "   %(essential)s::bool[]) AS w(term, idf, essential)),"
    f" part AS MATERIALIZED (SELECT p.chunk_id, p.namespace_id, sum({_BM25_TERM}) AS ps"
    "   FROM w JOIN postings p ON p.term = w.term"
    "   WHERE w.essential AND p.namespace_id = ANY(%(ns)s) AND p.kind = %(kind)s"
    f"   GROUP BY p.chunk_id, p.namespace_id HAVING {_READABLE_ID}),"
    " lead AS (SELECT c.ps + coalesce(o.s, 0) AS score"
    "   FROM (SELECT * FROM part ORDER BY ps DESC, chunk_id LIMIT %(k)s) c"
    f"   LEFT JOIN LATERAL ({_BM25_OTHER_TERMS}) o ON true),"
    " bound AS (SELECT CASE WHEN count(*) < %(k)s THEN %(theta)s::float8"
    "   ELSE greatest(min(score), %(theta)s::float8) END AS theta FROM lead),"
    " survivors AS MATERIALIZED (SELECT c.* FROM part c CROSS JOIN bound"
    "   WHERE bound.theta > %(rest)s AND c.ps + %(rest)s >= bound.theta),"
    " probing AS (SELECT count(*) <= %(probe_limit)s AS cheap FROM survivors),"
    f" other AS (SELECT p.chunk_id, sum({_BM25_TERM}) AS s"
    "   FROM w JOIN postings p ON p.term = w.term"
    "   WHERE NOT w.essential AND p.namespace_id = ANY(%(ns)s) AND p.kind = %(kind)s"
    "   GROUP BY p.chunk_id),"
    " scored AS ("
    "   SELECT c.chunk_id, c.ps + coalesce(o.s, 0) AS score FROM survivors c"
    f"   LEFT JOIN LATERAL ({_BM25_OTHER_TERMS}) o ON true"
    "   WHERE (SELECT cheap FROM probing)"
    "   UNION ALL"
    "   SELECT c.chunk_id, c.ps + coalesce(o.s, 0) FROM survivors c"
    "   LEFT JOIN other o ON o.chunk_id = c.chunk_id WHERE NOT (SELECT cheap FROM probing))"
    " (SELECT chunk_id, score FROM scored ORDER BY score DESC, chunk_id LIMIT %(k)s)"
    " UNION ALL SELECT NULL, theta FROM bound")
# A primary-key lookup costs about this many scanned postings (bench/backends.py, 1M chunks).
PROBE_COST = 8


@dataclass(frozen=True)
class TermWeight:
    """A query term with its document frequency, idf and the most one posting of it can add
    to a chunk's BM25 score (``idf * (k1 + 1)``: the term-frequency factor is below it)."""

    term: str
    df: int
    idf: float

    @property
    def bound(self) -> float:
        return self.idf * (BM25_K1 + 1)


def query_term_weights(rows: Iterable[tuple[str, int]], n: float) -> list[TermWeight]:
    """The query's known terms, rarest (highest idf) first; BM25's idf as the embedded index
    computes it (``ln((N - df + 0.5) / (df + 0.5))``, floored)."""
    weights = [TermWeight(str(term), int(df),
                          max(math.log((n - df + 0.5) / (df + 0.5)), BM25_IDF_FLOOR))
               for term, df in rows if int(df) > 0]
    return sorted(weights, key=lambda w: (-w.idf, w.term))


def bm25_plan(weights: Sequence[TermWeight], k: int, theta: float, at_least: int = 1) -> int:
    """How many of the rarest terms to treat as essential (MaxScore): with a known lower
    bound ``theta`` on the k-th best score, the fewest whose remaining terms' bounds sum below
    it; before one is known, an estimate (see the code). Never fewer than ``at_least``;
    ``len(weights)`` means score everything (also when the essential terms would hold over
    :data:`PRUNE_SHARE` of the postings)."""
    essential = len(weights)
    if theta > float("-inf"):
        essential = next((e for e in range(at_least, len(weights))
                          if sum(w.bound for w in weights[e:]) < theta), len(weights))
    else:
        # No bound yet: the fewest terms that hold k postings and whose idfs together
        # (a chunk holding each once, of average length, scores about that) exceed the
        # others' bounds; else pruning is hopeless and everything is scored at once.
        for count in range(at_least, len(weights)):
            chosen = weights[:count]
            if (sum(w.df for w in chosen) >= k and sum(w.idf for w in chosen)
                    > sum(w.bound for w in weights[count:])):
                essential = count
                break
    # Pruning pays only when the terms left out hold most of the postings.
    if sum(w.df for w in weights[:essential]) > sum(w.df for w in weights) * PRUNE_SHARE:
        return len(weights)
    return essential


def _scored_rows(rows: Iterable[Sequence[Any]]) -> list[ScoredRow]:
    return [ScoredRow(int(r[0]), float(r[1])) for r in rows]


class PostgresChunkIndex:
    """Dense (pgvector HNSW, cosine) and lexical (BM25 from term statistics) search over a
    :class:`PostgresCatalog`. Stateless: every write is visible to the next query."""

    def __init__(self, catalog: PostgresCatalog, dimension: int,
                 ef_search: int = DEFAULT_PG_EF_SEARCH,
                 readers: frozenset[str] | None = None,
                 seen_pending: SeenPending | None = None) -> None:
        self.catalog = catalog
        self.dimension = int(dimension)
        self.ef_search = ef_search
        #: The principals whose readable chunks every search ranks (None: all chunks).
        self.readers = readers
        #: Pending counts read by the dense searches (shared with :meth:`for_query`'s).
        self.seen_pending = seen_pending if seen_pending is not None else SeenPending()

    def _namespace_ids(self, namespaces: frozenset[str]) -> list[int]:
        return sorted(self.catalog.namespace_ids(require_namespaces(namespaces)).values())

    def for_query(self, readers: frozenset[str] | None = None) -> PostgresChunkIndex:
        """This index (it answers every search from the database as it is then), or, with
        ``readers``, one whose searches rank only the chunks they may read (the permission
        check is part of each statement, before its ``ORDER BY ... LIMIT``)."""
        if readers is None:
            return self
        return PostgresChunkIndex(self.catalog, self.dimension, self.ef_search,
                                  frozenset(readers), self.seen_pending)

    def _readers(self) -> list[str] | None:
        return None if self.readers is None else sorted(self.readers)

    def pending_counts(self, namespaces: Iterable[str]) -> dict[str, int]:
        """Chunks of ``namespaces``' open documents stored but not embedded yet, per
        namespace (see :meth:`ChunkIndex.pending_counts`): as the dense search of the
        answer read them with its first statement (:class:`SeenPending`), else the
        catalog's count."""
        names = set(namespaces)
        seen = self.seen_pending.take(names, self._writes())
        if seen is not None:
            return seen
        return self.catalog.pending_counts(names, open_only=True)

    def _writes(self) -> int:
        """This process's committed writes (a replica catalog's: its primary's), which move
        the pending counts."""
        catalog = self.catalog
        return (catalog.primary if isinstance(catalog, ReplicaCatalog) else catalog).writes

    def __len__(self) -> int:
        """Chunks in the index, all namespaces and kinds (kept by the statistics trigger)."""
        row = self.catalog.connection().execute(
            "SELECT n FROM corpus_stats WHERE id = 1").fetchone()
        return int(row[0]) if row else 0

    def dense_search(
        self, vector: Vector, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of the allowed namespaces by cosine similarity: exact when they
        hold at most :data:`EXACT_SCAN_ROWS` chunks of ``kind`` or when the HNSW scan
        (iterative, relaxed order) stops short of ``k``; HNSW otherwise."""
        ns_ids = self._namespace_ids(namespaces)
        if not ns_ids or k <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32)
        if query.shape != (self.dimension,):
            raise StoreError(f"query vector has shape {query.shape}, the index {self.dimension}")
        d = self.dimension
        writes = self._writes()
        # the pending chunks of the namespaces with the first statement, unless an earlier
        # search of this answer read them (what the answer reports: see SeenPending)
        count_pending = kind == "text" and self.seen_pending.stale(namespaces, writes)
        with self.catalog.unmarked_transaction() as db:  # a read: nothing to wait for
            if count_pending:
                allowed, pending = db.execute(CHUNKS_AND_PENDING_SQL,
                                              {"ns": ns_ids, "kind": kind}).fetchone()
                self.seen_pending.note(namespaces, pending, writes)
            else:
                allowed = db.execute(
                    "SELECT coalesce(sum(n), 0) FROM chunk_counts"
                    " WHERE namespace_id = ANY(%s) AND kind = %s",
                    (ns_ids, kind)).fetchone()[0]
            rows: list[Any] = []
            if int(allowed) > EXACT_SCAN_ROWS:
                db.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
                           " set_config('hnsw.ef_search', %s, true)",
                           (str(min(1000, max(self.ef_search, k))),))
                # The graph walk compares half-precision vectors; the hits are re-scored
                # (and re-sorted) from the full-precision column.
                rows = db.execute(
                    "WITH hits AS MATERIALIZED ("
                    " SELECT id, embedding FROM chunks"
                    f" WHERE namespace_id = ANY(%(ns)s) AND kind = %(kind)s{_READABLE_ROW}"
                    " AND embedding IS NOT NULL"
                    f" ORDER BY embedding::halfvec({d}) <=> %(q)s::halfvec({d}) LIMIT %(k)s)"
                    " SELECT id, embedding <=> %(q)s::vector AS distance FROM hits"
                    " ORDER BY distance, id",
                    {"q": query, "ns": ns_ids, "kind": kind, "k": k,
                     "readers": self._readers()},
                ).fetchall()
            if len(rows) < k:
                # A selective filter, or the HNSW scan stopped short: exact. (Ordering by the
                # bare column does not match the HNSW expression index.)
                rows = db.execute(
                    "SELECT id, embedding <=> %(q)s::vector AS distance FROM chunks"
                    f" WHERE namespace_id = ANY(%(ns)s) AND kind = %(kind)s{_READABLE_ROW}"
                    " AND embedding IS NOT NULL"
                    " ORDER BY distance, id LIMIT %(k)s",
                    {"q": query, "ns": ns_ids, "kind": kind, "k": k,
                     "readers": self._readers()},
                ).fetchall()
        return [ScoredRow(int(r[0]), 1.0 - float(r[1])) for r in rows]

    def lexical_search(
        self, text: str, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of the allowed namespaces by BM25 over breadcrumb + text.

        Exact, with MaxScore pruning (see :func:`bm25_plan`): when the query's postings are
        many, only the chunks holding one of its rarer ("essential") terms are candidates;
        the common terms are looked up for the candidates that can still reach the top
        ``k``. All statements read one snapshot (repeatable read). Document frequencies,
        the chunk count and the average length are those of ``kind``'s chunks."""
        ns_ids = self._namespace_ids(namespaces)
        if not ns_ids or k <= 0:
            return []
        terms = plain_query_words(text)  # English: PostgreSQL's analysis, as indexed
        # every other language of the namespaces: docgraph's (the chunks' ``lexical``)
        languages = self.catalog.namespace_languages(ns_ids) - {ENGLISH}
        own = query_terms_for(text, languages) if languages else []
        if not terms and not own:
            return []
        with self.catalog.unmarked_transaction() as db:  # a read: nothing to wait for
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            corpus = db.execute(
                "SELECT n::float8, greatest(total_len::float8 / greatest(n, 1), 1.0)"
                " FROM corpus_kind_stats WHERE kind = %s", (kind,)).fetchone()
            if corpus is None:
                return []
            n, avgdl = corpus
            weights = query_term_weights(db.execute(
                "SELECT t.term, t.df FROM (SELECT u.lexeme AS term"
                f"   FROM unnest(to_tsvector('{TS_CONFIG}'::regconfig, %s)) AS u"
                "   UNION SELECT unnest(%s::text[])) q"
                " JOIN terms t ON t.kind = %s AND t.term = q.term",
                (" ".join(terms), own, kind)).fetchall(), float(n))
            if not weights:
                return []
            params: dict[str, Any] = {
                "terms": [w.term for w in weights], "idf": [w.idf for w in weights],
                "ns": ns_ids, "kind": kind, "k": k, "k1": BM25_K1, "b": BM25_B,
                "avgdl": float(avgdl), "readers": self._readers()}
            if sum(w.df for w in weights) <= FULL_SCORE_POSTINGS:
                return _scored_rows(db.execute(_BM25_ALL_SQL, params).fetchall())
            theta = float("-inf")
            essential = bm25_plan(weights, k, theta)
            while essential < len(weights):
                others = weights[essential:]
                rest = sum(w.bound for w in others) * (1 + 1e-9) + 1e-12
                rows = db.execute(_BM25_MAXSCORE_SQL, {
                    **params, "essential": [i < essential for i in range(len(weights))],
                    "rest": rest, "theta": theta,
                    "probe_limit": sum(w.df for w in others) // (PROBE_COST * len(others)),
                }).fetchall()
                theta = max(theta, float(rows[-1][1]))  # the last row carries the bound
                if theta > rest:  # no chunk without an essential term can reach the top k
                    return _scored_rows(rows[:-1])
                essential = bm25_plan(weights, k, theta, essential + 1)
            return _scored_rows(db.execute(_BM25_ALL_SQL, params).fetchall())

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Unit vectors of the given chunks (absent: deleted)."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        if not ids:
            return {}
        rows = self.catalog.connection().execute(
            "SELECT id, embedding FROM chunks WHERE id = ANY(%s)"
            " AND embedding IS NOT NULL", (ids,)  # a pending chunk has no vector yet
        ).fetchall()
        return {int(i): _array(v) for i, v in rows}
