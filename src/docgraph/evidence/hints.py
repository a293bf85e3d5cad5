"""L0 query transform: domain, entity and keyword hints drawn from the query.

Hints explain a hit (they become ``hit_reasons`` and trace entries); they never change the
order of the evidence or any score. Retrieval owns the order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from docgraph.evidence.port import META_NAMESPACE, META_SOURCE, META_TITLE, KnowledgeSearchHit

#: An entity vocabulary: given the query, the known entity names it mentions.
EntityVocabulary = Callable[[str], list[str]]

_WORD = re.compile(r"\w+", re.UNICODE)
_NAME_PART = re.compile(r"[^\w]+|_", re.UNICODE)

STOPWORDS: frozenset[str] = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any",
    "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both",
    "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few",
    "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers",
    "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of",
    "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own",
    "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs",
    "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to",
    "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which",
    "while", "who", "whom", "whose", "why", "will", "with", "would", "you", "your", "yours",
    "yourself", "yourselves",
))


def content_words(text: str) -> list[str]:
    """Casefolded words of ``text`` minus stopwords and one-character tokens, first-seen order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text):
        folded = word.casefold()
        if len(folded) > 1 and folded not in STOPWORDS and not folded.isdigit():
            seen.setdefault(folded, None)
    return list(seen)


@dataclass(frozen=True, slots=True)
class QueryHints:
    """What the L0 transform read from the query."""

    query: str
    keywords: tuple[str, ...]
    entities: tuple[str, ...]
    domains: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        """JSON-ready hints (for the trace)."""
        return {
            "keywords": list(self.keywords),
            "entities": list(self.entities),
            "domains": list(self.domains),
        }


class QueryTransformer:
    """Turns a query into :class:`QueryHints`.

    ``domains`` are the caller's namespaces (a domain hint is a namespace whose name parts or
    description share a content word with the query); ``entity_vocabulary``, when given,
    names the known entities the query mentions.
    """

    def __init__(
        self,
        domains: Iterable[str] = (),
        *,
        descriptions: Mapping[str, str] | None = None,
        entity_vocabulary: EntityVocabulary | None = None,
    ) -> None:
        self.entity_vocabulary = entity_vocabulary
        descriptions = descriptions or {}
        self._domain_words: dict[str, frozenset[str]] = {}
        for name in sorted(set(domains)):
            parts = [p for p in _NAME_PART.split(name) if p]
            words = set(content_words(" ".join(parts)))
            words.update(content_words(descriptions.get(name, "")))
            self._domain_words[name] = frozenset(words)

    def transform(self, query: str) -> QueryHints:
        """Keyword, entity and domain hints for ``query``."""
        keywords = content_words(query)
        entities: list[str] = []
        if self.entity_vocabulary is not None:
            for name in self.entity_vocabulary(query):
                name = name.strip()
                if name and name not in entities:
                    entities.append(name)
        query_words = set(keywords)
        domains = [name for name, words in self._domain_words.items() if words & query_words]
        return QueryHints(query, tuple(keywords), tuple(entities), tuple(domains))


def explain_hit(hints: QueryHints | None, hit: KnowledgeSearchHit) -> list[str]:
    """The hint matches of one hit, as ``hit_reasons`` entries (``kind:value``).

    ``domain:<ns>`` when the hit's namespace is a domain hint, ``entity:<name>`` when the hit
    mentions a hinted entity, ``keyword:<word>`` for each query keyword it contains.
    """
    if hints is None:
        return []
    reasons: list[str] = []
    namespace = hit.metadata.get(META_NAMESPACE)
    if isinstance(namespace, str) and namespace in hints.domains:
        reasons.append(f"domain:{namespace}")
    haystack = " ".join(
        str(part) for part in (hit.metadata.get(META_TITLE), hit.metadata.get(META_SOURCE),
                               hit.content) if part
    )
    folded = haystack.casefold()
    reasons.extend(f"entity:{name}" for name in hints.entities if name.casefold() in folded)
    words = set(_WORD.findall(folded))
    reasons.extend(f"keyword:{word}" for word in hints.keywords if word in words)
    return reasons


def merge_reasons(first: Sequence[str], second: Iterable[str]) -> list[str]:
    """``first`` followed by the entries of ``second`` it lacks (order kept, no repeats)."""
    merged = list(dict.fromkeys(first))
    for reason in second:
        if reason not in merged:
            merged.append(reason)
    return merged
