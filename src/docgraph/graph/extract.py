"""Entity extraction that needs no model download.

Three extractors, each independent and each testable on its own:

1. :class:`VocabularyMatcher` - Aho-Corasick over known terms (configured lists, ``entity:``
   column tags, schema identifiers), matched on word boundaries, case-insensitively.
2. :class:`PatternExtractor` - identifiers and codes: CVE ids, ticket keys, error codes,
   version strings, emails, URLs, money amounts.
3. :class:`ProperNameExtractor` - a heuristic for proper names (capitalized word runs not
   at a sentence start) and acronyms.
4. Key phrases (optional): a :class:`VocabularyMatcher` of the phrases that
   :mod:`docgraph.graph.keyphrases` chose from a whole namespace's statistics; only the graph
   build, which knows the namespace, installs it (:meth:`EntityExtractor.with_phrases`).

:class:`EntityExtractor` runs them in that order; a span found by an earlier extractor wins
over overlapping spans from later ones. Mentions are grouped per canonical key into
:class:`EntityLink` records with frequency, first position and an association score.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import ahocorasick

from docgraph.graph.name_spans import at_sentence_start, split_run
from docgraph.graph.normalize import canonical_key, identifier_aliases
from docgraph.model import EntityLink

if TYPE_CHECKING:
    from docgraph.graph.keyphrases import KeyphraseParams


@dataclass(frozen=True, slots=True)
class Mention:
    """One entity mention: character span, surface text, type and canonical key."""

    start: int
    end: int
    text: str
    type: str
    key: str


def _longest_non_overlapping(mentions: list[Mention]) -> list[Mention]:
    """Drop mentions overlapping a longer (then earlier) one; result in text order. Taken
    characters are marked in a byte array, so each check is one C-level scan of the span
    rather than a comparison with every mention taken so far."""
    if len(mentions) < 2:
        return mentions
    taken: list[Mention] = []
    occupied = bytearray(max(m.end for m in mentions) + 1)
    for m in sorted(mentions, key=lambda m: (-(m.end - m.start), m.start)):
        if occupied.find(1, m.start, m.end) < 0:
            occupied[m.start:m.end] = b"\x01" * (m.end - m.start)
            taken.append(m)
    return sorted(taken, key=lambda m: m.start)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


class VocabularyMatcher:
    """Case-insensitive whole-word matching of known terms (Aho-Corasick automaton)."""

    def __init__(self) -> None:
        self._terms: dict[str, tuple[str, str, str]] = {}  # folded term -> (name, type, key)
        self._automaton: ahocorasick.Automaton | None = None

    def __len__(self) -> int:
        return len(self._terms)

    def __getstate__(self) -> dict[str, object]:
        # The automaton is derived (rebuilt on first use); worker processes get the terms.
        return {"_terms": self._terms, "_automaton": None}

    def add(self, entity_type: str, terms: Iterable[str], canonical: str | None = None) -> None:
        """Add terms of one type; ``canonical`` maps all of them to one entity (aliases)."""
        for term in terms:
            term = str(term).strip()
            if len(term) < 2:
                continue
            key = canonical or canonical_key(term, entity_type)
            if key:
                self._terms[term.casefold()] = (term, entity_type, key)
        self._automaton = None

    def add_identifier(self, identifier: str, entity_type: str = "field") -> None:
        """A schema identifier (``customer_id``) and its aliases (``customer id``, ``customer``)."""
        aliases = identifier_aliases(identifier)
        if aliases:
            self.add(entity_type, [identifier, *aliases], canonical=aliases[-1])

    def fingerprint(self) -> str:
        """A stable hash of the vocabulary, to notice when it changed between builds."""
        import hashlib

        digest = hashlib.sha256()
        for term in sorted(self._terms):
            digest.update(f"{term}\x00{self._terms[term][1]}\x00{self._terms[term][2]}\n".encode())
        return digest.hexdigest()

    def _build(self) -> ahocorasick.Automaton:
        automaton = ahocorasick.Automaton()
        for folded, value in self._terms.items():
            automaton.add_word(folded, (len(folded), *value))
        automaton.make_automaton()
        return automaton

    def find(self, text: str) -> list[Mention]:
        """Whole-word, case-insensitive matches, longest first at each position."""
        if not self._terms:
            return []
        if self._automaton is None:
            self._automaton = self._build()
        folded = text.casefold()
        if len(folded) != len(text):  # casefold changed lengths (e.g. 'ß'): fall back to lower
            folded = text.lower()
            if len(folded) != len(text):
                return []
        found: list[Mention] = []
        for end, (length, _name, etype, key) in self._automaton.iter(folded):
            start = end - length + 1
            if start > 0 and _is_word_char(folded[start - 1]):
                continue
            if end + 1 < len(folded) and _is_word_char(folded[end + 1]):
                continue
            found.append(Mention(start, end + 1, text[start:end + 1], etype, key))
        return _longest_non_overlapping(found)


# ``[A-Z](?<=\b[A-Z])`` means ``\b[A-Z]``, written so that the regex engine can skip ahead
# to capitals instead of trying every position (several times faster on prose).
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("cve", re.compile(r"\bCVE-\d{4}-\d{4,7}\b", re.IGNORECASE)),
    ("email", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    ("url", re.compile(r"\bhttps?://[^\s<>\"')\]]+", re.IGNORECASE)),
    ("ticket", re.compile(r"[A-Z](?<=\b[A-Z])[A-Z0-9]{1,9}(?:-[A-Z0-9]{1,10}){1,4}\b")),
    ("code", re.compile(r"[A-Z](?<=\b[A-Z])-?\d{2,6}\b")),
    ("version", re.compile(r"\b[vV]?\d+\.\d+(?:\.\d+){1,3}(?:-[\w.]+)?\b")),
    ("amount", re.compile(
        r"(?:[$€£¥]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:[kKmM]\b|million|billion|bn))?)"
        r"|(?:\b\d[\d,]*(?:\.\d+)?\s?(?:[kKmM]\s|million\s|billion\s|bn\s)?"
        r"(?:USD|EUR|GBP|JPY|CHF|CNY)\b)"
    )),
]
_VERSION_CORE = re.compile(r"\d\.\d+\.\d")
_CURRENCY_MARKS = ("$", "€", "£", "¥", "USD", "EUR", "GBP", "JPY", "CHF", "CNY")


def _may_match(etype: str, text: str) -> bool:
    """False only when pattern ``etype`` cannot match ``text`` (a cheap substring test that
    spares most texts most scans); True otherwise."""
    if etype == "cve":
        return "cve-" in text.lower()
    if etype == "email":
        return "@" in text
    if etype == "url":
        return "://" in text
    if etype == "ticket":
        return "-" in text
    if etype == "version":
        return _VERSION_CORE.search(text) is not None
    if etype == "amount":
        return any(mark in text for mark in _CURRENCY_MARKS)
    return True


class PatternExtractor:
    """Identifiers and codes by regular expression."""

    def find(self, text: str) -> list[Mention]:
        """Every identifier-like span with its type."""
        found: list[Mention] = []
        for etype, pattern in _PATTERNS:
            if not _may_match(etype, text):
                continue
            for m in pattern.finditer(text):
                surface = m.group(0).rstrip(".,;:")
                if etype == "ticket" and not any(ch.isdigit() for ch in surface):
                    continue
                found.append(Mention(m.start(), m.start() + len(surface), surface, etype,
                                     canonical_key(surface, etype)))
        return found


_CAP_WORD = r"(?:[A-Z][\w'’&.-]*[\w]|[A-Z])"
# Words of a run are separated by spaces or tabs and at most one line break (whether a line
# break ends a name is decided by ``split_run``).
_GAP = r"(?:[ \t]+|[ \t]*\n[ \t]*)"
_NAME_RUN = re.compile(
    rf"{_CAP_WORD}(?:{_GAP}(?:(?:of|de|van|von|der|la|du|and|&){_GAP})?{_CAP_WORD})*"
)
_WORD = re.compile(r"\S+")
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9&]{1,5}s?\b")
_SHOUTED_NEIGHBOUR = re.compile(r"(?:\b[A-Z]{2,}\s+$)|(?:^\s+[A-Z]{2,}\b)")
_NOT_NAMES = frozenset(
    """the a an this that these those it its we our you your they their he she his her i
    if when while after before during for from with without in on at by to of and or but
    not no yes all any each every some many most more less new see also note please
    monday tuesday wednesday thursday friday saturday sunday january february march april
    may june july august september october november december q1 q2 q3 q4 mr mrs ms dr
    step section table figure appendix summary overview introduction conclusion however
    there here what which who whom whose why how jan feb mar apr jun jul aug sep sept oct
    nov dec mon tue wed thu fri sat sun subject cc bcc re fwd sent date then later
    yesterday today tomorrow also so thus meanwhile first next finally once since until
    because although though instead otherwise other another dear hi hello hey thanks thank
    regards cheers welcome morning afternoon evening i'm i'll i've i'd""".split()
)


class ProperNameExtractor:
    """Heuristic proper names (capitalized runs) and acronyms; type ``name`` / ``acronym``.

    A run of capitalized words is cut into the names it holds by
    :func:`docgraph.graph.name_spans.split_run` (function words, coordination, possessives,
    job titles, field labels, units, sentence-opening verbs).
    """

    def find(self, text: str) -> list[Mention]:
        """Spans that look like names of people, places, products or organisations."""
        found: list[Mention] = []
        for m in _NAME_RUN.finditer(text):
            run = m.group(0)
            tokens = ([(m.start(), m.end(), run)] if " " not in run and "\t" not in run
                      and "\n" not in run else
                      [(m.start() + w.start(), m.start() + w.end(), w.group(0))
                       for w in _WORD.finditer(run)])
            for segment in split_run(text, tokens, _NOT_NAMES):
                mention = self._name(text, segment)
                if mention is not None:
                    found.append(mention)
        for m in _ACRONYM.finditer(text):
            surface = m.group(0)
            if surface[1:] == surface[1:].lower() or surface.casefold() in _NOT_NAMES:
                continue  # one capital only (the match is ASCII: [A-Z] then [A-Z0-9&]/s)
            before, after = text[max(0, m.start() - 12):m.start()], text[m.end():m.end() + 12]
            if _SHOUTED_NEIGHBOUR.search(before) or _SHOUTED_NEIGHBOUR.search(after):
                continue  # part of an all-caps heading, not an acronym
            found.append(Mention(m.start(), m.end(), surface, "acronym",
                                 canonical_key(surface.rstrip("s") if surface.endswith("s")
                                               and surface[:-1].isupper() else surface,
                                               "acronym")))
        return found

    @staticmethod
    def _name(text: str, segment: list[tuple[int, int, str]]) -> Mention | None:
        """The mention of one name segment, or None when it is not a name."""
        start = segment[0][0]
        raw = re.sub(r"['’]s?$", "", text[start:segment[-1][1]].rstrip(".,;:"))
        end = start + len(raw)
        surface = " ".join(raw.split())  # a name wrapped onto the next line
        if len(surface) < 2:
            return None
        if len(segment) == 1 and at_sentence_start(text, start):
            return None  # "Restart the unit." - a capital only because a sentence starts
        if surface.replace(" ", "").isupper():
            return None  # acronyms are handled separately; all-caps runs are shouted headings
        if len(segment) == 1 and len(surface) < 3:
            return None
        return Mention(start, end, surface, "name", canonical_key(surface, "name"))


def merge_phrases(base: list[Mention], phrases: list[Mention]) -> list[Mention]:
    """``base`` (non-overlapping, text order) and the key-phrase mentions (non-overlapping
    among themselves) that overlap none of it, in text order: a phrase never displaces a
    vocabulary term, pattern or name."""
    if not phrases:
        return base
    if not base:
        return phrases
    starts = [m.start for m in base]
    kept = []
    for phrase in phrases:
        at = bisect.bisect_left(starts, phrase.end)  # base mentions starting before its end
        if at and base[at - 1].end > phrase.start:
            continue
        kept.append(phrase)
    return sorted([*base, *kept], key=lambda m: m.start)


@dataclass
class EntityExtractor:
    """Runs the vocabulary, pattern, proper-name and key-phrase extractors and links entities
    to text.

    ``keyphrases`` (None: off) says how a graph build chooses each namespace's key phrases;
    ``phrases`` is the matcher of one namespace's chosen phrases, set only on the copy a
    build makes with :meth:`with_phrases` (ingest and queries run without it).
    """

    vocabulary: VocabularyMatcher = field(default_factory=VocabularyMatcher)
    patterns: bool = True
    proper_names: bool = True
    max_entities_per_chunk: int = 40
    keyphrases: KeyphraseParams | None = None
    phrases: VocabularyMatcher | None = None
    phrase_weights: Mapping[str, float] = field(default_factory=dict)

    def with_phrases(self, phrases: VocabularyMatcher, weights: Mapping[str, float]
                     ) -> EntityExtractor:
        """A copy that also finds ``phrases`` (lowest priority: any other extractor's span
        wins an overlap); ``weights`` (phrase key -> IDF in its namespace) choose which
        phrases a chunk keeps when it holds more than ``keyphrases.max_per_chunk``."""
        return replace(self, phrases=phrases, phrase_weights=weights)

    def mentions(self, text: str) -> list[Mention]:
        """Non-overlapping mentions; earlier extractors (vocabulary > patterns > names >
        key phrases) and longer spans win overlaps."""
        base = self.base_mentions(text)
        if self.phrases is None:
            return base
        return merge_phrases(base, self.phrases.find(text))

    def base_mentions(self, text: str) -> list[Mention]:
        """The non-overlapping mentions of every extractor but key phrases (vocabulary >
        patterns > names, longer spans first), in text order. Key phrases rank last, so
        these are the same whatever phrases a namespace has: a build may keep them."""
        ranked: list[tuple[int, Mention]] = [(0, m) for m in self.vocabulary.find(text)]
        if self.patterns:
            ranked += [(1, m) for m in PatternExtractor().find(text)]
        if self.proper_names:
            ranked += [(2, m) for m in ProperNameExtractor().find(text)]
        ranked.sort(key=lambda pm: (pm[0], -(pm[1].end - pm[1].start), pm[1].start))
        taken: list[Mention] = []
        occupied = bytearray(len(text) + 1)
        for _, mention in ranked:
            if not mention.key or occupied.find(1, mention.start, mention.end) >= 0:
                continue
            occupied[mention.start:mention.end] = b"\x01" * (mention.end - mention.start)
            taken.append(mention)
        return sorted(taken, key=lambda m: m.start)

    def links(self, text: str) -> list[EntityLink]:
        """Entities of ``text`` with frequency, first position and association score,
        strongest first, at most ``max_entities_per_chunk``."""
        return self.links_of(self.mentions(text), len(text))

    def links_of(self, mentions: list[Mention], length: int) -> list[EntityLink]:
        """:meth:`links` of a text of ``length`` characters whose :meth:`mentions` are
        ``mentions`` (in text order)."""
        if not mentions:
            return []
        grouped: dict[str, list[Mention]] = {}
        for m in mentions:
            grouped.setdefault(m.key, []).append(m)
        if self.phrases is not None and self.keyphrases is not None:
            dropped = self._surplus_phrases(grouped, self.keyphrases.max_per_chunk)
            if dropped:
                mentions = [m for m in mentions if m.key not in dropped]
                for key in dropped:
                    del grouped[key]
                if not mentions:
                    return []
        total = len(mentions)
        early = max(1, length // 5)
        links: list[EntityLink] = []
        for key, group in grouped.items():
            first = group[0]
            share = len(group) / total
            score = min(1.0, share * (1.5 if first.start < early else 1.0))
            links.append(EntityLink(key, first.text, first.type, len(group), first.start, score))
        links.sort(key=lambda link: (-link.score, link.first_position))
        return links[: self.max_entities_per_chunk]

    def _surplus_phrases(self, grouped: dict[str, list[Mention]], keep: int) -> set[str]:
        """Keys of the phrase-only entities of a chunk beyond the ``keep`` with the highest
        TF-IDF (mentions in the chunk x IDF in the namespace; ties: first mention)."""
        phrase_keys = [k for k, g in grouped.items() if all(m.type == "phrase" for m in g)]
        if len(phrase_keys) <= keep:
            return set()
        ranked = sorted(phrase_keys, key=lambda k: (
            -len(grouped[k]) * self.phrase_weights.get(k, 1.0), grouped[k][0].start))
        return set(ranked[keep:])
