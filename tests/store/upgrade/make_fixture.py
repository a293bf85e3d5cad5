"""Build the upgrade fixture of one earlier docgraph: ``index-<commit>.db.gz`` beside this file.

Run from the repository root with the earlier commit checked out elsewhere, e.g.::

    git worktree add ../docgraph-old 0b98a97
    PYTHONPATH=../docgraph-old/src python tests/store/upgrade/make_fixture.py 0b98a97
    git worktree remove ../docgraph-old

It indexes :data:`CORPUS` (namespace ``demo``, the deterministic ``hashing`` embedder) with
the docgraph on ``PYTHONPATH`` into a file under :data:`ROOT` (a fixed folder, so no path of
the machine that built it is written into the index), and gzips the file (an index is mostly
empty 8 KB pages). ``tests/store/test_upgrade.py`` opens it with this docgraph.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

#: The fixed folder the corpus is indexed from (its URN is what the index records).
ROOT = Path("/docgraph-upgrade-fixture")

CORPUS = {
    "runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked. "
                  "Clean the lidar window and restart the unit.\n",
    "leave.md": "# Parental leave\n\nStaff get twenty weeks of parental leave after a birth "
                "or an adoption.\n",
    "outage.md": "# Rotterdam outage\n\nThe Rotterdam depot lost power for six hours in March; "
                 "the Kestrel fleet stayed grounded.\n",
    "guide/pricing.md": "# Pricing\n\nThe Kestrel K2 costs 12,400 euros; service contracts "
                        "are billed yearly.\n",
}


def main(commit: str) -> None:
    """Index the corpus with the docgraph on the path; write the gzipped index here."""
    from docgraph import DocGraph

    if ROOT.exists():
        shutil.rmtree(ROOT)
    for name, text in CORPUS.items():
        (ROOT / "corpus" / name).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / "corpus" / name).write_text(text, encoding="utf-8")
    (ROOT / "docgraph.toml").write_text('[embed]\nmodel = "hashing"\n', encoding="utf-8")
    index = ROOT / "index.db"
    with DocGraph.open(index, config_file=ROOT / "docgraph.toml") as graph:
        graph.index(ROOT / "corpus", namespace="demo")
    target = Path(__file__).with_name(f"index-{commit}.db.gz")
    with index.open("rb") as raw, gzip.GzipFile(target, "wb", mtime=0) as packed:
        shutil.copyfileobj(raw, packed)
    shutil.rmtree(ROOT)
    print(f"wrote {target} ({target.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
