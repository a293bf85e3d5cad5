"""The per-query working state of cohort search: the pool the lanes fill, the query's seeds
and entities they start from, and the bounded, per-query cached graph reads they share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from docgraph.model import ScoredRow, ScoreName, SearchHit, StoredChunk, Vector
from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.trace import RetrievalTrace
from docgraph.store.base import ChunkIndex, ChunkPlace, StoreCatalog
from docgraph.store.graph import CappedEntity, EntityInfo, GraphStore, Link

# Links read per entity at most (bounds the cost of frequent entities). Not a setting: it
# bounds the work of one read, not what is found (an entity's strongest links come first).
_ENTITY_SCAN = 256


@dataclass
class Candidate:
    """A pool member."""

    rowid: int
    lane: str  # the highest-priority lane that brought it (its provenance)
    lanes: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Hop:
    """A chunk of another document that introduces an entity of an anchored seed."""

    source: int  # row id of the anchored seed whose entity the chunk introduces
    source_position: int  # that seed's position among the seeds
    entity: int


@dataclass
class CohortQuery:
    """Per-query working state (never stored on the engine)."""

    text: str
    vector: Vector
    allowed: frozenset[str]
    settings: CohortSettings
    trace: RetrievalTrace
    catalog: StoreCatalog
    index: ChunkIndex
    reads: GraphStore  # its bounded lane reads (capped counts, capped chunks, links)
    total_chunks: int
    k: int
    # the seed lane's lists (the orchestrator fills them)
    dense: list[ScoredRow] = field(default_factory=list)
    lexical: list[ScoredRow] = field(default_factory=list)
    fused: list[ScoredRow] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    # what the expansion lanes start from (the orchestrator fills them)
    query_ids: list[int] = field(default_factory=list)  # entities the query names
    sources: list[int] = field(default_factory=list)  # the strongest seeds
    seed_entities: list[int] = field(default_factory=list)  # their non-hub entities
    # what lanes leave for the ranking
    hops: dict[int, Hop] = field(default_factory=dict)
    walked: dict[int, float] = field(default_factory=dict)  # the PPR walk, in walk order
    paths: dict[int, list[str]] = field(default_factory=dict)  # graph lane: entity paths
    pool: dict[int, Candidate] = field(default_factory=dict)
    links: dict[int, list[Link]] = field(default_factory=dict)  # chunk -> links cache
    places: dict[int, ChunkPlace | None] = field(default_factory=dict)  # chunk -> where
    # entity -> key, namespace and capped count (None: no such entity)
    entity_places: dict[int, CappedEntity | None] = field(default_factory=dict)
    stored: dict[int, StoredChunk] = field(default_factory=dict)  # chunks read, by row id
    counts: dict[int, int] = field(default_factory=dict)  # entity -> capped chunk count
    # (entity, per entity) -> its strongest links among its first _ENTITY_SCAN
    strongest: dict[tuple[int, int], list[tuple[int, int, float, int]]] = field(
        default_factory=dict)

    @property
    def hub_limit(self) -> int:
        return int(max(self.settings.entity_max_df * self.total_chunks, 3))

    @property
    def start_entities(self) -> list[int]:
        """Where the graph and cluster lanes start: the query's entities, else the seeds'."""
        return self.query_ids or self.seed_entities

    def non_hub(self, entity_ids: Iterable[int]) -> list[int]:
        """The entities mentioned by at most ``hub_limit`` chunks (counted once per query,
        with each one's key and namespace: what the hops and the PPR lane ask next)."""
        wanted = list(dict.fromkeys(entity_ids))
        self._entities(wanted)
        return [e for e in wanted if self.counts.get(e, 0) <= self.hub_limit]

    def starting_entities(self, keys: list[str], namespace_ids: list[int],
                          ids: Iterable[int]) -> list[EntityInfo]:
        """The entities of the namespaces with one of ``keys`` (those the query names),
        read in one statement with the entities of ``ids`` (those the strongest seeds
        link to), each with its count, key and namespace kept for :meth:`non_hub` (an id
        with no entity is remembered as none)."""
        wanted = [e for e in dict.fromkeys(int(e) for e in ids) if e not in self.entity_places]
        read = self.reads.entities_in(keys, namespace_ids, self.hub_limit, wanted)
        for info, known in read:
            self.counts.setdefault(info.id, known.mentions)
            self.entity_places.setdefault(info.id, known)
        for e in wanted:
            self.entity_places.setdefault(e, None)
            self.counts.setdefault(e, 0)
        named, allowed = set(keys), set(namespace_ids)
        return [info for info, known in read
                if info.key in named and known.namespace_id in allowed]

    def capped_chunks(self, entity_ids: Iterable[int], per_entity: int
                      ) -> list[tuple[int, int, float, int]]:
        """``reads.capped_chunks`` within the scan bound, each entity read once per query
        (the entity lane, the hops and the PPR lane ask for many of the same)."""
        wanted = list(dict.fromkeys(int(e) for e in entity_ids))
        missing = [e for e in wanted if (e, per_entity) not in self.strongest]
        if missing:
            for e in missing:
                self.strongest[(e, per_entity)] = []
            for row in self.reads.capped_chunks(missing, per_entity, _ENTITY_SCAN):
                self.strongest[(row[0], per_entity)].append(row)
        return [row for e in wanted for row in self.strongest[(e, per_entity)]]

    def read_capped_chunks(self, entity_ids: list[int], per_entity: int
                           ) -> list[tuple[int, int, float, int]]:
        """``reads.capped_chunks`` within the scan bound, uncached (the graph and cluster
        lanes and completeness, which read each entity once anyway)."""
        return self.reads.capped_chunks(entity_ids, per_entity, _ENTITY_SCAN)

    def links_of(self, rowids: Iterable[int]) -> dict[int, list[Link]]:
        """Each chunk's links, read once per query. The first read takes every seed with
        it: the lanes ask for the strongest seeds', the PPR lane and completeness for more,
        and the ranking for the whole pool's (its coverage), every seed included."""
        missing = [r for r in dict.fromkeys(int(r) for r in rowids) if r not in self.links]
        if missing:
            asked = set(missing)
            self.links.update(self.reads.chunk_links(
                [*missing, *(r for r in self.seeds if r not in self.links and r not in asked)]))
        return self.links

    def chunk_places(self, rowids: Iterable[int]) -> dict[int, ChunkPlace]:
        """Where each chunk lives (absent: no such chunk), read once per query; the first
        read takes every seed with it (the hops ask for the strongest seeds' documents and
        often for other seeds', the PPR lane for the seeds' namespaces). Chunks of the pool
        (the seeds among them) are read with their text (:attr:`stored`: the ranking reads
        it next, so it costs no second read); the others, candidates most of which are
        never admitted, without it."""
        wanted = list(dict.fromkeys(int(r) for r in rowids))
        missing = [r for r in wanted if r not in self.places]
        if missing:
            if not self.places:
                missing = list(dict.fromkeys([*missing, *self.seeds]))
            ranked = [r for r in missing if r in self.pool]
            rest = [r for r in missing if r not in self.pool]
            places: dict[int, ChunkPlace] = {}
            if ranked:
                for r, (chunk, where) in self.catalog.placed_chunks(ranked).items():
                    places[r] = where
                    self.stored.setdefault(r, chunk)
            if rest:
                places.update(self.catalog.chunk_places(rest))
            for r in missing:
                self.places[r] = places.get(r)  # None: no such chunk (not read again)
        return {r: place for r in wanted if (place := self.places[r]) is not None}

    def stored_chunks(self, rowids: Iterable[int]) -> dict[int, StoredChunk]:
        """The chunks of ``rowids`` (absent: no such chunk), each read once per query
        (those :meth:`chunk_places` read come with it)."""
        wanted = list(dict.fromkeys(int(r) for r in rowids))
        missing = [r for r in wanted if r not in self.stored]
        if missing:
            self.stored.update(self.catalog.chunks_by_rowid(missing))
        return self.stored

    def entity_keys(self, entity_ids: Iterable[int]) -> dict[int, str]:
        """Canonical key of each entity (absent: no such entity), read once per query with
        its count (:meth:`non_hub`)."""
        wanted = self._entities(entity_ids)
        return {e: known.key for e in wanted if (known := self.entity_places[e]) is not None}

    def entities_within(self, entity_ids: Iterable[int], namespace_ids: Iterable[int]
                        ) -> set[int]:
        """The given entities of one of the namespaces, in id order (read once per query
        with their counts, :meth:`non_hub`)."""
        allowed = set(namespace_ids)
        wanted = self._entities(entity_ids)
        return {e for e in sorted(wanted) if (known := self.entity_places[e]) is not None
                and known.namespace_id in allowed}

    def chunks_within(self, rowids: Iterable[int], namespace_ids: Iterable[int]) -> set[int]:
        """The given chunks that are text chunks of one of the namespaces, in id order."""
        allowed = set(namespace_ids)
        places = self.chunk_places(rowids)
        return {r for r in sorted(places)
                if places[r].namespace_id in allowed and places[r].kind == "text"}

    def _entities(self, entity_ids: Iterable[int]) -> list[int]:
        """The ids, each entity's count, key and namespace read (once per query)."""
        wanted = list(dict.fromkeys(int(e) for e in entity_ids))
        missing = [e for e in wanted if e not in self.entity_places]
        if missing:
            read = self.reads.capped_entities(missing, self.hub_limit)
            for e in missing:
                known = read.get(e)
                self.entity_places[e] = known
                self.counts.setdefault(e, known.mentions if known is not None else 0)
        return wanted

    def documents_mentioning(self, entities: Iterable[EntityInfo]
                             ) -> dict[str, set[tuple[str, str]]]:
        """Per entity name, the (namespace, document) of the chunks of the query's
        namespaces read in this query (:attr:`stored`) whose links (as :meth:`links_of`
        read them) name one of the entities so named; a name with none read maps to an
        empty set."""
        named = list(entities)
        ids = {e.id for e in named}
        docs_of: dict[int, set[tuple[str, str]]] = {}
        if ids:
            for rowid, chunk in self.stored.items():
                if chunk.namespace not in self.allowed:
                    continue
                for entity_id, _, _ in self.links.get(rowid, ()):
                    if entity_id in ids:
                        docs_of.setdefault(entity_id, set()).add(
                            (chunk.namespace, chunk.doc_id))
        out: dict[str, set[tuple[str, str]]] = {}
        for entity in named:
            out.setdefault(entity.name, set()).update(docs_of.get(entity.id, ()))
        return out

    def gated(self, rows: list[int], floor: float, budget: int) -> list[int]:
        """New row ids (not in the pool) with similarity >= floor, most similar first."""
        fresh = [r for r in dict.fromkeys(rows) if r not in self.pool]
        if not fresh or budget <= 0:
            return []
        vectors = self.index.vectors(fresh)
        scored = sorted(
            ((float(vectors[r] @ self.vector), r) for r in fresh if r in vectors),
            key=lambda x: (-x[0], x[1]),
        )
        return [r for sim, r in scored if sim >= floor][:budget]

    def admit(self, rowid: int, lane: str, reason: str) -> None:
        """Add ``rowid`` to the pool as brought by ``lane`` (its provenance stays the
        highest-priority lane that brought it)."""
        candidate = self.pool.get(rowid)
        if candidate is None:
            self.pool[rowid] = Candidate(rowid, lane, {lane}, [reason])
            return
        candidate.lanes.add(lane)
        candidate.reasons.append(reason)
        if self.settings.priority(lane) > self.settings.priority(candidate.lane):
            candidate.lane = lane


def chunk_hit(chunk: StoredChunk, score: float, rank: int, similarity: float | None,
              lexical: float | None, lanes: tuple[str, ...], label: ScoreName) -> SearchHit:
    """A stored chunk as a search hit."""
    return SearchHit(
        chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, chunk_index=chunk.index,
        namespace=chunk.namespace, text=chunk.text, title=chunk.title,
        source_path=chunk.source_path, section_path=chunk.section_path, score=score,
        score_label=label, original_rank=rank, dense_similarity=similarity,
        lexical_score=lexical, lanes=lanes, rowid=chunk.rowid, origin=chunk.origin,
        pages=chunk.pages, ocr=chunk.ocr,
    )
