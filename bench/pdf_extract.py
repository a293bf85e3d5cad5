"""PDF extraction throughput (pages per second) on a generated report.

    python bench/pdf_extract.py [--pages 200] [--runs 7] [--baseline REV]

The report is ``tests/pdf_fixtures.long_pdf``: fpdf2 text with a running header and footer,
an outline entry and a larger bold heading every fifth page, three paragraphs per page.
With ``--baseline REV``, the PDF extractor of git revision ``REV``
(``src/docgraph/ingest/extract_packed.py`` there) is timed too, alternating run by run with
the current one, so both see the same machine load; medians are reported. Writes
``bench/results/pdf_extract.json``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from common import REPO_ROOT, log, write_result

sys.path.insert(0, str(REPO_ROOT))

from tests.pdf_fixtures import long_pdf

from docgraph.ingest.extract_packed import extract_pdf
from docgraph.ingest.limits import ExtractLimits

Extractor = Callable[[bytes, str, ExtractLimits], Any]


def baseline_extractor(revision: str) -> Extractor:
    """``extract_pdf`` as it was at git revision ``revision``."""
    source = subprocess.run(
        ["git", "show", f"{revision}:src/docgraph/ingest/extract_packed.py"],
        cwd=REPO_ROOT, check=True, capture_output=True, text=True).stdout
    module = types.ModuleType(f"extract_packed_{revision}")
    exec(compile(source, module.__name__, "exec"), module.__dict__)
    found: Extractor = module.extract_pdf
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", default=None, help="git revision to compare with")
    args = parser.parse_args()
    data = long_pdf(args.pages)
    limits = ExtractLimits()
    extractors: dict[str, Extractor] = {"current": extract_pdf}
    if args.baseline:
        extractors = {"baseline": baseline_extractor(args.baseline), **extractors}
    seconds: dict[str, list[float]] = {name: [] for name in extractors}
    blocks: dict[str, int] = {}
    for run in range(args.runs):
        for name, extractor in extractors.items():
            started = time.perf_counter()
            document = extractor(data, "report.pdf", limits)
            seconds[name].append(time.perf_counter() - started)
            blocks[name] = len(document.blocks)
        log(f"run {run + 1}: " + ", ".join(f"{n} {s[-1]:.3f} s" for n, s in seconds.items()))
    results = [{
        "extractor": name,
        "revision": args.baseline if name == "baseline" else "working tree",
        "pages": args.pages,
        "bytes": len(data),
        "blocks": blocks[name],
        "median_seconds": round(statistics.median(times), 4),
        "pages_per_second": round(args.pages / statistics.median(times), 1),
        "runs": [round(t, 4) for t in times],
    } for name, times in seconds.items()]
    write_result("pdf_extract", {"runs": args.runs, "alternating": True, "results": results})


if __name__ == "__main__":
    main()
