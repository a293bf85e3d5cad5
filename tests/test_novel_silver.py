"""GraphRAG-Bench novel's silver label (``bench/novel_silver.py``), which the per-model
tuning bench scores novel with: which questions it keeps, which chunks of a real index it
calls relevant, and what ``evidence@k`` and ``route@1`` count."""

from __future__ import annotations

import json
import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import novel_silver
from common import write_corpus_folder

FILLER = " ".join(f"The moor road ran past farm number {i} in the grey rain." for i in range(12))
BOOKS = {
    "Novel-1": f"{FILLER} Tregeagle was doomed to empty Dozmare Pool with a limpet shell. "
               f"{FILLER} Merlin walked the cliffs at Tintagel.",
    "Novel-2": f"{FILLER} In another tale Tregeagle swam across Dozmare Pool at night. {FILLER}",
}


def question(qid: str, book: str, triple: str, kind: str = "Fact Retrieval") -> dict[str, str]:
    return {"id": qid, "source": book, "question": f"question {qid}?", "question_type": kind,
            "answer": "", "evidence": "", "evidence_triple": triple}


QUESTIONS = [
    question("q-fact", "Novel-1", "(Tregeagle, was doomed to empty, Dozmare Pool)"),
    question("q-absent", "Novel-1", "(Tregeagle, feared, Bodmin Moor)"),  # tail not in book
    question("q-apart", "Novel-1", "(Tregeagle, met, Merlin)"),  # both there, far apart
    question("q-kind", "Novel-1", "(Tregeagle, emptied, Dozmare Pool)", "Complex Reasoning"),
    question("q-short", "Novel-1", "(Tregeagle, was at, Po)"),  # an end under 3 characters
    question("q-many", "Novel-1", "(moor road, ran past, farm)"),  # co-occurs at > 3 places
]


def test_normalise_folds_case_diacritics_and_punctuation_to_whole_words():
    assert novel_silver.normalise("Baron Von Pawel-Rammingen!") == " baron von pawel rammingen "
    assert novel_silver.normalise("Château  d'If") == " chateau d if "
    assert " arthur " not in novel_silver.normalise("Arthurian legends")
    assert novel_silver.evidence_pair("(King Arthur,fought with,Mordred); (a, b, c)") == (
        " king arthur ", " mordred ")
    assert novel_silver.evidence_pair("no triple here") is None


def test_the_split_keeps_fact_questions_whose_triple_co_occurs_in_a_few_places(
        tmp_path, monkeypatch):
    base = tmp_path / "reports_novel.json"
    base.write_text(json.dumps({"seed": 7, "tune": ["q-fact", "q-absent", "q-kind"],
                                "test": ["q-apart", "q-short", "q-many"]}))
    monkeypatch.setattr(novel_silver, "QUESTION_SPLIT", base)
    monkeypatch.setattr(novel_silver, "SPLIT", tmp_path / "model_tune_novel.json")

    split = novel_silver.build_split(BOOKS, QUESTIONS)

    assert [q["id"] for q in split["tune"]] == ["q-fact"] and split["test"] == []
    assert split["tune"][0] == {"id": "q-fact", "book": "Novel-1", "head": "tregeagle",
                                "tail": "dozmare pool", "places": 1}
    assert split["seed"] == 7 and split["label"] == novel_silver.LABEL
    # written once, read back after: a later change of the books does not move the halves
    assert novel_silver.build_split({}, []) == split


def test_relevant_chunks_are_the_questions_book_chunks_holding_both_ends(tmp_path, make_graph):
    labels = {"tune": [{"id": "q-fact", "book": "Novel-1", "head": "tregeagle",
                        "tail": "dozmare pool", "places": 1}],
              "test": [{"id": "q-lost", "book": "Novel-2", "head": "merlin",
                        "tail": "dozmare pool", "places": 1}]}
    novel = novel_silver.NovelSet(
        BOOKS, labels, [*QUESTIONS, question("q-lost", "Novel-2", "(Merlin, swam, Dozmare Pool)")])
    folder = tmp_path / "corpus"
    files = write_corpus_folder(novel.dataset(), sorted(BOOKS), folder)
    graph = make_graph(loader={"chunk_tokens": 32}, graph={"enabled": False})
    graph.index(folder, namespace="bench")
    rows = graph.catalog.connection().execute(
        "SELECT c.id, d.path FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE c.kind = 'text'").fetchall()
    chunk_book = {int(r): files[p] for r, p in rows}
    texts = {r: c.text for r, c in graph.catalog.chunks_by_rowid(sorted(chunk_book)).items()}

    assert novel.bind(chunk_book, texts) == 1  # q-lost: no Novel-2 chunk holds both ends
    [relevant] = novel.relevant["q-fact"]
    assert "limpet" in texts[int(relevant)] and chunk_book[int(relevant)] == "Novel-1"
    other = next(str(r) for r, t in texts.items()  # the same two names in the other book
                 if chunk_book[r] == "Novel-2" and "Tregeagle" in t and "Dozmare" in t)
    wrong_chunk = next(str(r) for r, b in chunk_book.items()
                       if b == "Novel-1" and str(r) != relevant)

    run = {"q-fact": [other, wrong_chunk, relevant]}
    assert novel.value(run["q-fact"], "q-fact", "evidence@2") == 0.0
    assert novel.value(run["q-fact"], "q-fact", "evidence@5") == 1.0
    assert novel.value(run["q-fact"], "q-fact", "route@1") == 0.0  # top chunk: Novel-2
    assert novel.value([wrong_chunk], "q-fact", "route@1") == 1.0
    assert novel.score(run, ["q-fact"]) == {"evidence@2": 0.0, "evidence@5": 1.0,
                                            "evidence@10": 1.0, "route@1": 0.0}
    assert novel.per_query({}, ["q-fact", "q-lost"], "evidence@10").tolist() == [0.0, 0.0]
