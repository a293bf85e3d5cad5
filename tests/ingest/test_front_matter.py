"""Front matter of Markdown files (YAML ``---`` or TOML ``+++``, as Jekyll, Hugo,
Docusaurus, MkDocs and Astro write it) is the document's title and metadata, never a
heading or body text; a malformed block never fails its file."""

from __future__ import annotations

import json
from typing import Any

from docgraph.governance import Caller
from docgraph.ingest.extract import extract
from docgraph.model import BlockKind
from tests.helpers import write_files
from tests.serve.test_mcp_tools import make_tools

ALICE = Caller("alice")
NPM_CI = """---
title: npm-ci
section: 1
description: Clean install a project
tags: [npm, install]
date: 2024-05-01
---

### Synopsis

```bash
npm ci
```

### Description

This command is similar to npm install, except it is meant to be used in automated
environments such as test platforms and continuous integration.
"""
HUGO = """+++
title = "Roost gateway release notes"
draft = false
weight = 3
[params]
author = "Ann Lee"
+++

Release 4.2 of the Roost gateway fixes the firmware rollout.
"""
BROKEN = """---
title: [npm-ci
section: 1
---

# Installing

Run npm ci in the project folder.
"""


def _documents(tools: Any) -> dict[str, dict[str, Any]]:
    listed = tools.call("list_documents", ALICE, {"limit": 50})
    return {d["path"]: d for d in listed["documents"]}


def _chunks(tools: Any, document_id: str) -> list[dict[str, Any]]:
    page = tools.call("read_document", ALICE, {"id": document_id, "token_budget": 16000})
    chunks: list[dict[str, Any]] = page["chunks"]
    return chunks


def test_yaml_and_toml_front_matter_are_title_and_metadata_not_text(make_graph, tmp_path):
    graph = make_graph()
    graph.index(write_files(tmp_path / "docs", {"npm-ci.md": NPM_CI, "release.md": HUGO}),
                namespace="engineering")
    tools = make_tools(graph)
    documents = _documents(tools)

    npm = documents["npm-ci.md"]
    assert npm["title"] == "npm-ci"
    assert npm["metadata"] == {"section": "1", "description": "Clean install a project",
                               "tags": "npm, install", "date": "2024-05-01"}
    chunks = _chunks(tools, "docs/npm-ci.md")
    assert [c["section"] for c in chunks] == ["Synopsis", "Description"]
    text = json.dumps([c["text"] for c in chunks])
    assert "npm ci" in text and "description:" not in text and "Clean install" not in text

    read = tools.call("read_document", ALICE, {"id": chunks[-1]["chunk_id"]})
    assert read["title"] == "npm-ci" and read["metadata"] == npm["metadata"]
    fetched = tools.call("fetch", ALICE, {"id": chunks[-1]["chunk_id"]})
    assert fetched["title"] == "npm-ci"
    assert fetched["metadata"]["document_metadata"] == npm["metadata"]
    assert "Clean install" not in fetched["text"]

    hits = tools.call("search_documents", ALICE, {"query_text": "npm ci automated", "k": 5})
    hit = next(h for h in hits["results"] if h["source"] == "npm-ci.md")
    assert hit["title"] == "npm-ci" and "title:" not in json.dumps(hit)

    hugo = documents["release.md"]
    assert hugo["title"] == "Roost gateway release notes"
    assert hugo["metadata"] == {"draft": "false", "weight": "3", "params": "author: Ann Lee"}
    (only,) = _chunks(tools, "docs/release.md")
    assert only["text"] == "Release 4.2 of the Roost gateway fixes the firmware rollout."
    assert only["section"] == ""


def test_malformed_front_matter_is_kept_as_text_and_the_file_indexed(make_graph, tmp_path):
    graph = make_graph()
    report = graph.index(write_files(tmp_path / "docs", {"broken.md": BROKEN}),
                         namespace="engineering")
    assert report.added and not graph.store.failures()
    tools = make_tools(graph)
    listed = _documents(tools)["broken.md"]
    assert listed["title"] == "Installing"
    assert listed["metadata"]["front_matter"].startswith("unreadable YAML")
    chunks = _chunks(tools, "docs/broken.md")
    assert [c["section"] for c in chunks] == ["", "Installing"]  # no setext heading of YAML
    assert "title: [npm-ci" in chunks[0]["text"] and "Run npm ci" in chunks[-1]["text"]


def test_rules_around_text_stay_markdown_and_the_fast_path_sees_front_matter():
    ruled = extract(b"---\n\nA paragraph between rules.\n\n---\n\nMore text.\n", "ruled.md")
    assert [b.text for b in ruled.blocks] == ["A paragraph between rules.", "More text."]
    assert ruled.metadata == {} and ruled.title == "ruled"
    # only ATX headings and paragraphs after the block: the parser-free path
    plain = extract(b"---\ntitle: Notes\nauthor: Ann\n---\n# Heading\n\nText.\n", "n.md")
    assert plain.title == "Notes" and plain.metadata == {"author": "Ann"}
    assert [(b.kind, b.text) for b in plain.blocks] == [(BlockKind.HEADING, "Heading"),
                                                         (BlockKind.PARAGRAPH, "Text.")]


def test_a_page_of_front_matter_only_is_indexed_by_its_title_and_description(make_graph,
                                                                              tmp_path):
    """A section landing page (Hugo's ``_index.md``) has no body: it is found by what its
    front matter says of it, not refused as "no text found"."""
    graph = make_graph()
    report = graph.index(write_files(tmp_path / "docs", {
        "cli/_index.md": "---\ntitle: CLI commands\ndescription: Every npm command, with "
                         "its options\nweight: 2\n---\n",
    }), namespace="engineering")
    assert report.failed == [] and report.added == ["cli/_index.md"]
    tools = make_tools(graph)
    (only,) = _chunks(tools, "docs/cli/_index.md")
    assert "CLI commands" in only["text"] and "Every npm command" in only["text"]
    assert "weight" not in only["text"]


def test_an_html_page_says_who_may_read_it_in_a_meta_tag_or_front_matter():
    meta = extract(b'<html><head><title>Plan</title><meta name="docgraph-access"'
                   b' content="group:finance, user:alice"></head><body><p>Budget.</p>'
                   b'</body></html>', "plan.html")
    assert json.loads(meta.metadata["access"]) == ["group:finance", "user:alice"]
    assert meta.title == "Plan" and [b.text for b in meta.blocks] == ["Budget."]
    jekyll = extract(b"---\ntitle: Roadmap\naccess: [group:ops]\nlayout: page\n---\n"
                     b"<h2>Q3</h2><p>Ship it.</p>\n", "roadmap.html")
    assert jekyll.title == "Roadmap" and jekyll.metadata["layout"] == "page"
    assert json.loads(jekyll.metadata["access"]) == ["group:ops"]
    assert [b.text for b in jekyll.blocks] == ["Q3", "Ship it."]  # no YAML in the text
    # both at once must agree; a value that is not a principal fails closed
    both = extract(b'---\naccess: [group:ops]\n---\n<meta name="DocGraph-Access"'
                   b' content="group:finance"><p>Text.</p>', "both.html")
    assert "differ" in both.metadata["access_error"]
    bad = extract(b'<meta name="docgraph-access" content="finance"><p>Text.</p>', "bad.html")
    assert "'finance' is not user:<id> or group:<name>" in bad.metadata["access_error"]
    assert "access" not in extract(b"<p>Open page.</p>", "open.html").metadata


def test_a_restricted_html_page_is_hidden_from_others_and_a_bad_one_not_indexed(make_graph,
                                                                                 tmp_path):
    graph = make_graph()
    report = graph.index(write_files(tmp_path / "docs", {
        "plan.html": '<meta name="docgraph-access" content="user:alice"><h1>Plan</h1>'
                     "<p>The Zephyrquartz budget.</p>",
        "bad.html": '<meta name="docgraph-access" content="alice"><p>Zephyrquartz too.</p>',
        "open.html": "<h1>Open</h1><p>The public Zephyrquartz note.</p>",
    }), namespace="support")
    assert sorted(report.added) == ["open.html", "plan.html"]
    assert [f for f, _ in report.failed] == ["bad.html"]
    tools = make_tools(graph)
    seen = {user: {d["path"] for d in tools.call("list_documents", Caller(user), {})[
        "documents"]} for user in ("alice", "bob")}
    assert seen == {"alice": {"plan.html", "open.html"}, "bob": {"open.html"}}
