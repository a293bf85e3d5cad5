"""``docgraph index`` killed with SIGKILL: no process outlives it, nothing is half-written,
and the next build converges to exactly what an uninterrupted build produces, embedding
nothing twice.

The kill points are seeded (``DOCGRAPH_CRASH_SEED``, default 7) and spread over listing,
preparing, embedding, writing and the graph build; ``DOCGRAPH_CRASH_KILLS`` (default 12)
sets how many. ``bench/crash.py`` runs many more.
"""

from __future__ import annotations

import os
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from docgraph.ingest.pipeline import PARALLEL_AFTER_FILES
from tests.conftest import REPO
from tests.crash_harness import Launcher, alive, child_pids, kill_leftovers, start_time, wait_gone
from tests.crash_scenarios import (
    POOLED_FROM,
    Setting,
    kill_points,
    prepare_settings,
    run_scenario,
    scenario_shapes,
)
from tests.helpers import write_files

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="finds processes through /proc")

KILLS = int(os.environ.get("DOCGRAPH_CRASH_KILLS", "12"))
SEED = int(os.environ.get("DOCGRAPH_CRASH_SEED", "7"))
SHAPES = scenario_shapes(KILLS)


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Setting]]:
    with pytest.MonkeyPatch.context() as env:
        for key in [k for k in os.environ if k.startswith("DOCGRAPH_")]:
            env.delenv(key)
        yield prepare_settings(tmp_path_factory.mktemp("crash"))


@pytest.fixture(scope="module")
def launcher(settings: dict[str, Setting]) -> Iterator[Launcher]:
    with Launcher() as started:  # after `settings` cleared DOCGRAPH_* from the environment
        yield started


@pytest.mark.parametrize("scenario", range(len(SHAPES)),
                         ids=[f"{name}-{i}" for i, (name, _) in enumerate(SHAPES)])
def test_killed_build_leaves_a_sound_index_and_the_rerun_converges(
        scenario: int, settings: dict[str, Setting], launcher: Launcher, tmp_path: Path
) -> None:
    name, chain = SHAPES[scenario]
    setting = settings[name]
    points = kill_points(setting, chain, sum(c for _, c in SHAPES[:scenario]), SEED)

    outcome = run_scenario(launcher, setting, points, tmp_path / "index.db", tmp_path)

    assert outcome.problems() == [], (points, (tmp_path / "killed-run.log").read_text())
    first = outcome.kills[0]
    assert first.landed, f"{first.point} was never reached"
    if first.point.phase == "prepare" and first.point.nth >= POOLED_FROM \
            and first.point.workers > 1:
        assert first.workers > first.point.workers  # the workers and the resource tracker
    assert outcome.re_embedded == 0
    assert outcome.converged


def _notes(count: int) -> dict[str, str | bytes]:
    people = ["Priya Raman", "Tomas Berg", "Aiko Tanaka", "Lena Fischer", "Omar Haddad"]
    return {
        f"note-{i:03d}.md": f"# Note {i}\n\n" + "\n\n".join(
            f"## Part {j}\n\n" + f"{people[(i + j) % 5]} met {people[(i + 2 * j) % 5]} at the "
            f"Rotterdam site about error E-{400 + (i * j) % 13} and firmware 2.{j}.{i % 7}. " * 3
            for j in range(10))
        for i in range(count)
    }


def _docgraph_command() -> list[str]:
    script = Path(sys.executable).with_name("docgraph")
    if script.is_file():
        return [str(script)]  # the installed console script, as a user runs it
    return [sys.executable, "-c", "from docgraph.serve.cli import main; main()"]


def _read_to_eof(proc: subprocess.Popen[bytes], timeout: float) -> float | None:
    """Seconds until both of ``proc``'s output pipes reach end of file, None on timeout."""
    t0 = time.monotonic()
    selector = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        assert stream is not None
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ)
    try:
        while selector.get_map():
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                return None
            for key, _ in selector.select(left):
                if not os.read(key.fd, 65536):
                    selector.unregister(key.fileobj)
        return time.monotonic() - t0
    finally:
        selector.close()


def _spawned_workers(parent: int) -> list[int]:
    """The parent's worker processes (started by multiprocessing's ``spawn``)."""
    out = []
    for pid in child_pids(parent):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def _documents_written(index: Path) -> int:
    """Documents committed so far by the build writing ``index`` (0 before it exists)."""
    if not index.exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=1)
        try:
            return int(db.execute("SELECT count(*) FROM documents").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:  # the schema is still being created
        return 0


def test_sigkill_of_docgraph_index_ends_its_workers_and_closes_its_pipes(tmp_path: Path) -> None:
    """Killed once its workers have prepared documents, every child of the command (the
    workers and multiprocessing's resource tracker) exits at once and the caller's pipes
    reach end of file. (Workers killed while still starting are covered by the kills while
    preparing, above.)"""
    folder = write_files(tmp_path / "docs", _notes(PARALLEL_AFTER_FILES + 100))
    index = tmp_path / "index.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")}
    env.update(PYTHONPATH=str(REPO / "src"), DOCGRAPH_EMBED__MODEL="hashing",
               DOCGRAPH_LOADER__WORKERS="2", DOCGRAPH_CONFIG=str(tmp_path / "absent.toml"))
    proc = subprocess.Popen(
        [*_docgraph_command(), "--index", str(index), "index", str(folder)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    children: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + 120
        # Documents past the first PARALLEL_AFTER_FILES were prepared by the workers.
        while len(_spawned_workers(proc.pid)) < 2 \
                or _documents_written(index) <= PARALLEL_AFTER_FILES:
            assert proc.poll() is None, "the build ended before its workers had worked"
            assert time.monotonic() < deadline, "no worker processes appeared"
            time.sleep(0.01)
        children = [(pid, start_time(pid)) for pid in child_pids(proc.pid)]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

        exit_seconds, left = wait_gone(children, timeout=15)
        eof_seconds = _read_to_eof(proc, timeout=15)
        print(f"{len(children)} children exited {exit_seconds:.3f} s after the kill;"
              f" pipes at EOF after {eof_seconds}")
        assert left == [], f"still running: {left}"
        assert eof_seconds is not None, "the killed command's pipes stayed open"
        assert exit_seconds < 5.0  # ~1-330 ms measured; the resource tracker exits last
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers([pid for pid, started in children if alive(pid, started)])
