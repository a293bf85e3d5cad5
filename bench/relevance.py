"""relevance_level on the served path: thresholds chosen on a tuning half, reported on a test half.

    python bench/relevance.py [--queries N] [--docs D] [--datasets scifact,2wiki] [--reuse]

The path measured is the one agents call: ``DocgraphTools(Governance(...)).call(
"lookup_knowledge", caller, {"query": q})`` with static entitlements granting the bench caller
the bench namespace, so every search is the governed cohort engine in ``vector_first`` mode.
The governance object only records the hits it returns (nothing is changed on the way); the
post-processor re-run offline on those hits must reproduce the live level of every lookup
(``live_checks``), so other thresholds can be evaluated on the very same hits. The plain
hybrid path (``KnowledgeService.for_graph``, the path ``bench/evidence.py`` calibrated) runs
as a control on the same queries and indexes.

Queries: each dataset's test queries are split once into a tuning and a test half by a seeded
shuffle, committed as ``bench/splits/relevance_<dataset>.json``; a run takes every query of
both halves (``--queries N``: the first N of each). Answerable = SciFact -> SciFact and 2Wiki
-> 2Wiki; unanswerable = SciFact -> 2Wiki and 2Wiki -> SciFact. Each index is the whole corpus
built as in ``bench/evidence.py`` (Markdown files, MiniLM int8 behind the embedding cache,
default settings); ``--docs D`` keeps the gold documents plus seeded random others, D in all,
which is faster but easier (fewer distractors raise the hit rates and lower the precise cut).

Thresholds are chosen on the tuning half only, per top-quality rule (the first block's
quality, and the best returned block's, which is what ships): ``low_quality_threshold`` is the
0.01 grid value with the best Youden index (answerable vs unanswerable; the middle of the best
plateau); ``precise_threshold`` the smallest grid value from which, going up, the evidence hit
rate (a gold passage among the blocks; unanswerable lookups count as misses) among the lookups
at or above it stays at least ``PRECISE_HIT_TARGET`` on each index. The report gives, on the
test half: AUC by top quality (both rules and the raw engine score of the first hit), level
distributions and the evidence hit rate per level, before (first block, the previous
thresholds) and after, on the served and the control path.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from common import (
    BENCH_DIR,
    BeirDataset,
    cached_embedder,
    load_beir,
    log,
    print_table,
    write_result,
)
from docgraph.app import DocGraph
from docgraph.config import RagSettings
from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.evidence import (
    DocgraphSearchPort,
    EvidencePostProcessor,
    EvidenceSettings,
    KnowledgeService,
    evidence_key,
)
from docgraph.evidence.port import KnowledgeSearchHit, hit_from_search_hit
from docgraph.evidence.quality import (
    CALIBRATED_LOW_QUALITY_THRESHOLD,
    CALIBRATED_PRECISE_THRESHOLD,
    HybridQuality,
)
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.serve.tools import DocgraphTools
from evidence import (
    NAMESPACE,
    RecordingPort,
    auc,
    gold_of,
    hit_record,
    open_index,
    parse_list,
    pct,
    run_pairs,
    summary,
    to_hits,
)

WORKDIR = BENCH_DIR / ".cache" / "relevance"
SPLITS_DIR = BENCH_DIR / "splits"
SPLIT_SEED = 20250917
CORPUS_SEED = 13
PRECISE_HIT_TARGET = 0.9
MIN_PRECISE_SUPPORT = 10  # lookups at or above a candidate precise threshold, per index
#: The thresholds bench/evidence.py fitted on the plain hybrid path (the "before").
PREVIOUS = (0.55, 0.45)
PATHS = ("served", "control")
CONFIGS = ("before", "first_refit", "after")
GRID = [round(i / 100, 2) for i in range(101)]
CALLER = Caller("bench-agent")


# ---------------------------------------------------------------- splits and corpora

def load_split(data: BeirDataset) -> dict[str, list[str]]:
    """The committed tuning/test split of ``data``'s queries (written once if absent)."""
    path = SPLITS_DIR / f"relevance_{data.name}.json"
    if not path.is_file():
        ids = sorted(data.queries)
        random.Random(SPLIT_SEED).shuffle(ids)
        half = (len(ids) + 1) // 2
        split = {"dataset": data.name, "seed": SPLIT_SEED,
                 "method": "sorted query ids shuffled by random.Random(seed); first half tunes",
                 "tune": ids[:half], "test": ids[half:]}
        SPLITS_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(split, indent=1) + "\n", encoding="utf-8")
        log(f"wrote {path.relative_to(BENCH_DIR.parent)}")
    split = json.loads(path.read_text(encoding="utf-8"))
    unknown = (set(split["tune"]) | set(split["test"])) - set(data.queries)
    if unknown or set(split["tune"]) & set(split["test"]):
        raise SystemExit(f"{path}: ids not among {data.name}'s test queries or in both halves")
    return {"tune": split["tune"], "test": split["test"]}


def corpus_ids(data: BeirDataset, qids: Sequence[str], docs: int | None) -> list[str]:
    """Gold documents of ``qids`` plus seeded random others, ``docs`` in all (at least gold;
    ``None``: the whole corpus)."""
    if docs is None:
        return list(data.corpus)
    gold = {d for q in qids for d in data.qrels[q] if d in data.corpus}
    others = sorted(set(data.corpus) - gold)
    extra = random.Random(CORPUS_SEED).sample(others, max(0, min(len(others), docs - len(gold))))
    keep = gold | set(extra)
    return [d for d in data.corpus if d in keep]


# ---------------------------------------------------------------- live lookups

class RecordingGovernance(Governance):
    """Governance that keeps the hits of every retrieval it serves (and changes nothing)."""

    recorded: list[Any]

    def retrieve(self, *args: Any, **kwargs: Any) -> Any:
        result = super().retrieve(*args, **kwargs)
        self.recorded.append(list(result.hits))
        return result


def served_lookups(graph: DocGraph, files: dict[str, str], queries: dict[str, str]
                   ) -> dict[str, Any]:
    """Every query through ``DocgraphTools.call("lookup_knowledge")``: hits and live answer."""
    governance = RecordingGovernance(
        graph, StaticEntitlements([RoleAssignment(CALLER.user_id, "reader", NAMESPACE)]))
    governance.recorded = []
    tools = DocgraphTools(governance)
    out: dict[str, Any] = {}
    for qid, text in queries.items():
        governance.recorded.clear()
        payload = tools.call("lookup_knowledge", CALLER, {"query": text})
        if len(governance.recorded) != 1:
            raise SystemExit(f"lookup_knowledge ran {len(governance.recorded)} retrievals "
                             "(expected 1): the recording hook no longer sees the served path")
        hits = [hit_from_search_hit(h) for h in governance.recorded[0]]
        where = {_key(h): [files[str(h.metadata["source"])], h.chunk_index] for h in hits}
        out[qid] = {"hits": [hit_record(h, files) for h in hits],
                    "live_level": payload["relevance_level"],
                    "live_low": payload["is_low_quality"],
                    "live_blocks": [where[e["document_id"]] for e in payload["evidence"]]}
    return out


def _key(hit: KnowledgeSearchHit) -> str:
    return evidence_key(hit.doc_id, hit.chunk_index, hit.vector_id, hit.original_rank)


def control_lookups(graph: DocGraph, files: dict[str, str], queries: dict[str, str]
                    ) -> dict[str, Any]:
    """The plain hybrid path (``KnowledgeService`` over ``DocgraphSearchPort``, as shipped)."""
    service = KnowledgeService.for_graph(graph, [NAMESPACE])
    port = RecordingPort(DocgraphSearchPort(graph, [NAMESPACE]))
    service.port = port
    out: dict[str, Any] = {}
    for qid, text in queries.items():
        result = service.lookup_knowledge(text)
        out[qid] = {"hits": [hit_record(h, files) for h in port.last],
                    "live_level": str(result.relevance_level),
                    "live_low": result.is_low_quality,
                    "live_blocks": [[files[b.source], b.chunk_index] for b in result.blocks]}
    return out


# ---------------------------------------------------------------- offline analysis

Row = dict[str, Any]  # one lookup: pair, half, answerable, index, first, best, composite, hit
#: Top-quality rules compared: the first block's quality (the rule before this bench), the
#: best returned block's (the shipped rule), and the first hit's raw engine score.
RULES = ("first", "best", "composite")


def processor(precise: float, low: float) -> EvidencePostProcessor:
    """The shipped post-processor (default RagSettings, min_rank_dense) at these thresholds."""
    return EvidencePostProcessor.from_settings(RagSettings(), EvidenceSettings(
        precise_threshold=precise, low_quality_threshold=low,
        hybrid_quality=HybridQuality.MIN_RANK_DENSE))


def lookup_rows(raw: dict[str, Any], data: dict[str, BeirDataset],
                halves: dict[str, dict[str, list[str]]], path: str) -> list[Row]:
    """One row per lookup: its score under every rule, its gold hit, and the live check."""
    shipped = processor(CALIBRATED_PRECISE_THRESHOLD, CALIBRATED_LOW_QUALITY_THRESHOLD)
    rows: list[Row] = []
    for key, per_query in raw[path].items():
        qname, iname = key.split("->")
        half_of = {q: h for h, ids in halves[qname].items() for q in ids}
        for qid, rec in per_query.items():
            result = shipped.process(to_hits(rec["hits"]))
            keys = [[b.doc_id, b.chunk_index] for b in result.blocks]
            gold = gold_of(data[qname], qid) if qname == iname else set()
            rows.append({
                "pair": key, "half": half_of[qid], "answerable": qname == iname,
                "index": iname, "dataset": qname,
                "first": result.blocks[0].quality_score if result.blocks else -1.0,
                "best": -1.0 if result.top_quality is None else result.top_quality,
                "composite": rec["hits"][0]["raw"] if rec["hits"] else -1.0,
                "hit": bool(gold & {b.doc_id for b in result.blocks}),
                # the projection may only drop trailing blocks (payload budget)
                "live_ok": (str(result.relevance_level) == rec["live_level"]
                            and result.is_low_quality == rec["live_low"]
                            and keys[: len(rec["live_blocks"])] == rec["live_blocks"]),
            })
    return rows


def level_of(top: float, precise: float, low: float) -> str:
    """The level ``relevance_level`` gives a top quality (``-1``: nothing retrieved)."""
    if top < 0:
        return "NONE"
    return "PRECISE" if top >= precise else "AMBIGUOUS" if top >= low else "WEAK"


def youden(rows: Sequence[Row], t: float, rule: str) -> float:
    """TPR - FPR of "answerable when the rule's score >= t"."""
    pos = [r[rule] >= t for r in rows if r["answerable"]]
    neg = [r[rule] >= t for r in rows if not r["answerable"]]
    return sum(pos) / len(pos) - sum(neg) / len(neg)


def choose_thresholds(rows: Sequence[Row], rule: str) -> dict[str, Any]:
    """(precise, low) for ``rule`` from the tuning rows, by the rules in the module docstring.

    ``precise`` is the smallest grid value from which (going up) the evidence hit rate among
    the lookups at or above it stays at least the target on every index, counting only
    values that every index reaches at least ``MIN_PRECISE_SUPPORT`` times.
    """
    scores = [youden(rows, t, rule) for t in GRID]
    best = max(scores)
    plateau = [t for t, s in zip(GRID, scores, strict=True) if s >= best - 1e-12]
    low = plateau[len(plateau) // 2]
    indexes = sorted({r["index"] for r in rows})
    sweep: list[dict[str, Any]] = []
    ok_from: float | None = None
    for t in reversed([t for t in GRID if t >= low]):
        entry: dict[str, Any] = {"t": t}
        rates = []
        for name in indexes:
            above = [r["hit"] for r in rows if r["index"] == name and r[rule] >= t]
            entry[f"{name}_n"] = len(above)
            entry[f"{name}_hit_rate"] = round(sum(above) / len(above), 4) if above else None
            if len(above) >= MIN_PRECISE_SUPPORT:
                rates.append(sum(above) / len(above))
        sweep.append(entry)
        if len(rates) < len(indexes):
            continue
        if min(rates) < PRECISE_HIT_TARGET:
            break
        ok_from = t
    precise = ok_from if ok_from is not None else 1.0
    return {"rule": rule, "precise_threshold": precise, "low_quality_threshold": low,
            "youden_at_low": round(best, 4), "youden_plateau": [plateau[0], plateau[-1]],
            "precise_sweep": [e for e in reversed(sweep)
                              if precise - 0.06 <= e["t"] <= precise + 0.06]}


def figures(rows: Sequence[Row], rule: str, precise: float, low: float) -> dict[str, Any]:
    """Level distribution per pair, hit rate per level, low-quality rates, AUCs."""
    def tops(score: str, answerable: bool) -> list[float]:
        return [r[score] for r in rows if r["answerable"] is answerable]

    def level(r: Row) -> str:
        return level_of(r[rule], precise, low)

    levels: list[dict[str, Any]] = []
    for pair in sorted({r["pair"] for r in rows}):
        part = [r for r in rows if r["pair"] == pair]
        counts = Counter(level(r) for r in part)
        levels.append({"queries": pair, "kind": "answerable" if part[0]["answerable"]
                       else "unanswerable", "n": len(part), **pct(counts, len(part)),
                       "low_quality_%": round(100.0 * (counts["WEAK"] + counts["NONE"])
                                              / len(part), 1)})
    hit_rate: dict[str, Any] = {}
    for dataset in sorted({r["dataset"] for r in rows if r["answerable"]}):
        part = [r for r in rows if r["answerable"] and r["dataset"] == dataset]
        for name in ("PRECISE", "AMBIGUOUS", "WEAK"):
            got = [r["hit"] for r in part if level(r) == name]
            hit_rate[f"{dataset} {name}"] = {
                "n": len(got), "hit_rate": round(sum(got) / len(got), 4) if got else None}
        hit_rate[f"{dataset} all"] = {"n": len(part), "hit_rate": round(
            sum(r["hit"] for r in part) / len(part), 4)}
    precise_rows = [r for r in rows if level(r) == "PRECISE"]
    return {
        "rule": rule, "thresholds": {"precise": precise, "low_quality": low},
        "auc": round(auc(tops(rule, True), tops(rule, False)), 4),
        "youden_at_low": round(youden(rows, low, rule), 4),
        "top_quality": {"answerable": summary(tops(rule, True)),
                        "unanswerable": summary(tops(rule, False))},
        "relevance_levels": levels,
        "evidence_hit_rate_by_level": hit_rate,
        "precise_answers": {"n": len(precise_rows),
                            "unanswerable": sum(not r["answerable"] for r in precise_rows),
                            "evidence_hit_rate": round(sum(r["hit"] for r in precise_rows)
                                                       / len(precise_rows), 4)
                            if precise_rows else None},
    }


def analyse(raw: dict[str, Any], data: dict[str, BeirDataset],
            halves: dict[str, dict[str, list[str]]]) -> dict[str, Any]:
    """Thresholds per rule from the served tuning half; figures per half for both paths.

    Configurations: ``before`` (first block, the previous thresholds), ``first_refit`` (first
    block, thresholds refitted here) and ``after`` (best block, thresholds fitted here: what
    ships)."""
    rows = {path: lookup_rows(raw, data, halves, path) for path in PATHS}
    tune = [r for r in rows["served"] if r["half"] == "tune"]
    chosen = {rule: choose_thresholds(tune, rule) for rule in ("first", "best")}
    configs = {
        "before": ("first", *PREVIOUS),
        "first_refit": ("first", chosen["first"]["precise_threshold"],
                        chosen["first"]["low_quality_threshold"]),
        "after": ("best", chosen["best"]["precise_threshold"],
                  chosen["best"]["low_quality_threshold"]),
    }
    report: dict[str, Any] = {
        "chosen_on_tuning_half": chosen,
        "live_checks": {path: {"lookups": len(rows[path]),
                               "offline_equals_live": sum(r["live_ok"] for r in rows[path])}
                        for path in PATHS},
    }
    for path in PATHS:
        for half in ("tune", "test"):
            part = [r for r in rows[path] if r["half"] == half]
            report[f"{path}_{half}"] = {
                "auc": {rule: round(auc([r[rule] for r in part if r["answerable"]],
                                        [r[rule] for r in part if not r["answerable"]]), 4)
                        for rule in RULES},
                **{name: figures(part, *cfg) for name, cfg in configs.items()}}
    return report


# ---------------------------------------------------------------- main

def collect(names: list[str], subsets: dict[str, dict[str, str]], docs: int | None,
            batch_size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build the indexes and run every lookup of both paths; returns (raw, info)."""
    embedder = cached_embedder(MiniLMEmbedder(batch_size=batch_size))
    graphs: dict[str, tuple[DocGraph, dict[str, str]]] = {}
    info: dict[str, Any] = {"indexes": {}, "ms_per_lookup": {}}
    raw: dict[str, Any] = {path: {} for path in PATHS}
    runners: dict[str, Callable[..., dict[str, Any]]] = {
        "served": served_lookups, "control": control_lookups}
    try:
        for n in names:
            data = load_beir(n)
            ids = corpus_ids(data, list(subsets[n]), docs)
            graph, files, built = open_index(data, ids, embedder, WORKDIR / f"{n}-{docs or 'all'}")
            graphs[n], info["indexes"][n] = (graph, files), built
        for qname, iname in run_pairs(names):
            key = f"{qname}->{iname}"
            graph, files = graphs[iname]
            for path in PATHS:
                started = time.perf_counter()
                raw[path][key] = runners[path](graph, files, subsets[qname])
                ms = 1000 * (time.perf_counter() - started) / max(len(subsets[qname]), 1)
                info["ms_per_lookup"][f"{key} {path}"] = round(ms, 1)
                log(f"  {key} {path}: {ms:.0f} ms/lookup")
    finally:
        for graph, _ in graphs.values():
            graph.close()
        embedder.close()
    return raw, info


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=None,
                        help="queries per half per dataset (the first N of each half; "
                             "default all)")
    parser.add_argument("--docs", type=int, default=None,
                        help="documents per index: gold documents + seeded random others "
                             "(default the whole corpus)")
    parser.add_argument("--datasets", default="scifact,2wiki")
    parser.add_argument("--reuse", action="store_true",
                        help="re-analyse the stored raw lookups without searching")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--name", default="relevance")
    args = parser.parse_args(argv)

    names = parse_list(args.datasets)
    data = {n: load_beir(n) for n in names}
    splits = {n: load_split(data[n]) for n in names}
    halves = {n: {h: ids[: args.queries] for h, ids in splits[n].items()} for n in names}
    subsets = {n: {q: data[n].queries[q] for h in ("tune", "test") for q in halves[n][h]}
               for n in names}
    raw_path = WORKDIR / f"raw-{args.name}-q{args.queries or 'all'}-d{args.docs or 'all'}.json"
    started = time.perf_counter()
    if args.reuse and raw_path.is_file():
        stored = json.loads(raw_path.read_text(encoding="utf-8"))
        raw, info = stored["raw"], stored["info"]
    else:
        raw, info = collect(names, subsets, args.docs, args.batch_size)
        WORKDIR.mkdir(parents=True, exist_ok=True)
        raw_path.write_text(json.dumps({"raw": raw, "info": info}), encoding="utf-8")
    report = analyse(raw, data, halves)
    write_result(args.name, {
        "protocol": {
            "served": "DocgraphTools(Governance(graph, StaticEntitlements)).call("
                      "'lookup_knowledge', caller, {'query': q}): governed cohort engine, "
                      "vector_first, default EvidenceSettings and RagSettings",
            "control": "KnowledgeService.for_graph(graph, [namespace]): plain hybrid search "
                       "(DocgraphSearchPort, similarity filled), the path bench/evidence.py fitted",
            "splits": {n: f"bench/splits/relevance_{n}.json" for n in names},
            "answerable": "queries against their own corpus",
            "unanswerable": "SciFact queries against the 2Wiki index and 2Wiki queries "
                            "against the SciFact index",
            "thresholds": f"chosen per rule on the served tuning half: low = best Youden "
                          f"index on a 0.01 grid (middle of the plateau); precise = smallest "
                          f"grid value from which the evidence hit rate of the lookups at or "
                          f"above it stays >= {PRECISE_HIT_TARGET} on every index "
                          f"(>= {MIN_PRECISE_SUPPORT} lookups per index)",
            "configs": "before = first block's quality at the previous thresholds "
                       f"{PREVIOUS[0]} / {PREVIOUS[1]} (bench/evidence.py); first_refit = "
                       "first block, thresholds refitted; after = best block, thresholds "
                       "refitted (what ships)",
            "rules": "first = quality of the first block; best = best block quality (the "
                     "shipped top_quality); composite = the first hit's raw engine score "
                     "(cohort composite / RRF score)",
            "corpus": "whole corpora" if args.docs is None else
                      f"gold documents plus seeded random others, {args.docs} per index "
                      "(easier than the whole corpus)",
        },
        "queries_per_half": args.queries, "documents_per_index": args.docs,
        "code_thresholds": {"precise": CALIBRATED_PRECISE_THRESHOLD,
                            "low_quality": CALIBRATED_LOW_QUALITY_THRESHOLD},
        "seconds": round(time.perf_counter() - started, 1),
        **info, **report,
        "results": [{"path": p, "half": "test", "config": name, "rule": fig["rule"],
                     "precise": fig["thresholds"]["precise"],
                     "low": fig["thresholds"]["low_quality"], "auc": fig["auc"],
                     "precise_hit_rate": fig["precise_answers"]["evidence_hit_rate"]}
                    for p in PATHS for name in CONFIGS
                    for fig in [report[f"{p}_test"][name]]],
    })
    for p in PATHS:
        for name in CONFIGS:
            fig = report[f"{p}_test"][name]
            print_table(fig["relevance_levels"], title=f"\n{p} test half, {name}: "
                        f"{fig['rule']} block, {fig['thresholds']}")
    print(json.dumps({"chosen": report["chosen_on_tuning_half"],
                      "live_checks": report["live_checks"]}, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
