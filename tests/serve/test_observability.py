"""What a running server tells its operator: ``/metrics`` scraped and parsed with
prometheus_client's own parser (values move when requests and builds happen), the request
id one request's log line, audit record, retrieval trace and OpenTelemetry trace share, and
the spans of a request and of a build (the SDK's in-memory exporter). The OTLP export to a
real receiver and the cost when off are in ``test_otel_export.py``.

One server over one small corpus (the embedded store, the test embedder) for the module;
tracing is on for the whole module.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from docgraph import DocGraph
from docgraph.governance import Caller
from docgraph.serve.auth import BearerTokens
from docgraph.serve.http import create_app
from docgraph.serve.observe import IndexCollector
from docgraph.telemetry.logs import use_log_format
from docgraph.telemetry.tracing import install_tracer
from tests.serve.test_http_server import Running, mcp_calls
from tests.serve.test_mcp_tools import build_corpus, make_tools, open_isolated_graph, payload

QUERY = "What does error E-417 mean on the Tern T3?"


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the module, every span kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    install_tracer(provider.get_tracer("test"))
    try:
        yield exporter
    finally:
        install_tracer(None)
        provider.shutdown()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           spans: InMemorySpanExporter) -> Iterator[dict[str, Any]]:
    """The corpus served on a loopback port; tokens of an admin, a reader and a stranger."""
    root = tmp_path_factory.mktemp("observe")
    graph: DocGraph = build_corpus(open_isolated_graph(root / "index.db"), root, rows=True)
    tokens = BearerTokens(graph.token_store)
    issued = {"root": tokens.add("root"), "alice": tokens.add("alice"),
              "mallory": tokens.add("mallory")}
    try:
        with Running(create_app(make_tools(graph), tokens)) as running:
            yield {"url": running.url, "tokens": issued, "graph": graph, "root": root}
    finally:
        graph.close()


def call(served: dict[str, Any], tool: str, body: dict[str, Any],
         user: str = "alice") -> httpx.Response:
    return httpx.post(f"{served['url']}/api/v1/{tool}", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {served['tokens'][user]}"})


def scrape(served: dict[str, Any], user: str = "root") -> dict[tuple[str, tuple[Any, ...]],
                                                                float]:
    """Every sample of ``/metrics``, parsed by prometheus_client: (name, labels) -> value."""
    answer = httpx.get(served["url"] + "/metrics", timeout=60,
                       headers={"Authorization": f"Bearer {served['tokens'][user]}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text)
            for s in family.samples}


def value(samples: dict[tuple[str, tuple[Any, ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_move_with_requests_denials_errors_and_builds(served: dict[str, Any]):
    graph: DocGraph = served["graph"]
    before = scrape(served)
    ok = dict(tool="search_documents", transport="http")
    assert call(served, "search_documents", {"query_text": QUERY}).status_code == 200
    assert call(served, "search_documents", {"query_text": QUERY}, "mallory").status_code == 403
    assert call(served, "search_documents", {"query_text": ""}).status_code == 400
    # MCP over HTTP counts under its own transport
    assert not mcp_calls(served["url"], served["tokens"]["alice"],
                         [("index_status", {})])[1][0].is_error
    after = scrape(served)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("docgraph_tool_calls_total", **ok, outcome="ok") == 1
    assert moved("docgraph_tool_calls_total", **ok, outcome="denied") == 1
    assert moved("docgraph_tool_calls_total", **ok, outcome="invalid") == 1
    assert moved("docgraph_tool_seconds_count", **ok) == 3
    assert moved("docgraph_tool_seconds_sum", **ok) > 0
    assert moved("docgraph_tool_calls_total", tool="index_status", transport="mcp",
                 outcome="ok") == 1
    assert moved("docgraph_errors_total", kind="denied", transport="http") == 1
    assert moved("docgraph_errors_total", kind="invalid", transport="http") == 1
    assert moved("docgraph_denials_total", operation="retrieve:vector_first") == 1
    assert moved("docgraph_governed_requests_total", operation="retrieve:vector_first",
                 outcome="ok") == 1
    assert moved("docgraph_http_request_seconds_count", route="/api/v1/{tool}",
                 method="POST", status="200") == 1
    assert moved("docgraph_http_request_seconds_count", route="/api/v1/{tool}",
                 method="POST", status="403") == 1
    # read from the index at scrape time
    for stats in graph.store.stats():
        assert value(after, "docgraph_documents", namespace=stats.namespace) == stats.documents
        assert value(after, "docgraph_chunks", namespace=stats.namespace) == stats.chunks
    assert value(after, "docgraph_store_up") == 1
    assert value(after, "docgraph_leader", state="none") == 1
    assert value(after, "docgraph_leader", state="this process") == 0
    assert value(after, "docgraph_refresher_running") == 0
    sidecar = [labels for name, labels in after if name == "docgraph_sidecar"]
    assert len(sidecar) == 1 and dict(sidecar[0])["state"] in ("loaded", "missing", "rebuilt")
    assert not [n for n, _ in after if n.startswith("docgraph_dense_ann")]  # the scan only
    assert value(after, "docgraph_worker_threads_waiting") == 0

    # a build: counted with its phases, and the new document is in the namespace's gauge
    folder = served["root"] / "eng"
    (folder / "watchdog.md").write_text("# Watchdog\n\nThe CAN bus watchdog of the Tern T3 "
                                        "restarts the drive after 40 ms.\n", encoding="utf-8")
    documents = value(after, "docgraph_documents", namespace="engineering")
    graph.refresh()
    built = scrape(served)
    assert value(built, "docgraph_builds_total", outcome="ok") \
        - value(after, "docgraph_builds_total", outcome="ok") == 2  # both namespaces
    assert value(built, "docgraph_build_seconds_count", outcome="ok") \
        - value(after, "docgraph_build_seconds_count", outcome="ok") == 2
    assert value(built, "docgraph_build_phase_seconds_count", phase="embed", outcome="ok") \
        > value(after, "docgraph_build_phase_seconds_count", phase="embed", outcome="ok")
    assert value(built, "docgraph_chunks_embedded_total") \
        > value(after, "docgraph_chunks_embedded_total")
    assert value(built, "docgraph_documents", namespace="engineering") == documents + 1


def test_metrics_need_the_token_the_setting_names(served: dict[str, Any]):
    graph: DocGraph = served["graph"]
    url = served["url"] + "/metrics"
    assert httpx.get(url, timeout=30).status_code == 401
    alice = {"Authorization": f"Bearer {served['tokens']['alice']}"}
    refused = httpx.get(url, headers=alice, timeout=30)
    assert refused.status_code == 403 and "'admin'" in refused.json()["error"]
    telemetry = graph.settings.telemetry
    try:
        telemetry.metrics = "token"  # any valid token, e.g. the scraper's own
        assert httpx.get(url, headers=alice, timeout=30).status_code == 200
        telemetry.metrics = "off"
        assert httpx.get(url, headers=alice, timeout=30).status_code == 404
    finally:
        telemetry.metrics = "admin"


def test_one_request_id_in_the_log_line_audit_record_trace_and_spans(
        served: dict[str, Any], spans: InMemorySpanExporter):
    graph: DocGraph = served["graph"]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    use_log_format(handler, "json")
    access = logging.getLogger("docgraph.access")
    access.addHandler(handler)
    level = access.level
    access.setLevel(logging.INFO)
    spans.clear()
    started = time.time_ns()  # an earlier test's request may end its span after the clear
    try:
        answer = call(served, "search_documents", {"query_text": QUERY, "k": 3})
        assert answer.status_code == 200, answer.text
        request_id = answer.headers["x-request-id"]
        assert len(request_id) == 32
        # the line is logged once the response is sent, which the client may see first:
        # the handler stays until it has come
        wait_until(lambda: request_id in stream.getvalue() and http_finished(spans))
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = [line for line in lines if line.get("request_id") == request_id]
    assert len(mine) == 1, lines
    assert mine[0]["event"] == "request" and mine[0]["status"] == 200
    assert mine[0]["path"] == "/api/v1/search_documents" and mine[0]["level"] == "INFO"

    audit = [r for r in graph.audit_store.recent(20) if r.get("request_id") == request_id]
    assert [r["operation"] for r in audit] == ["retrieve:vector_first"]
    traces = [t for t in graph.traces.recent(20) if t.get("request_id") == request_id]
    assert len(traces) == 1 and traces[0]["user_id"] == "alice"

    # with tracing on, the request id is the trace id of the request's spans
    finished = [s for s in spans.get_finished_spans() if (s.start_time or 0) >= started]
    trace_ids = {format(s.context.trace_id, "032x") for s in finished}
    assert trace_ids == {request_id}


def wait_until(done: Any, timeout: float = 10.0) -> None:
    """Wait for ``done()`` (a request's span and log line are finished once its response has
    been sent, which the client may see first)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


def http_finished(spans: InMemorySpanExporter) -> bool:
    """Whether a request span has ended since the exporter was cleared."""
    return any(s.name == "docgraph.http" for s in spans.get_finished_spans())


def by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in finished:
        out.setdefault(s.name, []).append(s)
    return out


def test_a_request_is_one_trace_with_a_span_per_phase(served: dict[str, Any],
                                                      spans: InMemorySpanExporter):
    spans.clear()
    answer = call(served, "lookup_knowledge", {"query": "Nordhaven Logistics Tern T3 E-417"})
    assert answer.status_code == 200, answer.text
    wait_until(lambda: http_finished(spans))
    finished = spans.get_finished_spans()
    named = by_name(finished)
    for phase in ("http", "tool", "validate", "governed", "resolve_namespaces", "evidence",
                  "search", "lane.seed", "fusion", "rank", "row_check", "audit"):
        assert f"docgraph.{phase}" in named, sorted(named)
    assert any(name.startswith("docgraph.lane.") and name != "docgraph.lane.seed"
               for name in named)
    # one trace, each span under the request's span
    (http,) = named["docgraph.http"]
    assert {s.context.trace_id for s in finished} == {http.context.trace_id}
    ids = {s.context.span_id: s for s in finished}
    for s in finished:
        if s is not http:
            assert s.parent is not None and s.parent.span_id in ids
    parent = ids[named["docgraph.governed"][0].parent.span_id]  # type: ignore[union-attr]
    assert parent.name == "docgraph.tool"
    assert parent.attributes == {"tool": "lookup_knowledge", "transport": "http"}
    assert http.attributes is not None and http.attributes["http.route"] == "/api/v1/{tool}"
    # no query text on any span unless configured
    for s in finished:
        for text in (s.attributes or {}).values():
            assert "Nordhaven" not in str(text)


def test_mcp_over_http_tool_calls_are_spans_of_their_request(served: dict[str, Any],
                                                             spans: InMemorySpanExporter):
    graph: DocGraph = served["graph"]
    spans.clear()
    results = mcp_calls(served["url"], served["tokens"]["alice"],
                        [("search_documents", {"query_text": QUERY, "k": 2}),
                         ("index_status", {})])[1]
    payload(results[0])
    # a POST's span ends when its response has been sent, which the client may see first
    deadline = time.monotonic() + 10
    while True:
        named = by_name(spans.get_finished_spans())
        carried = {s.context.trace_id for s in named.get("docgraph.tool", [])}
        if carried <= {s.context.trace_id for s in named.get("docgraph.http", [])} \
                or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    tools = sorted(named["docgraph.tool"], key=lambda s: s.start_time or 0)
    assert [dict(s.attributes or {}) for s in tools] == [
        {"tool": "search_documents", "transport": "mcp"},
        {"tool": "index_status", "transport": "mcp"}]
    # each call is in the trace of the POST that carried it (not the session's first
    # request's): that request's span encloses the tool's
    assert tools[0].context.trace_id != tools[1].context.trace_id
    for tool in tools:
        (http,) = [s for s in named["docgraph.http"]
                   if s.context.trace_id == tool.context.trace_id]
        assert http.start_time <= tool.start_time  # type: ignore[operator]
        assert tool.end_time <= http.end_time  # type: ignore[operator]
    assert len([s for s in named["docgraph.governed"]
                if s.context.trace_id == tools[0].context.trace_id]) == 1
    request_id = format(tools[0].context.trace_id, "032x")
    audit = [r for r in graph.audit_store.recent(20) if r.get("request_id") == request_id]
    assert [r["operation"] for r in audit] == ["retrieve:vector_first"]


def test_a_build_is_one_trace_with_a_span_per_phase(served: dict[str, Any],
                                                    spans: InMemorySpanExporter,
                                                    tmp_path: Path):
    graph: DocGraph = served["graph"]
    (served["root"] / "sup" / "returns.md").write_text(
        "# Returns\n\nBrightwell Grocers returns a Plover P2 dock within 30 days.\n",
        encoding="utf-8")
    spans.clear()
    graph.refresh()
    named = by_name(spans.get_finished_spans())
    builds = {s.attributes["namespace"]: s for s in named["docgraph.build"]
              if s.attributes is not None}
    assert set(builds) == {"engineering", "support"}
    support = builds["support"].context.trace_id
    phases = {name for name, found in named.items()
              if any(s.context.trace_id == support for s in found)}
    assert {"docgraph.build", "docgraph.build.source", "docgraph.build.list",
            "docgraph.build.prepare", "docgraph.build.embed",
            "docgraph.build.write"} <= phases, phases
    if graph.extractor is not None:
        assert "docgraph.build.graph" in phases


def test_the_dense_ann_cache_is_scraped_with_its_state(tmp_path: Path) -> None:
    """With the lists turned on ([store] dense_graph_min_rows), ``/metrics`` says whether
    they answer and what their build took: an operator of a large index learns from it
    that the exact scan is answering while they build, or for good without faiss."""
    path = tmp_path / "index.db"
    graph = build_corpus(open_isolated_graph(path, {"path": str(path),
                                                    "dense_graph_min_rows": 8}), tmp_path)
    try:
        tools = make_tools(graph)
        assert tools.call("lookup_knowledge", Caller("alice"), {"query": QUERY})["evidence"]
        index = graph.opened_chunk_index
        index.graph.wait()  # type: ignore[union-attr]
        collector = IndexCollector(tools, None)
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in collector.collect() for s in family.samples}
        assert value(samples, "docgraph_dense_ann", kind="lists", state="loaded") == 1
        assert [n for n, _ in samples if n == "docgraph_dense_ann"] == ["docgraph_dense_ann"]
        assert value(samples, "docgraph_dense_ann_build_seconds", kind="lists") > 0
    finally:
        graph.close()
