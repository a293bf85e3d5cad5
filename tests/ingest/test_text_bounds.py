"""Sizes are bounded in characters as well as tokens: a run of text without spaces (which
WordPiece and the hashing embedder count as one token) never becomes one huge chunk, and a
read, a fetch or a search never returns more than its budget or a chunk's bound."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from docgraph.budgets import TRUNCATION_MARK, char_limit
from docgraph.embedding.embedders import HashingEmbedder, MiniLMTokenCounter
from docgraph.governance import Caller
from docgraph.ingest.chunk import chunk_document
from docgraph.ingest.extract import extract
from docgraph.serve.cli import app
from tests.helpers import write_files
from tests.serve.test_mcp_tools import make_tools

CHUNK_TOKENS = 200  # the default loader.chunk_tokens
HEX = secrets.token_hex(120_000)  # 240,000 characters without a space


def _dump_markdown() -> str:
    return ("# Tern T3 firmware dump\n\nThe boot image of the Tern T3 gateway follows.\n\n"
            f"## Raw image\n\n{HEX}\n\n## Checksum\n\nThe Roost gateway verified the image.\n")


def _cli(config: Path, *args: str) -> Any:
    result = CliRunner().invoke(app, ["--config", str(config), *args])
    assert result.exit_code == 0, result.output
    return result


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "docgraph.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "index.db"}"\n'
                      '[embed]\nmodel = "hashing"\n', encoding="utf-8")
    return config


def test_a_run_without_spaces_is_cut_into_chunks_within_the_bound(tmp_path):
    folder = write_files(tmp_path / "dumps", {"t3.md": _dump_markdown()})
    config = _config(tmp_path)
    _cli(config, "index", str(folder))
    limit = char_limit(CHUNK_TOKENS)

    # every chunk, paged through with the largest budget: none over the bound, none lost
    chunks: list[dict[str, Any]] = []
    cursor: list[str] = []
    while True:
        page = json.loads(_cli(config, "read", "dumps/t3.md", "--budget", "16000",
                               *cursor).stdout)
        chunks += page["chunks"]
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert max(len(c["text"]) for c in chunks) <= limit
    raw = [c["text"] for c in chunks if c["section"].endswith("Raw image")]
    assert len(raw) >= len(HEX) // limit and "".join(raw) == HEX

    # a read with a small budget returns about that budget, not the 240,000 characters
    first_raw = next(c["chunk_id"] for c in chunks if c["section"].endswith("Raw image"))
    small = json.loads(_cli(config, "read", first_raw, "--budget", "200").stdout)
    assert small["tokens"] <= 200
    assert sum(len(c["text"]) for c in small["chunks"]) <= char_limit(200)

    # search --json: each hit is one bounded chunk
    out = _cli(config, "search", "--json", "-k", "5", "Tern T3 boot image raw").stdout
    hits = json.loads(out)
    assert hits and all(len(h["text"]) <= limit for h in hits)
    assert len(out) < 5 * (limit + 2000)


def test_a_read_cuts_a_chunk_larger_than_its_budget(make_graph, tmp_path):
    """An index built with chunks larger than the read's budget: the page holds the start
    of the chunk asked for, within the budget and marked as cut, never the whole chunk."""
    sentences = " ".join(f"Step {i} of the Tern T3 service manual checks bolt {i} and logs "
                         f"code M-{i}." for i in range(300))  # 4,800 tokens, one paragraph
    graph = make_graph(loader={"chunk_tokens": 8192})
    graph.index(write_files(tmp_path / "manuals", {"t3.md": f"# Manual\n\n{sentences}\n",
                                                   "dump.md": _dump_markdown()}),
                namespace="engineering")
    tools = make_tools(graph)
    alice = Caller("alice")
    page = tools.call("read_document", alice, {"id": "manuals/t3.md#chunk-0",
                                               "token_budget": 200})
    (chunk,) = page["chunks"]
    assert page["tokens"] <= 200 and len(chunk["text"]) <= char_limit(200)
    assert HashingEmbedder().count_tokens([chunk["text"]])[0] <= 200
    assert chunk["truncated"] is True and chunk["text"].endswith(TRUNCATION_MARK)
    assert chunk["text"].startswith("Step 0 of the Tern T3 service manual") and page["truncated"]
    fetched = tools.call("fetch", alice, {"id": "manuals/t3.md#chunk-0"})
    assert fetched["metadata"]["tokens"] <= 4000 and fetched["metadata"]["truncated"]
    assert fetched["text"].endswith(TRUNCATION_MARK)
    whole = tools.call("read_document", alice, {"id": "manuals/t3.md#chunk-0",
                                                "token_budget": 16000})
    assert whole["chunks"][0]["text"] == sentences and "truncated" not in whole

    # a chunk of one 81,920-character run (chunk_tokens 8192): its first slice, cut inside
    raw = tools.call("read_document", alice, {"id": "manuals/dump.md#chunk-1",
                                              "scope": "chunk", "token_budget": 200})
    (cut,) = raw["chunks"]
    assert cut["truncated"] and len(cut["text"]) <= char_limit(200) and raw["tokens"] <= 200
    assert HEX.startswith(cut["text"].removesuffix(TRUNCATION_MARK))


@pytest.mark.parametrize("counter", ["hashing", "wordpiece"])
def test_runs_without_spaces_are_chunked_within_both_bounds(counter):
    """The chunker on its own, with the hashing embedder's counter and MiniLM's WordPiece
    (one [UNK] per word over 100 characters): a run without spaces, and one dense in
    punctuation (a token per character), end up in chunks within both bounds, whole."""
    minified = "a,b;" * 20_000
    document = extract(f"# Dump\n\n{HEX}\n\n{minified}\n".encode(), "dump.md")
    count = HashingEmbedder().count_tokens if counter == "hashing" else MiniLMTokenCounter()
    drafts = chunk_document(document, count, 50)
    assert all(len(d.text) <= char_limit(50) and d.token_count <= 50 for d in drafts)
    assert "".join(d.text for d in drafts).replace(" ", "").replace("\n", "") == \
        HEX + minified
    assert all(n <= 50 for n in count([d.text for d in drafts]))


def test_search_hits_never_exceed_the_chunk_bound_of_the_settings(make_graph, tmp_path):
    """A chunk stored larger than ``chunk_tokens`` now allows (built with a larger setting,
    or before chunks were bounded in characters) is cut in search_documents and CLI
    ``search --json`` to what the setting allows, marked as cut; a read shows all of it."""
    sentences = " ".join(f"Step {i} of the Tern T3 service manual checks bolt {i} and logs "
                         f"code M-{i}." for i in range(300))  # ~21,000 characters, one chunk
    folder = write_files(tmp_path / "manuals", {"t3.md": f"# Manual\n\n{sentences}\n"})
    config = tmp_path / "docgraph.toml"
    lines = f'[store]\npath = "{tmp_path / "index.db"}"\n[embed]\nmodel = "hashing"\n'
    config.write_text(lines + "[loader]\nchunk_tokens = 8192\n", encoding="utf-8")
    _cli(config, "index", str(folder))
    config.write_text(lines + f"[loader]\nchunk_tokens = {CHUNK_TOKENS}\n", encoding="utf-8")

    (hit,) = json.loads(_cli(config, "search", "--json", "-k", "1", "Tern T3 bolt").stdout)
    assert len(hit["text"]) <= char_limit(CHUNK_TOKENS) and hit["truncated"] is True
    assert hit["text"].endswith(TRUNCATION_MARK) and sentences.startswith(
        hit["text"].removesuffix(TRUNCATION_MARK))

    graph = make_graph("index.db", loader={"chunk_tokens": CHUNK_TOKENS})
    tools = make_tools(graph)
    found = tools.call("search_documents", Caller("root"), {"query_text": "Tern T3 bolt"})
    assert found["results"] and all(len(h["text"]) <= char_limit(CHUNK_TOKENS)
                                    and h["truncated"] for h in found["results"])
    whole = tools.call("read_document", Caller("root"), {"id": found["results"][0]["chunk_id"],
                                                         "token_budget": 16000})
    assert whole["chunks"][0]["text"] == sentences


def test_document_context_stays_within_its_budget_in_characters(make_graph, tmp_path):
    """Chunks of a run without spaces count one token each: the context's budget still
    bounds how much of them it holds."""
    graph = make_graph()
    graph.index(write_files(tmp_path / "dumps", {"t3.md": _dump_markdown()}),
                namespace="engineering")
    tools = make_tools(graph)
    context = tools.call("document_context", Caller("alice"),
                         {"query_text": "Tern T3 boot image raw", "token_budget": 1000})
    rows = [row for section in context["sections"].values() for row in section]
    assert context["source_chunks"] and sum(map(len, rows)) <= char_limit(1000)
    assert sum(context["tokens_used"].values()) <= 1000
