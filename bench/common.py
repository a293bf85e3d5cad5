"""Shared benchmark helpers: data location, BEIR loading, retrieval metrics, result files.

Data is read from ``$DOCGRAPH_DATA`` or, by default, ``../shared/data`` next to the repository
(see that folder's README). Results go to ``bench/results/<name>.json``; the embedding cache
lives in ``bench/.cache/embeddings.sqlite``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import random
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docgraph.embedding.cache import CachedEmbedder
from docgraph.embedding.embedders import Embedder
from docgraph.ingest.pipeline import IngestProgress

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
CACHE_PATH = BENCH_DIR / ".cache" / "embeddings.sqlite"

Qrels = dict[str, dict[str, int]]
Run = Mapping[str, Sequence[str]]


def discard_foreign_index(db: Path, namespace: str, folder: Path) -> bool:
    """Delete a cached embedded index (``db`` and its WAL files) whose ``namespace`` holds a
    source other than ``folder``, so the caller builds it anew; returns whether it did.

    A cached index remembers the folder it was built from: one copied from another checkout
    would, indexed again from this checkout's folder, gain it as a second source and hold
    every passage twice (SciFact nDCG@10 0.698 instead of 0.716 once). Every bench that
    caches a dataset index under ``bench/.cache/`` calls this before opening it."""
    if not db.is_file():
        return False
    from docgraph.sources.urn import normalize_urn

    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            urns = {str(r[0]) for r in con.execute(
                "SELECT s.urn FROM sources s JOIN namespaces n ON n.id = s.namespace_id"
                " WHERE n.name = ?", (namespace,))}
        finally:
            con.close()
    except sqlite3.Error:
        urns = {"(unreadable)"}
    foreign = sorted(urns - {normalize_urn(folder)})
    if not foreign:
        return False
    log(f"  {db}: built from {foreign[0]}, not {folder}; deleting it to rebuild from here")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return True


def data_dir() -> Path:
    """``$DOCGRAPH_DATA`` if set, else ``<repo>/../shared/data``."""
    env = os.environ.get("DOCGRAPH_DATA")
    root = Path(env) if env else REPO_ROOT / ".." / "shared" / "data"
    root = root.resolve()
    if not root.is_dir():
        raise SystemExit(f"benchmark data not found at {root} (set DOCGRAPH_DATA)")
    return root


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR dataset: corpus ``{id: {"title", "text"}}``, test queries, graded qrels."""

    name: str
    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: Qrels

    def doc_text(self, doc_id: str) -> str:
        """Title and text joined by one space (the BEIR / sentence-transformers convention)."""
        doc = self.corpus[doc_id]
        return f"{doc['title']} {doc['text']}".strip()


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def load_beir(name: str, split: str = "test") -> BeirDataset:
    """Load ``<data>/<name>``; queries are restricted to those with qrels in ``split``."""
    root = data_dir() / name
    qrels: Qrels = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        header = next(reader)
        if [h.strip().lower() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
            raise ValueError(f"unexpected qrels header in {name}: {header}")
        for row in reader:
            if row:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    corpus = {
        str(d["_id"]): {"title": d.get("title") or "", "text": d.get("text") or ""}
        for d in _read_jsonl(root / "corpus.jsonl")
    }
    queries = {
        str(q["_id"]): q["text"] for q in _read_jsonl(root / "queries.jsonl")
        if str(q["_id"]) in qrels
    }
    missing = set(qrels) - set(queries)
    if missing:
        raise ValueError(f"{name}: {len(missing)} qrels queries have no text")
    return BeirDataset(name=name, corpus=corpus, queries=queries, qrels=qrels)


# ---------------------------------------------------------------- metrics (pytrec_eval style)

def ndcg_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean nDCG@k over the queries in ``qrels`` (trec_eval ``ndcg_cut``).

    Gain is the graded relevance from qrels (linear, not ``2**rel - 1``), discount
    ``log2(rank + 1)`` with ranks from 1; the ideal ranking sorts all judged documents by
    relevance. Queries absent from ``run`` score 0; queries without a positive judgement
    are skipped, as trec_eval does.
    """
    scores: list[float] = []
    for qid, judged in qrels.items():
        ideal = sorted((r for r in judged.values() if r > 0), reverse=True)[:k]
        if not ideal:
            continue
        idcg = sum(rel / math.log2(i + 2) for i, rel in enumerate(ideal))
        ranked = run.get(qid, ())[:k]
        dcg = sum(judged.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked)
                  if judged.get(doc, 0) > 0)
        scores.append(dcg / idcg)
    return sum(scores) / len(scores) if scores else 0.0


def recall_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean fraction of each query's relevant (score > 0) documents found in its top k."""
    scores: list[float] = []
    for qid, judged in qrels.items():
        relevant = {doc for doc, rel in judged.items() if rel > 0}
        if not relevant:
            continue
        found = relevant.intersection(run.get(qid, ())[:k])
        scores.append(len(found) / len(relevant))
    return sum(scores) / len(scores) if scores else 0.0


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sequence")
    pos = (len(ordered) - 1) * pct / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# ---------------------------------------------------------------- embeddings and results

def cached_embedder(embedder: Embedder) -> CachedEmbedder:
    """``embedder`` behind the shared passage cache in ``bench/.cache/embeddings.sqlite``."""
    return CachedEmbedder(embedder, CACHE_PATH)


def machine_info() -> dict[str, Any]:
    """What the timings were measured on."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }
    if hasattr(os, "getloadavg"):
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    return info


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    if value is None:
        return "-"
    return str(value)


def print_table(rows: Sequence[Mapping[str, Any]], title: str = "") -> None:
    """Print scalar fields of ``rows`` as an aligned text table (nested values skipped)."""
    if not rows:
        return
    columns: list[str] = []
    for row in rows:
        for key, value in row.items():
            if key not in columns and not isinstance(value, dict | list):
                columns.append(key)
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    if title:
        print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def write_result(name: str, payload: Mapping[str, Any]) -> Path:
    """Write ``bench/results/<name>.json`` (payload + timestamp + machine) and print a table.

    The table shows ``payload["results"]`` when it is a list of row dicts, otherwise the
    payload's scalar fields.
    """
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": name,
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        **payload,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    rows = payload.get("results")
    if isinstance(rows, list) and rows and all(isinstance(r, Mapping) for r in rows):
        print_table(rows, title=f"\n{name}")
    else:
        print_table([{k: v for k, v in payload.items()}], title=f"\n{name}")
    print(f"\nwrote {path.relative_to(REPO_ROOT)}")
    return path


# ---------------------------------------------------------------- shared bench plumbing

def log(message: str) -> None:
    """A progress line on stderr (results go to stdout and bench/results)."""
    print(message, file=sys.stderr, flush=True)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_file_stem(doc_id: str) -> str:
    """A filesystem-safe file stem for a corpus ``_id``."""
    stem = _UNSAFE.sub("_", doc_id).strip("._")
    return (stem or "doc")[:120]


def write_corpus_folder(data: BeirDataset, doc_ids: Sequence[str], folder: Path) -> dict[str, str]:
    """Write one ``# title\n\ntext`` Markdown file per document (an unchanged file is left
    alone, so cached indexes of the folder see no change); returns file name -> _id.

    The map is also saved next to the folder as ``files.json``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    mapping: dict[str, str] = {}
    for doc_id in doc_ids:
        stem = safe_file_stem(doc_id)
        name, n = f"{stem}.md", 1
        while name in mapping:
            n += 1
            name = f"{stem}-{n}.md"
        doc = data.corpus[doc_id]
        title = " ".join(doc["title"].split())
        body = doc["text"].strip()
        content = f"# {title}\n\n{body}\n" if title else f"{body}\n"
        path = folder / name
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")
        mapping[name] = doc_id
    (folder.parent / "files.json").write_text(json.dumps(mapping), encoding="utf-8")
    return mapping


def select_subset(
    data: BeirDataset, limit: int | None, seed: int = 13
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """(corpus ids, queries, info): everything, or a seeded smoke-run subset of ``limit``
    queries with their gold documents plus random others (5 x limit documents at least)."""
    all_ids = list(data.corpus)
    if not limit or limit >= len(data.queries):
        return all_ids, dict(data.queries), {"limited": False}
    rng = random.Random(seed)
    qids = sorted(rng.sample(sorted(data.queries), limit))
    gold = {d for q in qids for d in data.qrels[q] if d in data.corpus}
    others = sorted(d for d in all_ids if d not in gold)
    extra = rng.sample(others, max(0, min(len(others), 5 * limit - len(gold))))
    keep = gold | set(extra)
    info = {"limited": True, "seed": seed, "gold_docs": len(gold),
            "note": "smoke run: gold documents + random others; optimistic scores"}
    return [d for d in all_ids if d in keep], {q: data.queries[q] for q in qids}, info


def progress_printer(label: str) -> Callable[[IngestProgress], None]:
    """Ingest progress on stderr at most every 30 s (and at the end)."""
    started = time.perf_counter()
    last = [started]

    def show(state: IngestProgress) -> None:
        now = time.perf_counter()
        if now - last[0] < 30 and state.done_files != state.total_files:
            return
        last[0] = now
        rate = state.done_files / max(now - started, 1e-9)
        eta = (state.total_files - state.done_files) / rate if rate else float("nan")
        log(f"  [{label}] {state.done_files}/{state.total_files} files, "
            f"{state.chunks_written} chunks, eta {eta / 60:.1f} min")

    return show


def stop_processes(processes: Sequence[subprocess.Popen[Any]], wait_s: float) -> None:
    """Terminate every process, give each ``wait_s`` to exit, then kill and reap the rest
    (all terminated first, so they stop together)."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
