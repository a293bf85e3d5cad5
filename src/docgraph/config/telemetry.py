"""The ``[telemetry]`` section: what a server tells its operator (metrics, log lines,
traces). Everything here is off or cheap by default; OpenTelemetry needs the ``otel``
extra and is never imported unless ``otel_endpoint`` is set."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from docgraph.config.section import Section


class TelemetrySettings(Section):
    """Metrics at ``/metrics``, the log line format and OpenTelemetry tracing."""

    log_format: Literal["text", "json"] = Field(
        default="text",
        description="How `docgraph serve` writes its log on stderr: 'text' (one readable "
        "line per event) or 'json' (one JSON object per line, with the request_id the "
        "audit record and the retrieval trace of the same request carry, and one "
        "'request' event per HTTP request).",
    )
    metrics: Literal["admin", "token", "off"] = Field(
        default="admin",
        description="Who may read the Prometheus metrics at /metrics: 'admin' (a bearer "
        "token of a user holding [serve] console_admin_role on every domain), 'token' (any "
        "valid bearer token, e.g. one made for the scraper) or 'off' (404). Each server "
        "serves its own process's metrics.",
    )
    otel_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP traces endpoint (e.g. http://127.0.0.1:4318/v1/traces): "
        "when set, every request and build is traced with OpenTelemetry (needs the 'otel' "
        "extra). Unset (the default): no tracing and no OpenTelemetry SDK import.",
    )
    otel_service_name: str = Field(
        default="docgraph", min_length=1,
        description="The service.name resource attribute of exported spans.")
    otel_content: bool = Field(
        default=False,
        description="Whether spans carry query text (the 'query' attribute of the "
        "docgraph.governed span). Off: spans carry ids, counts and timings only, never query "
        "text or document content.",
    )

    @field_validator("otel_endpoint")
    @classmethod
    def _endpoint_is_http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"telemetry.otel_endpoint {value!r}: must be an http:// or "
                             "https:// URL of an OTLP/HTTP receiver")
        return value
