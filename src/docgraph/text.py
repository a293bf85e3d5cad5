"""Text analysis shared by every layer: word tokens, folding, stop words, Porter stems, and
the content hash of a text.

One tokenizer for everything that compares words: the BM25 index (embedded and Milvus), the
query path, key phrases and query entities all read words the same way. Tokens are FTS5's
``porter unicode61 remove_diacritics 2``: Unicode letters and digits, diacritics removed,
lower case, Porter-stemmed. Very common English words (:data:`STOPWORDS`) are not indexed
and never reach a query.

This module is on the ground floor: it imports nothing of docgraph.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata

import Stemmer

MAX_QUERY_TERMS = 64

# A word: a run of Unicode letters and digits.
WORD = re.compile(r"[^\W_]+", re.UNICODE)

# Very common English words: not indexed, dropped from queries.
STOPWORDS = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have",
        "how", "i", "in", "is", "it", "its", "of", "on", "or", "that", "the", "their", "there",
        "these", "this", "to", "was", "were", "what", "when", "where", "which", "who", "whom",
        "why", "will", "with", "does", "do", "did", "can", "could", "should", "would",
    ]
)

_stemmers = threading.local()
_STEMS: dict[str, str] = {}  # word -> stem, shared (dict reads and writes are atomic)
_FOLDED: dict[str, str] = {}  # non-ASCII token -> lower case without diacritics
_CACHE_LIMIT = 500_000


def text_hash(text: str) -> str:
    """sha256 of the UTF-8 text, hex: the key a chunk's vector is reused by."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stem_words(words: list[str]) -> list[str]:
    """The Porter stems of ``words``, in order. The process-wide cache is only a cache: the
    answer is built from this call's own lookups, so a clear of the cache (when it outgrows
    its limit here, or in another thread between two steps) never loses a word of this call."""
    stems = _STEMS
    try:
        return [stems[w] for w in words]
    except KeyError:
        pass
    found: dict[str, str] = {}
    missing: list[str] = []
    for w in dict.fromkeys(words):
        stem = stems.get(w)
        if stem is None:
            missing.append(w)
        else:
            found[w] = stem
    stemmer: Stemmer.Stemmer | None = getattr(_stemmers, "porter", None)
    if stemmer is None:  # PyStemmer objects are not thread-safe: one per thread
        stemmer = Stemmer.Stemmer("porter")
        _stemmers.porter = stemmer
    new = dict(zip(missing, stemmer.stemWords(missing), strict=True))
    found.update(new)
    if len(stems) + len(new) > _CACHE_LIMIT:
        stems.clear()
    stems.update(new)
    return [found[w] for w in words]


def fold_token(token: str) -> str:
    """``token`` with its diacritics removed (NFKD, combining marks dropped), lower case;
    cached process-wide like the stems."""
    folded = _FOLDED.get(token)
    if folded is None:
        decomposed = unicodedata.normalize("NFKD", token)
        folded = "".join(c for c in decomposed if not unicodedata.combining(c)).lower()
        if len(_FOLDED) > _CACHE_LIMIT:
            _FOLDED.clear()
        _FOLDED[token] = folded
    return folded


def words(text: str) -> list[str]:
    """The word tokens of ``text`` (NFKC, lower case, diacritics removed; not stemmed),
    stopwords included, in order."""
    tokens = WORD.findall(unicodedata.normalize("NFKC", text).lower())
    if text.isascii():
        return tokens
    return [t if t.isascii() else fold_token(t) for t in tokens]


def index_terms(text: str) -> tuple[list[str], int]:
    """(stemmed terms of ``text`` that are indexed, in order with repeats; all tokens counted)."""
    tokens = words(text)
    kept = [t for t in tokens if t not in STOPWORDS]
    return stem_words(kept), len(tokens)


def query_terms(text: str) -> list[str]:
    """The distinct stemmed terms a query searches for, in order (at most 64). Stopwords are
    dropped; a query of stopwords only has no terms."""
    kept = [t for t in dict.fromkeys(words(text)) if t not in STOPWORDS]
    return list(dict.fromkeys(stem_words(kept)))[:MAX_QUERY_TERMS]


def plain_query_words(text: str) -> list[str]:
    """The distinct words of a query for an engine with its own analyzer (Milvus, PostgreSQL):
    NFKC, lower case, no stemming, diacritics kept, stopwords dropped, at most 64."""
    tokens = WORD.findall(unicodedata.normalize("NFKC", text).lower())
    return [t for t in dict.fromkeys(tokens) if t not in STOPWORDS][:MAX_QUERY_TERMS]
