"""Turning a changed file into everything its write needs, except vectors.

:func:`prepare_bytes` extracts, chunks, builds breadcrumbs and embedded texts, finds the
entities of every chunk and counts its BM25 terms. It depends only on its inputs and a
:class:`PrepareSpec`, so the ingest pipeline can run it in its own process
(:mod:`docgraph.ingest.workers`) or inline; both give identical results. The catalog, the
embedder and the SQLite writer stay in the pipeline's process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from docgraph.config import LoaderSettings, SourcesSettings
from docgraph.errors import ExtractionError, SourceError
from docgraph.graph.extract import EntityExtractor
from docgraph.ingest.boilerplate import line_fingerprint
from docgraph.ingest.chunk import TokenCounter, chunk_document
from docgraph.ingest.extract import extract
from docgraph.ingest.limits import ExtractLimits
from docgraph.ingest.storable import storable_document
from docgraph.languages import (
    AUTO,
    DETECT_CHARS,
    ENGLISH,
    LANGUAGE_KEY,
    detect_language,
    normalize_language,
)
from docgraph.model import BlockKind, ChunkDraft, EntityLink, ExtractedDocument
from docgraph.sources.urn import normalize_urn
from docgraph.store.lexical import CountedTerms, count_terms

_LINE_KINDS = (BlockKind.PARAGRAPH, BlockKind.LIST_ITEM)
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrepareSpec:
    """What preparing a document needs: chunking settings, the embedding model's token
    counter, the entity extractor (None: no graph) and whether to count BM25 terms (the
    embedded catalog stores them; external engines analyse text themselves).

    Picklable when its token counter and extractor are (see
    :func:`docgraph.ingest.workers.portable_token_counter`)."""

    loader: LoaderSettings
    count_tokens: TokenCounter
    extractor: EntityExtractor | None
    lexical: bool = True
    # Fingerprint the paragraphs and list items (folder builds) and drop those whose
    # fingerprint is in ``repeated``: the lines repeated across the source's documents.
    count_lines: bool = False
    repeated: frozenset[str] = frozenset()
    # The source's language (``[sources] languages``): an ISO 639-1 code, or "auto" to take
    # each document's own (its format's declared ``language``, else detected from its text).
    language: str = AUTO


@dataclass
class PreparedDocument:
    """A document ready to embed and write. ``links`` has one list per chunk (empty when no
    extractor is configured); ``lexical`` one term count per chunk (None when not counted);
    ``seconds`` is the time spent per phase (extract, chunk, entities, store).
    ``attachments`` are the documents carried inside this one (a mail's attachments), each
    prepared alike, with its name and content hash. ``line_hashes`` are the fingerprints
    of its paragraphs and list items as extracted (None when not counted), ``lines_dropped``
    those left out as repeated across the source; ``language`` the one its words are
    analysed in."""

    document: ExtractedDocument
    chunks: list[ChunkDraft]
    breadcrumbs: list[str]
    embedded_texts: list[str]
    links: list[list[EntityLink]]
    lexical: list[CountedTerms] | None
    seconds: dict[str, float] = field(default_factory=dict)
    attachments: list[PreparedAttachment] = field(default_factory=list)
    line_hashes: list[str] | None = None
    lines_dropped: list[str] = field(default_factory=list)
    language: str = ENGLISH  # what its BM25 terms were counted in (ISO 639-1)

    def all_chunks(self) -> int:
        """Chunks of this document and its attachments."""
        return len(self.chunks) + sum(len(a.prepared.chunks) for a in self.attachments)


@dataclass
class PreparedAttachment:
    """An attachment prepared as a document of its own (see
    :class:`docgraph.model.AttachedDocument`)."""

    name: str
    content_hash: str
    prepared: PreparedDocument


def prepare_document(spec: PrepareSpec, document: ExtractedDocument) -> PreparedDocument:
    """Chunk an extracted document (and each document attached to it) and derive everything
    its write needs but vectors. Characters no store can keep (NUL, lone surrogates) are
    taken out first (:func:`~docgraph.ingest.storable.storable_document`)."""
    document = storable_document(document)
    prepared = _prepare_one(spec, document)
    for attached in document.attachments:
        inner = _prepare_one(spec, attached.document)
        for phase, seconds in inner.seconds.items():
            prepared.seconds[phase] += seconds
        prepared.attachments.append(
            PreparedAttachment(attached.name, attached.content_hash, inner))
    return prepared


def _prepare_one(spec: PrepareSpec, document: ExtractedDocument) -> PreparedDocument:
    t0 = time.perf_counter()
    hashes: list[str] | None = None
    dropped: list[str] = []
    if spec.count_lines:
        hashes, kept = [], []
        for block in document.blocks:
            fingerprint = (line_fingerprint(block.text) if block.kind in _LINE_KINDS
                           else None)
            if fingerprint is not None:
                hashes.append(fingerprint)
                if fingerprint in spec.repeated:
                    dropped.append(fingerprint)
                    continue
            kept.append(block)
        hashes, dropped = sorted(set(hashes)), sorted(set(dropped))
        if dropped:
            document = replace(document, blocks=tuple(kept))
    language = document_language(document, spec.language)
    chunks = chunk_document(document, spec.count_tokens, spec.loader.chunk_tokens)
    breadcrumbs = [c.breadcrumb(document.title) for c in chunks]
    embedded = [embedding_input(crumb, c.text, spec.loader.breadcrumb)
                for crumb, c in zip(breadcrumbs, chunks, strict=True)]
    t1 = time.perf_counter()
    links = ([spec.extractor.links(c.text) for c in chunks]
             if spec.extractor is not None else [])
    t2 = time.perf_counter()
    lexical = (count_terms(list(zip(breadcrumbs, (c.text for c in chunks), strict=True)),
                           language) if spec.lexical else None)
    t3 = time.perf_counter()
    return PreparedDocument(document, chunks, breadcrumbs, embedded, links, lexical,
                            {"chunk": t1 - t0, "entities": t2 - t1, "store": t3 - t2},
                            line_hashes=hashes, lines_dropped=dropped, language=language)


def embedding_input(breadcrumb: str, text: str, with_breadcrumb: bool) -> str:
    """The text a chunk's vector is computed from: its breadcrumb and text, or the text
    alone (``loader.breadcrumb`` off)."""
    return f"{breadcrumb} {text}" if with_breadcrumb else text


def source_language(urn: str, settings: SourcesSettings | None) -> str:
    """The language ``[sources] languages`` gives the source ``urn`` (its own entry, else
    ``*``'s, else "auto")."""
    if settings is None or not settings.languages:
        return AUTO
    for source, code in settings.languages.items():
        if source != "*" and (source == urn or _canonical(source) == urn):
            return code
    return settings.languages.get("*", AUTO)


def _canonical(source: str) -> str | None:
    try:
        return normalize_urn(source)
    except (SourceError, ValueError):
        return None


def document_language(document: ExtractedDocument, setting: str) -> str:
    """The language a document's words are analysed in: the source's ``setting`` unless it is
    "auto", else the language its format declares (an EPUB's, a front matter ``language``)
    when that is a language code, else the one detected from its title and text."""
    if setting != AUTO:
        return setting
    declared = document.metadata.get(LANGUAGE_KEY)
    if declared:
        try:
            code = normalize_language(declared)
        except ValueError:
            code = AUTO
        if code != AUTO:
            return code
    sample: list[str] = [document.title]
    size = len(document.title)
    for block in document.blocks:
        if size >= DETECT_CHARS:
            break
        sample.append(block.text)
        size += len(block.text) + 1
    return detect_language("\n".join(sample))


def prepare_bytes(spec: PrepareSpec, data: bytes, path: str) -> PreparedDocument:
    """Extract ``data`` (the file at ``path``) within the loader's limits and prepare it;
    raises :class:`docgraph.errors.ExtractionError` naming the file when it cannot be read
    or is too large."""
    t0 = time.perf_counter()
    try:
        document = extract(data, path, ExtractLimits.from_loader(spec.loader))
        extracted = time.perf_counter() - t0
        prepared = prepare_document(spec, document)
    except ExtractionError:
        raise
    except Exception as exc:
        # A defect met on one file's content (a parser's or our own) costs that file, not
        # the build: before, it aborted every run at the same file and nothing after it in
        # the folder was ever indexed. The traceback goes to the log for the bug report.
        _log.exception("unexpected error preparing %s", path)
        raise ExtractionError(
            f"{path}: unexpected error while reading it ({type(exc).__name__}: {exc}); "
            "the file is skipped, the rest of the build goes on"
        ) from exc
    prepared.seconds["extract"] = extracted
    return prepared
