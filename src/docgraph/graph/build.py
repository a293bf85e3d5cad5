"""Build (or rebuild) one namespace's entity graph, communities and community reports.

Called after ingest for every namespace whose documents changed (the catalog marks them
dirty in the same transaction as the document write). Everything is recomputed from the
stored chunk-entity links of that namespace only, so the result equals a fresh build, and
other namespaces are never touched. Reports whose text did not change keep their vectors.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from docgraph.config import GraphSettings
from docgraph.errors import ConfigError
from docgraph.graph.communities import Community, detect_communities
from docgraph.graph.cooccurrence import CooccurrenceGraph, build_cooccurrence
from docgraph.graph.extract import EntityExtractor, VocabularyMatcher
from docgraph.graph.reports import ReportInput, community_title, extractive_report, llm_report
from docgraph.ingest.embed import Embedder
from docgraph.ingest.embed_cache import text_hash
from docgraph.llm import ChatModel
from docgraph.model import Vector
from docgraph.store.sqlite_graph import CommunityRow, EdgeRow, EntityInfo, SQLiteGraphStore

log = logging.getLogger(__name__)


@dataclass
class GraphBuildReport:
    """What one namespace's graph build produced, with phase timings (seconds)."""

    namespace: str
    entities: int = 0
    edges: int = 0
    communities: int = 0
    reports: int = 0
    reports_embedded: int = 0
    relinked_chunks: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def make_extractor(settings: GraphSettings) -> EntityExtractor:
    """The entity extractor configured by ``[graph]`` (vocabulary lists and files)."""
    vocabulary = VocabularyMatcher()
    for entity_type, terms in sorted(settings.vocabulary.items()):
        vocabulary.add(entity_type, terms)
    for entity_type, path in sorted(settings.vocabulary_files.items()):
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(
                f"graph.vocabulary_files.{entity_type}: cannot read {path}: {exc}"
            ) from exc
        vocabulary.add(entity_type, [ln for ln in lines if ln.strip()])
    return EntityExtractor(
        vocabulary=vocabulary,
        patterns=settings.patterns,
        proper_names=settings.proper_names,
        max_entities_per_chunk=settings.max_entities_per_chunk,
    )


def extractor_fingerprint(extractor: EntityExtractor) -> str:
    """Changes whenever extraction of the same text could change."""
    return (f"{extractor.vocabulary.fingerprint()}:{int(extractor.patterns)}"
            f":{int(extractor.proper_names)}:{extractor.max_entities_per_chunk}")


class GraphBuilder:
    """Recomputes a namespace's graph from its chunk-entity links."""

    def __init__(
        self,
        store: SQLiteGraphStore,
        embedder: Embedder,
        settings: GraphSettings,
        extractor: EntityExtractor,
        chat_model: ChatModel | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.extractor = extractor
        self.chat_model = chat_model

    def relink_if_vocabulary_changed(self, namespace: str) -> int:
        """Re-extract entities of every chunk (no re-embedding) when the extractor changed
        since the namespace's links were made; returns the number of chunks relinked."""
        fingerprint = extractor_fingerprint(self.extractor)
        recorded = self.store.vocabulary_hash(namespace)
        if recorded in ("", fingerprint):
            return 0
        texts = self.store.chunk_texts(namespace)
        links = [(rowid, self.extractor.links(text)) for rowid, text in texts]
        self.store.replace_links(namespace, links, fingerprint)
        return len(links)

    def build(self, namespace: str) -> GraphBuildReport:
        """Rebuild edges, communities and reports of ``namespace``."""
        report = GraphBuildReport(namespace)
        t0 = time.perf_counter()
        report.relinked_chunks = self.relink_if_vocabulary_changed(namespace)
        report.seconds["relink"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        links = self.store.links(namespace)
        entity_ids = np.unique(links.entity_ids)
        infos = self.store.entities_by_id(entity_ids.tolist())
        node_order = np.array(sorted(infos, key=lambda i: infos[i].key), dtype=np.int64)
        report.seconds["load"] = time.perf_counter() - t0
        report.entities = len(node_order)

        t0 = time.perf_counter()
        graph = build_cooccurrence(
            links.chunk_rowids, links.entity_ids, node_order,
            self.settings.min_cooccurrence, self.settings.max_edges_per_entity,
        )
        node_ids = graph.entity_ids
        edges = [
            EdgeRow(int(min(node_ids[s], node_ids[t])), int(max(node_ids[s], node_ids[t])),
                    float(w), int(c))
            for s, t, w, c in zip(graph.sources, graph.targets, graph.weights, graph.chunks,
                                  strict=True)
        ]
        report.edges = len(edges)
        report.seconds["edges"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        communities = detect_communities(
            len(node_ids), graph.sources, graph.targets, graph.weights,
            levels=self.settings.levels, resolution=self.settings.resolution,
            split_above=self.settings.split_above, min_size=self.settings.min_community_size,
            seed=self.settings.seed,
        )
        report.communities = len(communities)
        report.seconds["communities"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        rows = self._community_rows(namespace, communities, graph, infos, report)
        report.seconds["reports"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        self.store.replace_graph(namespace, edges, rows, extractor_fingerprint(self.extractor))
        report.seconds["store"] = time.perf_counter() - t0
        return report

    def _community_rows(
        self,
        namespace: str,
        communities: list[Community],
        graph: CooccurrenceGraph,
        infos: dict[int, EntityInfo],
        report: GraphBuildReport,
    ) -> list[CommunityRow]:
        node_ids = graph.entity_ids
        incidence = graph.incidence.tocsc()
        with_report = set(
            sorted(range(len(communities)), key=lambda i: (-len(communities[i].nodes), i))
            [: self.settings.max_reports]
        )
        in_community = np.zeros(len(node_ids), dtype=bool)
        inputs: dict[int, ReportInput] = {}
        wanted_chunks: dict[int, list[int]] = {}
        for index, community in enumerate(communities):
            if index not in with_report:
                continue
            nodes = list(community.nodes)
            indicator = np.zeros(len(node_ids))
            indicator[nodes] = 1.0
            per_chunk = incidence @ indicator
            top = np.argsort(-per_chunk, kind="stable")[:6]
            wanted_chunks[index] = [int(graph.chunk_rowids[i]) for i in top if per_chunk[i] >= 1]
        texts = self.store.catalog.chunks_by_rowid(
            [r for rows in wanted_chunks.values() for r in rows]
        )
        out: list[CommunityRow] = []
        existing = self.store.report_vectors(namespace)
        pending: list[tuple[int, str]] = []
        for index, community in enumerate(communities):
            members = [
                (infos[int(node_ids[n])].name, infos[int(node_ids[n])].type,
                 infos[int(node_ids[n])].chunk_count, c)
                for n, c in zip(community.nodes, community.centrality, strict=True)
            ]
            text: str | None = None
            if index in with_report:
                in_community[:] = False
                in_community[list(community.nodes)] = True
                inner = np.flatnonzero(in_community[graph.sources] & in_community[graph.targets])
                top = inner[np.lexsort((graph.targets[inner], graph.sources[inner],
                                        -graph.chunks[inner]))][:8]
                rels = [(int(graph.sources[i]), int(graph.targets[i]), int(graph.chunks[i]))
                        for i in top]
                name = {n: infos[int(node_ids[n])].name for n in community.nodes}
                inputs[index] = ReportInput(
                    members, [(name[a], name[b], n) for a, b, n in rels],
                    [texts[r].text for r in wanted_chunks[index] if r in texts],
                )
                text = self._write_report(inputs[index])
                pending.append((index, text))
            out.append(CommunityRow(
                level=community.level,
                ordinal=sum(1 for c in communities[:index] if c.level == community.level),
                parent=community.parent,
                title=community_title(members),
                members=[(int(node_ids[n]), c) for n, c in
                         zip(community.nodes, community.centrality, strict=True)],
                report_text=text,
                report_vector=None,
            ))
        vectors = self._embed_reports([t for _, t in pending], existing, report)
        for (index, text), vector in zip(pending, vectors, strict=True):
            row = out[index]
            out[index] = CommunityRow(row.level, row.ordinal, row.parent, row.title, row.members,
                                      text, vector)
        report.reports = len(pending)
        return out

    def _write_report(self, data: ReportInput) -> str:
        if self.chat_model is not None:
            try:
                return llm_report(data, self.chat_model, self.settings.report_sentences)
            except Exception as exc:  # the extractive report is always available
                log.warning("LLM community report failed, using extractive: %s", exc)
        return extractive_report(data, self.settings.report_sentences)

    def _embed_reports(
        self, texts: list[str], existing: dict[str, Vector], report: GraphBuildReport
    ) -> list[Vector]:
        crumbs = [f"[Community report] {t}" for t in texts]
        hashes = [text_hash(t) for t in texts]
        missing = [i for i, h in enumerate(hashes) if h not in existing]
        by_index: dict[int, Vector] = {}
        if missing:
            fresh = self.embedder.embed_documents([crumbs[i] for i in missing])
            by_index = dict(zip(missing, fresh, strict=True))
        report.reports_embedded = len(missing)
        return [existing[h] if h in existing else by_index[i] for i, h in enumerate(hashes)]
