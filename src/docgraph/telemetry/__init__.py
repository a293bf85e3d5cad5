"""What docgraph tells its operator about itself: the request id every log line, audit
record and retrieval trace of one request carries (:mod:`~docgraph.telemetry.context`),
OpenTelemetry spans, optional and free when off (:mod:`~docgraph.telemetry.tracing`),
Prometheus metrics (:mod:`~docgraph.telemetry.metrics`) and JSON log lines
(:mod:`~docgraph.telemetry.logs`).

On the ground floor: every layer may record a span or a metric; it imports nothing of
docgraph but the settings.
"""

from __future__ import annotations

from docgraph.telemetry.context import current_request_id, request_scope
from docgraph.telemetry.tracing import content_attributes, span, tracing_enabled

__all__ = ["content_attributes", "current_request_id", "request_scope", "span",
           "tracing_enabled"]
