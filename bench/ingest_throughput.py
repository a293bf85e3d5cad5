"""Ingest at the model's speed: the pipeline's end-to-end chunks/s beside the raw model's
passages/s over exactly the texts the pipeline embeds, measured alternating in one run.

    python bench/ingest_throughput.py [--scifact-files 300] [--rounds 3] [--before] [--inline]
        [--old] [--quick]

Folders: the sample corpus ``examples/corpus`` (mixed formats) and SciFact as a folder of
one Markdown file per passage (``--scifact-files`` seeded passages, as quality.py writes
them). For each folder:

(b) pipeline: ``DocGraph.index`` of the folder into a fresh index (default settings, the
    real MiniLM int8 model, no embedding cache), wall clock of the whole call (the entity
    graph built after the folder included); chunks/s = chunks written / wall. The build's
    own phase split (``IngestReport.seconds``: list, read, extract, chunk, entities, embed,
    store) and the graph build (wall minus the folder build) are kept per run. With worker
    processes (a bulk build: more than ``PARALLEL_AFTER_FILES`` files) the extract/chunk
    phases are the workers' busy time, not wall time.
(a) raw: the same model object (one :class:`MiniLMEmbedder` with the default batch size and
    threads, shared with the pipeline, loaded before any timing) embedding every text the
    pipeline sent to it (recorded by a pass-through wrapper in a warm-up build) in ONE call,
    length-sorted, at the best batching of a short sweep (passages per call, padded tokens
    per call) on a sample of that folder's texts (each folder its own sweep: the raw side is
    the model at its best on exactly those texts).

Every build's chunks (text, breadcrumb, section, tokens, embedded-text hash, BM25 terms,
document language; vectors aside) are hashed, and every build of a folder, whichever
variant, must give the same digest (``chunk_digest`` in the results): the variants change
where and when the work runs, never what is stored.
``--before`` adds a third variant, the pipeline with the model's padded-token bound off
(``batch_tokens = 0``: batches of 32 passages of any length, as before the bound), so the
change is measured before/after in the same run. ``--commit-embed`` adds the pipeline that
embeds each commit batch before writing it (``embed_behind`` off: the path before chunks
were written pending and embedded behind in batches of ``FILL_BATCH`` across documents).
``--old`` adds the pipeline as it was before ``workers.PoolTrigger`` and the model's
batches of :data:`OLD_BATCH_TOKENS`: prepare processes (one per core) started for every
build of more than ``PARALLEL_AFTER_FILES`` files (as an explicit ``loader.workers`` still
does; the default now starts them only once they would pay), batches of at most
:data:`OLD_BATCH_TOKENS` padded tokens.
``--overlap`` adds the experiment of extracting in worker processes from the first file
(``PARALLEL_AFTER_FILES`` 0, a window of 64 files) while this process embeds smaller
batches behind (64 passages), so extraction and embedding run at the same time.

Rounds alternate which of (a) and (b) runs first (A B, B A, ...), so drift of the shared
machine's load hits both; the figures are medians over rounds, the ratio is pipeline
chunks/s over raw passages/s (of the medians, and the median of each round's own ratio),
and the load average is recorded before every measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common import REPO_ROOT, load_beir, log, write_corpus_folder, write_result
from docgraph.app import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.ingest import embed_behind
from docgraph.ingest import pipeline as pipeline_module
from docgraph.ingest.pipeline import IngestPipeline
from docgraph.ingest.workers import PreparePool
from docgraph.model import Vector
from docgraph.store.lexical import decode_terms

NAMESPACE = "bench"
# (passages, padded tokens) per model call tried for the raw figure; 0 tokens = no bound.
SWEEP_BATCHES = ((32, 0), (16, 0), (8, 0), (32, 1024), (32, 512))
# The model's padded-token bound before it was measured on both folders (``--old``).
OLD_BATCH_TOKENS = 1024
SWEEP_SAMPLE = 96  # texts per batch-size trial (seeded sample)


class RecordingEmbedder:
    """Passes everything to ``inner`` and keeps the texts of each ``embed_documents`` call:
    exactly what the pipeline embeds, in its own batches."""

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.name, self.dimension, self.max_tokens = inner.name, inner.dimension, inner.max_tokens
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        self.calls.append(list(texts))
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Vector:
        return self.inner.embed_query(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def token_counter(self) -> Any:
        return self.inner.token_counter()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def build(folder: Path, workdir: Path, embedder: Any, tag: str,
          workers: int = 0, behind: bool = True) -> dict[str, Any]:
    """One ``DocGraph.index`` of ``folder`` into a fresh index; wall clock and phases.
    ``workers`` is ``loader.workers`` (0, the default: one prepare process per core once a
    build has more than ``PARALLEL_AFTER_FILES`` files; 1: everything inline); ``behind``
    False embeds each commit batch before writing it (the path before embedding behind)."""
    db = workdir / f"{tag}.db"
    graph = DocGraph(load_settings(store={"path": db}, loader={"workers": workers}), embedder)
    if not behind:
        made = graph._pipeline

        def commit_embed() -> IngestPipeline:
            pipeline = made()
            pipeline.embed_behind = False
            return pipeline

        graph._pipeline = commit_embed  # type: ignore[method-assign]
    before = load()
    started = time.perf_counter()
    report = graph.index(folder, NAMESPACE)
    wall = time.perf_counter() - started
    graph.close()
    digest = chunk_digest(db)
    for path in workdir.glob(f"{tag}.db*"):
        path.unlink()
    if not report.chunks_written or report.failed:
        raise SystemExit(f"{folder}: build wrote {report.chunks_written} chunks, "
                         f"failed {report.failed[:3]}")
    seconds = {k: round(v, 3) for k, v in report.seconds.items()}
    seconds["graph"] = round(wall - report.wall_seconds, 3)
    return {
        "chunks": report.chunks_written,
        "passages_embedded": report.passages_embedded,
        "files": len(report.added),
        "workers": report.workers,
        "wall_s": round(wall, 3),
        "chunks_per_s": round(report.chunks_written / wall, 2),
        "seconds": seconds,
        "not_embed_s": round(wall - report.seconds["embed"], 3),
        "load_before": before,
        "chunk_digest": digest,
    }


def chunk_digest(db: Path) -> str:
    """SHA-256 of every chunk the index ``db`` holds, as stored (vectors aside: batching
    may move their last bits; BM25 terms by name, as term ids follow the build's order),
    in path and chunk order."""
    digest = hashlib.sha256()
    with contextlib.closing(sqlite3.connect(db)) as connection:
        names = dict(connection.execute("SELECT id, term FROM terms"))  # ids: build order
        for *row, blob in connection.execute(
                "SELECT d.path, d.language, c.chunk_index, c.kind, c.text, c.breadcrumb, "
                "c.section_path, c.token_count, c.embed_hash, c.term_count, c.terms "
                "FROM chunks c JOIN documents d ON d.id = c.document_id "
                "ORDER BY d.path, c.chunk_index"):
            ids, weights = decode_terms(blob)
            terms = sorted(zip((names[int(i)] for i in ids), weights.tolist(), strict=True))
            digest.update(repr((row, terms)).encode())
    return digest.hexdigest()


@contextlib.contextmanager
def overlapping() -> Iterator[None]:
    """Prepare processes from the first file with a deep window, and fills of 64 passages
    (so embedding starts while the workers still extract)."""
    saved = (pipeline_module.PARALLEL_AFTER_FILES, pipeline_module.PreparePool,
             embed_behind.FILL_BATCH)
    pipeline_module.PARALLEL_AFTER_FILES = 0
    pipeline_module.PreparePool = functools.partial(PreparePool, window=64)  # type: ignore
    embed_behind.FILL_BATCH = 64
    try:
        yield
    finally:
        (pipeline_module.PARALLEL_AFTER_FILES, pipeline_module.PreparePool,
         embed_behind.FILL_BATCH) = saved


def overlapped(step: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``step`` under :func:`overlapping`."""
    with overlapping():
        return step()


def raw(model: MiniLMEmbedder, texts: list[str], batching: tuple[int, int]) -> dict[str, Any]:
    """The model alone on ``texts`` in one call, batches of (passages, padded tokens)."""
    default = model.batch_size, model.batch_tokens
    model.batch_size, model.batch_tokens = batching
    before = load()
    try:
        started = time.perf_counter()
        model.embed_documents(texts)
        seconds = time.perf_counter() - started
    finally:
        model.batch_size, model.batch_tokens = default
    return {"seconds": round(seconds, 3), "passages_per_s": round(len(texts) / seconds, 2),
            "load_before": before}


def unbounded(model: MiniLMEmbedder, step: Callable[[], dict[str, Any]],
              tokens: int = 0) -> dict[str, Any]:
    """``step`` with the model's padded-token bound at ``tokens`` (0: off, the batching
    before the bound)."""
    default = model.batch_tokens
    model.batch_tokens = tokens
    try:
        return step()
    finally:
        model.batch_tokens = default


def sweep(model: MiniLMEmbedder, texts: list[str], seed: int) -> dict[str, Any]:
    """Passages/s per batch size on a seeded sample, two alternating passes; the best."""
    sample = random.Random(seed).sample(texts, min(SWEEP_SAMPLE, len(texts)))
    rates: dict[tuple[int, int], list[float]] = {b: [] for b in SWEEP_BATCHES}
    for order in (SWEEP_BATCHES, SWEEP_BATCHES[::-1]):
        for batch in order:
            rates[batch].append(raw(model, sample, batch)["passages_per_s"])
    medians = {b: statistics.median(r) for b, r in rates.items()}
    best = max(medians, key=lambda b: medians[b])
    log(f"  batch sweep ({len(sample)} texts, passages/tokens): "
        + ", ".join(f"{b[0]}/{b[1]}: {medians[b]:.1f}/s" for b in SWEEP_BATCHES)
        + f" -> {best}")
    return {"sample": len(sample),
            "passages_per_s": {f"{b[0]}/{b[1]}": medians[b] for b in medians},
            "best_batching": list(best)}


def _against(runs: dict[str, list[dict[str, Any]]], variant: str, ours: str,
             raw_rate: float, phases: list[str]) -> dict[str, Any]:
    """The figures of the alternating variant ``pipeline_<variant>`` beside the pipeline's:
    its chunks/s and ratio to raw, the pipeline (``ours``) over it (of the medians and the
    median of each round's own ratio), and its phase split."""
    theirs = runs[f"pipeline_{variant}"]
    rate = statistics.median(p["chunks_per_s"] for p in theirs)
    pipe_rate = statistics.median(p["chunks_per_s"] for p in runs["pipeline"])
    return {f"pipeline_{variant}_chunks_per_s": rate,
            f"{variant}_ratio": round(rate / raw_rate, 3),
            f"{ours}_over_{variant}": round(pipe_rate / rate, 3),
            f"{ours}_over_{variant}_per_round_median": round(statistics.median(
                a["chunks_per_s"] / b["chunks_per_s"]
                for a, b in zip(runs["pipeline"], theirs, strict=True)), 3),
            f"{variant}_phase_s_median": {k: round(statistics.median(
                p["seconds"][k] for p in theirs), 3) for k in phases}}


def measure_folder(label: str, folder: Path, model: MiniLMEmbedder, rounds: int,
                   workdir: Path, seed: int, inline: bool, before: bool,
                   commit_embed: bool = False, overlap: bool = False,
                   old: bool = False) -> dict[str, Any]:
    """Warm-up build (records the texts), batch sweep on this folder's texts, then
    alternating rounds."""
    recorder = RecordingEmbedder(model)
    warm = build(folder, workdir, recorder, f"{label}-warm")
    texts = [t for call in recorder.calls for t in call]
    tokens = model.count_tokens(texts)
    log(f"[{label}] {warm['files']} files, {warm['chunks']} chunks, {len(texts)} passages "
        f"in {len(recorder.calls)} embed calls; warm-up {warm['chunks_per_s']:.1f} chunks/s")
    best = sweep(model, texts, seed)
    steps: dict[str, Callable[[int], dict[str, Any]]] = {
        "raw": lambda _: raw(model, texts, tuple(best["best_batching"])),
        "pipeline": lambda r: build(folder, workdir, model, f"{label}-{r}"),
    }
    if before:  # today's batches before the padded-token bound: 32 passages, any length
        steps["pipeline_before"] = lambda r: unbounded(
            model, lambda: build(folder, workdir, model, f"{label}-b{r}"))
    if commit_embed:  # each commit batch embedded before it is written
        steps["pipeline_commit_embed"] = lambda r: build(folder, workdir, model,
                                                         f"{label}-c{r}", behind=False)
    if overlap:  # extraction in workers from the first file while this process embeds
        steps["pipeline_overlap"] = lambda r: overlapped(
            lambda: build(folder, workdir, model, f"{label}-o{r}"))
    if old:  # prepare processes after PARALLEL_AFTER_FILES files, batches as before
        steps["pipeline_old"] = lambda r: unbounded(model, lambda: build(
            folder, workdir, model, f"{label}-old{r}", os.cpu_count() or 1), OLD_BATCH_TOKENS)
    if inline and warm["workers"] > 1:  # where the prepare processes' cost shows
        steps["pipeline_inline"] = lambda r: build(folder, workdir, model, f"{label}-i{r}", 1)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in steps}
    for r in range(rounds):
        order = list(steps) if r % 2 == 0 else list(steps)[::-1]
        for name in order:
            runs[name].append(steps[name](r))
        p, a = runs["pipeline"][-1], runs["raw"][-1]
        other = "".join(f", {k} {v[-1]['chunks_per_s']:.1f} chunks/s"
                        for k, v in runs.items() if k not in ("raw", "pipeline"))
        log(f"  round {r + 1} ({' then '.join(order)}): pipeline {p['chunks_per_s']:.1f} "
            f"chunks/s, raw {a['passages_per_s']:.1f} passages/s{other}, load {load()}")
    pipe_rate = statistics.median(p["chunks_per_s"] for p in runs["pipeline"])
    raw_rate = statistics.median(a["passages_per_s"] for a in runs["raw"])
    phases = list(runs["pipeline"][0]["seconds"])
    phase_median = {k: round(statistics.median(p["seconds"][k] for p in runs["pipeline"]), 3)
                    for k in phases}
    wall = statistics.median(p["wall_s"] for p in runs["pipeline"])
    extra: dict[str, Any] = {}
    digests = {run["chunk_digest"] for runs_ in runs.values() for run in runs_
               if "chunk_digest" in run} | {warm["chunk_digest"]}
    if len(digests) != 1:
        raise SystemExit(f"[{label}] builds stored different chunks: {sorted(digests)}")
    for variant, ours in (("before", "after"), ("commit_embed", "behind"),
                          ("old", "new")):
        if f"pipeline_{variant}" in runs:
            extra |= _against(runs, variant, ours, raw_rate, phases)
    if "pipeline_overlap" in runs:
        rate = statistics.median(p["chunks_per_s"] for p in runs["pipeline_overlap"])
        extra |= {"pipeline_overlap_chunks_per_s": rate,
                  "overlap_ratio": round(rate / raw_rate, 3),
                  "overlap_over_behind_per_round_median": round(statistics.median(
                      b["chunks_per_s"] / a["chunks_per_s"] for a, b in
                      zip(runs["pipeline"], runs["pipeline_overlap"], strict=True)), 3)}
    if "pipeline_inline" in runs:
        rate = statistics.median(p["chunks_per_s"] for p in runs["pipeline_inline"])
        extra |= {"pipeline_inline_chunks_per_s": rate,
                 "inline_ratio": round(rate / raw_rate, 3)}
    return {
        "folder": label,
        "files": warm["files"],
        "chunks": warm["chunks"],
        "passages": len(texts),
        "embed_calls": len(recorder.calls),
        "passages_per_call": [len(c) for c in recorder.calls],
        "chunk_digest": digests.pop(),
        "mean_tokens": round(float(np.mean(tokens)), 1),
        "workers": warm["workers"],
        "rounds": rounds,
        "raw_passages_per_s": raw_rate,
        "pipeline_chunks_per_s": pipe_rate,
        "ratio": round(pipe_rate / raw_rate, 3),
        **extra,
        "ratio_per_round_median": round(statistics.median(
            p["chunks_per_s"] / a["passages_per_s"]
            for p, a in zip(runs["pipeline"], runs["raw"], strict=True)), 3),
        "pipeline_wall_s_median": wall,
        "phase_s_median": phase_median,
        "phase_share_of_wall": {k: round(v / wall, 3) for k, v in phase_median.items()},
        "pipeline_embed_passages_per_s": round(statistics.median(
            p["passages_embedded"] / p["seconds"]["embed"] for p in runs["pipeline"]), 2),
        "batch_sweep": best,
        "runs": runs,
        "warm_up": warm,
    }


def scifact_folder(root: Path, files: int, seed: int) -> Path:
    """``files`` seeded SciFact passages, one Markdown file each, under ``root``."""
    data = load_beir("scifact")
    ids = random.Random(seed).sample(sorted(data.corpus), files)
    folder = root / "scifact" / "corpus"
    write_corpus_folder(data, ids, folder)
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scifact-files", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per folder")
    parser.add_argument("--folders", default="examples,scifact")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 60 SciFact files, one round")
    parser.add_argument("--inline", action="store_true",
                        help="also build with loader.workers = 1 where the default build "
                             "starts prepare processes (a third alternating variant)")
    parser.add_argument("--before", action="store_true",
                        help="also build with the batches of before the padded-token bound "
                             "(32 passages of any length; a third alternating variant)")
    parser.add_argument("--commit-embed", action="store_true",
                        help="also build embedding each commit batch before writing it "
                             "(embed_behind off; a third alternating variant)")
    parser.add_argument("--old", action="store_true",
                        help="also build as before: prepare processes after "
                             "PARALLEL_AFTER_FILES files whatever they cost, batches of "
                             "OLD_BATCH_TOKENS padded tokens (a further variant)")
    parser.add_argument("--overlap", action="store_true",
                        help="also build with extraction in workers from the first file while "
                             "embedding behind in batches of 64 (a further variant)")
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.scifact_files, args.rounds = min(args.scifact_files, 60), 1
    name = args.name or ("ingest_throughput_quick" if args.quick else "ingest_throughput")

    model = MiniLMEmbedder()  # the default model object, as make_embedder builds it
    started = time.perf_counter()
    model.embed_documents(["load the model"])
    load_s = time.perf_counter() - started
    root = Path(tempfile.mkdtemp(prefix="docgraph-ingest-"))
    results: list[dict[str, Any]] = []
    try:
        for label in [f.strip() for f in args.folders.split(",") if f.strip()]:
            if label == "examples":
                folder = REPO_ROOT / "examples" / "corpus"
            elif label == "scifact":
                folder = scifact_folder(root, args.scifact_files, args.seed)
            else:
                raise SystemExit(f"unknown folder {label!r}; choose examples, scifact")
            results.append(measure_folder(label, folder, model, args.rounds, root, args.seed,
                                          args.inline, args.before, args.commit_embed,
                                          args.overlap, args.old))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    write_result(name, {
        "model": model.name,
        "model_batch_size": model.batch_size,
        "model_batch_tokens": model.batch_tokens,
        "model_threads": model.threads or os.cpu_count(),
        "model_load_s": round(load_s, 2),
        "scifact_files": args.scifact_files,
        "load_after": load(),
        "results": results,
        "notes": "2-core machine shared with other jobs: raw and pipeline alternate per "
                 "round; medians; load average recorded before each measurement",
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
