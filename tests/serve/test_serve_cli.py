"""``docgraph serve`` as a real process: what it says when it starts and when it cannot.

What must hold: the start-up banner names every address the server answers on (``/mcp``,
``/api/v1``, ``/console``); each log record is printed once; a second server on a port in
use says so, naming the port and ``--port``, exits non-zero and never announces itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from docgraph import DocGraph
from tests.deployment import Deployment, embedded_store
from tests.helpers import write_files
from tests.serve.test_http_server import Running
from tests.serve.test_otel_export import Receiver

POLICY = "assignments:\n  - {user: root, role: admin, domain: \"*\"}\n"
DOCS = {"runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n"}


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, embedded_store(tmp_path / "index.db"), POLICY,
                      "[refresh]\ninterval_seconds = 1.0\n")
    with DocGraph.open(config_file=made.config) as graph:
        graph.index(write_files(tmp_path / "ops", DOCS), "ops")
    made.run("token", "add", "root")
    try:
        yield made
    finally:
        made.stop()


def _words(text: str) -> str:
    return " ".join(text.split())  # the banner is wrapped to the terminal's width


def _wait_for_log(deployment: Deployment, process: object, needle: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        log = deployment.log_of(process)  # type: ignore[arg-type]
        if needle in log:
            return log
        assert time.monotonic() < deadline, log[-3000:]
        time.sleep(0.2)


def test_banner_names_the_console_and_each_log_line_appears_once(
        deployment: Deployment) -> None:
    process, url = deployment.serve_process()
    log = _wait_for_log(deployment, process, "now leads the refresh")
    time.sleep(2.5)  # a few refresh rounds: each logged once
    log = deployment.log_of(process)
    shown = _words(log)
    assert f"MCP at {url}/mcp" in shown
    assert f"JSON API at {url}/api/v1" in shown
    assert f"console at {url}/console" in shown, log
    assert httpx.get(url + "/console/login", timeout=10).status_code == 200
    assert log.count("now leads the refresh") == 1, log
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    records = [line for line in lines if " INFO " in line]
    assert records, log
    assert len(records) == len(set(records)), log  # timestamps differ: a repeat is a double
    assert not any(line.startswith("INFO ") or " INFO     " in line for line in lines), log


def test_a_second_server_on_a_used_port_says_so_before_announcing(
        deployment: Deployment) -> None:
    _, url = deployment.serve_process()
    port = url.rsplit(":", 1)[1]
    started = time.monotonic()
    second = deployment.attempt("serve", "--port", port)
    assert time.monotonic() - started < 60
    assert second.returncode != 0
    said = _words(second.stdout + second.stderr)
    assert "MCP at" not in said and "Ctrl-C stops" not in said, said
    assert f"port {port}" in said and "--port" in said, said
    assert "in use" in said, said
    assert said.count("error") == 1, said  # one message, not the server's log lines twice
    assert httpx.get(url + "/healthz", timeout=10).status_code == 200  # the first one serves


def test_the_build_line_says_how_many_documents_got_new_permissions():
    from docgraph.ingest.report import IngestReport
    from docgraph.model import SourceRecord
    from docgraph.serve.cli_build import _report_line

    report = IngestReport(SourceRecord(1, "file:///srv/share", "ops", "file"), unchanged=4,
                          access_changed=3)
    assert "4 unchanged, 0 removed, 0 failed, 3 with new permissions (not re-embedded);" in \
        _report_line(report, 1.0)
    report.access_changed = 0
    assert "permissions" not in _report_line(report, 1.0)


def test_json_logs_and_otlp_traces_of_serve_carry_each_request_s_id(tmp_path: Path) -> None:
    """``[telemetry] log_format = "json"`` and ``otel_endpoint`` as ``docgraph serve`` reads
    them: a request's one log line, its audit record and the spans exported to a real OTLP
    receiver (flushed when the server stops) carry the id answered in ``X-Request-ID``."""
    receiver = Receiver()
    collector = Running(Starlette(routes=[Route("/v1/traces", receiver.traces,
                                                methods=["POST"])]))
    with collector:
        made = Deployment(tmp_path, embedded_store(tmp_path / "index.db"), POLICY,
                          '[refresh]\nin_serve = false\n[telemetry]\nlog_format = "json"\n'
                          f'otel_endpoint = "{collector.url}/v1/traces"\n')
        with DocGraph.open(config_file=made.config) as graph:
            graph.index(write_files(tmp_path / "ops", DOCS), "ops")
        token = made.run("token", "add", "root").strip().split()[-1]
        try:
            process, url = made.serve_process()
            answer = httpx.post(url + "/api/v1/search_documents", timeout=30,
                                json={"query_text": "What does E-417 mean?"},
                                headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200, answer.text
            request_id = answer.headers["x-request-id"]
            log = _wait_for_log(made, process, request_id)
        finally:
            made.stop()  # SIGTERM: the server flushes its spans before it exits
        spans = receiver.spans()
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    mine = [r for r in records if r.get("request_id") == request_id]
    assert [(r["event"], r["status"], r["path"]) for r in mine] == [
        ("request", 200, "/api/v1/search_documents")], log[-3000:]
    assert {"time", "level", "logger", "message", "duration_ms"} <= set(mine[0])
    with DocGraph.open(config_file=made.config) as graph:
        audit = [r for r in graph.audit_store.recent(10) if r.get("request_id") == request_id]
    assert [r["operation"] for r in audit] == ["retrieve:vector_first"]
    traced = {s.name for resource, s in spans
              if s.trace_id.hex() == request_id and resource["service.name"] == "docgraph"}
    assert {"docgraph.http", "docgraph.tool", "docgraph.governed", "docgraph.lane.seed",
            "docgraph.audit"} <= traced, (traced, log[-2000:])
