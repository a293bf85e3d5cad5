"""Refresh cost: no-op refreshes and a 1% edit, through the refresher (``run_once``).

    python bench/refresh.py [--docs 10000] [--sftp-docs 1000] [--repeats 3]

(a) A no-op refresh of ``--docs`` Markdown files on ``file://`` (target <= 5 s, zero
    embeddings, zero bodies read): wall seconds of ``Refresher.run_once`` (median of
    ``--repeats``), after one full build.
(b) Editing 1% of that corpus (every 100th file gets one more sentence): the refresh must
    re-read and re-embed exactly those documents - ``updated`` must equal the edited set and
    the chunks embedded must not exceed those documents' chunks.
(c) A no-op refresh of ``--sftp-docs`` files over SFTP (an asyncssh server on 127.0.0.1,
    docgraph's client is fsspec's paramiko SFTP): wall seconds (median), bodies served by the
    server (must be 0) and embeddings (must be 0).

The corpus is synthetic (seeded word salad, two paragraphs under a heading) and the
embedder is the deterministic hashing embedder with a call counter: the figures measure the
refresh machinery, not a model. The machine is small and shared; its load average is recorded.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import REPO_ROOT, write_result
from docgraph.app import DocGraph
from docgraph.config import load_settings
from docgraph.embedding.embedders import HashingEmbedder

sys.path.insert(0, str(REPO_ROOT))

WORDS = ("depot picker firmware lidar invoice refund ticket scanner portal leave policy route "
         "shipment pallet crane battery sensor update outage recall warranty contract audit "
         "budget forecast supplier customer region warehouse driver schedule payment").split()


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the passages it embeds."""

    def __init__(self) -> None:
        self.embedded = 0

    def embed_documents(self, texts: Sequence[str]) -> Any:
        self.embedded += len(texts)
        return super().embed_documents(texts)


def make_corpus(root: Path, count: int, seed: int = 7) -> list[Path]:
    """``count`` Markdown files in 100-file sub-folders, timestamps a day in the past."""
    rng = random.Random(seed)
    paths: list[Path] = []
    old = time.time() - 86400
    for i in range(count):
        folder = root / f"part-{i // 100:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"doc-{i:06d}.md"
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(25, 45))) + "."
                      for _ in range(2)]
        path.write_text(f"# Note {i}\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")
        os.utime(path, (old, old))
        paths.append(path)
    return paths


def open_graph(index: Path, embedder: CountingEmbedder) -> DocGraph:
    settings = load_settings()
    settings.store.path = index
    return DocGraph(settings, embedder)


def timed_noop(graph: DocGraph, embedder: CountingEmbedder, repeats: int,
               served: Any = None) -> dict[str, Any]:
    seconds: list[float] = []
    embedded_before = embedder.embedded
    served_before = served() if served else 0
    bodies = 0
    for _ in range(repeats):
        started = time.perf_counter()
        result = graph.refresher.run_once()
        seconds.append(time.perf_counter() - started)
        assert result.ok, [p for b in result.builds for p in b.errors]
        bodies += sum(b.bodies_read for b in result.builds)
    return {
        "seconds_median": round(statistics.median(seconds), 3),
        "seconds_all": [round(s, 3) for s in seconds],
        "embeddings": embedder.embedded - embedded_before,
        "bodies_read": bodies,
        "bodies_served": (served() - served_before) if served else None,
    }


def bench_local(docs: int, repeats: int, work: Path) -> list[dict[str, Any]]:
    corpus = work / "corpus"
    paths = make_corpus(corpus, docs)
    embedder = CountingEmbedder()
    graph = open_graph(work / "local.db", embedder)
    graph.sources.add_folder(corpus, "bench")
    started = time.perf_counter()
    first = graph.refresher.run_once()
    build_seconds = time.perf_counter() - started
    assert first.ok
    chunks = sum(ns.chunks for ns in graph.catalog.stats())
    noop = timed_noop(graph, embedder, repeats)
    rows = [{
        "figure": "no-op refresh, file://", "documents": docs, "chunks": chunks,
        "first_build_seconds": round(build_seconds, 1), **noop,
        "target": "<= 5 s, 0 embeddings",
        "meets_target": noop["seconds_median"] <= 5.0 and noop["embeddings"] == 0
        and noop["bodies_read"] == 0,
    }]

    edited = paths[::100]
    later = time.time() - 3600
    for path in edited:
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\nA late addendum mentions the Quasar audit.\n")
        os.utime(path, (later, later))
    source = graph.sources.folders()[0]
    edited_rel = {p.relative_to(corpus).as_posix() for p in edited}
    before_docs = graph.catalog.documents_for_source(source)
    chunks_of_edited = sum(before_docs[r].chunk_count for r in edited_rel)
    embedded_before = embedder.embedded
    started = time.perf_counter()
    result = graph.refresher.run_once()
    seconds = time.perf_counter() - started
    (report,) = result.reports
    graph_embedded = sum(g.reports_embedded for g in result.graph_reports)
    rows.append({
        "figure": "refresh after editing 1%", "documents": docs, "edited": len(edited),
        "updated": len(report.updated), "added": len(report.added),
        "removed": len(report.removed), "bodies_read": report.bodies_read,
        "chunks_embedded": report.chunks_embedded, "chunks_reused": report.chunks_reused,
        "chunks_of_edited_documents_before": chunks_of_edited,
        "community_reports_embedded": graph_embedded,
        "embeddings": embedder.embedded - embedded_before,
        "seconds": round(seconds, 3),
        "target": "only the edited documents re-read and re-embedded",
        "meets_target": set(report.updated) == edited_rel and not report.added
        and report.bodies_read == len(edited) and report.chunks_embedded <= chunks_of_edited + len(
            edited),
    })
    graph.close()
    return rows


def bench_sftp(docs: int, repeats: int, work: Path) -> dict[str, Any]:
    from tests.servers import PASSWORD, USER, SftpServer

    from docgraph.sources.credentials import credential_key
    from docgraph.sources.urn import normalize_urn

    served_root = work / "sftp"
    make_corpus(served_root / "docs", docs, seed=11)
    embedder = CountingEmbedder()
    with SftpServer(served_root) as server:
        urn = normalize_urn(f"{server.url}/docs")
        key = credential_key(urn)
        os.environ[f"DOCGRAPH_SOURCE_{key}_USERNAME"] = USER
        os.environ[f"DOCGRAPH_SOURCE_{key}_PASSWORD"] = PASSWORD
        os.environ[f"DOCGRAPH_SOURCE_{key}_LOOK_FOR_KEYS"] = "false"
        os.environ[f"DOCGRAPH_SOURCE_{key}_ALLOW_AGENT"] = "false"
        graph = open_graph(work / "sftp.db", embedder)
        graph.sources.add_folder(urn, "bench")
        started = time.perf_counter()
        first = graph.refresher.run_once()
        build_seconds = time.perf_counter() - started
        assert first.ok, [p for b in first.builds for p in b.errors]
        noop = timed_noop(graph, embedder, repeats, served=lambda: server.bodies_served)
        graph.close()
    return {
        "figure": "no-op refresh, sftp:// (loopback)", "documents": docs,
        "first_build_seconds": round(build_seconds, 1), **noop,
        "target": "0 bodies fetched, 0 embeddings",
        "meets_target": noop["bodies_served"] == 0 and noop["embeddings"] == 0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--sftp-docs", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="refresh")
    args = parser.parse_args(argv)
    for noisy in ("asyncssh", "paramiko", "pyftpdlib", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("DOCGRAPH_CONFIG", str(Path(tempfile.gettempdir()) / "absent.toml"))
    work = Path(tempfile.mkdtemp(prefix="docgraph-bench-refresh-"))
    load_before = os.getloadavg()
    try:
        rows = bench_local(args.docs, args.repeats, work)
        rows.append(bench_sftp(args.sftp_docs, args.repeats, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_result(args.name, {
        "embedder": "hashing (deterministic, counted)",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "results": rows,
    })
    return 0 if all(r["meets_target"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
