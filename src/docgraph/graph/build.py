"""Build (or rebuild) one namespace's entity graph, communities and community reports.

Called after ingest for every namespace whose documents changed (the catalog marks them
dirty in the same transaction as the document write). Everything is recomputed from the
stored chunk-entity links of that namespace only, so the result equals a fresh build, and
other namespaces are never touched. Reports whose text did not change keep their vectors.
With key phrases on (``[graph] keyphrases``), every build first chooses the namespace's key
phrases from its chunks' word ids and brings every chunk's links up to them; what does not
depend on the phrase set is kept between builds (:mod:`docgraph.graph.phrase_cache`). What
each community's title and report are made from is computed in
:mod:`docgraph.graph.community_inputs`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from docgraph.config import GraphSettings
from docgraph.embedding.embedders import Embedder
from docgraph.errors import ConfigError
from docgraph.graph.communities import Community, detect_communities
from docgraph.graph.community_inputs import (
    access_documents,
    central_chunks,
    hits_per_chunk,
    identity_rank,
    inside_counts,
    row_documents,
    sparse_columns,
    strongest_inner_edges,
)
from docgraph.graph.cooccurrence import CooccurrenceGraph, build_cooccurrence
from docgraph.graph.extract import EntityExtractor, VocabularyMatcher, merge_phrases
from docgraph.graph.keyphrases import (
    KeyphraseParams,
    check_language,
    choose_keyphrases,
    phrase_matcher,
    phrase_weights,
)
from docgraph.graph.phrase_cache import PhraseCache, match_phrases
from docgraph.graph.reports import (
    ReportInput,
    community_title,
    extractive_report,
    llm_report,
    specificity,
)
from docgraph.llm import ChatModel
from docgraph.model import EntityLink, RowOrigin, Vector
from docgraph.store.graph import (
    CommunityRow,
    EdgeTable,
    EntityInfo,
    GraphStore,
)
from docgraph.text import text_hash

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
    keyphrases: int = 0
    #: With key phrases: chunk texts tokenized and base-extracted by this build (not kept
    #: from an earlier build in this process) and chunks whose phrases were matched again.
    extracted_chunks: int = 0
    matched_chunks: int = 0
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
    keyphrases = None
    if settings.keyphrases:
        keyphrases = KeyphraseParams(language=settings.keyphrase_language,
                                     min_chunks=settings.keyphrase_min_chunks,
                                     max_chunk_share=settings.keyphrase_max_chunk_share,
                                     max_per_chunk=settings.keyphrase_max_per_chunk)
        try:
            check_language(keyphrases.language)
        except LookupError as exc:
            raise ConfigError(f"graph.keyphrase_language: {exc}") from exc
    return EntityExtractor(
        vocabulary=vocabulary,
        patterns=settings.patterns,
        proper_names=settings.proper_names,
        max_entities_per_chunk=settings.max_entities_per_chunk,
        keyphrases=keyphrases,
    )


# Bumped whenever the extraction heuristics change what they find in the same text, so stored
# links are re-extracted (without re-embedding) at the next build. 2: proper-name runs are cut
# at titles, labels, coordination and line breaks.
EXTRACTION_VERSION = 2


def extractor_fingerprint(extractor: EntityExtractor) -> str:
    """Changes whenever extraction of the same text could change (with key phrases on: of the
    same namespace, since their phrases are chosen from its texts at every build)."""
    fingerprint = (f"{extractor.vocabulary.fingerprint()}:{int(extractor.patterns)}"
                   f":{int(extractor.proper_names)}:{extractor.max_entities_per_chunk}"
                   f":v{EXTRACTION_VERSION}")
    if extractor.keyphrases is not None:
        fingerprint += f":phrases:{extractor.keyphrases.fingerprint()}"
    return fingerprint


class GraphBuilder:
    """Recomputes a namespace's graph from its chunk-entity links."""

    def __init__(
        self,
        store: GraphStore,
        embedder: Embedder,
        settings: GraphSettings,
        extractor: EntityExtractor,
        chat_model: ChatModel | None = None,
        phrase_cache: PhraseCache | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.extractor = extractor
        self.chat_model = chat_model
        #: Chunk tokens and mentions kept between builds (a long-lived owner passes its own).
        self.phrase_cache = phrase_cache if phrase_cache is not None else PhraseCache()

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

    def relink_with_keyphrases(self, namespace: str, report: GraphBuildReport) -> None:
        """Choose the namespace's key phrases from all its chunks and bring every chunk's
        entity links up to them (no re-embedding).

        Done at every build: the phrases are a function of the whole namespace, so adding or
        removing one document can change any chunk's links, and recomputing all of them is
        what makes an incremental build equal a fresh one. What does not depend on the phrase
        set is kept between builds (:class:`~docgraph.graph.phrase_cache.PhraseCache`): only
        new chunk texts are tokenized and run through the base extractors, and only chunks
        holding a phrase spelling that was chosen or dropped are matched again; links are
        then assembled for every chunk and only those that differ from the stored ones are
        written. Only this namespace's texts are read and only its chunks are relinked.
        """
        params = self.extractor.keyphrases
        assert params is not None
        cache = self.phrase_cache
        with cache.lock:
            t0 = time.perf_counter()
            rows = self.store.chunk_texts(namespace)
            texts = [text for _, text in rows]
            fingerprint = extractor_fingerprint(self.extractor)
            vocabulary = cache.vocabulary(params.language)
            entry, chunks, new = cache.chunks(namespace, fingerprint, texts, self.extractor,
                                              vocabulary)
            report.extracted_chunks = new
            report.seconds["tokenize"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            phrases = choose_keyphrases([c.tokens for c in chunks], vocabulary, params)
            report.keyphrases = len(phrases)
            report.seconds["keyphrases"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            matcher = phrase_matcher(phrases)
            report.matched_chunks = match_phrases(
                entry, texts, chunks, matcher,
                frozenset(s for p in phrases for s in p.surfaces))
            extractor = self.extractor.with_phrases(matcher, phrase_weights(phrases, len(rows)))
            stored = _stored_link_sets(self.store, namespace)
            changed = []
            for (rowid, text), chunk in zip(rows, chunks, strict=True):
                assert chunk.phrases is not None
                links = extractor.links_of(merge_phrases(chunk.base, chunk.phrases), len(text))
                if _link_set(links) != stored.get(rowid, frozenset()):
                    changed.append((rowid, links))
            report.seconds["match"] = time.perf_counter() - t0
        if changed or self.store.vocabulary_hash(namespace) not in ("", fingerprint):
            self.store.replace_links(namespace, changed, fingerprint)
        report.relinked_chunks = len(changed)

    def build(self, namespace: str) -> GraphBuildReport:
        """Rebuild edges, communities and reports of ``namespace``."""
        report = GraphBuildReport(namespace)
        t0 = time.perf_counter()
        if self.extractor.keyphrases is not None:
            self.relink_with_keyphrases(namespace, report)
        else:
            report.relinked_chunks = self.relink_if_vocabulary_changed(namespace)
        report.seconds["relink"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        links = self.store.links(namespace)
        entity_ids, chunk_counts = np.unique(links.entity_ids, return_counts=True)
        names = self.store.entity_names(namespace)
        infos = {
            int(e): EntityInfo(int(e), *names[int(e)], namespace, int(n))
            for e, n in zip(entity_ids.tolist(), chunk_counts.tolist(), strict=True)
        }
        node_order = np.array(sorted(infos, key=lambda i: infos[i].key), dtype=np.int64)
        report.seconds["load"] = time.perf_counter() - t0
        report.entities = len(node_order)

        t0 = time.perf_counter()
        graph = build_cooccurrence(
            links.chunk_rowids, links.entity_ids, node_order,
            self.settings.min_cooccurrence, self.settings.max_edges_per_entity,
        )
        ends = (graph.entity_ids[graph.sources], graph.entity_ids[graph.targets])
        edges = EdgeTable(np.minimum(*ends), np.maximum(*ends), graph.weights, graph.chunks)
        report.edges = len(edges)
        report.seconds["edges"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        communities = detect_communities(
            len(graph.entity_ids), graph.sources, graph.targets, graph.weights,
            levels=self.settings.levels, resolution=self.settings.resolution,
            split_above=self.settings.split_above, min_size=self.settings.min_community_size,
            seed=self.settings.seed,
        )
        report.communities = len(communities)
        report.seconds["communities"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        rows = self._community_rows(namespace, communities, graph, infos, report,
                                   row_documents(links, communities, graph),
                                   identity_rank(links.identity_order, graph.chunk_rowids),
                                   access_documents(links, communities, graph))
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
        row_sources: Sequence[Sequence[tuple[str, RowOrigin]]],
        chunk_rank: npt.NDArray[np.int64],
        access_sources: Sequence[Sequence[tuple[str, frozenset[str]]]],
    ) -> list[CommunityRow]:
        node_ids = graph.entity_ids.tolist()
        node_info = [infos[e] for e in node_ids]
        with_report = sorted(
            sorted(range(len(communities)), key=lambda i: (-len(communities[i].nodes), i))
            [: self.settings.max_reports]
        )
        per_chunk = hits_per_chunk(graph, [c.nodes for c in communities])
        inside = inside_counts(graph, per_chunk)
        specific = [{node_info[n].name: specificity(int(column.get(n, 0)),
                                                    node_info[n].chunk_count)
                     for n in c.nodes}
                    for c, column in zip(communities, sparse_columns(inside), strict=True)]
        wanted_chunks = central_chunks(graph, per_chunk, with_report, chunk_rank)
        centroids, chunk_vectors = self._centroids(graph, per_chunk, with_report)
        relationships = strongest_inner_edges(graph, communities, with_report)
        texts = self.store.catalog.chunks_by_rowid(
            [r for rows in wanted_chunks for r in rows]
        )
        report_text: dict[int, str] = {}
        for index, chunk_rows in zip(with_report, wanted_chunks, strict=True):
            community = communities[index]
            members = [(node_info[n].name, node_info[n].type, node_info[n].chunk_count, c)
                       for n, c in zip(community.nodes, community.centrality, strict=True)]
            rows = [r for r in chunk_rows if r in texts]
            report_text[index] = self._write_report(ReportInput(
                members,
                [(node_info[a].name, node_info[b].name, n) for a, b, n in relationships[index]],
                [texts[r].text for r in rows],
                passage_vectors=[chunk_vectors[r] for r in rows]
                if all(r in chunk_vectors for r in rows) else None,
                centroid=centroids.get(index),
                specificity=specific[index],
            ))
        pending = sorted(report_text.items())
        vectors, hashes = self._report_vectors(namespace, pending, centroids, report)
        out: list[CommunityRow] = []
        ordinals: Counter[int] = Counter()
        for index, community in enumerate(communities):
            members = [(node_info[n].name, node_info[n].type, node_info[n].chunk_count, c)
                       for n, c in zip(community.nodes, community.centrality, strict=True)]
            out.append(CommunityRow(
                level=community.level,
                ordinal=ordinals[community.level],
                parent=community.parent,
                title=community_title(members, specific=specific[index]),
                members=[(node_ids[n], c) for n, c in
                         zip(community.nodes, community.centrality, strict=True)],
                report_text=report_text.get(index),
                report_vector=vectors.get(index),
                row_sources=row_sources[index],
                access_sources=access_sources[index],
                report_hash=hashes.get(index),
            ))
            ordinals[community.level] += 1
        report.reports = len(pending)
        return out

    def _centroids(self, graph: CooccurrenceGraph, per_chunk: sp.csc_matrix,
                   wanted: Sequence[int]) -> tuple[dict[int, Vector], dict[int, Vector]]:
        """Per wanted community, the normalised mean of the stored vectors of the chunks
        linking its members, each weighted by the members it mentions (no model call); and
        those chunks' vectors by row id."""
        if not wanted:
            return {}, {}
        sub = sp.csr_matrix(per_chunk[:, list(wanted)])
        rows = np.unique(sub.nonzero()[0])
        stored = self.store.chunk_vectors(graph.chunk_rowids[rows].tolist())
        if not stored:
            return {}, {}
        dim = len(next(iter(stored.values())))
        matrix = np.zeros((len(rows), dim), dtype=np.float64)
        for at, rowid in enumerate(graph.chunk_rowids[rows].tolist()):
            if rowid in stored:
                matrix[at] = stored[rowid]
        sums = np.asarray(sub[rows].T @ matrix)
        norms = np.linalg.norm(sums, axis=1)
        centroids = {i: (sums[at] / norms[at]).astype(np.float32)
                     for at, i in enumerate(wanted) if norms[at] > 0}
        return centroids, stored

    def _report_vectors(
        self, namespace: str, pending: list[tuple[int, str]], centroids: dict[int, Vector],
        report: GraphBuildReport,
    ) -> tuple[dict[int, Vector], dict[int, str]]:
        """Vectors of the reports (and the ``embed_hash`` to record where it is not the
        text's): the centroid with ``report_vectors = "mean"``, else the embedded text."""
        t0 = time.perf_counter()
        vectors: dict[int, Vector] = {}
        hashes: dict[int, str] = {}
        if self.settings.report_vectors == "mean":
            for index, text in pending:
                if index in centroids:
                    vectors[index] = centroids[index]
                    hashes[index] = f"mean:{text_hash(text)}"
        rest = [(i, t) for i, t in pending if i not in vectors]
        if rest:
            existing = self.store.report_vectors(namespace)
            vectors.update(zip((i for i, _ in rest),
                               self._embed_reports([t for _, t in rest], existing, report),
                               strict=True))
        report.seconds["report_vectors"] = time.perf_counter() - t0
        return vectors, hashes

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


def _link_set(links: Sequence[EntityLink]) -> frozenset[tuple[str, float]]:
    """What identifies a chunk's links: (canonical key, score as stored, rounded)."""
    return frozenset((link.key, round(float(np.float32(link.score)), 5)) for link in links)


def _stored_link_sets(store: GraphStore, namespace: str
                      ) -> dict[int, frozenset[tuple[str, float]]]:
    """:func:`_link_set` of every linked text chunk of the namespace, as stored."""
    links = store.links(namespace)
    names = store.entity_names(namespace)
    grouped: dict[int, set[tuple[str, float]]] = {}
    for chunk, entity, score in zip(links.chunk_rowids.tolist(), links.entity_ids.tolist(),
                                    links.scores.tolist(), strict=True):
        grouped.setdefault(chunk, set()).add((names[entity][0], round(score, 5)))
    return {chunk: frozenset(pairs) for chunk, pairs in grouped.items()}
