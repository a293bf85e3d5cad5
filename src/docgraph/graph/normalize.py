"""Entity name normalization to a canonical key that works for any script.

``canonical_key("Kestrel's")`` == ``canonical_key("KESTREL")`` == ``"kestrel"``. Identifiers
(codes, versions, emails, URLs) are only case-folded and NFKC-normalized: singularizing or
stripping their punctuation would merge distinct identifiers.
"""

from __future__ import annotations

import functools
import re
import unicodedata

IDENTIFIER_TYPES = frozenset({"cve", "ticket", "code", "version", "email", "url", "amount"})

_POSSESSIVE = re.compile(r"(?:['’]s|s['’])$", re.IGNORECASE)
_PUNCT_EDGE = re.compile(r"^[\W_]+|[\W_]+$", re.UNICODE)
_INNER_PUNCT = re.compile(r"[^\w\s\-./&+]", re.UNICODE)
_SPACES = re.compile(r"\s+")
_ID_SUFFIX = re.compile(r"[_\s-]?(?:id|key|code|no|num|number)$", re.IGNORECASE)


def _singular(word: str) -> str:
    """Very simple English singularization of one lower-case word (Latin script only)."""
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is", "os")):
        return word[:-1]
    return word


@functools.lru_cache(maxsize=1 << 16)
def canonical_key(name: str, entity_type: str = "") -> str:
    """The canonical id of an entity name: NFKC, casefold, possessive and edge punctuation
    stripped, whitespace collapsed, last word singularized (for non-identifier types).
    Memoized: ingest asks for the same names over and over."""
    text = unicodedata.normalize("NFKC", name).strip()
    if entity_type in IDENTIFIER_TYPES:
        key = _SPACES.sub(" ", text.casefold()).strip(" .,;:")
        return key[1:] if entity_type == "version" and key[:1] == "v" else key
    text = _POSSESSIVE.sub("", text)
    text = _INNER_PUNCT.sub(" ", text)
    text = _PUNCT_EDGE.sub("", text)
    text = _SPACES.sub(" ", text).casefold().strip()
    if not text:
        return ""
    words = text.split(" ")
    words[-1] = _singular(words[-1])
    return " ".join(words)


def identifier_aliases(identifier: str) -> list[str]:
    """Aliases of a schema identifier: ``customer_id`` -> ``customer id``, ``customer``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", identifier).replace("_", " ").strip()
    out = [canonical_key(spaced)]
    stripped = _ID_SUFFIX.sub("", identifier).strip("_ -")
    if stripped and stripped != identifier:
        out.append(canonical_key(stripped.replace("_", " ")))
    return [a for a in dict.fromkeys(out) if a]
