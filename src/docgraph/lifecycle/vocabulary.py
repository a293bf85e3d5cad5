"""The live entity vocabulary: configured and programmatically added terms, plus the terms
of the ``entity:<type>`` columns, replaced at every build and never stored."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence

from docgraph.graph.extract import EntityExtractor, VocabularyMatcher
from docgraph.lifecycle.outcomes import describe_error
from docgraph.model import PhaseOutcome
from docgraph.sources.registry import ColumnTag, SourceRegistry

log = logging.getLogger(__name__)

#: A tagged column: (source, schema, table, column, tag).
ColumnKey = tuple[str, str, str, str, str]


class LiveVocabulary(VocabularyMatcher):
    """A vocabulary in two layers: a base (whatever the extractor had, and every later
    :meth:`add`) and a live layer that :meth:`replace_live` swaps whole. A base term wins
    over a live one with the same spelling."""

    def __init__(self, base: VocabularyMatcher | None = None) -> None:
        super().__init__()
        self._base_terms: dict[str, tuple[str, str, str]] = dict(base._terms) if base else {}
        self._live_terms: dict[str, tuple[str, str, str]] = {}
        self._terms = dict(self._base_terms)

    def add(self, entity_type: str, terms: Iterable[str], canonical: str | None = None) -> None:
        """Add terms to the base layer (they survive every live replacement)."""
        layer = VocabularyMatcher()
        layer.add(entity_type, terms, canonical)
        self._base_terms.update(layer._terms)
        self._merge()

    def replace_live(self, terms_by_type: Mapping[str, Sequence[str]]) -> None:
        """Make the live layer exactly ``terms_by_type`` (entity type -> terms)."""
        layer = VocabularyMatcher()
        for entity_type, terms in sorted(terms_by_type.items()):
            layer.add(entity_type, terms)
        self._live_terms = layer._terms
        self._merge()

    @property
    def live_size(self) -> int:
        """Number of live terms."""
        return len(self._live_terms)

    def _merge(self) -> None:
        merged = dict(self._live_terms)
        merged.update(self._base_terms)
        self._terms = merged
        self._automaton = None


def live_vocabulary(extractor: EntityExtractor) -> LiveVocabulary:
    """The extractor's vocabulary as a :class:`LiveVocabulary` (installed on first use)."""
    if not isinstance(extractor.vocabulary, LiveVocabulary):
        extractor.vocabulary = LiveVocabulary(extractor.vocabulary)
    return extractor.vocabulary


def load_live_terms(extractor: EntityExtractor, registry: SourceRegistry, limit: int,
                    cache: dict[ColumnKey, list[str]]) -> tuple[list[PhaseOutcome], bool]:
    """Replace the live layer of ``extractor``'s vocabulary with the ``SELECT DISTINCT``
    (at most ``limit`` terms) of every ``entity:<type>`` column of ``registry`` (held in
    memory only; configured and programmatically added terms stay).

    A column whose query fails keeps the terms it had at its last successful query in
    this process (``cache``, the caller's); returns the phase outcomes and whether the
    vocabulary is complete."""
    live: dict[str, list[str]] = {}
    phases: list[PhaseOutcome] = []
    complete = True
    by_source: dict[str, list[ColumnTag]] = {}
    for tag in registry.entity_tags():
        by_source.setdefault(tag.source, []).append(tag)
    for source_name, source_tags in sorted(by_source.items()):
        reader = None
        try:
            reader = registry.reader(source_name)
        except Exception as exc:
            reader_error: BaseException | None = exc
        else:
            reader_error = None
        for item in source_tags:
            key = (item.source, item.schema, item.table, item.column, item.tag)
            label = f"{item.urn} ({item.tag})"
            started = time.perf_counter()
            try:
                if reader is None:
                    assert reader_error is not None
                    raise reader_error
                ref = reader.resolve(item.schema, item.table, item.column)
                terms = reader.distinct_values(ref, limit)
            except Exception as exc:
                message = describe_error(exc)
                cached = cache.get(key)
                if cached is None:
                    complete = False
                    message += "; no earlier terms in this process: graph rebuild deferred"
                else:
                    message += f"; kept the {len(cached)} terms of the last good query"
                log.error("entity vocabulary %s failed: %s", label, message)
                phases.append(PhaseOutcome(label, "entities", "error", message, 0,
                                           time.perf_counter() - started))
                terms = cached or []
            else:
                cache[key] = terms
                phases.append(PhaseOutcome(label, "entities", "ok", f"{len(terms)} terms",
                                           len(terms), time.perf_counter() - started))
            entity_type = item.entity_type
            assert entity_type is not None
            live.setdefault(entity_type, []).extend(terms)
        if reader is not None:
            reader.close()
    vocabulary = live_vocabulary(extractor)
    if live or vocabulary.live_size:
        vocabulary.replace_live(live)
    return phases, complete
