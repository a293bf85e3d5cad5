"""Load check of ``docgraph serve``: concurrent MCP clients over streamable HTTP on loopback.

    python bench/serve_load.py [--clients 16] [--calls 200] [--deadline 900]
                               [--embedder minilm-l6-int8|hashing] [--name serve_load]

Builds a temporary index of ``examples/corpus`` (three namespaces) with the chosen embedding
model, a YAML policy (``alice`` may read every namespace, ``bob`` only ``support``) and one
bearer token each; starts ``python -m docgraph.serve.cli serve`` as a subprocess on a free
loopback port; then runs ``--clients`` MCP sessions at once (the SDK's own streamable HTTP
client, alternately as alice and bob), each making ``--calls`` tool calls drawn from a seeded
mix of all eight tools (after a warm-up and a one-client baseline of ``--single-calls``
calls, reported separately). Every call's wall latency is recorded; an error is a tool error, a
transport exception, or a result of bob's that names a namespace other than ``support``.

The run is bounded: no call starts after ``--deadline`` seconds (then the result records how
many calls completed) and the server is stopped at the end. Client and server share the
machine (it is small and shared; the load average is recorded). Exits 1 on any error.
Results: ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from common import REPO_ROOT, cached_embedder, percentile, write_result
from docgraph.app import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import make_embedder
from docgraph.serve.auth import BearerTokens

CORPUS = REPO_ROOT / "examples" / "corpus"
NAMESPACES = ("engineering", "support", "people")
POLICY = """assignments:
  - {user: alice, role: staff, domain: "*"}
  - {user: bob, role: support, domain: support}
"""
QUERIES = (
    "What caused the Rotterdam outage?",
    "Who owns firmware releases?",
    "What does error E-417 mean?",
    "Which firmware fixes CVE-2025-29174?",
    "What was ticket SUP-4502 about?",
    "How much does contact spring kit PLV-CS-220-B cost?",
    "What P1 response time is Nordhaven Logistics guaranteed?",
    "How much service credit did Nordhaven get for the outage?",
    "How many days a year may employees work from abroad?",
    "Tern T3 localisation lost",
    "Plover P2 dock E-508",
    "Brightwell Grocers account plan",
)
ENTITY_QUERIES = ("Tern", "Nordhaven", "E-417", "Plover", "Brightwell", "Roost")
#: (tool, weight): the call mix each client draws from.
MIX = (
    ("lookup_knowledge", 25), ("search_documents", 25), ("search_entities", 10),
    ("trace_connections", 10), ("document_context", 5), ("explore_topics", 5),
    ("list_documents", 10), ("index_status", 10),
)


def arguments(tool: str, rng: random.Random) -> dict[str, Any]:
    """Arguments of one call of ``tool``."""
    query = rng.choice(QUERIES)
    if tool == "lookup_knowledge":
        return {"query": query}
    if tool == "search_documents":
        return {"query_text": query, "k": rng.choice((5, 10, 20)),
                "mode": rng.choice(("vector_first", "vector_first", "graph_first"))}
    if tool == "search_entities":
        return {"query_text": rng.choice(ENTITY_QUERIES), "k": 10}
    if tool == "trace_connections":
        return {"query_text": query, "k": 8}
    if tool == "document_context":
        return {"query_text": query, "token_budget": 2000}
    if tool == "explore_topics":
        return {"k": 5} if rng.random() < 0.5 else {"query_text": query, "k": 5}
    if tool == "list_documents":
        return {"limit": 50}
    return {}


def foreign_namespaces(tool: str, data: dict[str, Any], allowed: set[str]) -> set[str]:
    """Namespaces a result names outside ``allowed`` (must be empty)."""
    rows: list[dict[str, Any]] = []
    for key in ("results", "reports", "entities", "documents", "namespaces"):
        value = data.get(key)
        if isinstance(value, list):
            rows += [r for r in value if isinstance(r, dict)]
    return {str(r["namespace"]) for r in rows if "namespace" in r} - allowed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def build_index(root: Path, embedder: str
                ) -> tuple[dict[str, str], dict[str, int], dict[str, str]]:
    """Index the example corpus under ``root``; returns the child environment, counts and
    a bearer token per user (stored in the index database)."""
    env = {
        "DOCGRAPH_CONFIG": str(root / "absent-docgraph.toml"),
        "DOCGRAPH_EMBED__MODEL": embedder,
        "DOCGRAPH_STORE__PATH": str(root / "index.db"),
        # measure serving alone: no refresh round of the leading server in the timings
        "DOCGRAPH_REFRESH__IN_SERVE": "false",
        "DOCGRAPH_GOVERNANCE__POLICY_FILE": str(root / "policy.yaml"),
    }
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        settings = load_settings()
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    (root / "policy.yaml").write_text(POLICY, encoding="utf-8")
    # passages go through the shared embedding cache (same model name, so the server's own
    # embedder matches the index); queries are always embedded by the server
    with DocGraph(settings, cached_embedder(make_embedder(settings.embed))) as graph:
        for namespace in NAMESPACES:
            graph.index(CORPUS / namespace, namespace=namespace)
        stats = graph.catalog.stats()
        tokens = BearerTokens(graph.token_store)
        issued = {"alice": tokens.add("alice"), "bob": tokens.add("bob")}
    counts = {"documents": sum(s.documents for s in stats),
              "chunks": sum(s.chunks for s in stats),
              "entities": sum(s.entities for s in stats),
              "communities": sum(s.communities for s in stats)}
    return env, counts, issued


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """``docgraph serve`` as a subprocess; returns once /healthz answers."""
    child_env = {**os.environ, **env}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "docgraph.serve.cli", "serve", "--port", str(port)],
            env=child_env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    process.terminate()
    raise SystemExit("server did not start within 120 s")


class Stats:
    """Latencies and errors of all clients."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.leaks = 0
        self.completed = 0
        self.skipped = 0


async def run_client(index: int, url: str, token: str, user: str, calls: int,
                     stop_at: float, seed: int, stats: Stats) -> None:
    """One MCP session making ``calls`` tool calls (none started after ``stop_at``)."""
    rng = random.Random(seed * 1000 + index)
    tools = [t for t, _ in MIX]
    weights = [w for _, w in MIX]
    allowed = set(NAMESPACES) if user == "alice" else {"support"}
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(60.0, read=120.0)
    try:
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http, \
                Client(streamable_http_client(url, http_client=http)) as client:
            for _ in range(calls):
                if time.monotonic() >= stop_at:
                    stats.skipped += 1
                    continue
                tool = rng.choices(tools, weights)[0]
                args = arguments(tool, rng)
                started = time.perf_counter()
                try:
                    result = await client.call_tool(tool, args)
                except Exception as exc:  # a transport failure is an error, keep going
                    stats.errors.append(f"{tool}: {type(exc).__name__}: {exc}")
                    continue
                stats.latencies[tool].append((time.perf_counter() - started) * 1000)
                stats.completed += 1
                if result.is_error:
                    text = result.content[0].text if result.content else ""
                    stats.errors.append(f"{tool}: {text[:200]}")
                elif foreign_namespaces(tool, result.structured_content or {}, allowed):
                    stats.leaks += 1
                    stats.errors.append(f"{tool}: {user} saw a foreign namespace")
    except Exception as exc:
        stats.errors.append(f"client {index}: {type(exc).__name__}: {exc}")


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max/mean of latencies in ms."""
    return {"calls": len(values), "p50_ms": round(percentile(values, 50), 1),
            "p95_ms": round(percentile(values, 95), 1),
            "p99_ms": round(percentile(values, 99), 1),
            "max_ms": round(max(values), 1),
            "mean_ms": round(sum(values) / len(values), 1)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200, help="calls per client")
    parser.add_argument("--deadline", type=float, default=900.0,
                        help="seconds after which no new call starts")
    parser.add_argument("--embedder", default="minilm-l6-int8",
                        help="embedding model of the index (minilm-l6-int8 or hashing)")
    parser.add_argument("--single-calls", type=int, default=100,
                        help="calls of the one-client baseline before the load")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--name", default="serve_load")
    args = parser.parse_args(argv)
    if not 1 <= args.clients <= 64 or not 1 <= args.calls <= 10_000:
        parser.error("--clients must be 1-64 and --calls 1-10000")

    with tempfile.TemporaryDirectory(prefix="docgraph-serve-load-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        env, counts, issued = build_index(root, args.embedder)
        index_seconds = time.perf_counter() - started
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        server = start_server(env, port, root / "server.log")
        stats = Stats()
        try:
            warm = Stats()  # warm-up, then one client alone: the unloaded baseline
            anyio.run(run_client, 998, url, issued["alice"], "alice", 16,
                      time.monotonic() + 120, args.seed, warm)
            single = Stats()
            anyio.run(run_client, 999, url, issued["alice"], "alice", args.single_calls,
                      time.monotonic() + 300, args.seed, single)
            stats.errors += warm.errors + single.errors
            stop_at = time.monotonic() + args.deadline
            wall = time.perf_counter()

            async def load() -> None:
                async with anyio.create_task_group() as tg:
                    for i in range(args.clients):
                        user = "alice" if i % 2 == 0 else "bob"
                        tg.start_soon(run_client, i, url, issued[user], user, args.calls,
                                      stop_at, args.seed, stats)

            anyio.run(load)
            wall = time.perf_counter() - wall
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
        server_log = (root / "server.log").read_text(errors="replace")[-2000:]

    every = [v for values in stats.latencies.values() for v in values]
    one = [v for values in single.latencies.values() for v in values]
    per_tool = [{"tool": tool, **summary(values)}
                for tool, values in sorted(stats.latencies.items())]
    payload: dict[str, Any] = {
        "description": "concurrent MCP clients (SDK streamable HTTP client) against `docgraph "
                       "serve` on loopback; latency is the client-side wall time of one tool "
                       "call; client and server share the machine",
        "config": {"clients": args.clients, "calls_per_client": args.calls,
                   "deadline_s": args.deadline, "embedder": args.embedder, "seed": args.seed,
                   "mix": dict(MIX), "corpus": "examples/corpus", **counts,
                   "index_build_s": round(index_seconds, 1)},
        "calls_planned": args.clients * args.calls,
        "calls_completed": stats.completed,
        "calls_skipped_by_deadline": stats.skipped,
        "errors": len(stats.errors),
        "namespace_leaks": stats.leaks,
        "error_samples": stats.errors[:10],
        "wall_s": round(wall, 2),
        "throughput_calls_per_s": round(stats.completed / wall, 1) if wall else None,
        "latency": summary(every) if every else None,
        "single_client_latency": summary(one) if one else None,
        "results": per_tool,
    }
    if stats.errors:
        payload["server_log_tail"] = server_log
    write_result(args.name, payload)
    if every:
        lat = payload["latency"]
        print(f"{stats.completed}/{args.clients * args.calls} calls in {wall:.1f}s "
              f"({payload['throughput_calls_per_s']} calls/s), p50 {lat['p50_ms']} ms, "
              f"p95 {lat['p95_ms']} ms, errors {len(stats.errors)}")
    return 1 if stats.errors or stats.skipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
