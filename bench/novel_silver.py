"""GraphRAG-Bench novel as a retrieval set with a *silver* chunk label (issue 35).

GraphRAG-Bench novel has 20 books and 2,010 questions with an ``answer``, a paraphrased
``evidence`` sentence and an ``evidence_triple``, but no passage labels. Most answers are
generated sentences: of the 971 "Fact Retrieval" answers, 878 occur nowhere verbatim in
their book, so "the answer string is in the chunk" labels almost nothing. The evidence
triples name the fact's two ends as they are written in the book far more often, so the
label used here is their co-occurrence:

* **Indexed text.** Each book's first :data:`CHARS` characters, one Markdown file per book,
  all 20 in one namespace (a search asks all books at once): 1,059 MiniLM / 1,201 e5 chunks.
  The bound is the embedding time: the e5 build took 25 minutes niced on the shared 2-core
  machine (load 7-10, beside another e5 build: 0.8 chunks/s);
  60,000 characters would keep 247 questions instead of 207 for half as long again.
* **Questions** (:func:`build_split`, committed as ``bench/splits/model_tune_novel.json``).
  "Fact Retrieval" questions, halves as in the committed question split
  ``bench/splits/reports_novel.json`` (sorted ids shuffled by a fixed seed), kept when the
  *first* evidence triple ``(head, relation, tail)`` has a head and a tail of >= 3
  characters once normalised (:func:`normalise`: casefold, diacritics dropped, every run of
  non-alphanumerics one space, whole words) and they co-occur (starts within
  :data:`WINDOW` normalised characters) at 1 to :data:`MAX_PLACES` places of the book's
  indexed prefix: the fact is stated somewhere in the indexed text, in only a few places.
* **Relevant chunk**: a chunk of the question's book whose normalised text holds both the
  head and the tail. ``evidence@k`` = some relevant chunk is among the top ``k`` chunks of
  a search over all 20 books; ``route@1`` = the top chunk is from the question's book.

**Weaknesses.** Silver, not judged: two names in one chunk need not state the fact (a false
positive), and a chunk that states it through a pronoun or a paraphrase is missed (a false
negative); only the first triple counts; a head and tail that straddle a chunk boundary
leave the question with no relevant chunk in that model's index (``unreachable``, counted
per model: both models chunk by their own tokenizer, so their chunks differ); only facts
in the books' openings are asked, where the Gutenberg front matter sits; and many
questions name their book's title, which makes ``route@1`` easier than the content alone.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from common import BENCH_DIR, BeirDataset
from reports import SPLIT as QUESTION_SPLIT
from reports import load_novel

NAME = "novel"
CHARS = 40_000
WINDOW = 400
MAX_PLACES = 3
MIN_CHARS = 3
SPLIT = BENCH_DIR / "splits" / "model_tune_novel.json"
METRICS = ("evidence@2", "evidence@5", "evidence@10", "route@1")
LABEL = ("Fact Retrieval questions whose first evidence triple's head and tail co-occur "
         f"(within {WINDOW} normalised chars) at 1..{MAX_PLACES} places of their book's first "
         f"{CHARS} chars; relevant chunk = a chunk of that book holding both (normalised, "
         "whole words); evidence@k = a relevant chunk in the top k of a search over all 20 "
         "books; route@1 = the top chunk is from the question's book")


def normalise(text: str) -> str:
    """Casefolded, diacritics dropped, alphanumeric words joined by single spaces and padded
    with one space each side, so ``" " + word + " "`` finds whole words only."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    return " " + " ".join(re.findall(r"[0-9a-z]+", plain)) + " "


def evidence_pair(triples: str) -> tuple[str, str] | None:
    """The normalised (head, tail) of the first ``(head, relation, tail)`` in ``triples``,
    or None when there is none or either end is shorter than :data:`MIN_CHARS`."""
    for inner in re.findall(r"\(([^()]*)\)", triples):
        parts = [p.strip() for p in inner.split(",")]
        if len(parts) < 3:
            continue
        head, tail = normalise(parts[0]), normalise(parts[-1])
        if min(len(head.strip()), len(tail.strip())) < MIN_CHARS:
            return None
        return head, tail
    return None


def places(text: str, head: str, tail: str) -> int:
    """How many occurrences of ``head`` in normalised ``text`` have ``tail`` starting within
    :data:`WINDOW` characters."""
    heads = [m.start() for m in re.finditer(re.escape(head), text)]
    tails = np.array([m.start() for m in re.finditer(re.escape(tail), text)])
    if not heads or not len(tails):
        return 0
    return sum(bool((np.abs(tails - h) <= WINDOW).any()) for h in heads)


def build_split(books: Mapping[str, str], questions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The labelled questions of each half (kept in the question split's order), with the
    rule that chose them; written to :data:`SPLIT` once and read from there after."""
    if SPLIT.is_file():
        return dict(json.loads(SPLIT.read_text("utf-8")))
    base = json.loads(QUESTION_SPLIT.read_text("utf-8"))
    by_id = {q["id"]: q for q in questions}
    texts = {name: normalise(text) for name, text in books.items()}
    halves: dict[str, list[dict[str, Any]]] = {}
    for half in ("tune", "test"):
        halves[half] = []
        for qid in base[half]:
            q = by_id[qid]
            pair = evidence_pair(q.get("evidence_triple") or "")
            if q["question_type"] != "Fact Retrieval" or pair is None or q["source"] not in texts:
                continue
            found = places(texts[q["source"]], *pair)
            if 1 <= found <= MAX_PLACES:
                halves[half].append({"id": qid, "book": q["source"], "head": pair[0].strip(),
                                     "tail": pair[1].strip(), "places": found})
    split = {"dataset": "graphrag_bench_novel", "question_split": "bench/splits/reports_novel.json",
             "seed": base["seed"], "chars_per_book": CHARS, "label": LABEL, **halves}
    SPLIT.write_text(json.dumps(split, indent=1) + "\n", "utf-8")
    return split


class NovelSet:
    """The books, the labelled questions of both halves, and (once :meth:`bind` has seen an
    index's chunks) each question's relevant chunks in that index."""

    def __init__(self, books: Mapping[str, str], split: Mapping[str, Any],
                 questions: Sequence[dict[str, Any]]) -> None:
        self.books = dict(books)
        text = {q["id"]: q["question"] for q in questions}
        self.labels = {q["id"]: q for half in ("tune", "test") for q in split[half]}
        self.halves = {h: [q["id"] for q in split[h]] for h in ("tune", "test")}
        self.queries = {qid: text[qid] for qid in self.labels}
        self.relevant: dict[str, set[str]] = {}
        self.chunk_book: dict[str, str] = {}

    def dataset(self) -> BeirDataset:
        """The books as a corpus (no title: a heading would prefix every chunk) and the
        questions, for ``ablation.open_dataset_index``; no qrels (see :meth:`bind`)."""
        return BeirDataset(name=NAME, corpus={b: {"title": "", "text": t}
                                              for b, t in self.books.items()},
                           queries=dict(self.queries), qrels={})

    def bind(self, chunk_book: Mapping[int, str], chunk_text: Mapping[int, str]) -> int:
        """Label one index's chunks (run ids are chunk row ids as strings); returns how many
        questions have no relevant chunk there (``unreachable``)."""
        self.chunk_book = {str(r): b for r, b in chunk_book.items()}
        texts = {str(r): normalise(t) for r, t in chunk_text.items()}
        self.relevant = {qid: {r for r, b in self.chunk_book.items()
                               if b == q["book"] and f" {q['head']} " in texts[r]
                               and f" {q['tail']} " in texts[r]}
                         for qid, q in self.labels.items()}
        return sum(not chunks for chunks in self.relevant.values())

    def value(self, ranked: Sequence[str], qid: str, metric: str) -> float:
        """One question's ``metric`` (:data:`METRICS`) for a ranked list of chunk ids."""
        name, k = metric.split("@")
        top = ranked[:int(k)]
        if name == "route":
            return float(bool(top) and self.chunk_book.get(top[0]) == self.labels[qid]["book"])
        return float(any(r in self.relevant[qid] for r in top))

    def per_query(self, run: Mapping[str, Sequence[str]], qids: Sequence[str], metric: str
                  ) -> np.ndarray:
        return np.array([self.value(run.get(q, []), q, metric) for q in qids])

    def score(self, run: Mapping[str, Sequence[str]], qids: Sequence[str]) -> dict[str, float]:
        return {m: round(float(self.per_query(run, qids, m).mean()), 4) for m in METRICS}


def load_set() -> NovelSet:
    """The books' prefixes and the labelled questions of the committed split."""
    books, questions = load_novel(CHARS)
    return NovelSet(books, build_split(books, questions), questions)
