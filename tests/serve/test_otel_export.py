"""OpenTelemetry as an operator turns it on: ``[telemetry] otel_endpoint`` exports spans over
OTLP/HTTP to a real receiver (a tiny Starlette endpoint on loopback that decodes the
protobuf export request with opentelemetry-proto), and with it unset nothing of the SDK is
imported and a span costs nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from docgraph import DocGraph
from docgraph.config import TelemetrySettings
from docgraph.telemetry.tracing import configure_tracing, install_tracer, shutdown_tracing
from tests.serve.test_http_server import Running
from tests.serve.test_mcp_tools import build_corpus, make_tools, open_isolated_graph

SRC = Path(__file__).resolve().parents[2] / "src"


class Receiver:
    """An OTLP/HTTP traces endpoint that keeps every span it is sent."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.lock = threading.Lock()

    async def traces(self, request: Request) -> Response:
        assert request.headers["content-type"] == "application/x-protobuf"
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        with self.lock:
            self.requests.append(export)
        return Response(ExportTraceServiceResponse().SerializeToString(),
                        media_type="application/x-protobuf")

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received."""
        out = []
        with self.lock:
            for export in self.requests:
                for resource_spans in export.resource_spans:
                    resource = {a.key: a.value.string_value
                                for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        out.extend((resource, s) for s in scope_spans.spans)
        return out


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    found = Receiver()
    app = Starlette(routes=[Route("/v1/traces", found.traces, methods=["POST"])])
    with Running(app) as running:
        yield found, running.url + "/v1/traces"


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocGraph]:
    root = tmp_path_factory.mktemp("otel")
    opened: DocGraph = build_corpus(open_isolated_graph(root / "index.db"), root, rows=False)
    try:
        yield opened
    finally:
        opened.close()


def test_spans_reach_an_otlp_http_receiver(receiver: tuple[Receiver, str], graph: DocGraph):
    found, endpoint = receiver
    provider = configure_tracing(TelemetrySettings(otel_endpoint=endpoint,
                                                   otel_service_name="docgraph-test"))
    try:
        tools = make_tools(graph)
        result = tools.call("search_documents", _alice(), {"query_text": "error E-417"})
        assert result["count"] > 0
        assert provider.force_flush(30_000)
    finally:
        shutdown_tracing()
    received = found.spans()
    names = {s.name for _, s in received}
    assert {"docgraph.validate", "docgraph.governed", "docgraph.resolve_namespaces",
            "docgraph.search", "docgraph.lane.seed", "docgraph.fusion",
            "docgraph.audit"} <= names, names
    assert {resource["service.name"] for resource, _ in received} == {"docgraph-test"}
    (governed,) = [s for _, s in received if s.name == "docgraph.governed"]
    assert {s.trace_id for _, s in received if s.name != "docgraph.validate"} \
        == {governed.trace_id}
    attributes = {a.key: a.value.string_value for a in governed.attributes}
    assert attributes == {"operation": "retrieve:vector_first"}  # no query text
    # the request id of a request no transport named is its trace id too
    assert graph.audit_store.recent(1)[0]["request_id"] == governed.trace_id.hex()


def test_query_text_goes_on_a_span_only_when_configured(graph: DocGraph):
    tools = make_tools(graph)
    for content in (False, True):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        install_tracer(provider.get_tracer("test"), content=content)
        try:
            tools.call("lookup_knowledge", _alice(), {"query": "Roost gateway TLS"})
        finally:
            install_tracer(None)
        (governed,) = [s for s in exporter.get_finished_spans() if s.name == "docgraph.governed"]
        assert dict(governed.attributes or {}) == (
            {"operation": "lookup_knowledge", "query": "Roost gateway TLS"} if content
            else {"operation": "lookup_knowledge"})


def _alice() -> Any:
    from docgraph.governance import Caller

    return Caller("alice")


def test_tracing_off_imports_no_sdk_and_spans_are_one_shared_noop(tmp_path: Path):
    script = (
        "import sys\n"
        "from docgraph.serve.http import create_app\n"
        "from docgraph.serve.cli import app\n"
        "from docgraph.telemetry import span\n"
        "from docgraph.telemetry.tracing import configure_tracing\n"
        "from docgraph.config import TelemetrySettings\n"
        "assert configure_tracing(TelemetrySettings()) is None\n"
        "assert span('a', n=1) is span('b')\n"
        "with span('lane.seed'):\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk'))\n"
        "assert not loaded, loaded\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
