"""The cluster lane: chunks of entities in the same community as the query's (else the
strongest seeds'), budget-limited (off by default: no gain measured, ``bench/ablation.py``)."""

from __future__ import annotations

import time

from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.lanes.base import CLUSTER
from docgraph.retrieve.pool import CohortQuery

# Community peers read, and chunks read per peer. Not settings: they bound the lane's reads;
# what it adds is bounded by cluster_budget and cluster_min_similarity, which are.
_CLUSTER_PEERS = 20
_CLUSTER_CHUNKS_PER_ENTITY = 3


class ClusterLane:
    name = CLUSTER
    needs_entities = True

    def enabled(self, settings: CohortSettings) -> bool:
        return settings.cluster_lane

    def run(self, q: CohortQuery) -> None:
        t = time.perf_counter()
        s = q.settings
        peers = q.non_hub(q.reads.community_peers(q.start_entities, _CLUSTER_PEERS))
        links = q.read_capped_chunks(peers, _CLUSTER_CHUNKS_PER_ENTITY)
        chosen = q.gated([r for _, r, _, _ in links], s.cluster_min_similarity,
                         s.cluster_budget)
        for rowid in chosen:
            q.admit(rowid, CLUSTER, "community peer")
        q.trace.add(CLUSTER, [str(r) for r in chosen])
        q.trace.timings_ms[CLUSTER] = (time.perf_counter() - t) * 1000
