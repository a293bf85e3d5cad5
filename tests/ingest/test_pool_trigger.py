"""When a build starts its prepare processes (``ingest/workers.PoolTrigger``).

By default (``loader.workers`` = 0) they start only once the preparing still to do would
outweigh their start-up; an explicit ``loader.workers`` starts them for every build of more
than ``PARALLEL_AFTER_FILES`` files, as before."""

from __future__ import annotations

import pytest

from docgraph.ingest import workers
from docgraph.ingest.pipeline import PARALLEL_AFTER_FILES
from docgraph.ingest.workers import WORKER_START_SECONDS, PoolTrigger
from tests.helpers import write_files

FILES = PARALLEL_AFTER_FILES + 8


def _notes() -> dict[str, str | bytes]:
    return {f"note-{i:02d}.md": f"# Note {i}\n\nThe Kestrel K{i} picker reported error E-{i}."
            for i in range(FILES)}


def test_default_build_of_small_files_prepares_inline(tmp_path, make_graph, monkeypatch):
    """Two cores, 40 small Markdown files: their preparing is milliseconds, far below the
    workers' start-up, so the default build prepares them in its own process (before, it
    started one process per core after 32 files)."""
    monkeypatch.setattr(workers, "core_count", lambda limit=8: 2)
    graph = make_graph()  # loader.workers = 0: one per core, when they pay
    report = graph.index(write_files(tmp_path / "docs", _notes()), namespace="notes")
    assert report.workers == 1
    assert len(report.added) == FILES and not report.failed


def _after_inline(trigger: PoolTrigger, files: int, seconds_each: float) -> None:
    """``files`` files fetched and prepared inline, ``seconds_each`` each."""
    for visited in range(1, files + 1):
        assert not trigger.due(visited)
        trigger.seconds.append(seconds_each)


def test_default_trigger_starts_workers_once_the_rest_outweighs_their_start_up():
    total, after = 1000, PARALLEL_AFTER_FILES
    heavy = PoolTrigger(0, 2, total, after)  # 50 ms a file, 967 files to go: ~48 s
    _after_inline(heavy, after, 0.05)
    assert heavy.due(after + 1)

    light = PoolTrigger(0, 2, total, after)  # 1 ms a file: ~1 s left, under 4 x 1 s
    _after_inline(light, after, 0.001)
    assert not light.due(after + 1)

    # Exactly at the bound: the saving (half the rest on 2 workers) equals the start-up.
    left = 2 * WORKER_START_SECONDS / (1 - 1 / 2)
    edge = PoolTrigger(0, 2, after + 100, after)
    _after_inline(edge, after, left / 100 * 0.999)
    assert not edge.due(after + 1)


def test_incremental_build_scales_the_estimate_by_the_files_that_changed():
    """Files skipped unchanged count as visited: only the share that needed preparing is
    expected of the files left."""
    after = PARALLEL_AFTER_FILES
    trigger = PoolTrigger(0, 2, 10_000, after)
    for visited in range(1, after + 1):  # one changed file in every 100 listed
        assert not trigger.due(visited * 100)
        trigger.seconds.append(0.01)
    # 10 ms a file, ~6,700 files left of which ~1% change: ~0.7 s, not worth 2 s of start-up
    assert not trigger.due((after + 1) * 100)


def test_a_one_off_load_in_the_first_file_does_not_start_workers():
    """A fresh process's first document also loads py3langid's model (~0.5 s, 2 s on a
    busy machine): the estimate goes by the typical file, not the mean."""
    after = PARALLEL_AFTER_FILES
    trigger = PoolTrigger(0, 2, 200, after)  # 200 small files, 1 ms each
    for visited in range(1, after + 1):
        assert not trigger.due(visited)
        trigger.seconds.append(2.0 if visited == 1 else 0.001)
    assert not trigger.due(after + 1)


@pytest.mark.parametrize("configured", [2, 4])
def test_explicit_workers_start_after_the_file_floor(configured):
    trigger = PoolTrigger(configured, configured, 1000, PARALLEL_AFTER_FILES)
    _after_inline(trigger, PARALLEL_AFTER_FILES, 0.0)
    assert trigger.due(PARALLEL_AFTER_FILES + 1)


def test_one_core_or_inline_setting_never_starts_workers():
    trigger = PoolTrigger(0, 1, 1000, PARALLEL_AFTER_FILES)
    _after_inline(trigger, PARALLEL_AFTER_FILES, 10.0)
    assert not trigger.due(PARALLEL_AFTER_FILES + 1)
