"""ASGI guards in front of ``docgraph serve``'s routes.

- :class:`HostOriginGuard`: one DNS-rebinding policy (:func:`host_policy`, from the bind
  address) for every route except ``/healthz`` and ``/readyz``, so ``/api/v1`` refuses a
  foreign ``Host`` or ``Origin`` exactly as ``/mcp`` does. It runs before authentication.
  The two probes are exempt because they return no data and have no effect, while probes
  and proxies often address them by a name of their own.
- :class:`MCPBodyScreen`: a ``/mcp`` POST whose body the SDK would refuse with a vague
  message or pass on half-checked (a lone surrogate escape; invalid JSON; deep nesting)
  is answered with HTTP 400 and the JSON-RPC error that names the problem and, for a tool
  argument, the argument (:func:`~docgraph.serve.json_checks.screen_jsonrpc`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docgraph.serve.json_checks import screen_jsonrpc

log = logging.getLogger(__name__)

#: Bind addresses that make the server reachable from this machine only.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: Routes the Host/Origin policy (and the bearer-token check) does not apply to: the probes.
UNGUARDED_PATHS = ("/healthz", "/readyz")


def host_policy(bind_host: str) -> TransportSecuritySettings:
    """The Host/Origin policy of a server bound to ``bind_host``, for every guarded route.

    Bound to loopback, only loopback names (any port) may appear in ``Host`` and ``Origin``:
    a web page that re-points its own domain at 127.0.0.1 (DNS rebinding) still sends its
    domain, and is refused. Bound to another interface, names are not checked (the MCP
    SDK's own default; whoever exposes the port decides which names reach it)."""
    if bind_host in LOOPBACK_HOSTS:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


class HostOriginGuard:
    """Refuses requests whose ``Host`` (421) or ``Origin`` (403) the policy does not allow,
    with a JSON ``{"error": ...}`` body, before any route or token check runs."""

    def __init__(self, app: ASGIApp, policy: TransportSecuritySettings,
                 unguarded: Collection[str] = UNGUARDED_PATHS) -> None:
        self.app = app
        self.policy = policy
        self.unguarded = frozenset(unguarded)
        self._check = TransportSecurityMiddleware(policy)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request's headers, then hand it on or answer the refusal."""
        if scope["type"] != "http" or scope["path"] in self.unguarded:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = await self._check.validate_request(request, is_post=False)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        if refusal.status_code == 421:
            header, allowed = "Host", self.policy.allowed_hosts
            value = request.headers.get("host", "")
        else:
            header, allowed = "Origin", self.policy.allowed_origins
            value = request.headers.get("origin", "")
        message = (f"{header} {value!r} is not allowed (DNS-rebinding protection); "
                   f"allowed: {', '.join(allowed)}")
        await JSONResponse({"error": message}, status_code=refusal.status_code)(
            scope, receive, send)


class MCPBodyScreen:
    """Answers a POST the MCP SDK cannot take as a JSON-RPC message with HTTP 400 and a
    precise JSON-RPC error; any other request reaches ``app`` with its body replayed.

    Bodies above ``max_body`` bytes are passed on unread past the limit, so the SDK's own
    limit answers them (413)."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body, screen it, and answer it or replay it to ``app``."""
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        body = bytearray()
        complete = False
        while len(body) <= self.max_body:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                complete = True
                break
        if complete and len(body) <= self.max_body:
            rejection = screen_jsonrpc(bytes(body))
            if rejection is not None:
                log.warning("refused an invalid MCP request (id %s): %s",
                            rejection.error.id, rejection.message)
                content = rejection.error.model_dump_json(by_alias=True, exclude_none=True)
                await Response(content, status_code=400, media_type="application/json")(
                    scope, receive, send)
                return

        async def replay() -> Message:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)
