"""What accepting the identity provider's access tokens costs ``docgraph serve``.

    python bench/jwt_auth.py [--validations 20000] [--requests 200] [--rounds 10]
                             [--embedder minilm-l6-int8|hashing] [--name jwt_auth] [--quick]

Two figures, in one run:

1. **Per-request token check with a warm key cache**: ``IdentityTokens.check`` (header,
   pinned alg, key lookup in the cached JWKS, RS256 signature, exp/nbf/iss/aud, user and
   groups claims) of one RS256 access token, ``--validations`` times after a warm-up;
   p50/p95 in microseconds. Beside it the static token's check (``BearerTokens.verify``:
   the store's change counter and a constant-time digest comparison) on the same index.
2. **Requests per second through ``POST /api/v1/lookup_knowledge``** of a real
   ``docgraph serve`` process (``[auth] issuer`` set, the example corpus, the chosen
   embedder) with a static bearer token vs an access token of the same user, alternating in
   ``--rounds`` rounds of ``--requests`` sequential requests each (one keep-alive client;
   in each round both kinds ask the same queries, which cycle through the example
   questions, and which kind goes first alternates), so the query mix and drift of the
   shared machine fall on both alike. Per kind: the
   requests/s over all rounds and the lookup's p50/p95 latency; the JWT check's p50 is then
   set against the lookup's p50.

The authorization server is the tests' loopback one (``tests/serve/oauth_issuer.py``:
RFC 8414 metadata and a JWKS, keys generated here). ``--quick`` is a smoke run (hashing
embedder, a few hundred checks, two rounds of ten requests) written to ``<name>_quick``.
Results: ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

from common import REPO_ROOT, log, percentile, write_result
from serve_load import QUERIES, build_index, free_port, start_server

sys.path.insert(0, str(REPO_ROOT))
from tests.serve.oauth_issuer import TestIssuer

from docgraph.config import AuthSettings
from docgraph.serve.auth import BearerTokens
from docgraph.serve.idp.tokens import IdentityTokens


def start_issuer() -> tuple[TestIssuer, uvicorn.Server]:
    """The loopback authorization server, in a thread of this process."""
    port = free_port()
    issuer = TestIssuer(f"http://127.0.0.1:{port}")
    issuer.add_key("k1")
    server = uvicorn.Server(uvicorn.Config(issuer.app(), host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("the authorization server did not start")
        time.sleep(0.05)
    return issuer, server


def micros(values: Sequence[float]) -> dict[str, float]:
    """p50/p95 of ``values`` (seconds) in microseconds."""
    return {"p50_us": round(percentile(values, 50) * 1e6, 1),
            "p95_us": round(percentile(values, 95) * 1e6, 1)}


def check_cost(issuer: TestIssuer, audience: str, n: int) -> dict[str, Any]:
    """The JWT check's cost with a warm key cache (see the module doc)."""
    tokens = IdentityTokens(AuthSettings(issuer=issuer.url), audience)
    token = issuer.mint(audience, sub="bob", groups=[])

    async def run() -> list[float]:
        for _ in range(max(50, n // 20)):  # warm-up: reads the metadata and keys once
            await tokens.check(token)
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await tokens.check(token)
            times.append(time.perf_counter() - started)
        return times

    times = anyio.run(run)
    return {"validations": n, "jwks_fetches": tokens.keys.fetches, **micros(times)}


def static_cost(index: Path, token: str, n: int) -> dict[str, Any]:
    """The static token's check on the same index, for comparison."""
    from docgraph import DocGraph
    from docgraph.config import load_settings

    # the token store only: the hashing embedder is never used (no chunk index is opened)
    settings = load_settings(store={"path": str(index)}, embed={"model": "hashing"})
    with DocGraph(settings) as graph:
        tokens = BearerTokens(graph.token_store)
        for _ in range(max(50, n // 20)):
            tokens.verify(token)
        times = []
        for _ in range(n):
            started = time.perf_counter()
            tokens.verify(token)
            times.append(time.perf_counter() - started)
    return {"validations": n, **micros(times)}


def throughput(url: str, tokens: dict[str, str], requests: int,
               rounds: int) -> dict[str, dict[str, Any]]:
    """Requests/s and lookup latency per kind of token, alternating (see the module doc)."""
    latencies: dict[str, list[float]] = {kind: [] for kind in tokens}
    elapsed = dict.fromkeys(tokens, 0.0)
    queries = itertools.cycle(QUERIES)
    with httpx.Client(timeout=120) as client:
        for token in tokens.values():  # warm-up: the model, the caches, the keys
            for query in QUERIES:
                client.post(url, json={"query": query},
                            headers={"Authorization": f"Bearer {token}"}).raise_for_status()
        for round_no in range(rounds):
            batch = [next(queries) for _ in range(requests)]  # the same queries for each kind
            order = list(tokens) if round_no % 2 == 0 else list(reversed(tokens))
            for kind in order:
                headers = {"Authorization": f"Bearer {tokens[kind]}"}
                started = time.perf_counter()
                for query in batch:
                    t0 = time.perf_counter()
                    client.post(url, json={"query": query}, headers=headers).raise_for_status()
                    latencies[kind].append(time.perf_counter() - t0)
                elapsed[kind] += time.perf_counter() - started
            log(f"round {round_no + 1}/{rounds} done")
    return {kind: {"requests": len(latencies[kind]),
                   "requests_per_s": round(len(latencies[kind]) / elapsed[kind], 2),
                   "lookup_p50_ms": round(percentile(latencies[kind], 50) * 1e3, 2),
                   "lookup_p95_ms": round(percentile(latencies[kind], 95) * 1e3, 2)}
            for kind in tokens}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--validations", type=int, default=20000)
    parser.add_argument("--requests", type=int, default=200,
                        help="sequential requests per kind and round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--embedder", default="minilm-l6-int8")
    parser.add_argument("--name", default="jwt_auth")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.validations, args.requests, args.rounds = 300, 10, 2
        args.embedder, args.name = "hashing", args.name + "_quick"

    issuer, issuer_server = start_issuer()
    with tempfile.TemporaryDirectory(prefix="docgraph-jwt-bench-") as tmp:
        root = Path(tmp)
        log(f"indexing the example corpus with {args.embedder}")
        env, counts, issued = build_index(root, args.embedder)
        port = free_port()
        audience = f"http://127.0.0.1:{port}/mcp"
        env["DOCGRAPH_AUTH__ISSUER"] = issuer.url
        log("timing the token checks")
        jwt_check = check_cost(issuer, audience, args.validations)
        static_check = static_cost(root / "index.db", issued["bob"], args.validations)
        server = start_server(env, port, root / "serve.log")
        try:
            # one token for the whole run: lifetime well past it
            access = issuer.mint(audience, sub="bob", groups=[], exp=int(time.time()) + 86400)
            served = throughput(f"http://127.0.0.1:{port}/api/v1/lookup_knowledge",
                                {"static": issued["bob"], "jwt": access},
                                args.requests, args.rounds)
        finally:
            server.terminate()
            server.wait(30)
    issuer_server.should_exit = True
    lookup_p50_us = served["jwt"]["lookup_p50_ms"] * 1000
    results = [
        {"kind": "static", **static_check, **served["static"]},
        {"kind": "jwt", **jwt_check, **served["jwt"]},
    ]
    write_result(args.name, {
        "embedder": args.embedder, "corpus": counts, "rounds": args.rounds,
        "requests_per_round": args.requests,
        "jwt_check_share_of_lookup_p50": round(jwt_check["p50_us"] / lookup_p50_us, 4),
        "results": results,
    })
    print(f"JWT check p50 {jwt_check['p50_us']} us = "
          f"{100 * jwt_check['p50_us'] / lookup_p50_us:.2f}% of lookup_knowledge's p50 "
          f"({served['jwt']['lookup_p50_ms']} ms); requests/s static "
          f"{served['static']['requests_per_s']} vs JWT {served['jwt']['requests_per_s']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
