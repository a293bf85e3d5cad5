"""The process's Prometheus metrics: what every layer counts and times, in one registry
(:data:`REGISTRY`) that ``/metrics`` renders (:mod:`docgraph.serve.observe` adds what is
read from the index at scrape time: documents and chunks per namespace, the leader, the
chunk index sidecar, the worker threads).

Each metric is labelled only by bounded names (tools, transports, outcomes, phases, error
kinds, operations), never by a caller, a query or a document, so the number of series stays
small whatever the traffic. Each server process serves its own; Prometheus sums a fleet.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: The registry of docgraph's own metrics (not prometheus_client's global one, so an
#: application embedding docgraph keeps its own clean).
REGISTRY = CollectorRegistry()

#: Seconds buckets for requests: a cached lookup takes milliseconds, a global map-reduce
#: with a chat model tens of seconds.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Seconds buckets for builds and their phases: from an unchanged folder's metadata check
#: to a first build of a large corpus.
BUILD_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)

TOOL_SECONDS = Histogram(
    "docgraph_tool_seconds", "Time to answer one tool call, by tool and transport "
    "(http: the JSON API, mcp: MCP over HTTP, stdio: MCP over stdio).",
    ["tool", "transport"], buckets=REQUEST_BUCKETS, registry=REGISTRY)
TOOL_CALLS = Counter(
    "docgraph_tool_calls", "Tool calls by tool, transport and outcome (ok, invalid, denied, "
    "not_found, unavailable, error).", ["tool", "transport", "outcome"], registry=REGISTRY)
ERRORS = Counter(
    "docgraph_errors", "Tool calls that did not answer, by kind (invalid, denied, "
    "not_found, unavailable: the store, error: a failure of the server) and transport.",
    ["kind", "transport"], registry=REGISTRY)
DENIALS = Counter(
    "docgraph_denials", "Governed requests denied (no entitled namespace, a role the caller "
    "does not hold), by operation, from every entry point.", ["operation"],
    registry=REGISTRY)
GOVERNED_REQUESTS = Counter(
    "docgraph_governed_requests", "Requests through the governed service by operation and "
    "outcome (ok, denied, error), from every entry point (tools, console, CLI).",
    ["operation", "outcome"], registry=REGISTRY)
ROW_CHECK_FAILURES = Counter(
    "docgraph_row_check_failures", "Row re-checks that failed (the row database could not "
    "answer; its rows were left out: fail closed).", registry=REGISTRY)
HTTP_SECONDS = Histogram(
    "docgraph_http_request_seconds", "HTTP requests by route (a fixed set), method and "
    "status code.", ["route", "method", "status"], buckets=REQUEST_BUCKETS,
    registry=REGISTRY)
HTTP_IN_FLIGHT = Gauge(
    "docgraph_http_requests_in_flight", "HTTP requests being answered now (the server's "
    "queue of work).", registry=REGISTRY)
BUILDS = Counter(
    "docgraph_builds", "Namespace builds finished, by outcome (ok, partial, error).",
    ["outcome"], registry=REGISTRY)
BUILD_SECONDS = Histogram(
    "docgraph_build_seconds", "Duration of one namespace build, by outcome.", ["outcome"],
    buckets=BUILD_BUCKETS, registry=REGISTRY)
BUILD_PHASE_SECONDS = Histogram(
    "docgraph_build_phase_seconds", "Time a build spent in each phase (crawl, extract, "
    "chunk, embed, entities, store, graph, communities), by the phase's outcome.",
    ["phase", "outcome"], buckets=BUILD_BUCKETS, registry=REGISTRY)
CHUNKS_EMBEDDED = Counter(
    "docgraph_chunks_embedded", "Chunks whose vectors builds computed (vectors reused from "
    "unchanged text are not counted).", registry=REGISTRY)
EMBED_SECONDS = Counter(
    "docgraph_embed_seconds", "Seconds builds spent computing embeddings: throughput is "
    "rate(docgraph_chunks_embedded_total) / rate(docgraph_embed_seconds_total).",
    registry=REGISTRY)
PREPARE_QUEUE = Gauge(
    "docgraph_prepare_queue_depth", "Files handed to the build's worker processes and not "
    "yet written (0 when a build prepares inline or none runs).", registry=REGISTRY)


def observe_build(outcome: str, seconds: float,
                  phases: list[tuple[str, str, float]], chunks_embedded: int) -> None:
    """Count one finished namespace build: its ``outcome`` and duration, each phase as
    ``(phase, outcome, seconds)`` (phases of several sources add up per phase and outcome),
    and the chunks it embedded with the seconds the embed phase took."""
    BUILDS.labels(outcome).inc()
    BUILD_SECONDS.labels(outcome).observe(max(0.0, seconds))
    per_phase: dict[tuple[str, str], float] = {}
    for phase, phase_outcome, phase_seconds in phases:
        key = (phase, phase_outcome)
        per_phase[key] = per_phase.get(key, 0.0) + phase_seconds
    for (phase, phase_outcome), phase_seconds in per_phase.items():
        BUILD_PHASE_SECONDS.labels(phase, phase_outcome).observe(max(0.0, phase_seconds))
        if phase == "embed":
            EMBED_SECONDS.inc(max(0.0, phase_seconds))
    CHUNKS_EMBEDDED.inc(max(0, chunks_embedded))
