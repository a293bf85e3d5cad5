"""The graph storage port: entities, chunk-entity links, co-occurrence edges, communities and
community reports of each namespace, and the graph reads retrieval makes.

:class:`GraphStore` is what ingest, graph build, retrieval and governance depend on; it is
implemented once in shared SQL (:class:`docgraph.store.sql.graph.SqlGraphStore`) on every
relational catalog (embedded SQLite and PostgreSQL). The data classes here are the values
crossing the port.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from docgraph.model import EntityLink, RowOrigin, Vector
from docgraph.store.base import StoreCatalog

#: (entity id, association score, first position) of one chunk-entity link.
Link = tuple[int, float, int]


@dataclass(frozen=True, slots=True)
class CappedEntity:
    """An entity's key and namespace (id), and the chunks mentioning it counted up to a cap
    + 1 (a bounded read: a frequent entity is counted no further)."""

    key: str
    namespace_id: int
    mentions: int


@dataclass(frozen=True, slots=True)
class EntityInfo:
    """An entity of one namespace and how many chunks mention it."""

    id: int
    key: str
    name: str
    type: str
    namespace: str
    chunk_count: int


@dataclass(frozen=True, slots=True)
class Neighbor:
    """An entity linked to another by co-occurrence: NPMI weight and supporting chunks."""

    entity: EntityInfo
    weight: float
    chunks: int


@dataclass(frozen=True, slots=True)
class CommunityInfo:
    """A community of entities with its report."""

    id: int
    namespace: str
    level: int
    ordinal: int
    parent_id: int | None
    size: int
    title: str
    report_doc_id: str | None
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NamespaceLinks:
    """All chunk-entity links of a namespace as parallel arrays (text chunks only), and the
    table row (or permission set) behind each linked chunk of a row document (of a document
    with one), read in the same snapshot."""

    chunk_rowids: npt.NDArray[np.int64]
    entity_ids: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float32]
    row_chunks: dict[int, tuple[str, RowOrigin]] = field(default_factory=dict)
    #: The permission set behind each linked chunk of a document that has one.
    access_chunks: dict[int, tuple[str, frozenset[str]]] = field(default_factory=dict)
    #: Row ids of the namespace's text chunks in identity order (document id, chunk index):
    #: ties broken by this order do not depend on when a chunk was written.
    identity_order: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class EdgeTable:
    """Undirected edges as parallel arrays, ``source < target`` by entity id."""

    source: npt.NDArray[np.int64]
    target: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float64]
    chunks: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.source)


@dataclass(frozen=True, slots=True)
class CommunityRow:
    """A community to store: members with centrality; ``parent`` indexes the same list."""

    level: int
    ordinal: int
    parent: int | None
    title: str
    members: Sequence[tuple[int, float]]
    report_text: str | None
    report_vector: Vector | None
    #: Every row document (doc id, origin) whose chunks link a member: all the table rows
    #: the title and report may draw on (names, relationships, passages).
    row_sources: Sequence[tuple[str, RowOrigin]] = ()
    #: Every document with a permission set (doc id, set) whose chunks link a member.
    access_sources: Sequence[tuple[str, frozenset[str]]] = ()
    #: What the report chunk's ``embed_hash`` records (None: the hash of its text, i.e. the
    #: vector embeds that text; a mean of member vectors records another key, so switching
    #: back to embedded reports never reuses a mean vector as an embedding).
    report_hash: str | None = None


class GraphStore(Protocol):
    """Graph persistence and graph queries of one catalog (every read namespace-scoped by
    its caller: entity and chunk ids come from namespace-filtered reads)."""

    @property
    def catalog(self) -> StoreCatalog:
        """The catalog the graph lives in (chunk texts, origins, namespaces)."""
        ...

    # -- build state ---------------------------------------------------------------

    def dirty_namespaces(self) -> list[str]:
        """Namespaces whose documents changed since their graph was last built."""
        ...

    def vocabulary_hash(self, namespace: str) -> str:
        """Fingerprint of the vocabulary the namespace's links were extracted with."""
        ...

    def namespace_id(self, namespace: str) -> int | None:
        """Internal id of a namespace, or None if unknown."""
        ...

    # -- links and graph replace ---------------------------------------------------

    def links(self, namespace: str) -> NamespaceLinks:
        """Every chunk-entity link of the namespace's text chunks and the row origins of
        its linked row-document chunks, from one read snapshot."""
        ...

    def chunk_texts(self, namespace: str) -> list[tuple[int, str]]:
        """(row id, text) of every text chunk of the namespace, for re-extraction."""
        ...

    def replace_links(
        self, namespace: str, links: Sequence[tuple[int, Sequence[EntityLink]]], vocab_hash: str
    ) -> None:
        """Replace the entity links of the given chunks and record the vocabulary
        fingerprint they were extracted with (one transaction)."""
        ...

    def entity_names(self, namespace: str) -> dict[int, tuple[str, str, str]]:
        """(key, name, type) of every entity of the namespace by id."""
        ...

    def report_vectors(self, namespace: str) -> dict[str, Vector]:
        """Vectors of the namespace's current community reports by embedded-text hash."""
        ...

    def chunk_vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Stored unit vectors of the given chunks (absent: deleted)."""
        ...

    def replace_graph(self, namespace: str, edges: EdgeTable,
                      communities: Sequence[CommunityRow], vocab_hash: str) -> None:
        """Replace the namespace's orphan entities, edges, communities and reports at once,
        and mark its graph clean."""
        ...

    # -- queries -------------------------------------------------------------------

    def entities_by_id(self, ids: Iterable[int]) -> dict[int, EntityInfo]:
        """Entities (with chunk counts) by internal id."""
        ...

    def find_entities(self, namespaces: Iterable[str], query: str | None = None,
                      entity_type: str | None = None, limit: int = 50) -> list[EntityInfo]:
        """Entities of ``namespaces`` (most mentioned first), optionally filtered by a
        case-insensitive substring of the name/key and by type."""
        ...

    def entities_by_key(self, keys: Iterable[str], namespaces: Iterable[str]
                        ) -> list[EntityInfo]:
        """Entities whose canonical key is one of ``keys``, in any of ``namespaces``."""
        ...

    def neighbors(self, entity_ids: Iterable[int], limit: int = 20) -> list[Neighbor]:
        """Entities linked to any of ``entity_ids``, strongest first."""
        ...

    def chunks_for_entities(self, entity_ids: Iterable[int], per_entity: int = 20
                            ) -> list[tuple[int, int, float, int]]:
        """(entity id, chunk row id, score, first position) of text chunks mentioning each
        entity, strongest first, ``per_entity`` at most each."""
        ...

    def entities_of_chunks(self, rowids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
        """Entity ids (with association score) linked to each chunk, strongest first."""
        ...

    def entity_chunk_counts(self, entity_ids: Iterable[int]) -> dict[int, int]:
        """How many chunks mention each entity."""
        ...

    def namespace_chunk_count(self, namespaces: Iterable[str]) -> int:
        """Text chunks in the namespaces."""
        ...

    def community_peers(self, entity_ids: Iterable[int], limit: int = 50) -> list[int]:
        """Entities sharing the finest community of any given entity, most central first."""
        ...

    def edge_support(self, source: int, target: int, limit: int = 10) -> list[int]:
        """Row ids of chunks where both entities occur."""
        ...

    def communities(self, namespaces: Iterable[str], level: int | None = None,
                    limit: int = 100) -> list[CommunityInfo]:
        """Communities of ``namespaces`` (largest first), with their top members' names."""
        ...

    def community_by_report(self, report_doc_id: str) -> tuple[int, list[int]] | None:
        """(community id, member entity ids) of the community a report describes."""
        ...

    def community_members(self, community_id: int) -> list[int]:
        """Member entity ids of a community, most central first."""
        ...

    def report_row_sources(self, community_id: int) -> dict[str, RowOrigin]:
        """Every table row (doc id -> origin) the community's title and report drew on."""
        ...

    def report_access_sources(self, community_id: int) -> dict[str, frozenset[str]]:
        """Every document with a permission set (doc id -> the set) the community's title
        and report may draw on: recorded when the graph was built and kept current when a
        document's set changes (complete, never sampled)."""
        ...

    def community_signature(self, namespace: str) -> list[tuple[int, int, tuple[str, ...]]]:
        """(level, ordinal, sorted member keys) of every community: id-independent."""
        ...

    def edge_signature(self, namespace: str) -> list[tuple[str, str, float, int]]:
        """(key a, key b, weight, chunks) of every edge, by key: id-independent."""
        ...

    # -- bounded lane reads (cohort search) ----------------------------------------

    def capped_entities(self, entity_ids: Iterable[int], cap: int) -> dict[int, CappedEntity]:
        """Each entity's key, namespace and mentions counted up to ``cap + 1`` (absent: no
        such entity)."""
        ...

    def chunk_links(self, rowids: Iterable[int]) -> dict[int, list[Link]]:
        """Each chunk's links (every given chunk present), strongest first."""
        ...

    def capped_chunks(self, entity_ids: Iterable[int], per_entity: int, scan: int
                      ) -> list[tuple[int, int, float, int]]:
        """(entity, chunk row id, score, first position): each entity's ``per_entity``
        strongest links among its first ``scan`` (by chunk row id)."""
        ...


    def entities_in(self, keys: Sequence[str], namespace_ids: Sequence[int], cap: int,
                    ids: Sequence[int] = ()) -> list[tuple[EntityInfo, CappedEntity]]:
        """Entities with one of ``keys`` in the given namespaces, and those of ``ids`` (any
        namespace), each once with its :meth:`capped_entities` answer (``chunk_count`` is
        that capped count): the entities a cohort query starts from, in one read."""
        ...

    def structural_neighbours(self, rowids: Sequence[int]) -> list[tuple[int, int, str]]:
        """(chunk, neighbour, relation) for the previous, next and parent chunk of each
        chunk (relation ``prev``, ``next`` or ``parent``), within the chunk's document."""
        ...
