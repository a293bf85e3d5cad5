"""The CLI's servers: ``serve`` (MCP over HTTP, the JSON API and the console, refreshing
while it leads) and ``mcp`` (MCP over stdio for agent hosts). Registered on the root app by
:mod:`docgraph.serve.cli`."""

from __future__ import annotations

import errno
import logging
import sys
from typing import Annotated

import typer
from rich.markup import escape

from docgraph.serve.cli_common import err, notice, open_index, state
from docgraph.telemetry.logs import JsonFormatter, use_log_format


def serve_http(
    host: Annotated[
        str | None, typer.Option("--host", help="Interface to bind (default serve.host, "
                                              "127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Port (default serve.port, 8765).")
    ] = None,
) -> None:
    """Serve MCP (streamable HTTP at /mcp), the JSON API (/api/v1, /openapi.json) and the
    web console (/console).

    Every request needs a bearer token (`docgraph token add USER`), or, with auth.issuer
    set, an access token of that identity provider (users and groups from its claims);
    callers see only their entitled namespaces (governance.policy_file or
    governance.sql_url). With
    refresh.in_serve (the default) it also refreshes every namespace each
    refresh.interval_seconds while it leads: of several servers on one index exactly one
    does, and another takes over when it stops or dies."""
    from docgraph.serve.http import bind_socket, serve
    from docgraph.serve.setup import build_tools, leave_fleet, open_bearer_tokens
    from docgraph.telemetry.tracing import configure_tracing, shutdown_tracing

    handler = _log_to_stderr()  # before the MCP server is built: it configures logging
    with open_index() as dg:
        telemetry = dg.settings.telemetry
        if handler is not None:
            use_log_format(handler, telemetry.log_format)
        settings = dg.settings.serve
        tokens = open_bearer_tokens(dg, notice)
        auth = dg.settings.auth
        if not tokens.entries() and auth.issuer is None:
            err.print("no bearer tokens in the index database: create one with "
                      "[bold]docgraph token add USER[/], or set auth.issuer to accept your "
                      "identity provider's access tokens")
            raise typer.Exit(1)
        refresh = dg.settings.refresh
        bind = host or settings.host
        bind_port = settings.port if port is None else port
        try:
            sock = bind_socket(bind, bind_port)
        except OSError as exc:
            err.print(f"[red]error:[/] cannot listen on port {bind_port} of {escape(bind)}: "
                      f"{escape(exc.strerror or str(exc))}"
                      + (" (another server, perhaps a docgraph serve, is using it)"
                         if exc.errno == errno.EADDRINUSE else "")
                      + f"; stop it or pick another port with [bold]--port[/] "
                      f"(e.g. --port {bind_port + 1})")
            raise typer.Exit(1) from exc
        tools = build_tools(dg, fleet=True)  # the policy every server of the index serves
        # console links in results (search/fetch `url`): [serve] public_url, else this bind
        tools.governance.base_url = settings.base_url(bind, bind_port)
        resource = None
        if auth.issuer is not None:
            from docgraph.serve.idp.resource import ResourceServer

            resource = ResourceServer(auth, tools.governance.base_url + "/mcp")
            if not settings.public_url and not auth.audience and bind not in (
                    "127.0.0.1", "localhost", "::1"):
                err.print("[yellow]warning:[/] hosts will ask for tokens for the URL they "
                          "reach this server at; set serve.public_url to it (the audience "
                          f"is now {escape(resource.audience)})")
            err.print(f"accepting access tokens of {escape(auth.issuer)} for audience "
                      f"{escape(resource.audience)} (metadata: {escape(resource.metadata_url)})")
        if bind not in ("127.0.0.1", "localhost", "::1"):
            err.print(f"[yellow]warning:[/] binding {escape(bind)} makes the server reachable "
                      "from the network; put TLS in front of it")
        base = f"http://{escape(f'[{bind}]' if ':' in bind else bind)}:{bind_port}"
        err.print(f"MCP at {base}/mcp, JSON API at {base}/api/v1 (OpenAPI: /openapi.json), "
                  f"console at {base}/console; Ctrl-C stops")
        refreshing = refresh.in_serve and not dg.ports.read_only
        if dg.ports.read_only:
            err.print("[yellow]read-only index[/]: this server does not refresh it")
        elif refresh.in_serve:
            err.print(f"refreshing every {refresh.interval_seconds:g}s while this process "
                      "leads the index's builds (one process does; refresh.in_serve = false "
                      "turns this off)")
        try:
            provider = configure_tracing(telemetry)
        except ImportError as exc:
            leave_fleet(tools.governance)
            err.print(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(1) from exc
        if provider is not None:
            err.print(f"tracing: spans exported to {escape(str(telemetry.otel_endpoint))}")
        try:  # the server's shutdown exports the spans still queued (shutdown_tracing)
            serve(tools, tokens, host=bind, port=bind_port, sock=sock,
                  refresher=dg.refresher if refreshing else None, resource=resource)
        finally:
            shutdown_tracing()  # when the server never got to shut down
            leave_fleet(tools.governance)  # while the index is open: its row is deleted


def _log_to_stderr() -> logging.Handler | None:
    """Show docgraph's log records of INFO and above (the refresher's leadership changes,
    rounds and failures, the server's errors) on stderr, each once, unless logging is set
    up already.

    The handler goes on the root logger, not on ``docgraph``'s: the MCP server, when it is
    built, configures the root logger (``logging.basicConfig`` with a rich handler) unless
    that has a handler, and a handler on ``docgraph``'s logger besides one on the root
    printed every record twice. The root keeps its level (WARNING unless set otherwise), so
    other libraries stay quiet. Returns the handler (None when logging was set up
    already), for :func:`~docgraph.telemetry.logs.use_log_format` once the settings are
    read. The per-request lines of ``docgraph.access`` are shown in the JSON format only
    (a text log stays as terse as it was)."""
    logger, root = logging.getLogger("docgraph"), logging.getLogger()
    if logger.handlers or root.handlers:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(_AccessLinesInJsonOnly(handler))
    root.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


class _AccessLinesInJsonOnly(logging.Filter):
    """Drops the per-request ``docgraph.access`` records unless the handler writes JSON."""

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but an access line of a text handler."""
        return record.name != "docgraph.access" or isinstance(self.handler.formatter,
                                                             JsonFormatter)


def mcp_stdio(
    user: Annotated[
        str | None, typer.Option("--user", help="Caller (default serve.stdio_user).")
    ] = None,
    role: Annotated[
        str | None, typer.Option("--role", help="Active role (default serve.stdio_role).")
    ] = None,
) -> None:
    """Serve MCP over stdin/stdout as the configured caller (for agent hosts that spawn it).

    Without [governance] the index owner is the caller and reads everything, as with the
    read commands; with it the caller is --user or serve.stdio_user, and a caller without
    role assignments is warned about on stderr at start-up. It never refreshes the index:
    agent hosts start one per session and end it with the session, so builds belong to a
    long-running `serve` or `refresh --watch`."""
    import anyio

    from docgraph.serve.mcp import run_stdio
    from docgraph.serve.setup import caller_warnings, stdio_governance
    from docgraph.serve.tools import DocgraphTools

    with open_index(read=True) as dg:  # an agent host's typo must not create an empty index
        governance, caller = stdio_governance(dg, user or state.get("user"),
                                              role or state.get("role"))
        for warning in caller_warnings(dg, governance, caller):
            err.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        anyio.run(run_stdio, DocgraphTools(governance), caller)

