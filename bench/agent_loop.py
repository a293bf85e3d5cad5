"""Agent-style evaluation: does a fixed three-call agent loop read the gold passages?

    python bench/agent_loop.py [--datasets sample,2wiki] [--limit N] [--name agent_loop]

No LLM: each question runs the same deterministic loop through ``DocgraphTools.call`` (the
governed tools exactly as MCP and HTTP serve them, as one reader caller), and after each call
the bench checks what the agent has read so far. Three loops, three calls each:

* ``search_fetch`` (the ChatGPT apps / deep research pair): call 1 ``search(query)`` (ten
  results, each a 300-character snippet); calls 2 and 3 ``fetch(id)`` (the section around the
  chunk, up to 4,000 tokens).
* ``lookup_read``: call 1 ``lookup_knowledge(query)`` (evidence blocks with excerpts of at
  most 700 characters); calls 2 and 3 ``read_document(document_id)`` with the tool's
  defaults (the section around the chunk, up to 2,000 tokens).
* ``search_documents_read``: call 1 ``search_documents(query_text)`` (defaults: ten whole
  chunks, ``vector_first``); calls 2 and 3 ``read_document(chunk_id)`` as above.

A follow-up call opens the best-ranked id of call 1 whose chunk no earlier follow-up returned
whole (``fetch``'s ``metadata.chunk_ids``, ``read_document``'s ``chunks``), so the 2nd
and 3rd calls never re-read one section; when no such id is left the loop stops early. The
question is sent verbatim (no decomposition).

**What the agent read** after n calls is every string value of the first n answers but the
echoed question (for ``read_document`` also its chunks' texts joined in order, the page as
one text). Texts are compared as their lower-cased word sequences (``\\w+``; punctuation,
markup and spacing ignored), so a phrase counts only as whole, consecutive words within one
piece (a snippet, an excerpt, a chunk, a fetched or read page).

* **Sample corpus** (``examples/corpus``, the 16 questions of ``examples/QUERIES.md``, parsed
  by ``tests/example_queries.py``): ``file`` = for every hop of the question (sources joined
  by ``+``), a chunk of one of its files (the named file or an ``(also ...)`` one) was shown;
  ``answer`` = every "answer word" phrase of the question occurs in what was read (the
  phrases are words of the source text; the check ignores which file they came from).
* **2Wiki** (all 6,119 passages indexed, the committed **test half** of the query split,
  ``bench/splits/relevance_2wiki.json``; gold = the qrels' supporting passages, 2 or 4 per
  question there): ``read`` = the gold passage's whole text (without its title) occurs in what
  was read; ``shown`` = some chunk of the gold passage's file was shown (a snippet counts).
  Each for ``any`` gold passage and for ``all`` of them.

Before scoring, a check reads every gold file whole (``read_document``, scope document) and
asserts the criterion holds on it, so a miss is the loop's, not the comparison's. A cached
index built from another checkout's folder is deleted and rebuilt first (indexed again from
this checkout it would hold the old folder as a second source: every passage twice;
``common.discard_foreign_index``), and an index whose namespace holds anything but the one
corpus folder, fully indexed, is refused.

**Tokens read** per question = tokens of the answers' JSON text as the MCP SDK sends it
(``pydantic_core.to_json(indent=2)``), counted with the embedding model's WordPiece tokenizer
(all-MiniLM-L6-v2, no special tokens; an LLM's own tokenizer gives other counts);
cumulative after 1, 2 and 3 calls, median and mean over questions.

Indexes: the sample corpus under ``bench/.cache/agent_loop/sample`` (product settings, real
MiniLM int8 behind the shared embedding cache), 2Wiki is the ablation index
(``bench/ablation.py``'s ``bench/.cache/ablation/2wiki``: ``quality.py`` layout, product
settings, graph built), shared with ``quality_backends.py``, with its query-vector cache.
Nothing is tuned here. ``--limit N``: the first N test-half 2Wiki questions over their gold
passages plus 5N seeded random others (optimistic; a smoke run).
Results: ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pydantic_core

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # tests.example_queries: the shared parser

from tests.example_queries import ExampleQuestion, example_questions  # noqa: E402

from ablation import WORKDIR, QueryVectorCache, open_dataset_index, query_types  # noqa: E402
from common import (  # noqa: E402
    BeirDataset,
    cached_embedder,
    discard_foreign_index,
    load_beir,
    log,
    progress_printer,
    write_result,
)
from docgraph.app import DocGraph  # noqa: E402
from docgraph.config import load_settings  # noqa: E402
from docgraph.embedding.embedders import MiniLMEmbedder  # noqa: E402
from docgraph.governance import (  # noqa: E402
    Caller,
    Governance,
    RoleAssignment,
    StaticEntitlements,
)
from docgraph.serve.tools import DocgraphTools  # noqa: E402
from relevance import load_split  # noqa: E402

SAMPLE_CORPUS = BENCH_DIR.parent / "examples" / "corpus"
SAMPLE_WORKDIR = BENCH_DIR / ".cache" / "agent_loop" / "sample"
SAMPLE_NAMESPACE = "demo"
WIKI_NAMESPACE = "bench"  # the ablation index's namespace
CALLS = 3
AGENT = Caller("agent")

#: loop name -> (first tool, follow-up tool)
LOOPS: dict[str, tuple[str, str]] = {
    "search_fetch": ("search", "fetch"),
    "lookup_read": ("lookup_knowledge", "read_document"),
    "search_documents_read": ("search_documents", "read_document"),
}
SAMPLE_CRITERIA = ("file", "answer")
WIKI_CRITERIA = ("read_any", "read_all", "shown_any", "shown_all")

_WORD = re.compile(r"\w+")
#: Answer fields that only repeat the question (not read, though counted as tokens).
ECHOED = frozenset({"query", "query_text", "effective_query"})


# ---------------------------------------------------------------- reading

def words(text: str) -> str:
    """``text`` as its lower-cased word sequence, space-separated and space-framed, so that
    ``words(phrase) in words(text)`` matches whole consecutive words only (and two framed
    sequences put together meet at a double space, which no phrase spans)."""
    return " " + " ".join(_WORD.findall(text.casefold())) + " "


def contains(read: str, phrase: str) -> bool:
    """Whether the word sequence ``read`` (from :func:`words`) holds ``phrase``'s words."""
    wanted = words(phrase)
    return wanted.strip() != "" and wanted in read


def strings(payload: Any) -> Iterable[str]:
    """Every string value (not key) of a JSON-ready payload, depth first."""
    if isinstance(payload, str):
        yield payload
    elif isinstance(payload, Mapping):
        for value in payload.values():
            yield from strings(value)
    elif isinstance(payload, list | tuple):
        for value in payload:
            yield from strings(value)


def reading(tool: str, payload: Mapping[str, Any]) -> str:
    """What an answer gives to read, as word sequences (:func:`words`) of its pieces: every
    string value, and for ``read_document`` also its chunks' texts joined in order (the page
    as one text, as ``fetch`` gives it); not the question the answer echoes. Pieces are
    framed apart, so no phrase spans two."""
    parts = list(strings({k: v for k, v in payload.items() if k not in ECHOED}))
    if tool == "read_document":
        parts.append("\n".join(c["text"] for c in payload["chunks"]))
    return "".join(words(part) for part in parts)


def path_of_id(item_id: str) -> str:
    """The relative file path of an agent-visible chunk or document id
    (``<source name>/<path>#chunk-N``)."""
    document = item_id.split("#", 1)[0]
    return unquote(document.split("/", 1)[1] if "/" in document else document)


def shown_paths(tool: str, payload: Mapping[str, Any]) -> frozenset[str]:
    """The files whose text an answer of ``tool`` shows."""
    if tool == "search":
        return frozenset(path_of_id(r["id"]) for r in payload["results"])
    if tool == "search_documents":
        return frozenset(r["source"] for r in payload["results"])
    if tool == "lookup_knowledge":
        return frozenset(e["source"] for e in payload["evidence"])
    if tool == "fetch":
        return frozenset({payload["metadata"]["source"]})
    if tool == "read_document":
        return frozenset({payload["source"]})
    raise ValueError(f"no path rule for tool {tool!r}")


def candidate_ids(tool: str, payload: Mapping[str, Any]) -> list[str]:
    """The ids a first call offers for reading, best first."""
    if tool == "search":
        return [r["id"] for r in payload["results"]]
    if tool == "search_documents":
        return [r["chunk_id"] for r in payload["results"]]
    if tool == "lookup_knowledge":
        return [e["document_id"] for e in payload["evidence"]]
    raise ValueError(f"{tool!r} is not a first call")


def chunks_read(tool: str, payload: Mapping[str, Any]) -> set[str]:
    """The chunk ids a follow-up call returned whole."""
    if tool == "fetch":
        return set(payload["metadata"]["chunk_ids"])
    if tool == "read_document":
        return {c["chunk_id"] for c in payload["chunks"]}
    raise ValueError(f"{tool!r} is not a follow-up call")


def host_text(payload: Mapping[str, Any]) -> str:
    """The answer as the MCP SDK's text content carries it (JSON, indent 2)."""
    return pydantic_core.to_json(payload, fallback=str, indent=2).decode()


@dataclass(frozen=True)
class Call:
    """One tool call of a loop: what it showed (files, words) and what it cost (tokens)."""

    tool: str
    argument: str
    paths: frozenset[str]
    read: str
    tokens: int


def run_loop(tools: DocgraphTools, caller: Caller, loop: str, question: str,
             count_tokens: Callable[[Sequence[str]], list[int]],
             calls: int = CALLS) -> list[Call]:
    """The calls of ``loop`` for ``question``: the first call, then follow-ups on the
    best-ranked ids not yet read whole, ``calls`` in all at most."""
    first, follow = LOOPS[loop]
    args: dict[str, Any] = ({"query_text": question} if first == "search_documents"
                            else {"query": question})
    done: list[Call] = []

    def record(tool: str, argument: str, payload: Mapping[str, Any]) -> None:
        done.append(Call(tool=tool, argument=argument, paths=shown_paths(tool, payload),
                         read=reading(tool, payload),
                         tokens=count_tokens([host_text(payload)])[0]))

    payload = tools.call(first, caller, args)
    record(first, question, payload)
    queue = candidate_ids(first, payload)
    covered: set[str] = set()
    while len(done) < calls:
        item = next((i for i in queue if i not in covered), None)
        if item is None:
            break
        answer = tools.call(follow, caller, {"id": item})
        covered |= chunks_read(follow, answer) | {item}
        record(follow, item, answer)
    return done


def read_after(loop_calls: Sequence[Call], n: int) -> tuple[frozenset[str], str, int]:
    """(files shown, words read, tokens) of the first ``n`` calls."""
    first = loop_calls[:n]
    return (frozenset().union(*(c.paths for c in first)), "".join(c.read for c in first),
            sum(c.tokens for c in first))


def sample_found(question: ExampleQuestion, paths: frozenset[str], read: str
                 ) -> dict[str, bool]:
    """``file``: every hop has a file among ``paths``; ``answer``: every answer word is
    in ``read``."""
    return {"file": all(hop & paths for hop in question.hops),
            "answer": all(contains(read, w) for w in question.answer_words)}


def passages_found(gold: Mapping[str, str], paths: frozenset[str], read: str
                   ) -> dict[str, bool]:
    """Over gold passages ``{file path: passage text}``: ``read_*`` = the whole text was
    read, ``shown_*`` = its file was shown; for any and for all of them."""
    was_read = [contains(read, text) for text in gold.values()]
    shown = [path in paths for path in gold]
    return {"read_any": any(was_read), "read_all": all(was_read),
            "shown_any": any(shown), "shown_all": all(shown)}


# ---------------------------------------------------------------- scoring

def summarise(per_query: Sequence[Mapping[str, Any]], criteria: Sequence[str],
              calls: int = CALLS) -> dict[str, Any]:
    """Share found within 1..calls calls per criterion; tokens after 1..calls calls."""
    n_queries = len(per_query)
    found = {c: [round(sum(q["found"][n][c] for q in per_query) / n_queries, 4)
                 for n in range(calls)] for c in criteria}
    tokens = {f"after_{n + 1}": {
        "median": statistics.median(q["tokens"][n] for q in per_query),
        "mean": round(statistics.fmean(q["tokens"][n] for q in per_query), 1)}
        for n in range(calls)}
    made = [q["calls"] for q in per_query]
    return {"queries": n_queries, "found_within": found, "tokens": tokens,
            "calls_made_mean": round(statistics.fmean(made), 3)}


def score_queries(tools: DocgraphTools, loop: str, questions: Sequence[tuple[str, str]],
                  judge: Callable[[str, frozenset[str], str], dict[str, bool]],
                  count_tokens: Callable[[Sequence[str]], list[int]]) -> list[dict[str, Any]]:
    """Run ``loop`` for every (id, question) and judge what was read after each call
    (a loop that stopped early keeps its last state)."""
    rows: list[dict[str, Any]] = []
    for qid, text in questions:
        done = run_loop(tools, AGENT, loop, text, count_tokens)
        found, tokens = [], []
        for n in range(1, CALLS + 1):
            paths, read, spent = read_after(done, n)
            found.append(judge(qid, paths, read))
            tokens.append(spent)
        rows.append({"id": qid, "calls": len(done), "found": found, "tokens": tokens,
                     "read_ids": [c.argument for c in done[1:]]})
    return rows


def first_call_found(row: Mapping[str, Any], criterion: str) -> int | None:
    """The call after which ``criterion`` first held (1-based), or None."""
    for n, found in enumerate(row["found"], 1):
        if found[criterion]:
            return n
    return None


def make_tools(graph: DocGraph, namespace: str) -> DocgraphTools:
    """The governed tools with one reader of ``namespace`` (``AGENT``)."""
    return DocgraphTools(Governance(
        graph, StaticEntitlements([RoleAssignment(AGENT.user_id, "reader", namespace)])))


def read_whole(tools: DocgraphTools, document_id: str) -> str:
    """Every page of a document (``read_document``, scope document) as one word sequence."""
    parts: list[str] = []
    cursor: str | None = None
    while True:
        args: dict[str, Any] = {"id": document_id, "scope": "document", "token_budget": 16_000}
        if cursor:
            args["cursor"] = cursor
        page = tools.call("read_document", AGENT, args)
        parts.append(reading("read_document", page))
        cursor = page["next_cursor"]
        if not cursor:
            return "".join(parts)


def source_name(tools: DocgraphTools) -> str:
    """The display name of the (single) source folder the caller reaches."""
    listed = tools.call("list_documents", AGENT, {"limit": 1})["documents"][0]
    return str(listed["document"])[: -len(listed["path"]) - 1]


def check_single_source(graph: DocGraph, namespace: str, files: int) -> None:
    """Refuse an index whose namespace does not hold exactly the one corpus folder, every
    file of it indexed (a cached index built from another checkout's folder was already
    discarded by :func:`common.discard_foreign_index` before opening). Documents may
    outnumber files: a mail's attachments are documents of their own."""
    stats = next(s for s in graph.status().namespaces if s.namespace == namespace)
    if stats.sources != 1 or stats.documents < files:
        raise SystemExit(f"{namespace}: the index holds {stats.sources} sources and "
                         f"{stats.documents} documents, not one folder of {files} files")


# ---------------------------------------------------------------- datasets

def evaluate_sample(embedder: Any) -> dict[str, Any]:
    """The three loops over the sample corpus's example questions."""
    questions = example_questions()
    SAMPLE_WORKDIR.mkdir(parents=True, exist_ok=True)
    discard_foreign_index(SAMPLE_WORKDIR / "index.db", SAMPLE_NAMESPACE, SAMPLE_CORPUS)
    graph = DocGraph(load_settings(store={"path": SAMPLE_WORKDIR / "index.db"}), embedder)
    try:
        started = time.perf_counter()
        report = graph.index(SAMPLE_CORPUS, SAMPLE_NAMESPACE,
                             progress=progress_printer("sample"))
        if report.failed:
            raise SystemExit(f"sample corpus: {len(report.failed)} files failed")
        index = {"wall_s": round(time.perf_counter() - started, 1),
                 "chunks_embedded": report.chunks_embedded}
        check_single_source(graph, SAMPLE_NAMESPACE,
                            sum(1 for p in SAMPLE_CORPUS.rglob("*") if p.is_file()))
        tools = make_tools(graph, SAMPLE_NAMESPACE)
        name = source_name(tools)
        by_id = {str(q.number): q for q in questions}
        unreadable = []
        for q in questions:  # the criterion holds on the gold files read whole
            read = "".join(read_whole(tools, f"{name}/{p}") for p in sorted(q.sources))
            if not sample_found(q, q.sources, read)["answer"]:
                unreadable.append(q.number)
        if unreadable:
            raise SystemExit(f"sample: answer words not in the gold files of Q{unreadable}")

        def judge(qid: str, paths: frozenset[str], read: str) -> dict[str, bool]:
            return sample_found(by_id[qid], paths, read)

        out: dict[str, Any] = {"questions": len(questions), "index": index,
                               "criterion_check": "answer words found in every question's "
                                                  "gold files read whole", "loops": {}}
        for loop in LOOPS:
            rows = score_queries(tools, loop, [(str(q.number), q.question) for q in questions],
                                 judge, embedder.count_tokens)
            summary = summarise(rows, SAMPLE_CRITERIA)
            summary["per_question"] = [{
                "q": int(r["id"]), "kind": by_id[r["id"]].kind,
                **{f"{c}_at_call": first_call_found(r, c) for c in SAMPLE_CRITERIA},
                "tokens": r["tokens"][-1], "read_ids": r["read_ids"]} for r in rows]
            out["loops"][loop] = summary
            log(f"  sample {loop}: " + json.dumps(summary["found_within"]))
        return out
    finally:
        graph.close()


def wiki_corpus(data: BeirDataset, test: Sequence[str], limit: int | None
                ) -> tuple[list[str], str]:
    """(corpus ids, index tag): everything, or gold + 5 x limit seeded random others."""
    if not limit:
        return list(data.corpus), data.name
    gold = {d for q in test for d in data.qrels[q] if d in data.corpus}
    others = random.Random(13).sample(sorted(set(data.corpus) - gold), 5 * limit)
    keep = gold | set(others)
    return [d for d in data.corpus if d in keep], f"{data.name}-agent-limit{limit}"


def evaluate_wiki(embedder: Any, limit: int | None) -> dict[str, Any]:
    """The three loops over 2Wiki's test-half questions."""
    data = load_beir("2wiki")
    test = load_split(data)["test"]
    test = test[:limit] if limit else test
    doc_ids, tag = wiki_corpus(data, test, limit)
    (WORKDIR / tag).mkdir(parents=True, exist_ok=True)
    qcache = QueryVectorCache(embedder, WORKDIR / tag / "query_vectors.npz")
    log(f"== 2wiki: {len(doc_ids)} passages, {len(test)} test-half questions")
    graph, _, index = open_dataset_index(data, doc_ids, qcache, tag, rebuild=False)
    try:
        for qid in test:
            qcache.embed_query(data.queries[qid])
        qcache.save()
        files: dict[str, str] = json.loads((WORKDIR / tag / "files.json").read_text("utf-8"))
        file_of = {doc: name for name, doc in files.items()}
        gold = {q: {file_of[d]: data.corpus[d]["text"] for d, rel in data.qrels[q].items()
                    if rel > 0 and d in file_of} for q in test}
        check_single_source(graph, WIKI_NAMESPACE, len(doc_ids))
        tools = make_tools(graph, WIKI_NAMESPACE)
        name = source_name(tools)
        unreadable = sorted({f for g in gold.values() for f, text in g.items()
                             if not contains(read_whole(tools, f"{name}/{f}"), text)})
        if unreadable:
            raise SystemExit(f"2wiki: gold passages not found read whole: {unreadable[:5]}")
        types = query_types(data.name)

        def judge(qid: str, paths: frozenset[str], read: str) -> dict[str, bool]:
            return passages_found(gold[qid], paths, read)

        out: dict[str, Any] = {
            "questions": len(test), "passages": len(doc_ids), "index": index,
            "gold_per_question": dict(sorted(
                {str(n): sum(len(g) == n for g in gold.values())
                 for n in {len(g) for g in gold.values()}}.items())),
            "criterion_check": "every gold passage found in its file read whole",
            "split": "bench/splits/relevance_2wiki.json (test half)", "loops": {}}
        for loop in LOOPS:
            started = time.perf_counter()
            rows = score_queries(tools, loop, [(q, data.queries[q]) for q in test], judge,
                                 embedder.count_tokens)
            summary = summarise(rows, WIKI_CRITERIA)
            summary["seconds"] = round(time.perf_counter() - started, 1)
            summary["by_type_within_3"] = {
                kind: {c: round(statistics.fmean(r["found"][-1][c] for r in rows
                                                  if types.get(r["id"]) == kind), 4)
                       for c in ("read_any", "read_all")} | {
                    "questions": sum(types.get(r["id"]) == kind for r in rows)}
                for kind in sorted({types.get(r["id"], "") for r in rows})}
            out["loops"][loop] = summary
            log(f"  2wiki {loop}: " + json.dumps(summary["found_within"]))
        return out
    finally:
        graph.close()


# ---------------------------------------------------------------- main

def table_rows(dataset: str, result: Mapping[str, Any], criteria: Sequence[str]
               ) -> list[dict[str, Any]]:
    """One row per loop and criterion: found within 1/2/3 calls, tokens after 3 calls."""
    rows = []
    for loop, summary in result["loops"].items():
        tokens = summary["tokens"][f"after_{CALLS}"]
        for c in criteria:
            found = summary["found_within"][c]
            rows.append({"dataset": dataset, "loop": loop, "criterion": c,
                         "within_1": found[0], "within_2": found[1], "within_3": found[2],
                         "tokens_1_mean": summary["tokens"]["after_1"]["mean"],
                         "tokens_3_median": tokens["median"], "tokens_3_mean": tokens["mean"]})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="sample,2wiki")
    parser.add_argument("--limit", type=int, default=None,
                        help="smoke run: the first N 2Wiki test-half questions, small corpus")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1,
                        help="onnxruntime threads (1 avoids spin contention on a shared box)")
    parser.add_argument("--name", default="agent_loop")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = set(names) - {"sample", "2wiki"}
    if unknown:
        parser.error(f"unknown dataset(s) {sorted(unknown)}")

    embedder = cached_embedder(MiniLMEmbedder(batch_size=args.batch_size, threads=args.threads))
    started = time.perf_counter()
    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    try:
        if "sample" in names:
            results["sample"] = evaluate_sample(embedder)
            rows += table_rows("sample", results["sample"], SAMPLE_CRITERIA)
        if "2wiki" in names:
            results["2wiki"] = evaluate_wiki(embedder, args.limit)
            rows += table_rows("2wiki", results["2wiki"], WIKI_CRITERIA)
    finally:
        embedder.close()
    write_result(args.name, {
        "calls": CALLS, "loops": {k: list(v) for k, v in LOOPS.items()},
        "tokenizer": "all-MiniLM-L6-v2 WordPiece (no special tokens) over the MCP text "
                     "content (JSON, indent 2)",
        "limit": args.limit, "wall_minutes": round((time.perf_counter() - started) / 60, 1),
        "results": rows, "datasets": results,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

