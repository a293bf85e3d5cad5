"""The live entity vocabulary: configured and programmatically added terms, plus the terms
of the ``entity:<type>`` columns, replaced at every build and never stored."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from docgraph.graph.extract import EntityExtractor, VocabularyMatcher


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
