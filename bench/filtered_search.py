"""Filtering before ranking (issue 32): a caller who may read 100 %, 10 % or 1 % of the chunks.

    python bench/filtered_search.py [--n 100000] [--queries 200] [--rounds 3] [--db PATH]
        [--name filtered_search_<n>]

The synthetic store of ``bench/store_scale.py`` (built once into ``--db`` when missing; the
default is its own cache, since this benchmark writes permission sets into it), with every
document given a permission set through the catalog's ``set_document_access``: a hash of
the document number puts 1 % of the documents in ``{group:one, group:ten}``, 9 % in
``{group:ten}`` and the rest in ``{group:rest}``. Three callers then search the whole
store: ``all`` (every group: no filter), ``ten`` (``group:ten``: 10 % of the chunks) and
``one`` (``group:one``: 1 %).

**Quality** (permissions set), per caller and query: the dense lane's top 10 compared with
the exact top 10 over the chunks the caller may read (exact cosine over the stored vectors,
computed here by a scan of the catalog), and the BM25 lane's top 10 compared with the
unfiltered ranking cut to the readable chunks (the same scores, readable rows only: BM25 is
exact; rows tied at the cut may differ); whether the hybrid search filled k.

**Latency**, in alternating phases (``--rounds``, the order flipping each round): ``open``,
no document has a permission set (the sets cleared through the catalog), and
``restricted``, the sets above. In each, per query and caller (callers in rotating order):
the hybrid search of the product (:class:`HybridSearcher`, k = 10, the caller's principals
as ``readers``) and the governed ``lookup_knowledge`` tool (``DocgraphTools`` over the same
index, callers granted every namespace, groups declared by the policy), timed. Also: the
seconds to read the restricted rows after a change (once per build) and to place them in
the lanes' arrays (once per snapshot).

Reports p50/p95 of both per phase and caller, the ratio of each to the same caller with no
permissions (``open``), dense recall@10, BM25 exactness, k filled; the load average before
and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from backends import CHUNKS_PER_DOC, DIM, EVERYTHING, FixedQueries, K  # noqa: E402
from common import log, write_result  # noqa: E402
from docgraph.app import DocGraph  # noqa: E402
from docgraph.config import IndexSettings, load_settings  # noqa: E402
from docgraph.governance import (  # noqa: E402
    Caller,
    Governance,
    RoleAssignment,
    StaticEntitlements,
)
from docgraph.retrieve.hybrid import HybridSearcher  # noqa: E402
from docgraph.serve.tools import DocgraphTools  # noqa: E402
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog  # noqa: E402
from docgraph.store.sqlite.vectors import decode_vectors  # noqa: E402
from store_scale import build, truth_path  # noqa: E402

NAMESPACES = EVERYTHING
ONE, TEN, REST = "group:one", "group:ten", "group:rest"
CALLERS: dict[str, frozenset[str]] = {
    "all": frozenset({ONE, TEN, REST}), "ten": frozenset({TEN}), "one": frozenset({ONE})}
#: The user each caller is, and the groups the policy declares for it.
USERS = {"all": "u_all", "ten": "u_ten", "one": "u_one"}
MEMBERS = {"one": ["u_all", "u_one"], "ten": ["u_all", "u_ten"], "rest": ["u_all"]}
SCAN_ROWS = 50_000


class QueryVectors(FixedQueries):
    """The store's query vectors by text; a text the lookup rewrote gets the vector of the
    query it came from (counted), so no model runs in the timing."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        super().__init__(vectors)
        self.current = ""
        self.rewritten = 0

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.vectors:
            self.rewritten += 1
            return self.vectors[self.current]
        return self.vectors[text]


def share(document: int) -> int:
    """The document's bucket of 100 (a multiplicative hash: spread over the whole store)."""
    return (document * 2_654_435_761) % 2**32 % 100


def access_of(document: int) -> frozenset[str]:
    bucket = share(document)
    return frozenset({ONE, TEN}) if bucket == 0 else (
        frozenset({TEN}) if bucket < 10 else frozenset({REST}))


def document_number(path: str) -> int:
    return int(path.removeprefix("doc-").removesuffix(".md"))


def assign_access(catalog: SQLiteCatalog) -> dict[str, Any]:
    """Give every document its permission set (idempotent); seconds and counts."""
    rows = catalog.connection().execute("SELECT id, path, access FROM documents").fetchall()
    changes = {int(i): access_of(document_number(p)) for i, p, a in rows
               if catalog.dialect.access_value(a) != access_of(document_number(p))}
    t0 = time.perf_counter()
    for start in range(0, len(changes), 2000):
        part = dict(list(changes.items())[start:start + 2000])
        catalog.set_document_access(part)
    return {"documents": len(rows), "changed": len(changes),
            "set_access_s": round(time.perf_counter() - t0, 1)}


def clear_access(catalog: SQLiteCatalog) -> None:
    """No document has a permission set (the ``open`` phase)."""
    rows = catalog.connection().execute(
        "SELECT id FROM documents WHERE access IS NOT NULL").fetchall()
    ids = [int(r[0]) for r in rows]
    for start in range(0, len(ids), 2000):
        catalog.set_document_access(dict.fromkeys(ids[start:start + 2000]))


def exact_truth(catalog: SQLiteCatalog, qvectors: np.ndarray
                ) -> dict[str, list[set[int]]]:
    """Per caller and query, the row ids of the exact cosine top ``K`` over the chunks the
    caller may read (the stored vectors, every row scanned)."""
    best = {name: (np.full((len(qvectors), K), -np.inf, np.float32),
                   np.full((len(qvectors), K), -1, np.int64)) for name in CALLERS}
    cursor = catalog.connection().execute(
        "SELECT c.id, c.vector, d.path FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE c.kind = 'text' ORDER BY c.id")
    while batch := cursor.fetchmany(SCAN_ROWS):
        ids = np.array([r[0] for r in batch], np.int64)
        vectors = decode_vectors([r[1] for r in batch], DIM, catalog.path)
        buckets = np.array([share(document_number(r[2])) for r in batch])
        readable = {"all": np.ones(len(batch), bool), "ten": buckets < 10, "one": buckets == 0}
        sims = qvectors @ vectors.T
        for name, mask in readable.items():
            if not mask.any():
                continue
            part = sims[:, mask]
            take = min(K, part.shape[1])
            top = np.argpartition(-part, take - 1, axis=1)[:, :take]
            scores, where = best[name]
            scores = np.concatenate([scores, np.take_along_axis(part, top, 1)], axis=1)
            where = np.concatenate([where, ids[mask][top]], axis=1)
            keep = np.argsort(-scores, axis=1, kind="stable")[:, :K]
            best[name] = (np.take_along_axis(scores, keep, 1), np.take_along_axis(where, keep, 1))
    return {name: [set(row.tolist()) for row in where] for name, (_, where) in best.items()}


def percentile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 2)


def quality(catalog: SQLiteCatalog, index: EmbeddedChunkIndex, searcher: HybridSearcher,
            qtexts: list[str], qvectors: np.ndarray,
            filters: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Dense recall@10 against the exact filtered scan, BM25 exactness and k filled, per
    caller (permissions set)."""
    log("exact filtered truth (scan of the stored vectors)")
    exact = exact_truth(catalog, qvectors)
    snap = index.postings._snap  # no write happens during this pass: one snapshot
    position = dict(zip(snap.rowids[: snap.n].tolist(), range(snap.n), strict=True))
    masks = {name: np.ones(snap.n, bool) if keep is None else keep(snap.rowids, snap.n)
             for name, keep in filters.items()}
    out: dict[str, dict[str, float]] = {}
    for name, principals in CALLERS.items():
        found = exact_bm25 = filled = 0
        view = index.for_query(principals)
        for i, (text, vector) in enumerate(zip(qtexts, qvectors, strict=True)):
            hits = searcher.search(text, namespaces=NAMESPACES, k=K, readers=principals)
            filled += len(hits) == K
            dense = {r.rowid for r in view.dense_search(vector, K, NAMESPACES)}
            found += len(dense & exact[name][i])
            lexical = view.lexical_search(text, K, NAMESPACES)
            everything = index.for_query().lexical_search(text, len(index), NAMESPACES)
            mask = masks[name]
            allowed = [r.score for r in everything if mask[position[r.rowid]]][:K]
            same = (np.allclose([r.score for r in lexical], allowed, rtol=1e-9)
                    if len(lexical) == len(allowed) else False)
            exact_bm25 += same and all(mask[position[r.rowid]] for r in lexical)
        out[name] = {"dense_recall_at_10": round(found / (K * len(qtexts)), 4),
                     "bm25_exact": round(exact_bm25 / len(qtexts), 3),
                     "k_filled": round(filled / len(qtexts), 3)}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", type=Path, default=None)
    parser.add_argument("--name", default=None, help="result name (filtered_search_<n>)")
    args = parser.parse_args(argv)
    db = args.db or BENCH_DIR / ".cache" / f"filtered_{args.n}" / "catalog.db"
    built: dict[str, Any] = {}
    if not db.exists():
        log(f"building {args.n} synthetic chunks into {db}")
        built = build(db, args.n, args.queries)
    truth = np.load(truth_path(db))
    qtexts = [str(t) for t in truth["qtexts"]][: args.queries]
    qvectors = truth["qvectors"][: args.queries]
    catalog = SQLiteCatalog(db)
    assigned = assign_access(catalog)
    log(f"permission sets: {assigned}")
    load_before = os.getloadavg()

    t0 = time.perf_counter()
    index = EmbeddedChunkIndex(catalog, DIM)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    restricted = index.restricted()
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    filters = {name: restricted.row_filter(p) for name, p in CALLERS.items()}
    for keep in filters.values():
        if keep is not None:  # place the rows in each lane's arrays once
            keep(index.dense._snap.rowids, index.dense._snap.n)
            keep(index.postings._snap.rowids, index.postings._snap.n)
    place_s = time.perf_counter() - t0
    readable_share = {
        name: (1.0 if keep is None else round(float(keep(
            index.dense._snap.rowids, index.dense._snap.n).mean()), 4))
        for name, keep in filters.items()}
    log(f"restricted rows: {len(restricted)} read in {read_s:.2f} s, placed in {place_s:.2f} s;"
        f" readable shares {readable_share}")
    embedder = QueryVectors(dict(zip(qtexts, qvectors, strict=True)))
    searcher = HybridSearcher(catalog, index, embedder, IndexSettings())
    checked = quality(catalog, index, searcher, qtexts, qvectors, filters)

    graph = DocGraph(load_settings(store={"path": db}), embedder)
    grants = [RoleAssignment(user, "agent", "*") for user in USERS.values()]
    tools = DocgraphTools(Governance(graph, StaticEntitlements(grants, MEMBERS)))
    callers = {name: Caller(user) for name, user in USERS.items()}

    def hybrid(name: str, text: str) -> None:
        searcher.search(text, namespaces=NAMESPACES, k=K, readers=CALLERS[name])

    def lookup(name: str, text: str) -> None:
        embedder.current = text
        tools.call("lookup_knowledge", callers[name], {"query": text})

    times: dict[tuple[str, str, str], list[float]] = {}
    names = list(CALLERS)
    for round_ in range(args.rounds):
        for phase in (("open", "restricted") if round_ % 2 == 0 else ("restricted", "open")):
            (clear_access if phase == "open" else assign_access)(catalog)
            for text in qtexts[:10]:  # warm-up: the filter re-read, the caches
                for name in names:
                    hybrid(name, text)
                    lookup(name, text)
            for i, text in enumerate(qtexts):
                for name in names[i % 3:] + names[: i % 3]:  # rotate who goes first
                    for what, run in (("hybrid", hybrid), ("lookup", lookup)):
                        t0 = time.perf_counter()
                        run(name, text)
                        times.setdefault((phase, name, what), []).append(
                            time.perf_counter() - t0)
            log(f"  round {round_ + 1} {phase}: done")
    assign_access(catalog)  # leave the store as built
    load_after = os.getloadavg()
    rows = []
    for name in names:
        row: dict[str, Any] = {"caller": name, "readable_share": readable_share[name]}
        for what in ("hybrid", "lookup"):
            base = float(np.median(times["open", name, what]))
            row[f"{what}_p50_open_ms"] = percentile(times["open", name, what], 50)
            row[f"{what}_p50_ms"] = percentile(times["restricted", name, what], 50)
            row[f"{what}_p95_ms"] = percentile(times["restricted", name, what], 95)
            row[f"{what}_vs_open"] = round(
                float(np.median(times["restricted", name, what])) / base, 3)
        row.update(checked[name])
        rows.append(row)
    path = write_result(args.name or f"filtered_search_{args.n}", {
        "n": args.n, "chunks_per_document": CHUNKS_PER_DOC, "queries": len(qtexts),
        "rounds": args.rounds, "build": built, "access": assigned, "open_s": round(open_s, 2),
        "restricted_rows": len(restricted), "restricted_read_s": round(read_s, 2),
        "restricted_place_s": round(place_s, 2), "lookup_queries_rewritten":
            embedder.rewritten,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after], "results": rows})
    log(f"wrote {path}")
    graph.close()
    catalog.close()


if __name__ == "__main__":
    main()
