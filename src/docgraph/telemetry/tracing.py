"""OpenTelemetry spans, optional and free when off.

Code marks its phases with ``with span("lane.seed"):``. Until :func:`install_tracer`
(:func:`configure_tracing` from ``[telemetry] otel_endpoint``) is called, :func:`span`
returns one shared no-op context manager: no OpenTelemetry object is made and the SDK is
never imported, so a server without tracing pays a function call per phase. With a tracer
installed, each ``span`` is a child of the span current in its context (the request's,
across the worker thread that runs it), named ``docgraph.<name>``.

Spans carry ids, counts, modes and timings. Query text only goes on a span through
:func:`content_attributes`, which is empty unless ``[telemetry] otel_content`` is on;
document content never does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docgraph.config.telemetry import TelemetrySettings

log = logging.getLogger(__name__)

#: Attribute values OpenTelemetry accepts.
AttributeValue = str | bool | int | float

_NOOP: AbstractContextManager[None] = contextlib.nullcontext()
_tracer: Any = None  # an opentelemetry.trace.Tracer while tracing is on
_content = False
_provider: Any = None  # the SDK's tracer provider configure_tracing made


def tracing_enabled() -> bool:
    """Whether spans are recorded (a tracer is installed)."""
    return _tracer is not None


def span(name: str, **attributes: AttributeValue | None) -> AbstractContextManager[Any]:
    """A span ``docgraph.<name>`` around the ``with`` block, child of the current one, with
    the ``attributes`` that are not None; the shared no-op when tracing is off. An
    exception leaving the block is recorded on the span and marks it as an error."""
    tracer = _tracer
    if tracer is None:
        return _NOOP
    kept = {key: value for key, value in attributes.items() if value is not None}
    manager: AbstractContextManager[Any] = tracer.start_as_current_span(
        f"docgraph.{name}", attributes=kept)
    return manager


def content_attributes(**texts: str | None) -> dict[str, str | None]:
    """``texts`` as span attributes (``query`` ...) when ``[telemetry]
    otel_content`` allows text on spans; else nothing (each value None, so :func:`span`
    drops it)."""
    return {key: (value if _content else None) for key, value in texts.items()}


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the current span, when tracing is on and a span is
    current; the request id of a traced request (see :mod:`~docgraph.telemetry.context`)."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def install_tracer(tracer: Any, *, content: bool = False) -> None:
    """Record spans with ``tracer`` (an OpenTelemetry ``Tracer``; None turns tracing off);
    ``content``: whether query text may go on spans."""
    global _tracer, _content
    _tracer, _content = tracer, content


def configure_tracing(settings: TelemetrySettings,
                      resource: Mapping[str, AttributeValue] | None = None) -> Any:
    """Turn tracing on as ``settings`` say: spans exported in batches over OTLP/HTTP to
    ``otel_endpoint``, under ``otel_service_name``. Returns the SDK's tracer provider (shut
    it down to flush), or None when ``otel_endpoint`` is unset (nothing is imported then).
    Raises ImportError naming the ``otel`` extra when the SDK is not installed."""
    if not settings.otel_endpoint:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ImportError("telemetry.otel_endpoint is set but the OpenTelemetry SDK is not "
                          "installed: pip install 'docgraph[otel]'") from exc
    provider = TracerProvider(resource=Resource.create(
        {"service.name": settings.otel_service_name, **(resource or {})}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=settings.otel_endpoint)))
    global _provider
    shutdown_tracing()  # a provider configured before: its spans exported, then replaced
    _provider = provider
    install_tracer(provider.get_tracer("docgraph"), content=settings.otel_content)
    log.info("tracing: spans exported to %s", settings.otel_endpoint)
    return provider


def shutdown_tracing() -> None:
    """Export the spans still queued and turn tracing off: the server's shutdown calls it
    (its lifespan, which runs before uvicorn re-raises SIGTERM, so no span of the last
    seconds is lost). Nothing to do unless :func:`configure_tracing` turned tracing on."""
    global _provider
    provider, _provider = _provider, None
    if provider is not None:
        install_tracer(None)
        provider.shutdown()

