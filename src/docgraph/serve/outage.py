"""How ``docgraph serve`` answers while its store is unreachable, and what it logs.

When PostgreSQL stops, every request fails where it first reads the store, usually the
bearer-token check in front of every route. Without this module that failure escaped the
MCP SDK's authentication backend and Starlette's error middleware as a plain-text 500 with
a traceback per request, whether or not the token was valid. Here:

- :class:`StoreOutageGuard` (ASGI middleware, outside authentication) answers any request
  that failed because the store is unavailable
  (:func:`~docgraph.store.outages.store_unavailable`) with **503** and ``Retry-After``: the
  JSON API's ``{"error": ...}`` shape on ``/api/v1``, a JSON-RPC error on ``/mcp``, the
  console's error page under ``/console``. The body says the store is unavailable and
  nothing else (no database address), whoever asks.
- :class:`StoreOutage` logs one warning when the store becomes unavailable (with the
  driver's reason) and one info line when a store read succeeds again, not a line per
  request. The server needs no restart: each worker thread reconnects on its next read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docgraph.errors import StoreUnavailable
from docgraph.store.outages import store_unavailable

log = logging.getLogger(__name__)

#: Seconds a client is told to wait before retrying (``Retry-After``). A restarted
#: PostgreSQL is usually back within a few seconds and the server reconnects by itself.
RETRY_AFTER_SECONDS = 5
#: What every caller is told (the log has the reason: the database's address stays there).
UNAVAILABLE_MESSAGE = ("the index store is unavailable (the database cannot be reached); "
                       f"try again in {RETRY_AFTER_SECONDS} seconds")
RETRY_HEADERS = {"Retry-After": str(RETRY_AFTER_SECONDS)}

#: Renders the 503 of a route family (e.g. the console's HTML page) for a request.
PageRenderer = Callable[[Request], Response]


class StoreOutage:
    """Whether the store is reachable, as the last store read of this process found it.

    Thread-safe (store reads run in worker threads). :meth:`failed` logs only the change
    from reachable to unavailable, :meth:`recovered` only the change back, so a load
    balancer or client retrying many times a second during an outage costs two log lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._failures = 0

    @property
    def down(self) -> bool:
        """Whether the last store read failed because the store is unavailable."""
        return self._down_since is not None

    def failed(self, outage: StoreUnavailable) -> None:
        """A store read failed with ``outage``: warn if this starts an outage."""
        with self._lock:
            self._failures += 1
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        log.warning("the index store is unavailable; answering 503 with Retry-After until "
                    "it is back (logged once per outage): %s", outage)

    def recovered(self) -> None:
        """A store read succeeded: say so if it ends an outage."""
        if self._down_since is None:  # the common case, without the lock
            return
        with self._lock:
            since, self._down_since = self._down_since, None
            failures, self._failures = self._failures, 0
        if since is not None:
            log.info("the index store is available again after %.1f s (%d request(s) "
                     "answered 503 meanwhile)", time.monotonic() - since, failures)


def api_unavailable(request: Request) -> Response:
    """The JSON API's 503: its documented ``{"error": ...}`` shape."""
    return JSONResponse({"error": UNAVAILABLE_MESSAGE}, status_code=503, headers=RETRY_HEADERS)


def mcp_unavailable(request: Request) -> Response:
    """``/mcp``'s 503: a JSON-RPC error, as the MCP SDK answers a request it cannot serve
    (``id`` null: the body is not read, the request failed before it)."""
    error = JSONRPCError(jsonrpc="2.0", id=None,
                         error=ErrorData(code=INTERNAL_ERROR, message=UNAVAILABLE_MESSAGE))
    return Response(error.model_dump_json(by_alias=True), status_code=503,
                    media_type="application/json", headers=RETRY_HEADERS)


class StoreOutageGuard:
    """Answers a request that failed because the store is unavailable with a 503.

    ``pages`` maps a path prefix to the renderer of its 503 (the longest matching prefix
    wins; others get :func:`api_unavailable`). A failure after the response started cannot
    be answered anymore and is re-raised; any other exception passes through unchanged."""

    def __init__(self, app: ASGIApp, outage: StoreOutage,
                 pages: Mapping[str, PageRenderer] | None = None) -> None:
        self.app = app
        self.outage = outage
        self.pages = sorted((pages or {}).items(), key=lambda item: -len(item[0]))

    def renderer(self, path: str) -> PageRenderer:
        """The 503 renderer of ``path``."""
        for prefix, render in self.pages:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return render
        return api_unavailable

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request; answer a store outage that stopped it with the 503."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            outage = store_unavailable(exc)
            if outage is None or started:
                raise
            self.outage.failed(outage)
            response = self.renderer(scope["path"])(Request(scope))
            await response(scope, receive, send)
