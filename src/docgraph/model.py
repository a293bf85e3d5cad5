"""Plain data types shared by every layer (no behaviour beyond small derived properties),
and the scheme of a source URN, which every layer reads as the source type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
#: What a hit's ``score`` is (its ``score_label``): ``rrf`` the reciprocal-rank-fusion score
#: of the dense and BM25 lists (hybrid search; community reports in global mode),
#: ``composite`` the cohort engine's selection score (relevance, lane priority, coverage,
#: redundancy), ``dense`` the L2 distance to the query (lower is better).
ScoreName = Literal["rrf", "composite", "dense"]
#: The candidate lists of hybrid search and of the cohort's seed lane, as every surface
#: names them (a seed chunk is shown by the lists that held it, e.g. ``dense+bm25``).
LIST_LANES = ("dense", "bm25")
ChunkKind = Literal["text", "community_report"]
CHUNK_KINDS: tuple[ChunkKind, ...] = ("text", "community_report")


def urn_scheme(urn: str) -> str:
    """The URI scheme of a (normalized) source URN, which is also the source type."""
    return urlsplit(urn).scheme


class BlockKind(StrEnum):
    """The structural kind of an extracted block; chunk boundaries fall between blocks."""

    HEADING = "heading"
    PARAGRAPH = "paragraph"
    LIST_ITEM = "list_item"
    TABLE_ROW = "table_row"
    CODE = "code"


@dataclass(frozen=True, slots=True)
class Block:
    """One structural unit of an extracted document.

    ``level`` is the heading level (1-6) for headings and 0 otherwise. ``page`` is the
    1-based page (PDF page, slide number) the block was read from, where the format has
    pages; ``ocr`` says its text was recognised from an image rather than read from a text
    layer.
    """

    kind: BlockKind
    text: str
    level: int = 0
    page: int | None = None
    ocr: bool = False


@dataclass(frozen=True, slots=True)
class ExtractedDocument:
    """The text of one file as an ordered list of blocks, with its title.

    ``metadata`` holds what the format says about the document besides its text (an
    e-mail's from, to, date, subject and message id; a PDF's author; a Markdown file's front
    matter), as plain strings.
    ``attachments`` are documents of their own carried inside this one (a mail's
    attachments): the pipeline indexes each as ``<this path>/<name>``.
    """

    title: str
    blocks: tuple[Block, ...]
    media_type: str
    metadata: dict[str, str] = field(default_factory=dict)
    attachments: tuple[AttachedDocument, ...] = ()


@dataclass(frozen=True, slots=True)
class AttachedDocument:
    """A document carried inside another file (a mail's attachment): its ``name`` below the
    carrying file (``<file>/<name>``; one path segment, or more for an attachment of an
    attached message), the SHA-256 of its bytes and its extracted text."""

    name: str
    content_hash: str
    document: ExtractedDocument


@dataclass(frozen=True, slots=True)
class ChunkDraft:
    """A chunk as produced by the chunker, before it is embedded or stored.

    ``prev_index``/``next_index``/``parent_index`` point at other chunks of the same
    document by chunk index; ``parent_index`` is the first chunk of the enclosing section.
    ``pages`` is the first and last page of the blocks the chunk holds (None when the
    format has no pages); ``ocr`` says any of them was recognised from an image.
    """

    index: int
    text: str
    section_path: tuple[str, ...]
    token_count: int
    prev_index: int | None
    next_index: int | None
    parent_index: int | None
    pages: tuple[int, int] | None = None
    ocr: bool = False

    def breadcrumb(self, document_title: str) -> str:
        """``[document > section > subsection]``, the context prepended to embedded text."""
        parts = [document_title, *self.section_path]
        # The first heading often repeats the document title: say it once.
        if len(parts) > 1 and parts[1].strip().casefold() == parts[0].strip().casefold():
            parts.pop(1)
        return "[" + " > ".join(p for p in parts if p) + "]"


@dataclass(frozen=True, slots=True)
class EntityLink:
    """An entity as it occurs in one chunk.

    ``score`` is the association of the entity with the chunk in (0, 1]: its share of the
    chunk's entity mentions, boosted when it appears early (first fifth of the text).
    """

    key: str
    name: str
    type: str
    frequency: int
    first_position: int
    score: float


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """A registered document folder: normalized URN in one namespace.

    ``display_name`` is how agents and users see the folder (unique per namespace; empty
    for a source registered before names existed, see
    :func:`docgraph.sources.naming.display_names`); ``public_url`` is the address a
    person opens the folder's files under (intranet, S3 console), or None.
    """

    id: int
    urn: str
    namespace: str
    scheme: str
    display_name: str = ""
    public_url: str | None = None


#: Who may read a document besides its namespace's grantees: None, everyone the namespace
#: is granted to; else the principals (``user:<id>``, ``group:<name>``) one of which a
#: caller must be (an empty set: nobody).
Access = frozenset[str] | None

#: How a user and a group are written wherever a principal is named (policy grants,
#: document permissions, source tags, sidecars and tables): ``user:<id>``, ``group:<name>``.
USER_PREFIX = "user:"
GROUP_PREFIX = "group:"
#: Longest principal accepted (an identity provider's ids are far shorter).
MAX_PRINCIPAL_CHARS = 256


def parse_principals(values: object) -> frozenset[str]:
    """The principals a permission source names: a list of ``user:<id>`` / ``group:<name>``
    strings (or one such string). Raises :class:`ValueError` naming the first value that is
    not one, so the caller can say which source and document it came from."""
    items = [values] if isinstance(values, str) else values
    if not isinstance(items, list | tuple | set | frozenset):
        raise ValueError(f"expected a list of user:<id> and group:<name>, got {values!r}")
    out: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{item!r} is not user:<id> or group:<name>")
        text = item.strip()
        name = (text[len(USER_PREFIX):] if text.startswith(USER_PREFIX) else
                text[len(GROUP_PREFIX):] if text.startswith(GROUP_PREFIX) else "")
        if not name.strip() or len(text) > MAX_PRINCIPAL_CHARS or not text.isprintable():
            raise ValueError(f"{item[:80]!r} is not user:<id> or group:<name>")
        out.add(text)
    return frozenset(out)


def access_allows(access: Access, principals: frozenset[str]) -> bool:
    """Whether a caller with ``principals`` may read a document with ``access``."""
    return access is None or not access.isdisjoint(principals)


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """A document as the catalog knows it.

    ``doc_id`` is the stable document identity: normalized source URN + relative path.
    ``metadata`` is what the format said about the document (see
    :class:`ExtractedDocument`). ``parent`` is, for a document carried inside a file (a
    mail's attachment, path ``<parent>/<name>``), the path of that file's document: it is
    written, refreshed and deleted with its parent, never on its own.
    """

    id: int
    doc_id: str
    source_id: int
    namespace: str
    path: str
    title: str
    content_hash: str
    change_token: str
    media_type: str
    chunk_count: int
    updated_at: float
    metadata: Mapping[str, str] = field(default_factory=dict)
    parent: str | None = None
    #: Who may read it besides the namespace's grantees (:data:`Access`).
    access: Access = None
    #: The language its BM25 terms were counted in (ISO 639-1); None: written before
    #: docgraph knew languages, so English.
    language: str | None = None


@dataclass(frozen=True, slots=True)
class RowOrigin:
    """Where a row document came from: the registered table source, schema, table, primary
    key column and value. Chunks of free-standing documents have no origin."""

    source: str
    schema: str
    table: str
    pk_column: str
    pk_value: str


@dataclass(frozen=True, slots=True)
class DocGate:
    """What decides, beyond its namespace, who may read a document: the table row it came
    from (re-checked in its source database) and its permission set."""

    origin: RowOrigin | None = None
    access: Access = None


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk as stored in the catalog (without its vector); ``pages`` and ``ocr`` as in
    :class:`ChunkDraft`."""

    rowid: int
    chunk_id: str
    doc_id: str
    namespace: str
    index: int
    text: str
    section_path: tuple[str, ...]
    title: str
    source_path: str
    prev_index: int | None
    next_index: int | None
    parent_index: int | None
    origin: RowOrigin | None = None
    pages: tuple[int, int] | None = None
    ocr: bool = False
    #: Its document's permission set (:data:`Access`).
    access: Access = None


@dataclass(frozen=True, slots=True)
class ScoredRow:
    """A chunk row id and the score one index lane gave it (higher is better)."""

    rowid: int
    score: float


@dataclass(slots=True)
class SearchHit:
    """One ranked search result.

    ``score`` is what ``score_label`` names (:data:`ScoreName`): ``rrf`` the
    reciprocal-rank-fusion score, ``composite`` the cohort engine's ranking score (both
    higher is better, relative to the batch), ``dense`` the L2 distance between the unit
    query and chunk vectors (lower is better), the convention the evidence contract
    normalises. ``dense_similarity`` is the cosine to the query whenever the engine knows it
    (every vector_first or graph_first hit). ``original_rank`` is the 1-based order
    retrieval returned. ``pages`` (first, last) and ``ocr`` come from the stored chunk.

    ``lanes`` are the engine's own (the cohort's ``seed``, ``entity_adjacent``, ...; hybrid
    search's ``dense``/``bm25``), its first the provenance traces count; ``seed_lists`` are
    the seed lane's lists that held the hit. :attr:`shown_lanes` and :attr:`lane` name them
    as every surface shows them.
    """

    chunk_id: str
    doc_id: str
    chunk_index: int
    namespace: str
    text: str
    title: str
    source_path: str
    section_path: tuple[str, ...]
    score: float
    score_label: ScoreName
    original_rank: int
    dense_similarity: float | None = None
    lexical_score: float | None = None
    lanes: tuple[str, ...] = field(default_factory=tuple)
    rowid: int = 0
    origin: RowOrigin | None = None
    pages: tuple[int, int] | None = None
    ocr: bool = False
    seed_lists: tuple[str, ...] = ()

    @property
    def shown_lanes(self) -> tuple[str, ...]:
        """The lanes that found the hit as every surface names them (:func:`lane_names`)."""
        return lane_names(self.lanes, self.seed_lists)

    @property
    def lane(self) -> str:
        """The lane the hit is shown as (:func:`lane_of`): ``dense+bm25`` for a chunk both
        lists matched, whether hybrid search or the cohort's seed lane found it."""
        return lane_of(self.shown_lanes)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict of the hit (the CLI's ``--json`` shape)."""
        return {
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "chunk_index": self.chunk_index,
            "namespace": self.namespace,
            "title": self.title,
            "source": self.source_path,
            "section_path": list(self.section_path),
            "pages": page_list(self.pages),
            "ocr": self.ocr,
            "score": self.score,
            "score_label": self.score_label,
            "original_rank": self.original_rank,
            "dense_similarity": self.dense_similarity,
            "lexical_score": self.lexical_score,
            "lane": self.lane,
            "lanes": list(self.shown_lanes),
            "origin": None if self.origin is None else {
                "source": self.origin.source, "schema": self.origin.schema,
                "table": self.origin.table, "pk_column": self.origin.pk_column,
                "pk_value": self.origin.pk_value,
            },
            "text": self.text,
        }


def lane_names(lanes: tuple[str, ...], seed_lists: tuple[str, ...] = ()) -> tuple[str, ...]:
    """``lanes`` with the cohort's ``seed`` lane named by the lists that held the chunk
    (``seed_lists``; both when unknown), so a seed chunk reads as hybrid search shows it.

    >>> lane_names(("seed", "ppr"), ("bm25",))
    ('bm25', 'ppr')
    >>> lane_names(("entity_adjacent", "seed"))
    ('entity_adjacent', 'dense', 'bm25')
    """
    out: list[str] = []
    for name in lanes:
        out.extend((seed_lists or LIST_LANES) if name == "seed" else (name,))
    return tuple(dict.fromkeys(out))


def lane_of(names: tuple[str, ...] | list[str]) -> str:
    """The one lane a result is shown as: its leading list lanes joined by ``+``
    (``dense+bm25``, ``bm25``), else its first lane ('' when none is known).

    >>> lane_of(("dense", "bm25", "ppr")), lane_of(("ppr", "dense"))
    ('dense+bm25', 'ppr')
    """
    lists: list[str] = []
    for name in names:
        if name not in LIST_LANES:
            break
        lists.append(name)
    return "+".join(lists) if lists else (names[0] if names else "")


def page_list(pages: tuple[int, int] | None) -> list[int] | None:
    """Pages as agents see them: ``[3]`` for one page, ``[3, 4]`` for a range, None when
    unknown."""
    if pages is None:
        return None
    first, last = pages
    return [first] if first == last else [first, last]


def page_label(pages: tuple[int, int] | None) -> str:
    """Pages for people: ``p. 3``, ``pp. 3-4``, or ``""`` when unknown."""
    if pages is None:
        return ""
    first, last = pages
    return f"p. {first}" if first == last else f"pp. {first}-{last}"


#: How one phase of a build went (see :class:`PhaseOutcome`).
Outcome = Literal["ok", "partial", "error", "skipped", "running"]


@dataclass(frozen=True, slots=True)
class PhaseOutcome:
    """How one phase went for one source (``*`` for namespace-wide phases).

    ``outcome``: ``ok``; ``partial`` (some documents failed, the rest went through);
    ``error`` (the phase failed for the source; ``message`` says why); ``skipped`` (not run
    because an earlier phase failed). Recorded by the lifecycle, listed by governance."""

    source: str
    phase: str
    outcome: Outcome
    message: str = ""
    items: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class NamespaceStatus:
    """Freshness of one namespace (made by ``docgraph.lifecycle.status.index_status``,
    listed through governance).

    ``staleness_seconds`` is now minus the end of the last build that did not fail (``ok`` or
    ``partial``); None when no build ever succeeded. ``overdue`` is True when that is more
    than twice the refresh interval (or there never was a successful build)."""

    namespace: str
    documents: int
    chunks: int
    last_build_at: float | None
    last_outcome: str | None
    last_success_at: float | None
    staleness_seconds: float | None
    overdue: bool
    errors: list[PhaseOutcome] = field(default_factory=list)
    failed_documents: int = 0
    last_indexed_at: float | None = None
    #: While a build of the namespace runs (``last_outcome`` ``running``): how far it got,
    #: e.g. ``indexing file:///docs: 12 of 60 files, 140 chunks written``. A build whose
    #: process ended before it finished (killed) shows as ``interrupted``.
    in_progress: str | None = None
    #: Chunks stored but not embedded yet (found by BM25, skipped by the dense lane until
    #: the build that wrote them, or the next one, embeds them).
    pending_chunks: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)
