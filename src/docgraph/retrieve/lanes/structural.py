"""The structural lane: the previous, next and parent-section chunks of the strongest seeds
(off by default: no retrieval gain measured, +1.4 ms at 100k, ``bench/ablation.py``)."""

from __future__ import annotations

import time

from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.lanes.base import STRUCTURAL
from docgraph.retrieve.pool import CohortQuery

# Seeds whose neighbours the lane reads. Not a setting: the lane is off by default and this
# was never measured to matter.
_STRUCTURAL_FROM = 5


class StructuralLane:
    name = STRUCTURAL
    needs_entities = False

    def enabled(self, settings: CohortSettings) -> bool:
        return settings.structural_lane

    def run(self, q: CohortQuery) -> None:
        t = time.perf_counter()
        added: list[str] = []
        for source, neighbour, relation in q.reads.structural_neighbours(
                q.seeds[:_STRUCTURAL_FROM]):
            if neighbour not in q.pool:
                added.append(str(neighbour))
            q.admit(neighbour, STRUCTURAL, f"{relation} of {source}")
        q.trace.add(STRUCTURAL, added)
        q.trace.timings_ms[STRUCTURAL] = (time.perf_counter() - t) * 1000
