"""The governed listings: entities and their mentions, neighbours, communities, documents and
index status, each seen through one request's :class:`Visibility`.

An entity, neighbour or community is listed only when a chunk the caller may see mentions
it (counts stay those of the whole namespace: structure is computed over everything, text is
shown only from what the caller may see). Community reports are derived from the graph and
never listed as documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypeVar

from docgraph.governance.ports import GovernedIndex
from docgraph.governance.reports import visible_communities
from docgraph.governance.visibility import Visibility, visible_mentions
from docgraph.graph.normalize import canonical_key
from docgraph.model import DocumentRecord, NamespaceStatus, SourceRecord, StoredChunk
from docgraph.retrieve.query_entities import find_query_entities
from docgraph.store.base import FailureRecord, NamespaceStats, ReplicaStatus
from docgraph.store.graph import CommunityInfo, EntityInfo, GraphStore, Neighbor

#: A namespace's counts: its build status or its stats.
C = TypeVar("C", NamespaceStatus, NamespaceStats)

#: What a phase message says in place of a failure the caller may not be told of.
UNTOLD = "(a file you may not read)"

#: Document ids of community reports (derived from the graph, not source documents).
REPORT_PREFIX = "community://"


@dataclass(frozen=True)
class EntityMentions:
    """An entity and up to ``per_entity`` visible chunks that mention it."""

    entity: EntityInfo
    chunks: list[StoredChunk]


@dataclass(frozen=True)
class DocumentPage:
    """One page of documents in reach; ``next_after`` is the cursor position of the next
    page (None on the last)."""

    documents: list[DocumentRecord]
    next_after: int | None


@dataclass(frozen=True)
class StatusView:
    """The index status of the caller's namespaces only, and who refreshes the index.

    ``refresh_leader`` is the ``pid@host`` of the process that builds the index (None when
    none does); ``this_process_leads`` says whether that is the process answering, and
    ``refresher_running`` whether it runs the background refresh loop (a follower's loop
    takes over when the leader stops). Which process leads carries no namespace data, so
    every caller sees it; builds, counts and failures are only the caller's namespaces'."""

    embedding_model: tuple[str, int] | None
    refresh_interval_seconds: float
    builds: list[NamespaceStatus]
    stats: dict[str, NamespaceStats]
    failures: list[FailureRecord] = field(default_factory=list)
    sources: list[SourceRecord] = field(default_factory=list)
    refresh_leader: str | None = None
    this_process_leads: bool = False
    refresher_running: bool = False
    #: Each read replica's lag (``[store] read_urls``): like the leader, no namespace data.
    replicas: list[ReplicaStatus] = field(default_factory=list)
    #: Per namespace, the paths and reasons of the failures the caller may not be told of:
    #: never shown, only taken out of the messages :meth:`told` is given.
    untold: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)

    def told(self, namespace: str, message: str) -> str:
        """``message`` (a build phase's in ``namespace``, which may quote its first
        failure) with what the caller may not be told of replaced by :data:`UNTOLD`."""
        return _untold(message, self.untold.get(namespace, ()))


def mentions(graph: GraphStore, scope: Visibility, entities: list[EntityInfo],
             per_entity: int) -> dict[int, list[StoredChunk]]:
    """Per entity, up to ``per_entity`` visible chunks mentioning it (strongest first)."""
    return visible_mentions(graph, scope, [e.id for e in entities], per_entity)


def entities(root: GovernedIndex, scope: Visibility, query: str | None,
             entity_type: str | None, limit: int) -> list[EntityInfo]:
    """Entities whose name contains ``query`` with at least one visible mention."""
    graph = root.query_graph_store
    found = graph.find_entities(scope.namespaces, query, entity_type, limit * 2)
    seen = mentions(graph, scope, found, 1)
    return [e for e in found if e.id in seen][:limit]


def entity_mentions(root: GovernedIndex, scope: Visibility, query: str, k: int,
                    per_entity: int) -> list[EntityMentions]:
    """Entities whose name contains ``query`` and, if fewer than ``k``, those ``query``
    names (a sentence, not a name), each with its visible mentions."""
    graph = root.query_graph_store
    found = graph.find_entities(scope.namespaces, query, None, k * 2)
    if len(found) < k:
        named, _ = find_query_entities(query, root.extractor, graph, scope.namespaces)
        known = {e.id for e in found}
        found += [e for e in named if e.id not in known][:k * 2]
    seen = mentions(graph, scope, found, per_entity)
    return [EntityMentions(e, seen[e.id]) for e in found if seen.get(e.id)][:k]


def neighbors(root: GovernedIndex, scope: Visibility, entity: str,
              limit: int) -> list[Neighbor]:
    """Visible entities co-occurring with ``entity`` (a name or key), strongest first; an
    entity the caller sees no mention of has no visible neighbours."""
    keys = {canonical_key(entity), canonical_key(entity, "code"), entity.casefold()}
    graph = root.query_graph_store
    start = graph.entities_by_key(keys, scope.namespaces)
    start = [e for e in start if e.id in mentions(graph, scope, start, 1)]
    found = graph.neighbors([e.id for e in start], limit * 2)
    seen = mentions(graph, scope, [n.entity for n in found], 1)
    return [n for n in found if n.entity.id in seen][:limit]


def communities(root: GovernedIndex, scope: Visibility, level: int | None,
                limit: int) -> list[CommunityInfo]:
    """Communities of the caller's namespaces with titles and members it may see."""
    found = root.query_graph_store.communities(scope.namespaces, level, limit)
    return visible_communities(found, scope, root.query_graph_store)


def documents(root: GovernedIndex, scope: Visibility, after_id: int, limit: int,
              max_rounds: int = 8) -> DocumentPage:
    """One page of visible source documents after ``after_id``, refilled (boundedly) when
    the row re-check thins it."""
    out: list[DocumentRecord] = []
    after, next_after = after_id, None
    for _ in range(max_rounds):
        want = limit - len(out)
        window = root.query_store.list_documents(scope.namespaces, after, want)
        out += [d for d in scope.visible(window) if not d.doc_id.startswith(REPORT_PREFIX)]
        if len(window) < want:
            next_after = None
            break
        after = next_after = window[-1].id
        if len(out) >= limit:
            break
    return DocumentPage(out, next_after)


def status(root: GovernedIndex, scope: Visibility) -> StatusView:
    """Builds, counts, sources and failed files of the caller's namespaces; the leader.
    Document and chunk counts leave out the documents the caller may not read (their
    permission sets; a table row's re-check is not run for a count); pending chunks are
    those of open documents only (what an agent may be told), except for the index file's
    owner (a local command without ``[governance]``), who is told of every document's.
    A failed file is listed, and counted, only for callers its permission set lets in (its
    name and the extractor's message are its text); one recorded before failures carried
    their set counts as the owner's only.

    Every figure is read from the primary catalog in one snapshot: totals and what is
    subtracted from them from two servers (a replica behind the primary) or two moments
    (a build between the statements) would tell a caller of documents it may not read."""
    allowed = scope.namespaces
    with root.store.snapshot():
        info = root.status(open_pending=not scope.every_document)
        restricted = root.store.restricted_counts(allowed)
    unreadable: dict[str, tuple[int, int]] = {}
    for namespace, access, documents, chunks in restricted:
        if not scope.may_read(access):
            before = unreadable.get(namespace, (0, 0))
            unreadable[namespace] = (before[0] + documents, before[1] + chunks)
    told: list[FailureRecord] = []
    hidden: dict[str, list[FailureRecord]] = {}  # by namespace
    for failure in info.failures:
        if failure.namespace not in allowed:
            continue
        if scope.may_read(failure.access):
            told.append(failure)
        else:
            hidden.setdefault(failure.namespace, []).append(failure)
    return StatusView(
        embedding_model=info.embedding_model,
        refresh_interval_seconds=root.settings.refresh.interval_seconds,
        builds=[_build_told(b, unreadable, hidden) for b in info.builds
                if b.namespace in allowed],
        stats={s.namespace: _stats_told(s, unreadable, hidden)
               for s in info.namespaces if s.namespace in allowed},
        failures=told,
        sources=[s for s in info.sources if s.namespace in allowed],
        refresh_leader=info.refresh_leader,
        this_process_leads=info.this_process_leads,
        refresher_running=info.refresher_running,
        replicas=list(info.replicas),
        untold={namespace: _texts(failures) for namespace, failures in hidden.items()},
    )


def _less(counts: C, unreadable: dict[str, tuple[int, int]]) -> C:
    """``counts`` (a namespace's build status or stats) without the documents and chunks
    the caller may not read."""
    documents, chunks = unreadable.get(counts.namespace, (0, 0))
    if not documents:
        return counts
    return replace(counts, documents=max(0, counts.documents - documents),
                   chunks=max(0, counts.chunks - chunks))


def _build_told(build: NamespaceStatus, unreadable: dict[str, tuple[int, int]],
                hidden: dict[str, list[FailureRecord]]) -> NamespaceStatus:
    """A build's status without what the caller may not read nor be told of: the counts,
    and the hidden failures' reasons and paths in its phases' messages (a phase quotes its
    first failure)."""
    build = _less(build, unreadable)
    mine = hidden.get(build.namespace, [])
    if not mine:
        return build
    texts = _texts(mine)
    errors = [replace(e, message=_untold(e.message, texts)) for e in build.errors]
    return replace(build, failed_documents=max(0, build.failed_documents - len(mine)),
                   errors=errors)


def _texts(hidden: list[FailureRecord]) -> tuple[str, ...]:
    """What hidden failures say of their files: each one's reason, then its path."""
    return tuple(text for f in hidden for text in (f.reason, f.path) if text)


def _untold(message: str, texts: tuple[str, ...]) -> str:
    """``message`` with each of ``texts`` (:func:`_texts`) replaced by :data:`UNTOLD`."""
    for text in texts:
        message = message.replace(text, UNTOLD)
    return message


def _stats_told(stats: NamespaceStats, unreadable: dict[str, tuple[int, int]],
                hidden: dict[str, list[FailureRecord]]) -> NamespaceStats:
    """A namespace's stats without what the caller may not read nor be told of."""
    stats = _less(stats, unreadable)
    failed = len(hidden.get(stats.namespace, []))
    return replace(stats, failures=max(0, stats.failures - failed)) if failed else stats
