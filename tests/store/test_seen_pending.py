"""The pending counts a PostgreSQL dense search reads for its answer are reused for at most
``PENDING_REUSE_S``: reading other namespaces later never makes an old count look fresh."""

from __future__ import annotations

import pytest

from docgraph.store.postgres import pending
from docgraph.store.postgres.pending import PENDING_REUSE_S, SeenPending


def test_a_count_is_not_kept_past_its_age_by_later_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(pending.time, "monotonic", lambda: now[0])
    seen = SeenPending()
    seen.note(["x"], {"x": 3}, writes=0)
    for name in ("y", "z", "w"):  # other namespaces read, each within the window
        now[0] += 0.9 * PENDING_REUSE_S
        seen.note([name], {name: 1}, writes=0)
    assert seen.stale(["x"], writes=0)  # read 2.7 windows ago
    assert seen.take(["x"], writes=0) is None
    seen.note(["x"], {"x": 5}, writes=0)
    assert seen.take(["x"], writes=0) == {"x": 5}  # a fresh read is taken
