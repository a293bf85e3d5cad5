"""The request checks every transport shares: text that is not valid Unicode, bounded JSON
parsing, and the JSON-RPC refusal chosen for a message the MCP SDK cannot take."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from docgraph.errors import InvalidQuery
from docgraph.serve.json_checks import (
    InvalidJSON,
    json_depth,
    parse_json,
    screen_jsonrpc,
    sniff_request_id,
)
from docgraph.serve.text_checks import (
    find_unpaired_surrogate,
    unpaired_surrogate_at,
)
from docgraph.serve.tool_args import SearchDocumentsArgs, format_validation_error


def test_only_surrogate_code_points_are_invalid_text():
    assert unpaired_surrogate_at("plain ascii") is None
    assert unpaired_surrogate_at("café \U0001f600 Straße") is None
    assert unpaired_surrogate_at("ab\ud800") == 2
    assert unpaired_surrogate_at("\udfff tail") == 0


def test_tool_arguments_name_the_one_holding_a_lone_surrogate():
    # The tools' text validator runs before pydantic's own str check (which would say only
    # "unable to parse raw data as a unicode string").
    assert SearchDocumentsArgs(query_text="Tern T3").query_text == "Tern T3"
    with pytest.raises(ValidationError) as refused:
        SearchDocumentsArgs(query_text="ok\ud83d")
    assert format_validation_error(refused.value) == (
        "query_text: contains an unpaired UTF-16 surrogate (U+D83D at character 2)")


def test_the_finder_reports_the_path_of_a_bad_value_or_key_at_any_depth():
    data: Any = {"params": {"name": "t", "arguments": {"q": ["fine", "x\udc00"]}}}
    found = find_unpaired_surrogate(data)
    assert found is not None and found.where() == "params.arguments.q.1"
    assert found.where(2) == "q.1" and "U+DC00 at character 1" in found.problem
    key = find_unpaired_surrogate({"args": {"\ud800": 1}})
    assert key is not None and key.where() == "args.\\ud800"
    assert find_unpaired_surrogate({"a": ["b", {"c": "d"}], "e": 1}) is None
    deep: Any = "\ud800"
    for _ in range(20_000):  # far beyond the interpreter's recursion limit
        deep = [deep]
    found = find_unpaired_surrogate(deep)
    assert found is not None and len(found.path) == 20_000
    assert json_depth(deep) == 20_000


@pytest.mark.parametrize("raw, problem", [
    (b"[" * 30_000 + b"]" * 30_000, "JSON nested deeper than 32 levels"),   # RecursionError
    (b"[" * 33 + b"]" * 33, "JSON nested deeper than 32 levels"),
    (b'{"q": "caf\xe9"}', "not valid UTF-8 (invalid continuation byte at byte 10)"),
    (b'{"q": ', "not valid JSON (Expecting value: line 1 column 7 (char 6))"),
])
def test_bounded_parsing_refuses_with_a_message_naming_the_input(raw, problem):
    with pytest.raises(InvalidJSON) as refused:
        parse_json(raw, what="request body")
    assert isinstance(refused.value, InvalidQuery)
    assert str(refused.value) == f"request body: {problem}"
    assert parse_json(b"[" * 32 + b"]" * 32) == parse_json("[" * 32 + "]" * 32)


def test_the_screen_passes_what_the_sdk_accepts_and_answers_the_rest():
    assert screen_jsonrpc(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}') is None
    bad_argument = screen_jsonrpc(
        '{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{"name":"search_entities",'
        '"arguments":{"query_text":"\\ud800"}}}')
    assert bad_argument is not None and bad_argument.answer
    assert bad_argument.error.id == "r1" and bad_argument.error.error.code == -32602
    assert bad_argument.message.startswith(
        "invalid arguments for search_entities: query_text: contains an unpaired")
    envelope = screen_jsonrpc(b'{"jsonrpc":"2.0","id":2,"method":7}')
    assert envelope is not None and envelope.error.id == 2
    assert envelope.error.error.code == -32600 and "method" in envelope.message
    not_an_object = screen_jsonrpc(b"[1, 2]")
    assert not_an_object is not None and not_an_object.answer and not_an_object.error.id is None
    # JSON-RPC never answers a notification or a response: those are only logged
    notification = screen_jsonrpc('{"jsonrpc":"2.0","method":"n","params":{"x":"\\udc00"}}')
    assert notification is not None and not notification.answer
    response = screen_jsonrpc('{"jsonrpc":"2.0","id":3,"result":{"x":"\\udc00"}}')
    assert response is not None and not response.answer
    # an id that cannot be echoed safely is answered as null
    bad_id = screen_jsonrpc('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}')
    assert bad_id is not None and bad_id.answer and bad_id.error.id is None


@pytest.mark.parametrize("raw, expected", [
    (b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"x"', 41),
    (b'{"method":"x","params":' + b"[" * 5000 + b'{"id":1}' + b"]" * 5000 + b',"id":"a"}', "a"),
    (b'{"jsonrpc":"2.0","id":"caf\xe9","method":"x"}', "caf\ufffd"),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"x"', None),
    (b'{"jsonrpc":"2.0","method":"x"', None),
])
def test_the_id_of_an_unparseable_message_is_still_found(raw, expected):
    assert sniff_request_id(raw) == expected
