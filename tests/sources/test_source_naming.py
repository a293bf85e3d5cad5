"""Agent-visible identity and citation URLs: display names and public URLs stored with each
source (both backends), ids that round-trip, links that never show the machine's layout."""

from __future__ import annotations

import json
import sqlite3

import pytest

from docgraph import DocGraph
from docgraph.errors import SourceError
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.model import SourceRecord
from docgraph.serve.tools import DocgraphTools
from docgraph.sources.naming import (
    PublicIdentity,
    check_display_name,
    citation_url,
    default_display_name,
    display_names,
)
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.sqlite.catalog import SQLiteCatalog
from tests import backend_graphs
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

FILES = {"support/faq v2.md": "# FAQ\n\nHold the power key of the Tern T3 for ten seconds "
                              "to reboot it.\n",
         "guide.md": "# Guide\n\nThe Roost gateway reconnects every robot.\n"}


# -- the pieces ---------------------------------------------------------------------------

def test_citation_urls_are_percent_encoded_and_take_a_page():
    assert citation_url(None, "a.md") is None
    assert citation_url("https://intra.example/docs/", "support/faq v2.md") == \
        "https://intra.example/docs/support/faq%20v2.md"
    assert citation_url("https://intra.example/docs", "x#y?.md", page=4) == \
        "https://intra.example/docs/x%23y%3F.md#page=4"
    assert citation_url("https://s3.example/o/b?prefix=docs/{path}", "ü/a.pdf") == \
        "https://s3.example/o/b?prefix=docs/%C3%BC/a.pdf"


def test_display_names_default_to_the_folder_and_stay_unique_per_namespace():
    assert default_display_name("file:///srv/data/corpus") == "corpus"
    assert default_display_name("s3://bucket") == "bucket"
    assert default_display_name("file:///srv/my%20docs") == "my-docs"
    sources = [SourceRecord(1, "file:///a/corpus", "ns", "file"),
               SourceRecord(2, "file:///b/corpus", "ns", "file"),
               SourceRecord(3, "file:///c/corpus", "other", "file"),
               SourceRecord(4, "file:///d/x", "ns", "file", display_name="corpus-2"),
               SourceRecord(5, "sql://crm/public.t.body", "ns", "sql")]
    assert display_names(sources) == {1: "corpus", 2: "corpus-3", 3: "corpus", 4: "corpus-2"}
    for bad in ("", "a/b", "a#b", "c:d", "two words", ".", "x" * 65):
        with pytest.raises(SourceError, match="display name"):
            check_display_name(bad)


def test_public_ids_round_trip_and_accept_the_stored_form():
    urn = normalize_urn("/srv/data/corpus")
    identity = PublicIdentity([SourceRecord(1, urn, "ns", "file", "corpus",
                                            "https://intra.example/c")])
    stored = document_id(urn, "support/faq v2.md")
    public = identity.key("ns", stored + "#chunk-12")
    assert public == "corpus/support/faq%20v2.md#chunk-12"
    assert identity.stored_candidates("corpus/support/faq%20v2.md", {"ns"})[0] == ("ns", stored)
    assert ("ns", stored) in identity.stored_candidates("corpus/support/faq v2.md", {"ns"})
    assert ("ns", stored) in identity.stored_candidates(stored, {"ns"})
    assert identity.document("ns", "public.tickets.body/3") == "public.tickets.body/3"
    assert identity.url("ns", stored, "support/faq v2.md", page=2) == \
        "https://intra.example/c/support/faq%20v2.md#page=2"


# -- stored with the source, on both backends --------------------------------------------

def _tools(graph: DocGraph) -> DocgraphTools:
    return DocgraphTools(Governance(graph, StaticEntitlements(
        [RoleAssignment("ann", "reader", "*")])))


def test_names_and_urls_are_stored_and_shown_instead_of_paths(make_graph, tmp_path):
    graph = make_graph()
    folder = write_files(tmp_path / "srv" / "corpus", FILES)
    other = write_files(tmp_path / "elsewhere" / "corpus", {"b.md": "# B\n\nBeta text.\n"})
    graph.sources.add_folder(folder, "docs", public_url="https://intra.example/kb/")
    graph.sources.add_folder(other, "docs")  # same last component: a unique default
    with pytest.raises(SourceError, match="already used"):
        graph.sources.add_folder(tmp_path / "third", "docs", display_name="corpus")
    listed = {s.urn: s for s in graph.store.list_sources()}
    assert listed[normalize_urn(folder)].display_name == "corpus"
    assert listed[normalize_urn(folder)].public_url == "https://intra.example/kb/"
    assert listed[normalize_urn(other)].display_name == "corpus-2"
    assert listed[normalize_urn(other)].public_url is None
    graph.index(folder, namespace="docs")
    graph.index(other, namespace="docs")

    tools = _tools(graph)
    ann = Caller("ann")
    lookup = tools.call("lookup_knowledge", ann, {"query": "How do I reboot the Tern T3?"})
    block = next(e for e in lookup["evidence"] if "faq" in e["document_id"])
    assert block["document_id"].startswith("corpus/support/faq%20v2.md#chunk-")
    assert block["url"] == "https://intra.example/kb/support/faq%20v2.md"
    hits = tools.call("search_documents", ann, {"query_text": "Beta text", "k": 5})["results"]
    beta = next(h for h in hits if h["source"] == "b.md")
    assert beta["chunk_id"] == "corpus-2/b.md#chunk-0" and "url" not in beta
    assert str(tmp_path) not in str(lookup) + str(hits)
    fetched = tools.call("fetch", ann, {"id": block["document_id"]})
    assert fetched["url"] == block["url"] and "ten seconds" in fetched["text"]
    listing = tools.call("list_documents", ann, {})["documents"]
    assert {d["document"] for d in listing} == {"corpus/guide.md", "corpus/support/faq%20v2.md",
                                                "corpus-2/b.md"}
    context = tools.call("document_context", ann, {"query_text": "reboot the Tern T3",
                                                   "token_budget": 800})
    rows = context["sections"]["Source Text"]
    assert rows and all(r.startswith("[corpus") for r in rows)
    assert context["source_chunks"] and all(k.startswith("corpus") for k in
                                            context["source_chunks"])
    assert str(tmp_path) not in str(context) and "file://" not in str(context)

    # renaming and changing the URL are visible at once; ids already handed out in the
    # stored form keep resolving
    graph.sources.update_folder(folder, "docs", display_name="kb",
                                public_url="https://wiki.example/{path}?view=1")
    moved = tools.call("read_document", ann, {"id": "kb/guide.md"})
    assert moved["document_id"] == "kb/guide.md"
    assert moved["url"] == "https://wiki.example/guide.md?view=1"
    stored = document_id(normalize_urn(folder), "guide.md")
    assert tools.call("read_document", ann, {"id": stored})["document_id"] == "kb/guide.md"
    graph.sources.update_folder(folder, "docs", clear_public_url=True)
    assert "url" not in tools.call("read_document", ann, {"id": "kb/guide.md"})


def test_the_cli_sets_a_name_and_a_public_url(make_graph, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    graph = make_graph()
    backend_graphs.point_the_cli_at(graph, monkeypatch)
    index = ["--index", str(graph.settings.store.path)]
    folder = write_files(tmp_path / "kb", FILES)
    done = CliRunner().invoke(app, [*index, "sources", "add", str(folder), "-d", "docs",
                                    "--name", "handbook", "--public-url",
                                    "https://intra.example/hb"])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(app, [*index, "sources", "set", str(folder), "-d", "docs",
                                    "--public-url", "ftp://nope"])
    assert done.exit_code != 0 and "public URL" in str(done.exception)
    (source,) = graph.store.list_sources()
    assert (source.display_name, source.public_url) == ("handbook", "https://intra.example/hb")
    done = CliRunner().invoke(app, [*index, "sources", "list", "--json"])
    (listed,) = json.loads(done.stdout)
    assert (listed["display_name"], listed["public_url"]) == ("handbook",
                                                              "https://intra.example/hb")


@backend_graphs.embedded_only
def test_an_index_file_from_before_names_gains_the_columns(make_graph, tmp_path):
    graph = make_graph("old.db")
    folder = write_files(tmp_path / "corpus", FILES)
    graph.index(folder, namespace="docs")
    graph.close()
    path = graph.settings.store.path
    with sqlite3.connect(path) as db:  # the sources table as earlier versions wrote it
        db.execute("ALTER TABLE sources DROP COLUMN display_name")
        db.execute("ALTER TABLE sources DROP COLUMN public_url")
    catalog = SQLiteCatalog(path)
    (source,) = catalog.list_sources()
    assert (source.display_name, source.public_url) == ("", None)
    assert display_names([source]) == {source.id: "corpus"}
    catalog.close()
    reopened = make_graph("old.db")
    page = _tools(reopened).call("read_document", Caller("ann"), {"id": "corpus/guide.md"})
    assert page["document_id"] == "corpus/guide.md"
