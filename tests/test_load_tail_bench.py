"""``bench/load_tail.py``'s busy processes: they load the cores only while the bench runs,
and none is left behind however the bench ends (others time their runs on these cores)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import load_tail

HOLD = (f"import json, sys; sys.path.insert(0, {str(REPO / 'bench')!r})\n"
        "from load_tail import busy\n"
        "with busy(2) as procs:\n"
        "    print(json.dumps([p.pid for p in procs]), flush=True)\n"
        "    sys.stdin.read()\n")


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    """Whether every pid has exited (a zombie counts: it runs nothing) within the time."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_busy_processes_spin_during_the_block_and_stop_after_it():
    with load_tail.busy(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        pids = [p.pid for p in procs]
    assert all(p.returncode is not None for p in procs)
    assert _gone(pids, 0.0)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_busy_process_outlives_the_bench(signum):
    """Ctrl-C and SIGTERM stop them on the way out; SIGKILL leaves them to notice their
    parent is gone."""
    bench = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert bench.stdout is not None
        pids = json.loads(bench.stdout.readline())
        assert len(pids) == 2 and not _gone(pids, 0.0)
        bench.send_signal(signum)
        bench.wait(20)
        assert _gone(pids), f"busy processes {pids} outlived the bench ({signum!r})"
    finally:
        bench.kill()
        bench.wait()


def test_a_variant_is_a_name_and_its_environment():
    assert load_tail.parse_variant("thread") == ("thread", {})
    assert load_tail.parse_variant("old:A=1,B=x") == ("old", {"A": "1", "B": "x"})
    with pytest.raises(SystemExit, match="'old:A'"):
        load_tail.parse_variant("old:A")
