"""Crash consistency at scale: ``docgraph index`` killed with SIGKILL many times.

    python bench/crash.py [--kills 100] [--seed 7] [--pooled-every 2] [--name crash]

The scenarios of ``tests/ingest/test_crash_consistency.py`` (see ``tests/crash_scenarios.py``),
with more kills: seeded kill points spread over listing, preparing, embedding, writing and
the graph build, on a fresh index and on an index whose folder was edited, some kills twice
in a row. After every kill the index must be sound (integrity check, no half-written or
mixed-version document, no stale graph marked clean, searchable) and no child process of
the killed build may survive; the re-run must converge to the uninterrupted build and embed
no text that was already stored. ``--pooled-every N`` runs one in N kills outside the
preparing phase with worker processes (the test suite: one in 12), each costing their
start-up. Writes ``bench/results/<name>.json``: kills tried and landed, scenarios
converged, orphaned processes, re-embedded texts, seconds until the killed build's child
processes had exited (kills that found every worker started, and kills that caught one still
starting up), and every problem found. About 4 s per kill on two shared cores.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import REPO_ROOT, log, write_result

sys.path.insert(0, str(REPO_ROOT))

from tests.crash_harness import Launcher
from tests.crash_scenarios import (
    kill_points,
    prepare_settings,
    run_scenario,
    scenario_shapes,
)


def _spread(values: list[float]) -> dict[str, Any]:
    """Count, median and max of seconds (None when there are none)."""
    if not values:
        return {"kills": 0, "median": None, "max": None}
    return {"kills": len(values), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pooled-every", type=int, default=2,
                        help="one in N kills outside preparing runs with worker processes")
    parser.add_argument("--name", default="crash")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        parser.error("finds processes through /proc: Linux only")
    for key in [k for k in os.environ if k.startswith("DOCGRAPH_")]:
        del os.environ[key]
    logging.disable(logging.WARNING)  # the re-runs' "skipped <broken file>" lines

    started = time.perf_counter()
    phases: Counter[str] = Counter()
    exit_started: list[float] = []  # kills whose worker processes had all started
    exit_starting: list[float] = []  # kills that caught a worker still starting
    problems: list[str] = []
    totals: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="docgraph-crash-") as tmp:
        work = Path(tmp)
        os.environ["DOCGRAPH_CONFIG"] = str(work / "absent.toml")
        settings = prepare_settings(work / "settings")
        shapes = scenario_shapes(args.kills)
        first_kill = 0
        with Launcher() as launcher:
            for number, (name, chain) in enumerate(shapes):
                points = kill_points(settings[name], chain, first_kill, args.seed,
                                     pooled_every=args.pooled_every)
                first_kill += chain
                scenario_dir = work / f"scenario-{number}"
                scenario_dir.mkdir()
                outcome = run_scenario(launcher, settings[name], points,
                                       scenario_dir / "index.db", scenario_dir)
                totals["scenarios"] += 1
                totals["converged"] += outcome.converged
                totals["re_embedded"] += outcome.re_embedded
                totals["embedded_by_reruns"] += outcome.embedded
                for kill in outcome.kills:
                    totals["kills"] += 1
                    totals["landed"] += kill.landed
                    totals["orphans"] += kill.orphans
                    totals["kills_with_children"] += kill.workers > 0
                    if kill.landed:
                        phases[kill.point.phase] += 1
                    if kill.workers:
                        (exit_starting if kill.starting_workers else exit_started).append(
                            kill.exit_seconds)
                found = outcome.problems()
                problems += [f"scenario {number} ({name}): {p}" for p in found]
                log(f"scenario {number} {name} {points}: "
                    f"{'ok' if not found else '; '.join(found)}")

    payload: dict[str, Any] = {
        "seed": args.seed,
        "pooled_every": args.pooled_every,
        "kills_tried": totals["kills"],
        "kills_landed": totals["landed"],
        "landed_per_phase": dict(sorted(phases.items())),
        "scenarios": totals["scenarios"],
        "scenarios_converged": totals["converged"],
        "orphaned_processes": totals["orphans"],
        "re_embedded_texts": totals["re_embedded"],
        "embedded_by_reruns": totals["embedded_by_reruns"],
        "kills_with_child_processes": totals["kills_with_children"],
        "child_exit_seconds": {
            "workers_started": _spread(exit_started),
            "a_worker_still_starting": _spread(exit_starting),
        },
        "problems": problems,
        "seconds": round(time.perf_counter() - started, 1),
    }
    write_result(args.name, payload)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
