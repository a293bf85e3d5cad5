"""Untrusted JSON in, a clear refusal out: bounded parsing and JSON-RPC message screening.

Two failure modes of the libraries underneath motivate this module:

- Python's ``json`` recurses per nesting level, so a small body such as 30,000 ``[`` raises
  ``RecursionError`` (a 500 if nobody catches it). :func:`parse_json` turns that, too-deep
  nesting below the interpreter's limit, invalid UTF-8 and invalid JSON into
  :class:`InvalidJSON` (a 400 in the JSON API).
- The MCP SDK's stdio reader hands every line it cannot validate (a lone surrogate escape,
  which its parser refuses; bad JSON; a malformed envelope) to a session that only logs it
  at debug level: the request is never answered and the client waits forever.
  :func:`screen_jsonrpc` decides, for such a message, which JSON-RPC error answers it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from docgraph.errors import InvalidQuery
from docgraph.serve.text_checks import (
    find_unpaired_surrogate,
    printable_key,
    unpaired_surrogate_at,
)

#: Deepest nesting accepted in a JSON API body (tool arguments are flat objects).
MAX_BODY_DEPTH = 32
#: Nesting at which the MCP SDK's parser (jiter) gives up; only used to explain a refusal.
SDK_MAX_DEPTH = 200


class InvalidJSON(InvalidQuery):
    """A body or line is not JSON docgraph accepts; the message says what is wrong."""

    def __init__(self, what: str, problem: str) -> None:
        super().__init__(f"{what}: {problem}")
        #: The problem without the name of the input (``JSON nested deeper than ...``).
        self.problem = problem


def json_depth(data: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``[]`` and ``{}`` are 1)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in
                         (value.values() if isinstance(value, dict) else value))
    return deepest


def parse_json(raw: bytes | str, *, what: str = "request body",
               max_depth: int = MAX_BODY_DEPTH) -> Any:
    """Parse ``raw`` (UTF-8 JSON text) nested at most ``max_depth`` levels deep.

    Raises :class:`InvalidJSON` naming ``what`` for invalid UTF-8, invalid JSON and too deep
    nesting alike, never ``RecursionError``. Lone surrogate escapes are accepted here (they
    are valid JSON grammar); :func:`~docgraph.serve.text_checks.find_unpaired_surrogate`
    names the argument that holds one."""
    too_deep = f"JSON nested deeper than {max_depth} levels"
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidJSON(what, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") \
                from None
    try:
        data = json.loads(raw)
    except RecursionError:
        raise InvalidJSON(what, too_deep) from None
    except ValueError as exc:
        raise InvalidJSON(what, f"not valid JSON ({exc})") from None
    if json_depth(data) > max_depth:
        raise InvalidJSON(what, too_deep)
    return data


@dataclass(frozen=True, slots=True)
class Rejection:
    """How to refuse one JSON-RPC message the SDK cannot take."""

    #: The error response (its id is the request's, or null when none could be read).
    error: JSONRPCError
    #: False for a notification or a response: JSON-RPC never answers those, so the
    #: stdio transport only logs them (an HTTP POST still gets the error as its 400 body).
    answer: bool

    @property
    def message(self) -> str:
        """The error message (for logs)."""
        return self.error.error.message


def screen_jsonrpc(raw: bytes | str) -> Rejection | None:
    """None when the MCP SDK accepts ``raw`` as a JSON-RPC message, else its refusal.

    The refusal names the problem: ``Parse error: ...`` for text that is not JSON, and for a
    lone surrogate the argument holding it (``invalid arguments for search_documents:
    query_text: contains an unpaired UTF-16 surrogate (U+D800 at character 0)``)."""
    try:
        jsonrpc_message_adapter.validate_json(raw, by_name=False)
        return None
    except ValidationError as exc:
        sdk_error = exc
    try:
        data = parse_json(raw, what="message", max_depth=SDK_MAX_DEPTH)
    except InvalidJSON as exc:
        # Still answer with the request's id when it can be read, or the client keeps waiting.
        return _rejection(sniff_request_id(raw), PARSE_ERROR, f"Parse error: {exc.problem}",
                          answer=True)
    shaped_like = _shape(data)
    request_id = _request_id(data)
    answer = shaped_like in ("JSONRPCRequest", None)
    finding = find_unpaired_surrogate(data)
    if finding is not None:
        params = data.get("params") if isinstance(data, dict) else None
        if (isinstance(params, dict) and data.get("method") == "tools/call"
                and finding.path[:2] == ("params", "arguments") and len(finding.path) > 2):
            tool = printable_key(str(params.get("name")))
            return _rejection(request_id, INVALID_PARAMS, f"invalid arguments for {tool}: "
                              f"{finding.where(2)}: {finding.problem}", answer)
        code = INVALID_PARAMS if finding.path[:1] == ("params",) else INVALID_REQUEST
        return _rejection(request_id, code, f"{finding.where()}: {finding.problem}", answer)
    errors = sdk_error.errors(include_url=False, include_input=False)
    parse_errors = [e for e in errors if e["type"] == "json_invalid"]
    if parse_errors:
        return _rejection(request_id, PARSE_ERROR, f"Parse error: {parse_errors[0]['msg']}",
                          answer)
    relevant = [e for e in errors if e["loc"][:1] == (shaped_like,)] or errors
    problems = "; ".join(dict.fromkeys(
        f"{'.'.join(str(p) for p in e['loc'][1:]) or 'message'}: {e['msg']}" for e in relevant))
    return _rejection(request_id, INVALID_REQUEST,
                      f"Invalid request (not a JSON-RPC 2.0 message): {problems}", answer)


def _rejection(request_id: str | int | None, code: int, message: str,
               answer: bool) -> Rejection:
    return Rejection(JSONRPCError(jsonrpc="2.0", id=request_id,
                                  error=ErrorData(code=code, message=message)), answer)


def _shape(data: Any) -> str | None:
    """Which JSON-RPC message ``data`` looks like (the SDK's model name); None for a value
    that is not an object at all (JSON-RPC answers that with an error, id null)."""
    if not isinstance(data, dict):
        return None
    if "method" in data:
        return "JSONRPCRequest" if "id" in data else "JSONRPCNotification"
    return "JSONRPCError" if "error" in data else "JSONRPCResponse"


def _request_id(data: Any) -> str | int | None:
    """The message's id if it is one JSON-RPC allows and an answer can carry, else None."""
    request_id = data.get("id") if isinstance(data, dict) else None
    if isinstance(request_id, bool):
        return None
    if isinstance(request_id, int):
        return request_id
    if isinstance(request_id, str) and unpaired_surrogate_at(request_id) is None:
        return request_id
    return None


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s"{}\[\],:]+')


def sniff_request_id(raw: bytes | str) -> str | int | None:
    """The top-level ``"id"`` of a message that does not parse (truncated, invalid UTF-8,
    nested too deeply), read by a flat tokenizer that tracks depth and never recurses;
    None when there is none or it is not a string or integer."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    depth = 0
    previous = ""
    tokens = _TOKEN.finditer(raw)
    for match in tokens:
        token = match.group()
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
        elif token == ":" and depth == 1 and previous == '"id"':
            value = next(tokens, None)
            return _request_id({"id": _scalar(value.group())}) if value else None
        previous = token
    return None


def _scalar(token: str) -> Any:
    try:
        return json.loads(token)
    except ValueError:
        return None
