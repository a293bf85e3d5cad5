"""The owner's engine API (:class:`docgraph.DocGraph`) refuses unusable text at its door.

Every public method taking free text refuses what the governed entry refuses (too long for
the engine's bound, an unpaired UTF-16 surrogate; a NUL character only in a folder or a new
namespace name, since the engines take it as data in a query) with the project's
:class:`~docgraph.governance.inputs.InvalidArgument` naming the argument, instead of a raw
``sqlite3.OperationalError: LIKE or GLOB pattern too complex`` or ``UnicodeEncodeError``
from below. Namespace lists are names already held, so only text that cannot be encoded is
refused there (an unknown name is :class:`~docgraph.errors.UnknownNamespace` as before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.embedding.embedders import HashingEmbedder
from docgraph.governance.inputs import InvalidArgument
from tests.helpers import write_files

DOCS = {"runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n"}
TOO_LONG = "x" * 60_000  # over every engine bound; as a LIKE pattern, SQLite's too
SURROGATE = "lidar \ud800"
NUL = "lidar\x00K2"

Call = Callable[[DocGraph, Any, Path], object]

#: (method and argument, the call with the value in that argument, refused kinds of text)
CASES: list[tuple[str, Call, str, tuple[str, ...]]] = [
    ("search.query", lambda g, v, _: g.search(v, namespaces=["ops"]), "query",
     ("long", "surrogate")),
    ("search.query dense", lambda g, v, _: g.search(v, namespaces=["ops"], mode="dense"),
     "query", ("long", "surrogate")),
    ("retrieve.query_text", lambda g, v, _: g.retrieve(v, namespaces=["ops"]), "query_text",
     ("long", "surrogate")),
    ("context.query", lambda g, v, _: g.context(v, namespaces=["ops"]), "query",
     ("long", "surrogate")),
    ("entities.query", lambda g, v, _: g.entities(["ops"], v), "query",
     ("long", "surrogate")),
    ("entities.entity_type", lambda g, v, _: g.entities(["ops"], None, v), "entity_type",
     ("long", "surrogate")),
    ("neighbors.entity", lambda g, v, _: g.neighbors(v, ["ops"]), "entity",
     ("long", "surrogate")),
    ("search.namespaces", lambda g, v, _: g.search("lidar", namespaces=[v], strict=False),
     "namespaces", ("surrogate",)),
    ("entities.namespaces", lambda g, v, _: g.entities([v], strict=False), "namespaces",
     ("surrogate",)),
    ("neighbors.namespaces", lambda g, v, _: g.neighbors("K2", [v], strict=False),
     "namespaces", ("surrogate",)),
    ("communities.namespaces", lambda g, v, _: g.communities([v], strict=False),
     "namespaces", ("surrogate",)),
    ("documents.namespaces", lambda g, v, _: g.documents([v], strict=False), "namespaces",
     ("surrogate",)),
    ("index.namespace", lambda g, v, docs: g.index(docs, v), "namespace",
     ("long", "surrogate", "nul")),
    ("index.folder", lambda g, v, _: g.index(v, "ops"), "folder", ("surrogate", "nul")),
    ("add_folder.folder", lambda g, v, _: g.add_folder(v, "ops"), "folder",
     ("surrogate", "nul")),
    ("remove_folder.namespace", lambda g, v, docs: g.remove_folder(docs, v), "namespace",
     ("surrogate",)),
]
TEXTS = {"long": TOO_LONG, "surrogate": SURROGATE, "nul": NUL}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DocGraph, Path]]:
    root = tmp_path_factory.mktemp("engine_door")
    docs = write_files(root / "docs", DOCS)
    with DocGraph.open(root / "index.db", embedder=HashingEmbedder()) as graph:
        graph.index(docs, "ops")
        yield graph, docs


@pytest.mark.parametrize(("call", "argument", "kind"), [
    pytest.param(call, argument, kind, id=f"{name}-{kind}")
    for name, call, argument, kinds in CASES for kind in kinds])
def test_engine_api_refuses_unusable_text_naming_the_argument(
        indexed: tuple[DocGraph, Path], call: Call, argument: str, kind: str) -> None:
    graph, docs = indexed
    with pytest.raises(InvalidArgument) as refused:
        call(graph, TEXTS[kind], docs)
    assert refused.value.argument == argument
    assert str(refused.value).startswith(f"{argument}: ")
    assert graph.search("Kestrel lidar", namespaces=["ops"])  # the index still answers
