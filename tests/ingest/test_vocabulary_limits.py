"""A build meets more distinct words than the process-wide stem cache holds: the cache is
cleared and refilled, and no word of the call that overflowed it is lost (before, every run
stopped at the same file with a KeyError and nothing after it was ever indexed). A defect
met while preparing one file's content fails that file only."""

from __future__ import annotations

import threading

import pytest

from docgraph import text as analysis
from docgraph.ingest import prepare as prepare_module
from docgraph.text import index_terms, query_terms
from tests.helpers import write_files


def _vocabulary(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}q" for i in range(n))


def test_a_call_that_overflows_the_stem_cache_keeps_all_its_words(monkeypatch):
    monkeypatch.setattr(analysis, "_STEMS", {})
    monkeypatch.setattr(analysis, "_CACHE_LIMIT", 30)
    index_terms("common running " + _vocabulary("a", 40))  # 42 words cached: over the limit
    terms, _ = index_terms("common running " + _vocabulary("b", 40))  # overflows: clear
    assert terms[:2] == ["common", "run"]
    assert terms[2:] == [f"b{i}q" for i in range(40)]
    assert query_terms("running common") == ["run", "common"]


def test_a_clear_in_another_thread_never_breaks_a_lookup(monkeypatch):
    monkeypatch.setattr(analysis, "_STEMS", {})
    monkeypatch.setattr(analysis, "_CACHE_LIMIT", 30)
    errors: list[BaseException] = []

    def work(prefix: str) -> None:
        try:
            for round_ in range(200):
                text = f"shared words {_vocabulary(prefix + str(round_ % 7), 25)}"
                terms, _ = index_terms(text)
                assert terms[:2] == ["share", "word"]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p,)) for p in ("x", "y", "z")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_build_past_the_stem_cache_limit_indexes_every_file(tmp_path, make_graph,
                                                              monkeypatch):
    """The issue's repro at a small limit: one file with a large vocabulary beside a good
    file; both are indexed and searchable."""
    monkeypatch.setattr(analysis, "_STEMS", {})
    monkeypatch.setattr(analysis, "_CACHE_LIMIT", 300)
    big = "\n\n".join(f"common {_vocabulary(f'u{p}x', 40)}" for p in range(30))
    folder = write_files(tmp_path / "docs", {
        "a-ids.txt": big,
        "b-guide.md": "# Guide\n\nThe Kestrel picker runs firmware 4.2.1.\n",
    })
    graph = make_graph(loader={"workers": 1})
    report = graph.index(folder, namespace="ops")
    assert report.failed == []
    assert sorted(report.added) == ["a-ids.txt", "b-guide.md"]
    hits = graph.search("Kestrel firmware", namespaces={"ops"}, k=3)
    assert hits and hits[0].source_path == "b-guide.md"


def test_a_defect_while_preparing_one_file_fails_that_file_only(tmp_path, make_graph,
                                                                 monkeypatch):
    real = prepare_module.prepare_document

    def broken_for_one(spec, document):  # type: ignore[no-untyped-def]
        if "poison" in document.blocks[0].text:
            raise KeyError("u0q")
        return real(spec, document)

    monkeypatch.setattr(prepare_module, "prepare_document", broken_for_one)
    folder = write_files(tmp_path / "docs", {
        "a.txt": "poison pill text\n",
        "b.txt": "The Kestrel picker runs firmware 4.2.1.\n",
    })
    graph = make_graph(loader={"workers": 1})
    report = graph.index(folder, namespace="ops")
    assert report.added == ["b.txt"]
    [(path, reason)] = report.failed
    assert path == "a.txt"
    assert "KeyError" in reason and "skipped" in reason


@pytest.fixture(autouse=True)
def _fresh_stem_cache(monkeypatch):
    """Each test starts and ends with its own cache (the real one is left as it was)."""
    monkeypatch.setattr(analysis, "_STEMS", dict(analysis._STEMS))
