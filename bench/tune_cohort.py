"""Re-tune the cohort engine's constants on the tuning half, report the test half (issue 20).

    python bench/tune_cohort.py [--split tune|test|all] [--search] [--name tune_cohort]

Indexes, query vectors and the run of one configuration are ``bench/ablation.py``'s (the
whole 2Wiki and SciFact corpora, MiniLM int8, ``k=20`` chunks folded to documents); queries
are one half of the committed splits ``bench/splits/relevance_<dataset>.json``.

``--search`` runs the declared search on the **tune** half only (it refuses another split),
then reports the test half of the configurations it compares:

1. one constant at a time around the defaults before this search (:data:`BEFORE`;
   :data:`SPACE`, printed), objective
   ``J = (R@2 + R@5) / 2`` on 2Wiki tune, guard: SciFact tune nDCG@10 at most
   :data:`GUARD` below the defaults'. A value replaces the default only when it gains at
   least :data:`MIN_GAIN` in ``J`` and every grid neighbour of it also beats the default
   (a plateau, not a peak); a lane or gate (:data:`SWITCHES`) is switched off when ``J``
   without it is within :data:`SIMPLER` of ``J`` with it and the guard holds (simpler wins).
2. the accepted changes together, checked on tune (kept only if the combination is at
   least as good as the best single change; otherwise only that one).
3. the personalized-PageRank lane on top of the result of 2, its constants one at a time
   the same way (:data:`PPR_SPACE`).

Then every compared configuration runs on the **test** half (paired bootstrap intervals
against :data:`BEFORE` and against the engine's current defaults). Without ``--search`` the
fixed configurations of :func:`fixed_configs` run on the given split.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ablation import (
    WORKDIR,
    Config,
    QueryVectorCache,
    open_dataset_index,
    run_config,
    settings_diff,
)
from common import cached_embedder, load_beir, log, write_result
from docgraph.app import DocGraph
from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.retrieve.cohort import CohortSettings
from quality import paired_delta, per_query, score_run
from relevance import load_split

DATASETS = ("2wiki", "scifact")
GUARD = 0.005       # SciFact tune nDCG@10 may drop at most this much below the defaults'
MIN_GAIN = 0.005    # J gain a changed constant must bring on 2Wiki tune
SIMPLER = 0.002     # a lane/gate whose removal costs less J than this is switched off
REFERENCES = ("before", "defaults")  # test-half deltas are reported against these

#: The engine's defaults before issue 20's re-tune (chosen on all of 2Wiki's queries): the
#: search starts here, and test-half deltas are reported against it.
BEFORE = replace(CohortSettings(), hop_intro_position=20, redundancy_penalty=0.1,
                 bridge_needs_intro=True, completeness=True, ppr_lane=False, ppr_from_seeds=5)
#: Constants that matter most (entity lane, hops, fusion, composite), a few values around
#: the default (the default is always one of them).
SPACE: dict[str, list[Any]] = {
    "entity_from_seeds": [2, 3, 5],
    "entities_per_seed": [6, 12, 20],
    "chunks_per_entity": [4, 8, 16],
    "entity_max_df": [0.01, 0.02, 0.04],
    "entity_min_similarity": [0.05, 0.15, 0.25],
    "entity_budget": [20, 40, 80],
    "hop_intro_position": [5, 10, 15, 20, 40],
    "hop_min_ratio": [0.2, 0.3, 0.5],
    "hops_per_seed": [1, 2],
    "rrf_k": [10, 20, 40],
    "coverage_weight": [0.05, 0.15, 0.3],
    "redundancy_penalty": [0.0, 0.05, 0.1, 0.2],
    "entity_priority": [0.5, 0.7, 0.9],
    "seed_pool": [20, 30, 50],
}
#: Lanes and gates that are on by default: each is tried off. Completeness is not among them:
#: besides adding chunks it reports which named entities were found (``unmatched_entities``
#: of ``lookup_knowledge``, the console), so it stays on whatever its retrieval gain (on
#: tune its expansion changed neither J nor nDCG@10: ``bench/results/tune_cohort.json``).
SWITCHES = ("hop_inherit", "bridge_needs_intro", "query_names_capitalized")
#: The PPR lane's constants (tried on top of the tuned engine with ``ppr_lane=True``).
PPR_SPACE: dict[str, list[Any]] = {
    "ppr_weight": [0.5, 1.0, 2.0],
    "ppr_damping": [0.3, 0.5, 0.7],
    "ppr_from_seeds": [3, 5, 10],
    "ppr_entity_restart": [0.25, 0.5, 0.75],
    "ppr_chunks_per_entity": [4, 8, 16],
    "ppr_budget": [10, 20, 40],
    "ppr_min_similarity": [0.05, 0.15, 0.25],
}


class Bench:
    """The two datasets' indexes and the split's queries; memoised runs per configuration."""

    def __init__(self, split: str) -> None:
        self.split = split
        self.graphs: dict[str, DocGraph] = {}
        self.chunk_doc: dict[str, dict[int, str]] = {}
        self.queries: dict[str, dict[str, str]] = {}
        self.data = {n: load_beir(n) for n in DATASETS}
        self.memo: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.model = cached_embedder(MiniLMEmbedder(threads=1))
        for name, data in self.data.items():
            halves = load_split(data)
            wanted = halves["tune"] + halves["test"] if split == "all" else halves[split]
            self.queries[name] = {q: data.queries[q] for q in wanted}
            embedder = QueryVectorCache(self.model, WORKDIR / name / "query_vectors.npz")
            graph, chunk_doc, _ = open_dataset_index(data, list(data.corpus), embedder, name,
                                                     rebuild=False)
            for text in self.queries[name].values():
                embedder.embed_query(text)
            embedder.save()
            self.graphs[name], self.chunk_doc[name] = graph, chunk_doc

    def close(self) -> None:
        for graph in self.graphs.values():
            graph.close()
        self.model.close()

    def run(self, name: str, config: Config) -> dict[str, Any]:
        """Scores (and per-query values) of ``config`` on dataset ``name``'s queries."""
        key = (name, config.mode, repr(config.settings))
        if key not in self.memo:
            run, times, _ = run_config(self.graphs[name], config, self.queries[name],
                                       self.chunk_doc[name])
            qids = list(self.queries[name])
            metric = "ndcg@10" if name == "scifact" else "recall@5"
            self.memo[key] = {
                "scores": score_run(run, self.data[name], qids),
                "per_query": {m: per_query(run, self.data[name], qids, m)
                              for m in ("ndcg@10", "recall@2", "recall@5")},
                "p50_ms": round(float(np.median(times)), 2), "headline": metric,
            }
        return self.memo[key]

    def evaluate(self, config: Config) -> dict[str, Any]:
        """J on 2Wiki, nDCG@10 on SciFact, and both datasets' scores."""
        wiki, sci = self.run("2wiki", config), self.run("scifact", config)
        return {"J": round((wiki["scores"]["recall@2"] + wiki["scores"]["recall@5"]) / 2, 4),
                "2wiki": wiki["scores"], "scifact": sci["scores"],
                "ndcg": sci["scores"]["ndcg@10"],
                "p50_ms": {"2wiki": wiki["p50_ms"], "scifact": sci["p50_ms"]}}


def one_at_a_time(bench: Bench, base: CohortSettings, space: dict[str, list[Any]],
                  switches: Sequence[str], label: str) -> tuple[dict[str, Any], list[Any]]:
    """Each constant of ``space`` varied alone from ``base`` (and each switch turned off);
    returns (accepted changes, the log of every evaluation)."""
    ref = bench.evaluate(Config(f"{label}:base", base))
    log(f"  {label} base: J {ref['J']:.4f}  scifact nDCG@10 {ref['ndcg']:.4f}")
    trail: list[Any] = [{"stage": label, "param": None, "value": None, **ref}]
    accepted: dict[str, Any] = {}
    for param, values in space.items():
        current = getattr(base, param)
        results: dict[Any, dict[str, Any]] = {}
        for value in values:
            results[value] = ref if value == current else bench.evaluate(
                Config(f"{param}={value}", replace(base, **{param: value})))
            r = results[value]
            trail.append({"stage": label, "param": param, "value": value, **r})
            log(f"  {param:<24} {value!s:<6} J {r['J']:.4f} ({r['J'] - ref['J']:+.4f})  "
                f"scifact {r['ndcg']:.4f} ({r['ndcg'] - ref['ndcg']:+.4f})")
        ordered = list(values)
        best, gain = None, MIN_GAIN
        for i, value in enumerate(ordered):
            r = results[value]
            if value == current or r["ndcg"] < ref["ndcg"] - GUARD:
                continue
            neighbours = [ordered[j] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
            plateau = all(results[n]["J"] >= ref["J"] for n in neighbours)
            if r["J"] - ref["J"] >= gain and plateau:
                best, gain = value, r["J"] - ref["J"]
        if best is not None:
            accepted[param] = best
            log(f"  -> {param} = {best} (J {gain:+.4f})")
    for switch in switches:
        if not getattr(base, switch):
            continue
        r = bench.evaluate(Config(f"{switch}=False", replace(base, **{switch: False})))
        trail.append({"stage": label, "param": switch, "value": False, **r})
        log(f"  {switch:<24} off    J {r['J']:.4f} ({r['J'] - ref['J']:+.4f})  "
            f"scifact {r['ndcg']:.4f} ({r['ndcg'] - ref['ndcg']:+.4f})")
        if r["J"] >= ref["J"] - SIMPLER and r["ndcg"] >= ref["ndcg"] - GUARD:
            accepted[switch] = False
            log(f"  -> {switch} off (does not pay on tune)")
    return accepted, trail


def combine(bench: Bench, base: CohortSettings, accepted: dict[str, Any],
            trail: list[Any], label: str) -> tuple[CohortSettings, dict[str, Any]]:
    """The accepted changes together, if they beat the best single one; else that one."""
    if not accepted:
        return base, {}
    singles = {p: bench.evaluate(Config(f"{p}={v}", replace(base, **{p: v})))
               for p, v in accepted.items()}
    together = replace(base, **accepted)
    r = bench.evaluate(Config(f"{label}:combined", together))
    trail.append({"stage": label, "param": "combined", "value": accepted, **r})
    best = max(singles, key=lambda p: (singles[p]["J"], p))
    guard_ok = r["ndcg"] >= bench.evaluate(Config("base", base))["ndcg"] - GUARD
    log(f"  {label} combined {accepted}: J {r['J']:.4f} (best single {best}: "
        f"{singles[best]['J']:.4f})")
    if r["J"] >= singles[best]["J"] and guard_ok:
        return together, dict(accepted)
    return replace(base, **{best: accepted[best]}), {best: accepted[best]}


def test_report(bench: Bench, configs: list[Config], references: Sequence[str]
                ) -> list[dict[str, Any]]:
    """Every configuration's scores, with paired bootstrap deltas against each reference."""
    runs = {c.name: {n: bench.run(n, c) for n in DATASETS} for c in configs}
    rows: list[dict[str, Any]] = []
    for c in configs:
        row: dict[str, Any] = {"config": c.name, "mode": c.mode,
                               "2wiki_R@2": runs[c.name]["2wiki"]["scores"]["recall@2"],
                               "2wiki_R@5": runs[c.name]["2wiki"]["scores"]["recall@5"],
                               "2wiki_nDCG@10": runs[c.name]["2wiki"]["scores"]["ndcg@10"],
                               "scifact_nDCG@10": runs[c.name]["scifact"]["scores"]["ndcg@10"],
                               "p50_ms_2wiki": runs[c.name]["2wiki"]["p50_ms"],
                               "settings": settings_diff(c.settings, BEFORE), "note": c.note}
        for reference in references:
            if c.name != reference and reference in runs:
                row["vs_" + reference] = {
                    f"{n} {m}": paired_delta(runs[c.name][n]["per_query"][m],
                                             runs[reference][n]["per_query"][m])
                    for n, metrics in (("2wiki", ("recall@2", "recall@5")),
                                       ("scifact", ("ndcg@10",))) for m in metrics}
        rows.append(row)
    return rows


def fixed_configs(tuned: CohortSettings | None = None,
                  ppr: CohortSettings | None = None) -> list[Config]:
    """hybrid, the engine before and now (with and without the PPR lane), and the search's
    choices when given."""
    defaults = CohortSettings()
    out = [Config("hybrid_api", None, "hybrid", "DocGraph.search(mode='hybrid')"),
           Config("before", BEFORE, note="vector_first, the defaults before the re-tune"),
           Config("before+ppr", replace(BEFORE, ppr_lane=True),
                  note="the defaults before the re-tune plus the PPR lane"),
           Config("defaults", defaults, note="vector_first, the engine's current defaults"),
           Config("defaults-ppr" if defaults.ppr_lane else "defaults+ppr",
                  replace(defaults, ppr_lane=not defaults.ppr_lane),
                  note="the current defaults with the PPR lane switched")]
    if tuned is not None:
        out.append(Config("tuned", tuned, note="vector_first, chosen on tune"))
    if ppr is not None:
        out.append(Config("tuned+ppr", ppr, note="tuned plus the PPR lane, chosen on tune"))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--split", choices=("tune", "test", "all"), default="test")
    parser.add_argument("--search", action="store_true",
                        help="run the declared search on tune, then report test")
    parser.add_argument("--name", default="tune_cohort")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print("search space (one at a time around the defaults):")
    for param, values in {**SPACE, **{s: [True, False] for s in SWITCHES},
                          **PPR_SPACE}.items():
        print(f"  {param:<24} {values}  (before {getattr(BEFORE, param)})")
    payload: dict[str, Any] = {
        "protocol": {
            "splits": {n: f"bench/splits/relevance_{n}.json" for n in DATASETS},
            "run": "bench/ablation.py: whole corpora, MiniLM int8, k=20 chunks folded to "
                   "documents, query vectors shared by configurations",
            "objective": "J = (R@2 + R@5) / 2 on 2Wiki tune",
            "guard": f"SciFact tune nDCG@10 >= defaults - {GUARD}",
            "rule": f"a value replaces the default when J gains >= {MIN_GAIN} and every grid "
                    "neighbour also beats the default; a lane/gate is switched off when J "
                    f"without it is within {SIMPLER} of J with it (guard holding); accepted "
                    "changes combined if the combination beats the best single change",
        },
        "search_space": {"one_at_a_time": SPACE, "switched_off": list(SWITCHES),
                         "ppr": PPR_SPACE},
        "before": asdict(BEFORE),
        "defaults": asdict(CohortSettings()),
    }
    if args.search:
        bench = Bench("tune")
        try:
            log("== stage 1: today's constants, one at a time (2Wiki + SciFact tune)")
            accepted, trail = one_at_a_time(bench, BEFORE, SPACE, SWITCHES, "engine")
            tuned, kept = combine(bench, BEFORE, accepted, trail, "engine")
            log(f"== stage 2: PPR lane on top of {kept}")
            ppr_base = replace(tuned, ppr_lane=True)
            ppr_accepted, ppr_trail = one_at_a_time(bench, ppr_base, PPR_SPACE, (), "ppr")
            ppr, ppr_kept = combine(bench, ppr_base, ppr_accepted, ppr_trail, "ppr")
            tune_rows = test_report(bench, fixed_configs(tuned, ppr), REFERENCES)
        finally:
            bench.close()
        payload["tune"] = {"trail": trail + ppr_trail, "accepted": accepted, "kept": kept,
                           "ppr_accepted": ppr_accepted, "ppr_kept": ppr_kept,
                           "results": tune_rows}
        payload["chosen"] = {"engine": settings_diff(tuned, BEFORE),
                             "ppr": settings_diff(ppr, BEFORE)}
        split = "test"
        configs = fixed_configs(tuned, ppr)
    else:
        split = args.split
        configs = fixed_configs()
    bench = Bench(split)
    try:
        rows = test_report(bench, configs, REFERENCES)
    finally:
        bench.close()
    payload.update(split=split, seconds=round(time.perf_counter() - started, 1), results=rows)
    write_result(args.name, payload)


if __name__ == "__main__":
    main()
