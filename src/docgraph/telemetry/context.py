"""The request id: one per request, shared by its log lines, its audit record, its
retrieval traces and (when tracing is on) its OpenTelemetry trace, so an operator can go
from any one of them to the others.

It lives in a context variable: set where a request enters (the HTTP middleware, or the
governed service for a request no transport named), it follows the request into the worker
thread that runs it (``anyio.to_thread`` copies the context) and is gone when it ends.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from contextvars import ContextVar

_REQUEST_ID: ContextVar[str | None] = ContextVar("docgraph_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being served in this context, or None outside one."""
    return _REQUEST_ID.get()


def new_request_id() -> str:
    """A fresh request id: 32 hex digits, the form of an OpenTelemetry trace id, so the
    two can be one and the same."""
    return uuid.uuid4().hex


@contextlib.contextmanager
def request_scope(request_id: str | None = None) -> Iterator[str]:
    """Run a request under ``request_id`` (else the enclosing request's id, else a fresh
    one); yields the id in force."""
    rid = request_id or _REQUEST_ID.get() or new_request_id()
    token = _REQUEST_ID.set(rid)
    try:
        yield rid
    finally:
        _REQUEST_ID.reset(token)
