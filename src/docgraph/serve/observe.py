"""What a server tells its operator, wired into the HTTP app in one place: the request id
and span of every request, per-request log lines, tool latencies and outcomes, and the
Prometheus text at ``/metrics``.

- :class:`RequestTelemetry` (the app's outermost middleware) gives each HTTP request its
  id (the OpenTelemetry trace id when tracing is on, else a random one of the same form),
  answers it in ``X-Request-ID``, runs the request in a ``docgraph.http`` span, times it
  per route and writes one ``request`` event on the ``docgraph.access`` logger. The id
  and the span travel in the request's context (through the MCP SDK's handling of a POST
  to ``/mcp``, and into the worker thread that runs a tool: ``anyio.to_thread`` copies
  it) to the audit record and the retrieval traces.
- :func:`observe_tool` times one tool call per tool and transport and counts its outcome.
- :class:`Observability` serves ``/metrics``: the process's metrics
  (:data:`~docgraph.telemetry.metrics.REGISTRY`) and, read at scrape time from the index,
  documents and chunks per namespace, whether the store answers, the refresh leader, the
  refresh loop, the chunk index sidecar and the worker threads (busy, and requests waiting
  for one). Who may read it is ``[telemetry] metrics``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docgraph.errors import InvalidQuery, NotFound
from docgraph.governance import AccessDenied
from docgraph.serve.auth import caller_from_access_token
from docgraph.serve.console.sessions import is_console_admin
from docgraph.store.outages import store_unavailable
from docgraph.telemetry import request_scope, span
from docgraph.telemetry.context import new_request_id
from docgraph.telemetry.metrics import (
    ERRORS,
    HTTP_IN_FLIGHT,
    HTTP_SECONDS,
    REGISTRY,
    TOOL_CALLS,
    TOOL_SECONDS,
)
from docgraph.telemetry.tracing import current_trace_id

if TYPE_CHECKING:
    from docgraph.lifecycle.refresher import Refresher
    from docgraph.serve.tools import DocgraphTools

access_log = logging.getLogger("docgraph.access")

#: The response header that carries the request id.
REQUEST_ID_HEADER = "X-Request-ID"
#: The routes requests are timed by (anything else counts as ``other``): a fixed set, so a
#: scanner requesting random paths cannot grow the metrics.
ROUTES = ("/mcp", "/api/v1", "/openapi.json", "/healthz", "/readyz", "/metrics", "/console")
METRICS_PATH = "/metrics"


def route_of(path: str) -> str:
    """The timing label of ``path``: its route (``/api/v1/{tool}`` for a tool of the JSON
    API), else ``other``."""
    for route in ROUTES:
        if path == route or path.startswith(route + "/"):
            return "/api/v1/{tool}" if route == "/api/v1" else route
    return "other"


class RequestTelemetry:
    """ASGI middleware: the request id, span, timing and log line of every HTTP request
    (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        route = route_of(path)
        status = 500  # what the client gets if the app fails before answering
        started = time.perf_counter()
        HTTP_IN_FLIGHT.inc()
        try:
            with span("http", **{"http.request.method": method, "http.route": route}):
                request_id = current_trace_id() or new_request_id()
                with request_scope(request_id):
                    async def send_with_id(message: Message) -> None:
                        nonlocal status
                        if message["type"] == "http.response.start":
                            status = int(message["status"])
                            MutableHeaders(scope=message).append(REQUEST_ID_HEADER, request_id)
                        await send(message)

                    try:
                        await self.app(scope, receive, send_with_id)
                    finally:
                        elapsed = time.perf_counter() - started
                        access_log.info(
                            "%s %s %d %.1fms", method, path, status, elapsed * 1000,
                            extra={"event": "request", "method": method, "path": path,
                                   "route": route, "status": status,
                                   "duration_ms": round(elapsed * 1000, 3)})
        finally:
            HTTP_IN_FLIGHT.dec()
            HTTP_SECONDS.labels(route, method, str(status)).observe(
                time.perf_counter() - started)


def outcome_of(exc: BaseException) -> str:
    """The kind of a failed tool call: ``invalid``, ``denied``, ``not_found``,
    ``unavailable`` (the store) or ``error``."""
    if isinstance(exc, AccessDenied):
        return "denied"
    if isinstance(exc, InvalidQuery):
        return "invalid"
    if isinstance(exc, NotFound):
        return "not_found"
    if isinstance(exc, Exception) and store_unavailable(exc) is not None:
        return "unavailable"
    return "error"


@contextlib.contextmanager
def observe_tool(tool: str, transport: str) -> Iterator[None]:
    """Time the tool call in the block (``docgraph_tool_seconds``), count its outcome and
    any error's kind, in a ``docgraph.tool`` span."""
    outcome = "ok"
    started = time.perf_counter()
    with span("tool", tool=tool, transport=transport):
        try:
            yield
        except BaseException as exc:
            outcome = outcome_of(exc)
            ERRORS.labels(outcome, transport).inc()
            raise
        finally:
            TOOL_SECONDS.labels(tool, transport).observe(time.perf_counter() - started)
            TOOL_CALLS.labels(tool, transport, outcome).inc()


class IndexCollector(Collector):
    """The metrics read from the index when ``/metrics`` is scraped (see the module
    docstring). A store that does not answer is ``docgraph_store_up 0``, never a failed
    scrape."""

    def __init__(self, tools: DocgraphTools, refresher: Refresher | None) -> None:
        self.tools = tools
        self.refresher = refresher
        #: (busy, waiting) worker threads, read by the scrape in the event loop.
        self.threads: tuple[int, int] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges of one scrape."""
        graph = self.tools.graph
        up = GaugeMetricFamily("docgraph_store_up", "1 when the index store answered this "
                               "scrape's read, else 0.")
        try:
            stats = graph.store.stats()
        except Exception:  # the outage is logged by the requests and /readyz
            stats = None
        up.add_metric([], 0 if stats is None else 1)
        yield up
        if stats is not None:
            documents = GaugeMetricFamily("docgraph_documents", "Source documents indexed "
                                          "per namespace.", labels=["namespace"])
            chunks = GaugeMetricFamily("docgraph_chunks", "Text chunks indexed per "
                                       "namespace.", labels=["namespace"])
            for s in stats:
                documents.add_metric([s.namespace], s.documents)
                chunks.add_metric([s.namespace], s.chunks)
            yield documents
            yield chunks
        yield from self._leader()
        running = GaugeMetricFamily("docgraph_refresher_running", "1 while this process "
                                    "runs the refresh loop.")
        running.add_metric([], int(self.refresher is not None and self.refresher.running))
        yield running
        index = graph.opened_chunk_index
        sidecar = GaugeMetricFamily("docgraph_sidecar", "The chunk index sidecar as this "
                                    "process opened it (1 for its state: loaded, missing, "
                                    "stale, rebuilt, off; 'not opened' before the first query "
                                    "or build; 'none' for an index without one).",
                                    labels=["state"])
        state = "not opened" if index is None else str(getattr(index, "sidecar_status", "none"))
        sidecar.add_metric([state], 1)
        yield sidecar
        yield from self._dense_ann(index)
        if self.threads is not None:
            busy = GaugeMetricFamily("docgraph_worker_threads_busy", "Worker threads "
                                     "running blocking work (tool calls, store reads).")
            busy.add_metric([], self.threads[0])
            waiting = GaugeMetricFamily("docgraph_worker_threads_waiting", "Requests "
                                        "waiting for a free worker thread (the queue).")
            waiting.add_metric([], self.threads[1])
            yield busy
            yield waiting

    def _dense_ann(self, index: object) -> Iterator[GaugeMetricFamily]:
        """``docgraph_dense_ann{kind,state}`` and its last build's seconds: whether the
        dense lane's ANN cache ([store] dense_graph_min_rows) answers, or the exact scan
        while it builds, is missing or cannot be (an index with none: no series)."""
        described = getattr(index, "dense_ann_state", None)
        found = described() if callable(described) else None
        if found is None:
            return
        kind, state, seconds = found
        ann = GaugeMetricFamily("docgraph_dense_ann", "The dense lane's ANN cache in this "
                                "process (1 for its state: loaded, updating, building, "
                                "below_min_rows, missing, stale, corrupt, foreign, "
                                "unavailable; all but loaded and updating mean the exact "
                                "scan answers).", labels=["kind", "state"])
        ann.add_metric([kind, state], 1)
        yield ann
        built = GaugeMetricFamily("docgraph_dense_ann_build_seconds", "Seconds the dense "
                                  "ANN cache's last update in this process took (0: none).",
                                  labels=["kind"])
        built.add_metric([kind], seconds)
        yield built

    def _leader(self) -> Iterator[GaugeMetricFamily]:
        """``docgraph_leader{state}``: 1 for who leads the refresh as this process sees it."""
        leadership = self.tools.graph.leadership
        try:
            leading = leadership.leading
            state = "this process" if leading else \
                "none" if leadership.leader() is None else "another process"
        except Exception:
            state = "unknown"
        leader = GaugeMetricFamily("docgraph_leader", "Who leads the index's refresh as "
                                   "this process sees it (1 for the current state).",
                                   labels=["state"])
        for each in ("this process", "another process", "none", "unknown"):
            leader.add_metric([each], int(each == state))
        yield leader


class Observability:
    """``/metrics`` of one app (see the module docstring)."""

    def __init__(self, tools: DocgraphTools, refresher: Refresher | None = None) -> None:
        self.tools = tools
        self.collector = IndexCollector(tools, refresher)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)

    def routes(self) -> list[Route]:
        """The ``/metrics`` route."""
        return [Route(METRICS_PATH, endpoint=self.metrics, methods=["GET"])]

    def render(self) -> bytes:
        """The Prometheus text of every metric: the process's and the index's."""
        return generate_latest(REGISTRY) + generate_latest(self.registry)

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics`` for a caller ``[telemetry] metrics`` allows."""
        settings = self.tools.graph.settings
        mode = settings.telemetry.metrics
        if mode == "off":
            return JSONResponse({"error": "metrics are off ([telemetry] metrics = \"off\")"},
                                status_code=404)
        user = request.scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            return JSONResponse({"error": "a valid bearer token is required"}, status_code=401,
                                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        if mode == "admin":
            caller = caller_from_access_token(user.access_token)
            admin = await anyio.to_thread.run_sync(
                is_console_admin, caller, self.tools.governance.entitlements,
                settings.serve.console_admin_role)
            if not admin:
                return JSONResponse({"error": "access denied: /metrics needs the token of a "
                                     f"user holding role {settings.serve.console_admin_role!r}"
                                     " on every domain ([telemetry] metrics = \"admin\")"},
                                    status_code=403)
        stats = anyio.to_thread.current_default_thread_limiter().statistics()
        self.collector.threads = (stats.borrowed_tokens, stats.tasks_waiting)
        body = await anyio.to_thread.run_sync(self.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
