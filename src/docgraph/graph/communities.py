"""Hierarchical Leiden communities (igraph + leidenalg), deterministic for a given graph.

Level 0 partitions the whole graph; each deeper level re-partitions every community larger
than ``split_above`` on its own subgraph. A missing igraph/leidenalg is an error, never a
silent fallback to another algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from docgraph.errors import ConfigError


@dataclass(frozen=True)
class Community:
    """Node indices of one community, its level, and its parent's position in the list."""

    level: int
    nodes: tuple[int, ...]
    parent: int | None
    centrality: tuple[float, ...]  # weighted degree inside the community, per node


def _require_leiden() -> tuple[object, object]:
    try:
        import igraph
        import leidenalg
    except ImportError as exc:  # pragma: no cover - both are install requirements
        raise ConfigError(
            "community detection needs igraph and leidenalg (pip install igraph leidenalg)"
        ) from exc
    return igraph, leidenalg


def detect_communities(
    n_nodes: int,
    sources: npt.NDArray[np.int64],
    targets: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float64],
    *,
    levels: int = 2,
    resolution: float = 1.0,
    split_above: int = 12,
    min_size: int = 2,
    seed: int = 42,
) -> list[Community]:
    """Leiden (RB-configuration, weighted) communities, coarse level first, sorted within a
    level by size (desc) then smallest node index, so ordinals are stable."""
    igraph, leidenalg = _require_leiden()
    graph = igraph.Graph(n=n_nodes, edges=list(zip(sources.tolist(), targets.tolist(),  # type: ignore[attr-defined]
                                                     strict=True)))
    graph.es["weight"] = weights.tolist()
    out: list[Community] = []

    def partition(subgraph: object) -> list[list[int]]:
        result = leidenalg.find_partition(  # type: ignore[attr-defined]
            subgraph, leidenalg.RBConfigurationVertexPartition,  # type: ignore[attr-defined]
            weights="weight", resolution_parameter=resolution, seed=seed,
        )
        return [list(p) for p in result]

    def add_level(level: int, groups: list[tuple[list[int], int | None]]) -> None:
        if level >= levels:
            return
        found: list[tuple[list[int], int | None]] = []
        for nodes, parent in groups:
            if level == 0:
                parts = partition(graph)
            else:
                sub = graph.subgraph(nodes)
                parts = [[nodes[i] for i in p] for p in partition(sub)]
                if len(parts) <= 1:
                    continue
            found.extend((sorted(p), parent) for p in parts if len(p) >= min_size)
        found.sort(key=lambda item: (-len(item[0]), item[0][0]))
        next_groups: list[tuple[list[int], int | None]] = []
        # Weighted degree inside each community, from the edge arrays in one pass per level
        # (an igraph subgraph per community was the slowest step of a build).
        label = np.full(n_nodes, -1, dtype=np.int64)
        for position, (nodes, _) in enumerate(found):
            label[nodes] = position
        inside = (label[sources] == label[targets]) & (label[sources] >= 0)
        strength = np.zeros(n_nodes)
        np.add.at(strength, sources[inside], weights[inside])
        np.add.at(strength, targets[inside], weights[inside])
        for nodes, parent in found:
            out.append(Community(level, tuple(nodes), parent,
                                 tuple(float(strength[n]) for n in nodes)))
            if len(nodes) > split_above:
                next_groups.append((nodes, len(out) - 1))
        add_level(level + 1, next_groups)

    if n_nodes and len(sources):
        add_level(0, [(list(range(n_nodes)), None)])
    return out
