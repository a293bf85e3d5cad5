"""The same ids and the same words on every surface: the CLI, the agent tools and the console
show one agent-visible id (``<source name>/<path>#chunk-N``) that every read accepts; every
``search``/``fetch`` result carries a ``url`` that opens its passage (the console's document
page when the source publishes no URL); scores and lanes are named alike everywhere.

Real components throughout: the corpus of :mod:`tests.serve.test_mcp_tools` indexed on the
embedded backend, the CLI through Typer's runner, the console served by the ASGI app of
``docgraph serve`` under uvicorn and signed in to like a browser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from markupsafe import escape
from typer.testing import CliRunner

from docgraph.config import ServeSettings
from docgraph.errors import NotFound
from docgraph.governance import Caller
from docgraph.serve.cli import app
from docgraph.serve.tools import DocgraphTools
from tests import backend_graphs
from tests.console_helpers import ConsoleClient, served_console
from tests.helpers import write_files
from tests.store_backends import BACKENDS

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

ALICE = Caller("alice")
#: Text no page may show as markup.
HOSTILE = '<script>alert("x")</script> and <img src=x onerror=alert(1)> in a note'


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The two-namespace corpus (folders ``eng`` and ``sup``, ticket rows) and one note
    whose text is markup, served with the console; results link to this server."""
    root = tmp_path_factory.mktemp("same-ids")
    backend = BACKENDS["embedded"](request, root)
    try:
        with served_console(root, backend) as running:
            graph = running["graph"]
            graph.index(write_files(root / "notes", {
                "hostile.txt": HOSTILE + ".\n",
                "odd names/50% off #2?.md": "# Odd\n\nThe Plover P2 dock is half price.\n"}),
                namespace="support")
            tools: DocgraphTools = running["console"].tools
            tools.governance.base_url = running["url"]
            yield {**running, "tools": tools}
    finally:
        backend.close()


@pytest.fixture
def admin(served: dict[str, Any]) -> Iterator[ConsoleClient]:
    client = ConsoleClient(served["url"])
    signed_in = client.login(served["tokens"]["root"])
    assert signed_in.status_code == 303, signed_in.text[:500]
    yield client
    client.close()


def console_document_url(base: str, doc: str, index: int) -> str:
    """The console page of document ``doc`` at chunk ``index`` (ids without characters a
    URL path encodes)."""
    return f"{base}/console/documents/{doc}?chunk={index}#chunk-{index}"


def _cli(graph: Any, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    monkeypatch.setenv("DOCGRAPH_CONFIG", str(Path(graph.settings.store.path).parent
                                              / "absent-docgraph.toml"))
    backend_graphs.point_the_cli_at(graph, monkeypatch)
    done = CliRunner().invoke(app, ["--index", str(graph.settings.store.path), *args])
    assert done.exit_code == 0, done.output
    return done.stdout


# -- one id ---------------------------------------------------------------------------------

def test_the_id_cli_search_prints_is_the_one_docgraph_read_accepts(make_graph, tmp_path,
                                                                    monkeypatch):
    graph = make_graph()
    graph.index(write_files(tmp_path / "support", {
        "tern-t3-faq.md": "# Tern T3 FAQ\n\nHold the power key of the Tern T3 for ten seconds "
                          "to reboot it.\n"}), namespace="ops")
    text = _cli(graph, monkeypatch, "search", "reboot the Tern T3", "-k", "3")
    ids = re.findall(r"^\d+\. (\S+)", text, flags=re.MULTILINE)
    assert ids == ["support/tern-t3-faq.md#chunk-0"], text
    page = json.loads(_cli(graph, monkeypatch, "read", ids[0]))
    assert page["chunks"][0]["chunk_id"] == ids[0]
    assert "ten seconds" in page["chunks"][0]["text"]
    shown = json.loads(_cli(graph, monkeypatch, "search", "reboot the Tern T3", "--json"))
    assert [h["chunk_id"] for h in shown] == ids  # the same id in JSON
    lookup = json.loads(_cli(graph, monkeypatch, "lookup", "How do I reboot the Tern T3?",
                             "--trace"))
    assert lookup["evidence"][0]["document_id"] == ids[0]
    assert lookup["trace"]["candidates"][0]["evidence_key"] == ids[0]  # the trace too
    assert lookup["trace"]["candidates"][0]["doc_id"] == "support/tern-t3-faq.md"
    traced = json.loads(_cli(graph, monkeypatch, "search", "reboot", "--mode", "vector_first",
                             "--json"))
    stored = json.loads(_cli(graph, monkeypatch, "trace", "last"))
    assert list(stored["final_provenance"]) == [h["chunk_id"] for h in traced]
    assert "file://" not in text + json.dumps(shown) + json.dumps(lookup) + json.dumps(stored)


def test_the_playground_shows_agent_visible_ids(served, admin):
    admin.get("/console/playground")
    for tool in ("lookup_knowledge", "search_documents"):
        ran = admin.post("/console/playground", {
            "tool": tool, "user": "alice", "role": "", "query": "reboot the Tern T3",
            "k": "5", "mode": "vector_first"})
        assert ran.status_code == 200, ran.text[:800]
        keys = re.findall(r'<code class="key">([^<]+)</code>', ran.text)
        assert "sup/faq.md#chunk-0" in keys, (tool, keys)
        assert "file://" not in ran.text
        # each id opens its passage in the console
        assert 'href="/console/documents/sup/faq.md?chunk=0#chunk-0"' in ran.text


def test_the_traces_page_shows_agent_visible_ids(served, admin):
    admin.get("/console/playground")
    admin.post("/console/playground", {
        "tool": "search_documents", "user": "alice", "role": "", "query": "reboot the Tern T3",
        "k": "5", "mode": "vector_first"})
    page = admin.get("/console/traces")
    assert page.status_code == 200 and "sup/faq.md#chunk-0" in page.text
    assert "file://" not in page.text
    trace_id = served["graph"].traces.recent(1)[0]["id"]
    trace = admin.get(f"/console/traces/{trace_id}")
    assert "sup/faq.md#chunk-0" in trace.text and "file://" not in trace.text
    # the seed lane is named as the tools and the playground name its chunks
    assert "<td>dense+bm25 (seed)</td>" in trace.text
    assert "> dense+bm25 (seed)</li>" in page.text  # the lane-share chart's legend


# -- a url on every search and fetch result ---------------------------------------------------

def test_every_search_and_fetch_result_links_to_its_passage(served, admin):
    tools: DocgraphTools = served["tools"]
    results = tools.call("search", ALICE, {"query": "Which firmware fixes E-417?"})["results"]
    assert results
    for result in results:
        doc, _, index = result["id"].rpartition("#chunk-")
        assert result["url"] == console_document_url(served["url"], doc, int(index))
        page = admin.get(result["url"])
        assert page.status_code == 200, (result["url"], page.text[:300])
        assert f'id="chunk-{index}"' in page.text  # the anchor of the cited chunk
        assert f'<code class="key">{escape(result["id"])}</code>' in page.text
    fetched = tools.call("fetch", ALICE, {"id": results[0]["id"]})
    assert fetched["url"] == results[0]["url"]
    document = tools.call("fetch", ALICE, {"id": "eng/firmware.md"})  # a document id
    assert document["url"] == console_document_url(served["url"], "eng/firmware.md", 0)
    # an id whose path the stored form percent-encodes opens as well
    odd = next(r for r in tools.call("search", ALICE, {"query": "Plover P2 dock half price"})[
        "results"] if r["id"].startswith("notes/odd%20names/"))
    opened = admin.get(odd["url"])
    assert opened.status_code == 200 and "half price" in opened.text
    assert f'<code class="key">{escape(odd["id"])}</code>' in opened.text
    assert tools.call("read_document", ALICE, {"id": odd["id"]})["chunks"]
    # a row document links to its console page too
    rows = tools.call("search", ALICE, {"query": "Castellan Pharma Heron H7 recall"})["results"]
    row = next(r for r in rows if r["id"].startswith("public.tickets.body/"))
    assert admin.get(row["url"]).status_code == 200


def test_the_document_page_is_a_governed_read_that_escapes_what_it_shows(served, admin):
    tools: DocgraphTools = served["tools"]
    (note,) = [r for r in tools.call("search", ALICE, {"query": "alert onerror note"})["results"]
               if r["id"].startswith("notes/")]
    page = admin.get(note["url"])
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    assert str(escape(HOSTILE)) in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert ("root", "read", "ok") in [(r["user_id"], r["operation"], r["outcome"])
                                      for r in served["graph"].audit_store.recent(5)]

    signed_out = ConsoleClient(served["url"])
    try:  # the link asks a signed-out person to sign in, then opens the passage
        away = signed_out.get(note["url"])
        path = note["url"].removeprefix(served["url"]).split("#")[0]
        assert away.status_code == 303 and "alert" not in away.text
        assert away.headers["location"] == f"/console/login?next={quote(path, safe='')}"
        form = signed_out.get(away.headers["location"])
        assert f'name="next" value="{escape(path)}"' in form.text
        back = signed_out.post("/console/login", {"token": served["tokens"]["root"],
                                                  "next": path})
        assert back.status_code == 303 and back.headers["location"] == path + "#" + \
            note["url"].split("#")[1]  # at the chunk again
        assert str(escape(HOSTILE)) in signed_out.follow(back).text
        # no other target: the sign-in never sends anyone off the console's documents
        for elsewhere in ("https://evil.example/", "//evil.example/x", "/console/status",
                          "/console/documents/../settings", "/console/documents/a\\b",
                          "/console/documents/%2E%2e/settings"):
            signed_out.get("/console/login")
            again = signed_out.post("/console/login", {"token": served["tokens"]["root"],
                                                       "next": elsewhere})
            assert again.headers["location"] == "/console/status", elsewhere
    finally:
        signed_out.close()

    missing = admin.get("/console/documents/sup/nothing-here.md?chunk=0")
    absent_chunk = admin.get("/console/documents/sup/faq.md?chunk=999")
    assert missing.status_code == absent_chunk.status_code == 404
    assert "nothing readable has the id" in missing.text
    assert admin.get("/console/documents/sup/faq.md?chunk=x").status_code == 400
    with pytest.raises(NotFound):  # what the page shows is what a read as root gets
        tools.governance.read(Caller("root"), "sup/nothing-here.md")


def test_the_stdio_base_url_is_configured_or_the_default_address():
    assert ServeSettings().base_url() == "http://127.0.0.1:8765"
    assert ServeSettings(host="0.0.0.0", port=9000).base_url() == "http://127.0.0.1:9000"
    assert ServeSettings(public_url="https://docs.example/kb/").base_url() == \
        "https://docs.example/kb"
    with pytest.raises(ValueError, match="public_url"):
        ServeSettings(public_url="ftp://docs.example")


# -- the same words -------------------------------------------------------------------------

def test_scores_and_lanes_are_named_alike_on_every_surface(served, monkeypatch):
    graph, tools = served["graph"], served["tools"]
    found = tools.call("search_documents", ALICE, {"query_text": "reboot the Tern T3", "k": 5})
    results = found["results"]
    assert {r["score_label"] for r in results} == {"composite"}
    assert all("seed" not in r["lanes"] and r["lane"] != "seed" for r in results)
    top = results[0]
    assert top["lane"] in ("dense+bm25", "dense", "bm25")
    assert top["lanes"][: len(top["lane"].split("+"))] == top["lane"].split("+")

    hybrid = json.loads(_cli(graph, monkeypatch, "search", "reboot the Tern T3", "--json"))
    assert {h["score_label"] for h in hybrid} == {"rrf"}
    assert hybrid[0]["lane"] == "dense+bm25" and hybrid[0]["lanes"] == ["dense", "bm25"]
    cohort = json.loads(_cli(graph, monkeypatch, "search", "reboot the Tern T3", "--json",
                             "--mode", "vector_first"))
    assert {h["score_label"] for h in cohort} == {"composite"}
    assert all("seed" not in h["lanes"] for h in cohort)
    text = _cli(graph, monkeypatch, "search", "reboot the Tern T3", "--mode", "vector_first")
    assert " seed" not in text and "composite" in text and "via dense" in text

