"""``docgraph serve``: MCP over streamable HTTP plus the same operations as a JSON HTTP API.

Routes (one ASGI app, served by uvicorn, bound to 127.0.0.1 unless configured otherwise):

- ``/mcp``                 MCP streamable HTTP (bearer token required)
- ``POST /api/v1/<tool>``  the tool with a JSON object of arguments (bearer token required);
  ``GET`` also works for ``list_documents`` and ``index_status`` (query parameters)
- ``GET /openapi.json``    the OpenAPI 3.1 document of the JSON API
- ``GET /healthz``         liveness (no token, no data): 200 while the process runs
- ``GET /readyz``          readiness (no token, no data): 200 when the store can be read,
  503 naming the failing component when not (:mod:`docgraph.serve.readiness`)
- ``GET /metrics``         Prometheus metrics (a bearer token as ``[telemetry] metrics`` says:
  an admin's by default; :mod:`docgraph.serve.observe`)
- ``/console``             the web console for admins (:mod:`docgraph.serve.console`:
  sign-in with an admin's bearer token, then a session cookie and CSRF tokens)

With a :class:`~docgraph.lifecycle.refresher.Refresher` given, the server runs its
background loop from start-up to shutdown (``docgraph serve`` with ``refresh.in_serve``):
the lifespan starts it and, on SIGTERM or Ctrl-C, stops it after the namespace being built
(waiting up to :data:`REFRESHER_STOP_SECONDS`; a longer build is cut off like a crash and
redone by the next leader) and before the process exits, so leadership is released.

Every route but ``/healthz`` and ``/readyz`` first passes one Host/Origin (DNS-rebinding)
policy derived from the bind address (:mod:`docgraph.serve.guards`: 421 for a foreign
``Host``, 403 for a foreign ``Origin``). Every request without a valid ``Authorization:
Bearer <token>`` then gets 401 (with ``[auth] issuer`` the token may also be the identity
provider's, the 401 names the Protected Resource Metadata served under
``/.well-known/oauth-protected-resource``, and a missing required scope is a 403:
:mod:`docgraph.serve.idp.resource`). A request that fails because the store cannot be reached
(PostgreSQL stopped or restarting) gets 503 with ``Retry-After``, in the route's error shape,
and the outage is logged once (:mod:`docgraph.serve.outage`); the server reconnects by
itself when the store is back. Tokens map to callers (:mod:`docgraph.serve.auth`); the
caller is never taken from the request body. Bodies are parsed with bounded nesting and
refused (400, naming the argument) when they hold text that is not valid Unicode
(:mod:`docgraph.serve.json_checks`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from docgraph.errors import DocgraphError, InvalidQuery, NotFound
from docgraph.governance import AccessDenied, Caller, SqlRowAuthorizer
from docgraph.limits import MAX_BODY_BYTES
from docgraph.serve.auth import (
    BearerTokens,
    RouteBearerBackend,
    StoreTokenVerifier,
    caller_from_access_token,
)
from docgraph.serve.console import PREFIX as CONSOLE_PREFIX
from docgraph.serve.console import Console, ConsoleAuth, SessionStore
from docgraph.serve.console.sessions import idp_admins
from docgraph.serve.guards import UNGUARDED_PATHS, HostOriginGuard, MCPBodyScreen, host_policy
from docgraph.serve.idp.resource import Challenge, RequireBearer, ResourceServer
from docgraph.serve.json_checks import MAX_BODY_DEPTH, parse_json
from docgraph.serve.mcp import INSTRUCTIONS, build_mcp_server
from docgraph.serve.observe import Observability, RequestTelemetry, observe_tool
from docgraph.serve.outage import (
    RETRY_AFTER_SECONDS,
    StoreOutage,
    StoreOutageGuard,
    mcp_unavailable,
)
from docgraph.serve.proxies import uvicorn_forwarding
from docgraph.serve.readiness import Readiness
from docgraph.serve.setup import leave_fleet
from docgraph.serve.text_checks import find_unpaired_surrogate
from docgraph.serve.tools import TOOLS, DocgraphTools
from docgraph.store.outages import store_unavailable
from docgraph.telemetry.tracing import shutdown_tracing
from docgraph.version import __version__

if TYPE_CHECKING:
    from docgraph.lifecycle.refresher import Refresher

log = logging.getLogger(__name__)
#: How long shutdown waits for the refresher to finish the namespace it is building.
REFRESHER_STOP_SECONDS = 120.0

API_PREFIX = "/api/v1"
#: Tools that may also be called with GET and query parameters (no free text involved).
GET_TOOLS = ("list_documents", "index_status")


def http_caller(ctx: Context[Any, Any]) -> Caller:
    """The caller of an MCP request over HTTP: the user its bearer token maps to."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    if not isinstance(user, AuthenticatedUser):
        raise ToolError("access denied: no authenticated caller")
    return caller_from_access_token(user.access_token)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _read_json(request: Request) -> dict[str, Any]:
    """The JSON object of arguments in the body (empty body: no arguments).

    Raises :class:`InvalidQuery` (a 400) for an oversized body, invalid UTF-8 or JSON,
    nesting deeper than :data:`~docgraph.serve.json_checks.MAX_BODY_DEPTH`, or a value that
    is not an object."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise InvalidQuery(f"request body: larger than {MAX_BODY_BYTES} bytes")
    if not body.strip():
        return {}
    data = parse_json(bytes(body))
    if not isinstance(data, dict):
        raise InvalidQuery("request body: must be a JSON object of arguments")
    return data


def _screen_surrogates(arguments: dict[str, Any]) -> None:
    """Refuse a body holding a lone surrogate anywhere (an argument's value or name, known
    to the tool or not), naming where, before any tool code or the JSON encoder of the
    answer meets text that cannot be encoded: the JSON API's form of the screen ``/mcp``
    bodies and stdio lines pass (:func:`~docgraph.serve.json_checks.screen_jsonrpc`). It
    checks the wire format only; the arguments are validated by the tool's schema and the
    governed entry."""
    finding = find_unpaired_surrogate(arguments)
    if finding is not None:
        raise InvalidQuery(f"{finding.where()}: {finding.problem}")


def create_app(tools: DocgraphTools, tokens: BearerTokens, *, host: str = "127.0.0.1",
               stateless: bool = False, refresher: Refresher | None = None,
               console: Console | None = None,
               resource: ResourceServer | None = None) -> Starlette:
    """The ASGI app: MCP at ``/mcp``, the JSON API under ``/api/v1``, ``/openapi.json`` and
    the console under ``/console`` (``console``, or one built over ``tools`` and ``tokens``
    with the admin role of ``[serve] console_admin_role`` and, when ``[auth]`` configures
    it, sign-in through the identity provider); ``refresher``'s background loop runs while
    the app does (see the module docstring). With ``resource`` (``[auth] issuer``) the
    identity provider's access tokens are accepted beside the static ones, and the
    Protected Resource Metadata is served (:mod:`docgraph.serve.idp.resource`)."""
    if console is None:
        console = Console(tools, ConsoleAuth(
            tokens, tools.governance.entitlements,
            SessionStore(tools.graph.console_session_store),
            tools.graph.settings.serve.console_admin_role,
            idp=idp_admins(tools.graph.settings.auth)))
    mcp_server = build_mcp_server(tools, http_caller, transport="mcp")
    policy = host_policy(host)
    # Builds the session manager; its own Host/Origin check gets the same policy.
    mcp_server.streamable_http_app(streamable_http_path="/mcp", host=host,
                                   stateless_http=stateless, transport_security=policy)
    session_manager = mcp_server.session_manager
    outage = StoreOutage()
    readiness = readiness_of(tools, tokens, outage, refresher)
    challenge = resource.challenge if resource is not None else Challenge()
    mcp_endpoint = RequireBearer(
        MCPBodyScreen(StreamableHTTPASGIApp(session_manager),
                      session_manager.max_request_body_size), challenge)

    async def call_api(request: Request) -> Response:
        name = request.path_params["tool"]
        if name not in TOOLS:
            return _error(404, f"unknown operation {name!r}; operations are "
                               f"{', '.join(TOOLS)}")
        if request.method == "GET" and name not in GET_TOOLS:
            return _error(405, f"{name} takes POST with a JSON body", {"Allow": "POST"})
        refusal = challenge.refusal(request.scope)
        user = request.scope.get("user")
        if refusal is not None or not isinstance(user, AuthenticatedUser):
            status, _, description, headers = refusal or (401, "", "", {})
            return _error(status, description, headers)
        try:
            caller = caller_from_access_token(user.access_token)
            if request.method == "GET":
                arguments: dict[str, Any] = dict(request.query_params)
            else:
                arguments = await _read_json(request)
            _screen_surrogates(arguments)
            with observe_tool(name, "http"):
                result = await anyio.to_thread.run_sync(
                    functools.partial(tools.call, name, caller, arguments))
        except AccessDenied as exc:
            return _error(403, f"access denied: {exc}")
        except InvalidQuery as exc:
            return _error(400, str(exc))
        except NotFound as exc:
            return _error(404, str(exc))
        except Exception as exc:
            if store_unavailable(exc) is not None:
                raise  # the outage guard answers 503 and logs the outage once
            if isinstance(exc, DocgraphError):
                log.warning("%s failed: %s", name, exc)
                return _error(500, str(exc))
            log.exception("%s crashed", name)
            return _error(500, "internal error (logged on the server)")
        return JSONResponse(result)

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__})

    async def readyz(request: Request) -> Response:
        report = await readiness.report()
        headers = None if report.ready else {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return JSONResponse(report.body, status_code=200 if report.ready else 503,
                            headers=headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with session_manager.run():
            try:
                if refresher is None:
                    yield
                    return
                refresher.start()
                try:
                    yield
                finally:
                    await anyio.to_thread.run_sync(_stop_refresher, refresher)
            finally:
                readiness.close()
                # uvicorn re-raises SIGTERM/SIGINT after this, ending the process: say here
                # that this server no longer serves its fleet's policy
                await anyio.to_thread.run_sync(leave_fleet, tools.governance)
                shutdown_tracing()  # export the spans still queued before the process ends

    routes = [
        Route("/mcp", endpoint=mcp_endpoint),
        Route(API_PREFIX + "/{tool}", endpoint=call_api, methods=["GET", "POST"]),
        Route("/openapi.json", endpoint=openapi, methods=["GET"]),
        Route("/healthz", endpoint=healthz, methods=["GET"]),
        Route("/readyz", endpoint=readyz, methods=["GET"]),
        *console.routes(),
        *(resource.routes() if resource is not None else []),
        *Observability(tools, refresher).routes(),  # /metrics
    ]
    static = StoreTokenVerifier(tokens, outage)
    middleware = [
        Middleware(RequestTelemetry),  # outermost: every answer has a request id and a time
        Middleware(HostOriginGuard, policy=policy),
        # Outside authentication: the token check is where an outage shows first.
        Middleware(StoreOutageGuard, outage=outage,
                   pages={"/mcp": mcp_unavailable, CONSOLE_PREFIX: console.unavailable}),
        Middleware(AuthenticationMiddleware, backend=(
            resource.backend(static, UNGUARDED_PATHS) if resource is not None
            else RouteBearerBackend(static, UNGUARDED_PATHS))),
        Middleware(AuthContextMiddleware),
    ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def readiness_of(tools: DocgraphTools, tokens: BearerTokens, outage: StoreOutage,
                 refresher: Refresher | None) -> Readiness:
    """The readiness check of a server over ``tools``: the store probed through the token
    store's change counter (the read every request makes first), the index's leadership,
    and the row authorizer's databases when row documents are re-checked in SQL."""
    authorizer = tools.governance.row_authorizer
    rows = authorizer.urls if isinstance(authorizer, SqlRowAuthorizer) else {}
    return Readiness(store_probe=tokens.store.version, leadership=tools.graph.leadership,
                     outage=outage, row_databases=rows,
                     refresher_running=lambda: refresher is not None and refresher.running)


def _stop_refresher(refresher: Refresher) -> None:
    """Stop the loop (it finishes the namespace it builds) and stop leading."""
    if refresher.stop(timeout=REFRESHER_STOP_SECONDS):
        log.info("refresher stopped; this process no longer leads the refresh")
    else:
        log.warning("the refresher did not finish its namespace within %.0fs; exiting "
                    "anyway (the next leader redoes the build)", REFRESHER_STOP_SECONDS)


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API (one operation per tool)."""
    schemas: dict[str, Any] = {
        "Error": {"type": "object", "properties": {"error": {"type": "string"}},
                  "required": ["error"]},
    }
    errors = {
        "400": "Invalid arguments (the message names each bad argument), or a body that is "
               f"not JSON, nests deeper than {MAX_BODY_DEPTH} levels or holds text that is not "
               "valid Unicode.",
        "401": "Missing or invalid bearer token (WWW-Authenticate says why, and with an "
               "identity provider configured where its resource metadata is).",
        "403": "The caller is denied (no entitled namespace, or a role it does not hold), "
               "the token lacks a required scope (insufficient_scope), or the Origin header "
               "is not allowed.",
        "404": "read_document / fetch: no readable document or chunk has this id (the same "
               "answer whether it never existed or is outside the caller's reach).",
        "421": "The Host header is not allowed (DNS-rebinding protection).",
        "500": "Server-side failure (the message says which).",
        "503": "The index store cannot be reached (e.g. PostgreSQL is restarting); retry "
               "after the seconds in the Retry-After header. /readyz says when it is back.",
    }
    error_responses = {
        code: {"description": text, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Error"}}}}
        for code, text in errors.items()
    }
    paths: dict[str, Any] = {}
    for name, spec in TOOLS.items():
        schema = spec.args.model_json_schema(ref_template="#/components/schemas/{model}")
        for key, value in schema.pop("$defs", {}).items():
            schemas[key] = value
        schemas[spec.args.__name__] = schema
        ok = {"description": f"The {name} result.", "content": {"application/json": {
            "schema": {"type": "object", "additionalProperties": True}}}}
        operation: dict[str, Any] = {
            "operationId": name,
            "summary": spec.title,
            "description": spec.description,
            "tags": ["tools"],
            "security": [{"bearerAuth": []}],
            "requestBody": {
                "required": bool(schema.get("required")),
                "content": {"application/json": {
                    "schema": {"$ref": f"#/components/schemas/{spec.args.__name__}"}}},
            },
            "responses": {"200": ok, **error_responses},
        }
        item: dict[str, Any] = {"post": operation}
        if name in GET_TOOLS:
            item["get"] = {
                "operationId": f"{name}_get",
                "summary": spec.title,
                "description": spec.description,
                "tags": ["tools"],
                "security": [{"bearerAuth": []}],
                "parameters": [
                    {"name": field, "in": "query", "required": False,
                     "schema": schema["properties"][field]}
                    for field in schema.get("properties", {})
                ],
                "responses": {"200": ok, **error_responses},
            }
        paths[f"{API_PREFIX}/{name}"] = item
    paths["/healthz"] = {"get": {"operationId": "healthz", "summary": "Liveness",
                                 "security": [],
                                 "responses": {"200": {"description": "The server is up."}}}}
    readiness = {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}
    paths["/readyz"] = {"get": {
        "operationId": "readyz", "summary": "Readiness",
        "description": "Whether this server can serve requests now: the index store answers "
                       "a read and the refresh leader can be read (checked at most once a "
                       "second). A row database that is down leaves it ready but degraded "
                       "(its row documents are left out of answers). No token, no data.",
        "security": [],
        "responses": {
            "200": {"description": "Ready (status 'ready' or 'degraded').",
                    "content": readiness},
            "503": {"description": "Not ready: 'failing' names the component.",
                    "content": readiness},
        }}}
    state = {"type": "object", "properties": {"status": {"type": "string"}},
             "required": ["status"], "additionalProperties": True}
    schemas["Readiness"] = {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["ready", "degraded", "not ready"]},
            "failing": {"type": "array", "items": {"type": "string"}},
            "components": {"type": "object", "properties": {
                "store": state, "leader": state, "row_databases": state}},
        },
        "required": ["status", "failing", "components"],
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "docgraph",
            "version": __version__,
            "description": "The docgraph agent tools as a JSON API (the same operations the "
                           "MCP server at /mcp exposes). Every call runs as the caller its "
                           "bearer token maps to, within that caller's namespaces.\n\n"
                           + INSTRUCTIONS,
        },
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (not yet listening), as uvicorn would bind it
    (``SO_REUSEADDR``, so a port left in TIME_WAIT by a stopped server is usable).

    Bound before the server announces itself, so a port another process listens on is an
    :class:`OSError` (``EADDRINUSE``) the caller can report, not a log line after a banner
    that said the server was up; the socket is then handed to :func:`serve`, so nothing can
    take the port in between."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def serve(tools: DocgraphTools, tokens: BearerTokens, *, host: str = "127.0.0.1",
          port: int = 8765, log_level: str = "warning",
          refresher: Refresher | None = None, sock: socket.socket | None = None,
          resource: ResourceServer | None = None) -> None:
    """Run the HTTP server until interrupted (blocking); with ``refresher``, its loop runs
    as long as the server does. ``sock`` is a socket :func:`bind_socket` bound already
    (else ``host``:``port`` is bound here); ``resource`` accepts the identity provider's
    tokens too (:func:`create_app`)."""
    import uvicorn

    app = create_app(tools, tokens, host=host, refresher=refresher, resource=resource)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            server_header=False, timeout_graceful_shutdown=5,
                            **uvicorn_forwarding(tools.graph.settings.serve.trusted_proxies))
    uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)
