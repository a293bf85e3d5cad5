"""Reading by id (``Governance.read`` / ``read_document``) and the search/fetch pair, on
both backends: what a search returned reads back, paging covers a document exactly once,
and every id a caller cannot read gets the same "not found"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from docgraph.errors import InvalidQuery, NotFound
from docgraph.governance import Caller
from docgraph.serve.tools import DocgraphTools
from tests import backend_graphs
from tests.helpers import write_files
from tests.serve import test_mcp_tools as corpus
from tests.serve.test_mcp_tools import call_all, error_text, make_tools

# One shared two-namespace corpus per backend (read only), as the MCP tool tests use it;
# tests that need a corpus of their own open one on the same backends.
corpus_graph = corpus.corpus_graph
tools = corpus.tools
pgvector_server = backend_graphs.pgvector_server
make_graph = backend_graphs.make_graph

ALICE, BOB = Caller("alice"), Caller("bob")


def _search(tools: DocgraphTools, caller: Caller, query: str) -> list[dict[str, Any]]:
    result = tools.call("search_documents", caller, {"query_text": query, "k": 5})
    hits: list[dict[str, Any]] = result["results"]
    return hits


def test_a_search_result_reads_back_with_its_section(tools):
    hit = next(h for h in _search(tools, ALICE, "Roost gateway pushes firmware rollout")
               if h["source"] == "firmware.md")
    assert hit["chunk_id"].startswith("eng/firmware.md#chunk-")  # the folder's name, no path
    assert "file://" not in json.dumps(hit)
    page = tools.call("read_document", ALICE, {"id": hit["chunk_id"]})
    assert page["document_id"] == "eng/firmware.md" and page["source_name"] == "eng"
    assert page["title"] and page["source"] == "firmware.md" and page["scope"] == "section"
    read_ids = [c["chunk_id"] for c in page["chunks"]]
    assert hit["chunk_id"] in read_ids
    assert {c["section"] for c in page["chunks"]} == {page["section"]}
    assert "url" not in page  # the source has no public URL: no link, never a file path
    assert "file://" not in json.dumps(page)

    # the stored (full URN) form an agent may have kept reads the same page
    stored = tools.governance.root.store.list_sources()
    urn = next(s.urn for s in stored if s.namespace == "engineering")
    full_id = urn + hit["chunk_id"].removeprefix("eng")
    again = tools.call("read_document", ALICE, {"id": full_id})
    assert [c["chunk_id"] for c in again["chunks"]] == read_ids

    alone = tools.call("read_document", ALICE, {"id": hit["chunk_id"], "scope": "chunk"})
    assert [c["chunk_id"] for c in alone["chunks"]] == [hit["chunk_id"]]


def test_a_document_reads_whole_and_pages_cover_it_once(make_graph, tmp_path):
    paragraphs = [f"Paragraph {i} of the Tern T3 maintenance manual covers step {i} of "
                  f"the procedure: check bolt {i}, tighten it and log code M-{i}." for i in
                  range(60)]
    text = ("# Manual\n\n## Before\n\n" + "\n\n".join(paragraphs[:30]) + "\n\n## After\n\n"
            + "\n\n".join(paragraphs[30:]) + "\n")
    graph = make_graph()
    graph.index(write_files(tmp_path / "manuals", {"t3.md": text}), namespace="engineering")
    tools = make_tools(graph)
    whole = tools.call("read_document", ALICE, {"id": "manuals/t3.md",
                                                "token_budget": 16000})
    assert whole["scope"] == "document" and whole["next_cursor"] is None
    every = [c["index"] for c in whole["chunks"]]
    assert every == list(range(len(every))) and len(every) >= 6

    seen: list[int] = []
    cursor = None
    pages = []
    while True:
        page = tools.call("read_document", ALICE, {"id": "manuals/t3.md",
                                                   "token_budget": 400, "cursor": cursor})
        assert page["tokens"] <= 400 or len(page["chunks"]) == 1
        pages.append(page)
        seen += [c["index"] for c in page["chunks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == every and len(pages) >= 3
    back = tools.call("read_document", ALICE, {"id": "manuals/t3.md", "token_budget": 400,
                                               "cursor": pages[1]["previous_cursor"]})
    assert [c["index"] for c in back["chunks"]] == [c["index"] for c in pages[0]["chunks"]]

    # a chunk's section: its chunks only, and the chunk asked for is on the first page
    last = every[-1]
    section = tools.call("read_document", ALICE, {"id": f"manuals/t3.md#chunk-{last}",
                                                  "token_budget": 400})
    assert section["section"].endswith("After")
    assert all(c["section"] == section["section"] for c in section["chunks"])
    assert f"manuals/t3.md#chunk-{last}" in [c["chunk_id"] for c in section["chunks"]]
    assert section["span"]["chunks"] < len(every)
    assert section["previous_cursor"] is not None and section["next_cursor"] is None

    with pytest.raises(InvalidQuery, match="cursor"):
        tools.call("read_document", ALICE, {"id": "manuals/t3.md", "cursor": "bm90LWEtY3Vyc29y"})
    with pytest.raises(InvalidQuery, match="token_budget"):
        tools.call("read_document", ALICE, {"id": "manuals/t3.md", "token_budget": 10})


UNREADABLE_FOR_BOB = [
    "public.tickets.body/2",           # a row bob's row check hides (alice reads it)
    "public.tickets.body/3#chunk-0",   # the same, as a chunk key
    "eng/firmware.md",                 # a namespace outside bob's set
    "eng/firmware.md#chunk-0",
    "sup/nothing-here.md",             # never existed
    "sup/faq.md#chunk-99",             # a chunk index the document does not have
    "file:///nowhere/at/all.md",
]


def test_hidden_outside_and_absent_ids_are_the_same_not_found(tools):
    for readable in ("public.tickets.body/2", "eng/firmware.md"):
        assert tools.call("read_document", ALICE, {"id": readable})["chunks"]
    assert tools.call("read_document", BOB, {"id": "public.tickets.body/1"})["chunks"]
    answers = set()
    for item in UNREADABLE_FOR_BOB:
        with pytest.raises(NotFound) as caught:
            tools.call("read_document", BOB, {"id": item})
        answers.add((type(caught.value), str(caught.value).replace(repr(item), "<id>")))
        with pytest.raises(NotFound) as fetched:
            tools.call("fetch", BOB, {"id": item})
        answers.add((type(fetched.value), str(fetched.value).replace(repr(item), "<id>")))
    assert len(answers) == 1, answers

    results = call_all(tools, BOB, [("read_document", {"id": i}) for i in UNREADABLE_FOR_BOB]
                       + [("fetch", {"id": i}) for i in UNREADABLE_FOR_BOB])
    texts = {error_text(r).replace(repr(i), "<id>").replace("fetch", "read_document")
             for r, i in zip(results, UNREADABLE_FOR_BOB * 2, strict=True)}
    assert len(texts) == 1 and "nothing readable" in texts.pop()


def test_reads_are_audited_with_the_stored_keys(tools):
    tools.call("read_document", ALICE, {"id": "sup/faq.md#chunk-0", "scope": "chunk"})
    record = tools.governance.audit.recent(1)[0]
    assert (record["user_id"], record["operation"], record["outcome"]) == ("alice", "read", "ok")
    keys = record["payload"]["evidence_keys"] if "payload" in record else record["evidence_keys"]
    assert len(keys) == 1 and keys[0].endswith("/faq.md#chunk-0") and "://" in keys[0]


def test_search_and_fetch_follow_the_published_shape(tools):
    results = call_all(tools, ALICE, [("search", {"query": "Which firmware fixes E-417?"})])
    (result,) = results
    assert len(result.content) == 1 and result.content[0].type == "text"
    found = json.loads(result.content[0].text)
    assert list(found) == ["results"] and found["results"]
    for entry in found["results"]:
        assert {"id", "title", "text"} <= set(entry) and set(entry) <= {"id", "title", "text",
                                                                        "url"}
        assert "file://" not in entry["id"]
    first = found["results"][0]["id"]
    (fetched,) = call_all(tools, ALICE, [("fetch", {"id": first})])
    assert len(fetched.content) == 1 and fetched.content[0].type == "text"
    document = json.loads(fetched.content[0].text)
    assert document["id"] == first and document["title"] and document["text"]
    assert set(document) <= {"id", "title", "text", "url", "metadata"}
    assert first in document["metadata"]["chunk_ids"]


def test_search_and_fetch_see_what_the_caller_sees(tools):
    ids = {r["id"] for r in tools.call("search", BOB, {"query": "Castellan Pharma Heron H7 "
                                                                "recall escalation"})["results"]}
    assert ids and not any(i.startswith("public.tickets.body/3") for i in ids)
    assert not any(i.startswith("eng/") for i in ids)
    alice = {r["id"] for r in tools.call("search", ALICE, {"query": "Castellan Pharma Heron H7 "
                                                                    "recall escalation"})[
        "results"]}
    assert any(i.startswith("public.tickets.body/3") for i in alice)


def test_the_research_prompt_carries_the_decomposition_guidance(tools):
    import anyio
    from mcp import Client

    from docgraph.serve.mcp import build_mcp_server, fixed_caller

    server = build_mcp_server(tools, fixed_caller(ALICE))
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with Client(server) as client:
            seen["list"] = (await client.list_prompts()).prompts
            seen["get"] = await client.get_prompt("research_question",
                                                  {"question": "Who fixed E-417, and when?"})

    anyio.run(main)
    (prompt,) = seen["list"]
    assert prompt.name == "research_question"
    assert [a.name for a in prompt.arguments] == ["question"] and prompt.arguments[0].required
    text = seen["get"].messages[0].content.text
    assert "atomic sub-questions" in text and "lookup_knowledge" in text
    assert "read_document" in text and text.endswith("Question: Who fixed E-417, and when?")


def test_the_cli_reads_by_id_as_the_caller(make_graph, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    graph = make_graph()
    graph.index(write_files(tmp_path / "notes", {"a.md": "# A\n\nAlpha note about E-417.\n"}),
                namespace="ops")
    backend_graphs.point_the_cli_at(graph, monkeypatch)
    index = ["--index", str(graph.settings.store.path)]
    done = CliRunner().invoke(app, [*index, "read", "notes/a.md#chunk-0"])
    assert done.exit_code == 0, done.output
    page = json.loads(done.stdout)
    assert page["document_id"] == "notes/a.md" and "Alpha note" in page["chunks"][0]["text"]
    done = CliRunner().invoke(app, [*index, "read", "notes/zzz.md"])
    assert done.exit_code != 0 and isinstance(done.exception, NotFound)
