"""MCP over stdin/stdout in which every request gets an answer.

The SDK's stdio transport (:func:`mcp.server.stdio.stdio_server`) validates each line and
hands what it cannot validate to the session as an exception, which the session logs at
debug level and drops: a request holding a lone surrogate escape (``"\\ud800"``), bad JSON
or a malformed envelope is never answered and the client hangs. Here stdin is read by
:class:`ScreenedLines` first: a line the SDK would accept passes through unchanged, any
other line is answered with the JSON-RPC error :func:`~docgraph.serve.json_checks.screen_jsonrpc`
chooses (notifications and responses, which JSON-RPC never answers, are logged) and the
SDK never sees it. The SDK still owns stdout (fd 1 is pointed at stderr while serving, so
stray prints cannot corrupt the wire); fd 0 is claimed here the same way.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, BinaryIO, Protocol, cast

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from docgraph.serve.json_checks import screen_jsonrpc

log = logging.getLogger(__name__)


class MessageSender(Protocol):
    """Where answers go (the transport's write stream)."""

    async def send(self, item: SessionMessage, /) -> None:
        """Queue one message for stdout."""


class ScreenedLines:
    """The lines of a binary input the SDK's stdio reader may see; every other line is
    answered (or, for a notification or response, logged) here instead."""

    def __init__(self, source: anyio.AsyncFile[bytes]) -> None:
        self._source = source
        self._replies: MessageSender | None = None
        self._attached = anyio.Event()

    def attach(self, replies: MessageSender) -> None:
        """Send refusals to ``replies`` (the write stream the transport yields)."""
        self._replies = replies
        self._attached.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        """The valid lines, decoded; refused lines are answered before reading on."""
        async for raw in self._source:
            line = raw.strip()
            if not line:
                continue
            rejection = screen_jsonrpc(line)
            if rejection is None:
                yield line.decode("utf-8", errors="replace")
                continue
            if not rejection.answer:
                log.warning("ignored an invalid MCP notification or response: %s",
                            rejection.message)
                continue
            log.warning("refused an invalid MCP request (id %s): %s",
                        rejection.error.id, rejection.message)
            await self._attached.wait()
            assert self._replies is not None
            try:
                await self._replies.send(SessionMessage(rejection.error))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the session has ended; nobody is left to answer


def claim_stdin() -> tuple[BinaryIO, Callable[[], None]]:
    """The wire as a private duplicate of fd 0, with fd 0 pointed at the null device so no
    other reader in the process or a child inherits the client's requests; returns the
    stream and the function that puts fd 0 back. Falls back to ``sys.stdin.buffer``."""
    try:
        wire = os.dup(0)  # not inheritable (PEP 446)
    except OSError:
        return sys.stdin.buffer, lambda: None
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
    except OSError:
        os.close(wire)
        return sys.stdin.buffer, lambda: None

    def restore() -> None:
        # ``wire`` stays open: a worker thread may still be blocked reading it.
        try:
            os.dup2(wire, 0)
        except OSError:
            log.warning("could not restore stdin after serving MCP")

    # closefd=False for the same reason: closing could recycle the descriptor under a reader.
    return os.fdopen(wire, "rb", closefd=False), restore


@asynccontextmanager
async def screened_stdio_server(
    stdin: BinaryIO | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport (read stream, write stream) reading ``stdin`` (default: the
    process's fd 0, claimed) through :class:`ScreenedLines`."""
    restore: Callable[[], None] = lambda: None  # noqa: E731 - nothing to restore yet
    if stdin is None:
        stdin, restore = claim_stdin()
    lines = ScreenedLines(anyio.wrap_file(stdin))
    try:
        async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
            lines.attach(write)
            yield read, write
    finally:
        restore()
