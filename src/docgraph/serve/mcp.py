"""The MCP server (official ``mcp`` SDK): the governed tools over one docgraph index, and
one prompt (``research_question``) for hosts that offer prompts to their users.

Transports: stdio (``docgraph mcp``; the caller comes from configuration; every line is
screened first, see :mod:`docgraph.serve.stdio`) and streamable HTTP
(``docgraph serve``, see :mod:`docgraph.serve.http`; the caller comes from the bearer token).
No tool takes a namespace, domain or role: the caller is resolved by the transport and every
call goes through :class:`~docgraph.governance.Governance`. Blocking work runs in worker
threads, so one slow search never stalls other sessions.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Prompt
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import ValidationError

from docgraph.errors import DocgraphError
from docgraph.governance import AccessDenied, Caller
from docgraph.governance.inputs import InvalidArgument
from docgraph.serve.agent_tools import (
    PROMPT_DESCRIPTION,
    PROMPT_NAME,
    PROMPT_TITLE,
    ItemId,
    ReadBudget,
    ReadCursor,
    ReadScopeArg,
    SearchQuery,
    research_prompt,
)
from docgraph.serve.observe import observe_tool
from docgraph.serve.outage import UNAVAILABLE_MESSAGE
from docgraph.serve.stdio import screened_stdio_server
from docgraph.serve.tool_args import (
    GUIDANCE,
    Cursor,
    ModeArg,
    OptionalQueryText,
    PageLimit,
    QueryText,
    TokenBudget,
    TopK,
    format_validation_error,
)
from docgraph.serve.tools import (
    TOOLS,
    DocgraphTools,
    canonical_arguments,
    unexpected_arguments,
    unexpected_arguments_message,
)
from docgraph.store.outages import store_unavailable
from docgraph.version import __version__

log = logging.getLogger(__name__)

#: Resolves the caller of one request from its MCP context (transport-specific).
CallerResolver = Callable[[Context[Any, Any]], Caller]

INSTRUCTIONS = (
    "docgraph answers questions from an indexed document corpus you are entitled to. "
    "Pick the tool by question type: lookup_knowledge for a factual question (start here); "
    "search_documents for ranked passages with provenance (mode graph_first or global when "
    "relationships or themes matter); trace_connections for how named entities relate; "
    "explore_topics for corpus-wide themes; document_context for a compact briefing within "
    "a token budget; search_entities to find exact entity names and where they occur; "
    "list_documents and index_status to see what is indexed and how fresh it is; "
    "read_document to read a found chunk's section or a whole document by id. search and "
    "fetch are the same capabilities in the shape ChatGPT apps and deep research expect. "
    + GUIDANCE
)


class DocgraphMCPServer(MCPServer[Any]):
    """An :class:`MCPServer` whose argument errors read ``argument: problem`` and whose stdio
    transport answers every request."""

    async def run_stdio_async(self) -> None:
        """Serve stdin/stdout; a line the SDK cannot validate is answered with a JSON-RPC
        error instead of being dropped (:mod:`docgraph.serve.stdio`)."""
        server = self._lowlevel_server
        async with screened_stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Call a tool; an alias of an argument (``query`` for ``query_text`` and back) is
        renamed first; invalid arguments become a tool error naming each bad argument and
        what the tool takes."""
        spec = TOOLS.get(name)
        if spec is not None:
            arguments = canonical_arguments(spec, arguments)
            unknown = unexpected_arguments(spec, arguments)
            if unknown:
                raise ToolError(unexpected_arguments_message(spec, unknown))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(
                    f"invalid arguments for {name}: {format_validation_error(cause)}"
                ) from cause
            if isinstance(cause, ToolError) and isinstance(cause.__cause__, InvalidArgument):
                # refused by the governed entry's checks: said like the schema's refusals
                raise ToolError(f"invalid arguments for {name}: {cause.__cause__}") from cause
            raise


def fixed_caller(caller: Caller) -> CallerResolver:
    """A resolver that always answers ``caller`` (the stdio transport)."""
    def resolve(ctx: Context[Any, Any]) -> Caller:
        return caller
    return resolve


def build_mcp_server(
    tools: DocgraphTools, resolve_caller: CallerResolver, *, name: str = "docgraph",
    transport: str = "stdio",
) -> DocgraphMCPServer:
    """The MCP server exposing every operation of ``tools`` as a tool; ``transport`` names
    it in the metrics (``stdio``, or ``mcp`` for MCP over HTTP)."""
    server = DocgraphMCPServer(name, title="docgraph", instructions=INSTRUCTIONS,
                               version=__version__, log_level="WARNING")

    async def run(tool: str, ctx: Context[Any, Any], **values: Any) -> dict[str, Any]:
        caller = resolve_caller(ctx)
        spec = TOOLS[tool]
        # The SDK validated ``values`` against the tool function's signature, which uses
        # the argument model's own annotated types: the model is built without a second pass.
        args = spec.args.model_construct(**values)
        call = functools.partial(spec.invoke, tools, caller, args)
        try:
            with observe_tool(tool, transport):
                result: dict[str, Any] = await anyio.to_thread.run_sync(call)
        except InvalidArgument as exc:
            raise ToolError(str(exc)) from exc
        except AccessDenied as exc:
            raise ToolError(f"access denied: {exc}") from exc
        except Exception as exc:
            # The store went away during the call (its token was checked before): say so,
            # without the database's address, so the agent retries instead of giving up.
            if store_unavailable(exc) is not None:
                raise ToolError(UNAVAILABLE_MESSAGE) from exc
            if isinstance(exc, DocgraphError):
                raise ToolError(str(exc)) from exc
            raise
        return result

    async def lookup_knowledge(query: QueryText, ctx: Context[Any, Any]) -> dict[str, Any]:
        return await run("lookup_knowledge", ctx, query=query)

    async def search_documents(query_text: QueryText, ctx: Context[Any, Any], k: TopK = 10,
                               mode: ModeArg = "vector_first") -> dict[str, Any]:
        return await run("search_documents", ctx, query_text=query_text, k=k, mode=mode)

    async def explore_topics(ctx: Context[Any, Any], query_text: OptionalQueryText = None,
                             k: TopK = 5) -> dict[str, Any]:
        return await run("explore_topics", ctx, query_text=query_text, k=k)

    async def trace_connections(query_text: QueryText, ctx: Context[Any, Any],
                                k: TopK = 10) -> dict[str, Any]:
        return await run("trace_connections", ctx, query_text=query_text, k=k)

    async def document_context(query_text: QueryText, ctx: Context[Any, Any],
                               token_budget: TokenBudget = 4000) -> dict[str, Any]:
        return await run("document_context", ctx,
                         query_text=query_text, token_budget=token_budget)

    async def search_entities(query_text: QueryText, ctx: Context[Any, Any],
                              k: TopK = 10) -> dict[str, Any]:
        return await run("search_entities", ctx, query_text=query_text, k=k)

    async def list_documents(ctx: Context[Any, Any], cursor: Cursor = None,
                             limit: PageLimit = 50) -> dict[str, Any]:
        return await run("list_documents", ctx, cursor=cursor, limit=limit)

    async def index_status(ctx: Context[Any, Any]) -> dict[str, Any]:
        return await run("index_status", ctx)

    async def read_document(id: ItemId, ctx: Context[Any, Any],
                            scope: ReadScopeArg = "section", token_budget: ReadBudget = 2000,
                            cursor: ReadCursor = None) -> dict[str, Any]:
        return await run("read_document", ctx, id=id, scope=scope, token_budget=token_budget,
                         cursor=cursor)

    async def search(query: SearchQuery, ctx: Context[Any, Any]) -> dict[str, Any]:
        return await run("search", ctx, query=query)

    async def fetch(id: ItemId, ctx: Context[Any, Any]) -> dict[str, Any]:
        return await run("fetch", ctx, id=id)

    functions: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
        "lookup_knowledge": lookup_knowledge, "search_documents": search_documents,
        "explore_topics": explore_topics, "trace_connections": trace_connections,
        "document_context": document_context, "search_entities": search_entities,
        "list_documents": list_documents, "index_status": index_status,
        "read_document": read_document, "search": search, "fetch": fetch,
    }
    for tool_name, spec in TOOLS.items():
        server.add_tool(
            functions[tool_name], name=tool_name, title=spec.title,
            description=spec.description,
            annotations=ToolAnnotations(title=spec.title, read_only_hint=True,
                                        destructive_hint=False, idempotent_hint=True,
                                        open_world_hint=False),
        )

    def research_question(question: str) -> str:
        return research_prompt(question)

    server.add_prompt(Prompt.from_function(research_question, name=PROMPT_NAME,
                                           title=PROMPT_TITLE, description=PROMPT_DESCRIPTION))
    return server


async def run_stdio(tools: DocgraphTools, caller: Caller) -> None:
    """Serve MCP over stdin/stdout as ``caller`` until the client disconnects."""
    server = build_mcp_server(tools, fixed_caller(caller))
    await server.run_stdio_async()
