"""A refresher process for the leadership tests (``python -m tests.refresh_leader_child LOG``).

It opens the index its environment configures (``DOCGRAPH_STORE__*``), runs the refresher's
background loop and appends ``ready PID`` once, then ``begin PID`` / ``end PID`` around every
build it runs, to ``LOG``. Each build lingers a little, so a second process building at the
same time would show as interleaved lines.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from docgraph import DocGraph


def _append(log: Path, line: str) -> None:
    with log.open("a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def main(log: Path) -> None:
    graph = DocGraph.open()
    refresher = graph.refresher
    build = refresher._run_leading
    pid = os.getpid()

    def logged(*args: Any, **kwargs: Any) -> Any:
        _append(log, f"begin {pid}")
        try:
            time.sleep(0.3)
            return build(*args, **kwargs)
        finally:
            _append(log, f"end {pid}")

    refresher._run_leading = logged  # type: ignore[method-assign]
    refresher.start()
    _append(log, f"ready {pid}")
    while refresher.running:
        time.sleep(0.2)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
