"""Run every benchmark in sequence: embedders, quality, speed, evidence, relevance, graph,
ablation, refresh, serve_load, backends, store_scale (the embedded store at 1M chunks),
serve_backends, quality_backends, graph_backends, agent_loop, crash, jwt_auth,
filtered_search (permissions filtered before ranking, 100 %/10 %/1 % readable),
ingest_throughput (the pipeline's chunks/s beside the raw model's passages/s), lists_real
(the dense lane's partition against the exact scan on real MiniLM embeddings) and peers
(docgraph beside LanceDB and raw faiss on the same 1M vectors; LanceDB is skipped, with the
reason in the result, unless ``DOCGRAPH_PEERS_PATH`` names a folder it was installed into).

    python bench/run_all.py [--quick] [--only quality,speed]

Each benchmark runs as a subprocess of this interpreter and writes its own
``bench/results/<name>.json``. ``--quick`` passes a small ``--limit`` to each for a smoke run
(minutes instead of hours; the numbers are then not comparable with full runs). Exits
non-zero when any benchmark fails (the remaining ones still run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ORDER = ("embedders", "quality", "speed", "evidence", "relevance", "graph", "ablation",
         "refresh", "serve_load", "backends", "store_scale", "serve_backends", "quality_backends",
         "graph_backends", "agent_loop", "crash", "jwt_auth", "filtered_search",
         "ingest_throughput", "lists_real", "peers")
# Quick-run arguments per benchmark (small sizes; results go beside the real ones).
QUICK_ARGS = {
    "embedders": ["--limit", "400", "--name", "embedders_quick"],
    "quality": ["--limit", "20", "--name", "quality_quick"],
    "speed": ["--limit", "40", "--name", "speed_quick"],
    "evidence": ["--limit", "40", "--name", "evidence_quick"],
    "relevance": ["--queries", "20", "--docs", "300", "--name", "relevance_quick"],
    "graph": ["--limit", "300", "--synthetic", "2000"],
    "ablation": ["--limit", "40", "--name", "ablation_quick"],
    "refresh": ["--docs", "500", "--sftp-docs", "50", "--name", "refresh_quick"],
    "serve_load": ["--clients", "4", "--calls", "20", "--name", "serve_load_quick"],
    "backends": ["--sizes", "3000", "--queries", "60", "--scifact-limit", "30",
                 "--name", "backends_quick"],
    "store_scale": ["--n", "20000", "--budget", "2", "--name", "store_scale_quick"],
    "serve_backends": ["--sizes", "3000", "--clients", "1,4", "--calls", "10",
                       "--name", "serve_backends_quick"],
    "quality_backends": ["--limit", "20", "--name", "quality_backends_quick"],
    "graph_backends": ["--chunks", "3000", "--repeats", "1", "--name", "graph_backends_quick"],
    "agent_loop": ["--limit", "20", "--name", "agent_loop_quick"],
    "crash": ["--kills", "10", "--name", "crash_quick"],
    "jwt_auth": ["--quick"],
    "filtered_search": ["--n", "20000", "--queries", "20", "--rounds", "1",
                        "--name", "filtered_search_quick"],
    "ingest_throughput": ["--quick"],
    "lists_real": ["--datasets", "scifact", "--limit", "1500", "--name", "lists_real_quick"],
    "peers": ["--n", "20000", "--queries", "50", "--rounds", "1", "--name", "peers_quick"],
}


def command(name: str, quick: bool) -> list[str]:
    cmd = [sys.executable, str(BENCH_DIR / f"{name}.py")]
    if quick:
        cmd += QUICK_ARGS[name]
    return cmd


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small --limit smoke run")
    parser.add_argument("--only", default=",".join(ORDER),
                        help="comma-separated subset of " + ", ".join(ORDER))
    args = parser.parse_args(argv)

    wanted = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = set(wanted) - set(ORDER)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {', '.join(ORDER)}")

    outcomes: list[tuple[str, str, float]] = []
    for name in ORDER:
        if name not in wanted:
            continue
        script = BENCH_DIR / f"{name}.py"
        if not script.is_file():
            if name == "embedders":
                outcomes.append((name, "absent, skipped", 0.0))
                continue
            outcomes.append((name, "MISSING", 0.0))
            continue
        cmd = command(name, args.quick)
        print(f"\n=== {name}: {' '.join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))}",
              flush=True)
        started = time.perf_counter()
        code = subprocess.call(cmd, cwd=BENCH_DIR.parent)
        seconds = time.perf_counter() - started
        outcomes.append((name, "ok" if code == 0 else f"FAILED (exit {code})", seconds))

    print("\nbenchmark   outcome            minutes")
    for name, outcome, seconds in outcomes:
        print(f"{name:<11} {outcome:<18} {seconds / 60:7.1f}")
    failed = [n for n, o, _ in outcomes if o not in ("ok", "absent, skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
