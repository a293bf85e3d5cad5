"""Pool sizing (:mod:`docgraph.parallel`): pools sized to the cores this process may use."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

AFFINITY_ONE = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
                "from docgraph.parallel import core_count; print(core_count())\n")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a CPU affinity of two cores or more to narrow")
def test_core_count_is_the_cores_this_process_may_run_on():
    """Under ``taskset`` or a container's CPU set, the machine's count would oversubscribe."""
    out = subprocess.run([sys.executable, "-c", AFFINITY_ONE], check=True,
                         capture_output=True, text=True)
    assert out.stdout.strip() == "1"
