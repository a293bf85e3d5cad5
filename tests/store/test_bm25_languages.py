"""BM25 in the language of each document, on both product backends: a folder of German,
Dutch, French, Chinese and English documents is indexed (languages detected), and a query
with another inflected form of a word, or a Chinese word inside an unbroken sentence, finds
its document; English is read as it always was. One folder and one index per backend."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from tests.helpers import CountingEmbedder, write_files
from tests.pg import PostgresServer, pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.store_backends import Backend, product_backend

backend = product_backend

FILES = {
    "de/sanierung.md": "# Sanierung\n\nWer ein altes Haus saniert, muss feuchte Balken "
                       "austauschen und darf keine dichte Farbe verwenden.\n",
    "de/brezeln.md": "# Brezeln\n\nIn der Backstube werden Brezeln vor dem Backen kurz in "
                     "Natronlauge getaucht und mit grobem Salz bestreut.\n",
    "nl/grachten.md": "# Grachten\n\nDe huizen aan de Amsterdamse grachten zijn smal en hoog, "
                      "omdat de belasting naar de breedte van de gevel werd berekend.\n",
    "nl/kaas.md": "# Kaasmarkt\n\nOp de kaasmarkt dragen kaasdragers de kazen op houten "
                  "berries naar de Waag, waar elke kaas wordt gewogen.\n",
    "fr/haras.md": "# Le haras\n\nUn cheval bien dressé répond aux aides du cavalier avec "
                   "calme et patience, même sur un terrain difficile.\n",
    "fr/fromage.md": "# L'affinage\n\nDans les caves d'affinage, les fromages sont retournés "
                     "et brossés régulièrement pendant des mois.\n",
    "zh/library.md": "# 借阅规则\n\n在市立图书馆借书需要先办理读者证，"
                     "每位读者一次最多可以借十本书。\n",
    "zh/tea.md": "# 茶叶\n\n茶树喜欢温暖湿润的气候和酸性土壤，所以多种植在南方的山坡上。\n",
    "en/sourdough.md": "# Sourdough\n\nA sourdough starter is a living culture of wild "
                       "yeasts; feed it flour and water every day.\n",
}

# query -> the document it must find first (each query's word has another form there)
QUERIES = {
    "Häuser": "de/sanierung.md",       # Haus
    "huis": "nl/grachten.md",          # huizen
    "chevaux": "fr/haras.md",          # cheval
    "图书": "zh/library.md",            # inside 在市立图书馆借书需要...
    "读者": "zh/library.md",
    "feeding starters": "en/sourdough.md",  # feed, starter: Porter, as before
}


@pytest.fixture
def graph(backend: Backend, tmp_path: Path) -> Iterator[DocGraph]:
    folder = write_files(tmp_path / "docs", FILES)
    with DocGraph(load_settings(store=backend.store_settings()), CountingEmbedder()) as graph:
        graph.index(folder, namespace="multi")
        yield graph


def test_each_document_is_read_in_its_language(graph: DocGraph) -> None:
    index = graph.chunk_index()
    for query, expected in QUERIES.items():
        rows = index.lexical_search(query, 3, frozenset({"multi"}))
        chunks = graph.store.chunks_by_rowid([r.rowid for r in rows])
        found = [chunks[r.rowid].source_path for r in rows]
        assert found[:1] == [expected], (query, found)
    languages = {d.path: d.language for d in graph.documents(["multi"])}
    assert languages == {path: path.split("/")[0] for path in FILES}


def test_a_source_may_name_its_language(tmp_path: Path) -> None:
    """``[sources] languages`` wins over detection (the embedded store: the setting is read
    by the ingest pipeline, the same for every backend)."""
    folder = write_files(tmp_path / "docs", {"a.md": FILES["de/sanierung.md"],
                                             "b.md": FILES["en/sourdough.md"]})
    settings = load_settings(store={"path": tmp_path / "index.db"},
                             sources={"languages": {str(folder): "nl"}})
    with DocGraph(settings, CountingEmbedder()) as graph:
        graph.index(folder, namespace="set")
        assert {d.language for d in graph.documents(["set"])} == {"nl"}


def test_a_read_only_index_from_before_reads_queries_as_english(tmp_path: Path) -> None:
    """A file written before namespaces recorded their languages, opened read-only (it
    cannot gain the column), still answers BM25: every query read as English, as before."""
    folder = write_files(tmp_path / "docs", {"b.md": FILES["en/sourdough.md"]})
    db = tmp_path / "index.db"
    with DocGraph(load_settings(store={"path": db}), CountingEmbedder()) as graph:
        graph.index(folder, namespace="old")
    with sqlite3.connect(db) as con:
        con.execute("ALTER TABLE namespaces DROP COLUMN languages")
    con.close()
    settings = load_settings(store={"path": db, "read_only": True})
    with DocGraph(settings, CountingEmbedder()) as graph:
        rows = graph.chunk_index().lexical_search("feeding starters", 1, frozenset({"old"}))
        assert len(rows) == 1


def test_a_language_new_to_the_namespace_reads_the_next_query(tmp_path: Path) -> None:
    """The languages a query is read in are cached between syncs of the embedded index: a
    German document written after an English-only query still finds the next German one."""
    folder = write_files(tmp_path / "docs", {"en.md": FILES["en/sourdough.md"]})
    settings = load_settings(store={"path": tmp_path / "index.db"})
    with DocGraph(settings, CountingEmbedder()) as graph:
        graph.index(folder, namespace="grow")
        index = graph.chunk_index()
        assert index.lexical_search("Häuser", 1, frozenset({"grow"})) == []
        write_files(folder, {"de.md": FILES["de/sanierung.md"]})
        graph.index(folder, namespace="grow")
        rows = index.lexical_search("Häuser", 1, frozenset({"grow"}))
        chunks = graph.store.chunks_by_rowid([r.rowid for r in rows])
        assert [c.source_path for c in chunks.values()] == ["de.md"]


def test_migrate_keeps_each_documents_language(pgvector_server: PostgresServer,  # noqa: F811
                                               tmp_path: Path) -> None:
    """``docgraph migrate`` copies a document's language, and PostgreSQL counts the copy's
    terms in it: the German document is found by another form of its word there too."""
    from docgraph.store.migrate import migrate_to_postgres
    from docgraph.store.postgres import PostgresCatalog, PostgresChunkIndex
    from docgraph.store.sqlite import SQLiteCatalog

    folder = write_files(tmp_path / "docs", {"de.md": FILES["de/sanierung.md"],
                                             "en.md": FILES["en/sourdough.md"]})
    with DocGraph(load_settings(store={"path": tmp_path / "index.db"}),
                  CountingEmbedder()) as graph:
        graph.index(folder, namespace="moved")
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = pgvector_server.create_database(name)
    source, copy = SQLiteCatalog(tmp_path / "index.db"), PostgresCatalog(url)
    try:
        migrate_to_postgres(source, copy)
        languages = {d.path: d.language for d in copy.list_documents(["moved"], 0, 10)}
        assert languages == {"de.md": "de", "en.md": "en"}
        dimension = CountingEmbedder().dimension
        rows = PostgresChunkIndex(copy, dimension).lexical_search(
            "Häuser", 1, frozenset({"moved"}))
        chunks = copy.chunks_by_rowid([r.rowid for r in rows])
        assert [c.source_path for c in chunks.values()] == ["de.md"]
    finally:
        source.close()
        copy.close()
        pgvector_server.drop_database(name)
