"""What graph builds with key phrases keep of each chunk between builds in one process.

Key phrases are chosen from a whole namespace's statistics, so a build must count every
chunk's words and, when the phrase set changes, find the phrases again in the chunks they
occur in. Neither needs the text itself again once known:

- a chunk's **word ids** (:class:`~docgraph.graph.keyphrases.ChunkTokens`) are all the
  counting needs (:func:`~docgraph.graph.keyphrases.choose_keyphrases`);
- its **base mentions** (vocabulary, patterns, names) do not depend on the phrases, which
  rank last (:meth:`~docgraph.graph.extract.EntityExtractor.base_mentions`);
- its **phrase mentions** change only when a spelling that occurs in it was chosen or
  dropped: only those chunks are matched again (one scan for the changed spellings).

Entries are keyed by chunk text (equal texts give equal results whatever their row ids) per
namespace, and dropped when a build no longer sees their text; the whole namespace entry is
dropped when the extractor's fingerprint changes. Nothing is persisted: a new process pays
for one full extraction at its first build of a namespace, then only for what changed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from docgraph.graph.extract import EntityExtractor, Mention, VocabularyMatcher
from docgraph.graph.keyphrases import PHRASE_TYPE, ChunkTokens, Vocabulary


@dataclass(slots=True)
class ChunkEntry:
    """One chunk text's word ids, base mentions and (once matched) phrase mentions."""

    tokens: ChunkTokens
    base: list[Mention]
    phrases: list[Mention] | None = None


@dataclass(slots=True)
class NamespaceEntry:
    """A namespace's chunk entries by text and the phrase spellings they were matched with
    (None: not matched yet)."""

    fingerprint: str
    chunks: dict[str, ChunkEntry] = field(default_factory=dict)
    surfaces: frozenset[str] | None = None


class PhraseCache:
    """Per-namespace chunk entries and per-language vocabularies of one process (thread-safe:
    hold :attr:`lock` for a whole build of a namespace)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._namespaces: dict[str, NamespaceEntry] = {}
        self._vocabularies: dict[str, Vocabulary] = {}

    def vocabulary(self, language: str) -> Vocabulary:
        """The shared word ids of ``language``."""
        found = self._vocabularies.get(language)
        if found is None:
            found = self._vocabularies[language] = Vocabulary(language)
        return found

    def chunks(self, namespace: str, fingerprint: str, texts: Sequence[str],
               extractor: EntityExtractor, vocabulary: Vocabulary
               ) -> tuple[NamespaceEntry, list[ChunkEntry], int]:
        """The entry of ``namespace`` holding exactly ``texts`` (new texts tokenized and
        their base mentions extracted, texts no longer seen dropped), the chunk entries in
        the order of ``texts``, and how many texts were new."""
        entry = self._namespaces.get(namespace)
        if entry is None or entry.fingerprint != fingerprint:
            entry = self._namespaces[namespace] = NamespaceEntry(fingerprint)
        known = entry.chunks
        fresh: dict[str, ChunkEntry] = {}
        new = 0
        for text in texts:
            found = known.get(text) or fresh.get(text)
            if found is None:
                found = ChunkEntry(vocabulary.tokenize(text), extractor.base_mentions(text))
                new += 1
            fresh[text] = found
        entry.chunks = fresh
        return entry, [fresh[t] for t in texts], new


def match_phrases(entry: NamespaceEntry, texts: Sequence[str], chunks: Sequence[ChunkEntry],
                  matcher: VocabularyMatcher, surfaces: frozenset[str]) -> int:
    """Bring every chunk's phrase mentions up to ``matcher`` (whose spellings are
    ``surfaces``): a chunk never matched, or holding a spelling chosen or dropped since the
    last match (found by one scan for those spellings), is matched again. Returns how many
    chunks were matched."""
    changed = None if entry.surfaces is None else surfaces ^ entry.surfaces
    probe = VocabularyMatcher()
    if changed:
        probe.add(PHRASE_TYPE, sorted(changed))
    matched = 0
    for text, chunk in zip(texts, chunks, strict=True):
        if chunk.phrases is None or changed is None or (changed and probe.find(text)):
            chunk.phrases = matcher.find(text)
            matched += 1
    entry.surfaces = surfaces
    return matched
