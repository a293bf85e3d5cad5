"""Turn free user text into a safe SQLite FTS5 MATCH expression.

The query never reaches FTS5 as syntax: it is split into word tokens (Unicode letters and
digits), each token becomes a double-quoted FTS5 string (so ``NEAR``, ``AND``, ``*``, ``:``,
``^`` or quotes are plain words), and tokens are OR-ed so BM25 ranks partial matches. The
resulting expression is passed as a bound parameter, never formatted into SQL.
"""

from __future__ import annotations

import re
import unicodedata

MAX_TERMS = 64

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

# Very common English words: dropping them keeps the OR-query's posting lists small.
# If a query is made only of them, they are kept.
STOPWORDS = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have",
        "how", "i", "in", "is", "it", "its", "of", "on", "or", "that", "the", "their", "there",
        "these", "this", "to", "was", "were", "what", "when", "where", "which", "who", "whom",
        "why", "will", "with", "does", "do", "did", "can", "could", "should", "would",
    ]
)


def fts5_terms(text: str) -> list[str]:
    """The distinct searchable terms of ``text``, in order, stopwords dropped when possible.

    Terms are lower-cased, not case-folded: FTS5's unicode61 tokenizer folds case itself and
    keeps ``ß``, so a case-folded ``strasse`` would never match an indexed ``Straße``.
    """
    tokens = [t.lower() for t in _TOKEN.findall(unicodedata.normalize("NFKC", text))]
    unique = list(dict.fromkeys(tokens))
    content = [t for t in unique if t not in STOPWORDS]
    return (content or unique)[:MAX_TERMS]


def to_fts5_query(text: str) -> str | None:
    """A safe FTS5 expression (``"a" OR "b"``) for ``text``, or None when it has no terms."""
    terms = fts5_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
