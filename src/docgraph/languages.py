"""Text analysis per language: which language a document is in, and the BM25 terms of a
text in that language.

English is analysed exactly as :mod:`docgraph.text` always has (FTS5-like word tokens,
Porter stems, a short English stop list), so an index built before languages were known
stays valid. Every other language gets:

* its Snowball stemmer (PyStemmer) where Snowball has one, applied to the lower-case word
  *before* diacritics are folded (the French and German rules read the accents), and its
  stop words from the ``stop-words`` package where it has a list;
* runs of Chinese, Japanese or Korean characters cut into overlapping character bigrams,
  as Lucene's CJKAnalyzer does (a lone character stays a unigram): those scripts write no
  spaces between words, so without this a whole sentence is one token no query matches.
  ``bench/multilingual.py`` measured bigrams against jieba's word segmentation on the
  Chinese queries (see ``bench/results/multilingual.json``): bigrams need no 40 MB
  dictionary and no second of start-up in every worker process.

Chinese, Japanese and Korean documents analyse the words between their CJK runs (English
terms, product names) as English does, so a mixed sentence finds both halves.

The language of a document comes from :func:`detect_language` (py3langid: a naive Bayes
model of byte n-grams shipped in its wheel, ~0.3 ms a document; English when it is unsure)
unless its source names one.
A query's language is unknown: :func:`query_terms_for` analyses it with every language
present in the searched namespaces and searches the union of the terms.

This module is on the ground floor: it imports nothing of docgraph but :mod:`docgraph.text`.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import Stemmer

from docgraph.text import MAX_QUERY_TERMS, WORD, fold_token, index_terms, query_terms

ENGLISH = "en"
AUTO = "auto"
#: The document metadata key its language is stored under (an ISO 639-1 code).
LANGUAGE_KEY = "language"

#: Fewer letters than this (a CJK character counting three): too little text to tell a
#: language, the document is English.
MIN_DETECT_LETTERS = 20
#: Below this probability the detector is guessing (a YAML file as Tagalog at 0.13): English.
#: Real documents score 0.59 (a Chinese sentence) to 1.0 in ``bench/data/multilingual``.
MIN_DETECT_PROBABILITY = 0.5
#: py3langid's code for text with no linguistic content.
NO_LANGUAGE = "zxx"
#: Characters of a document read to detect its language.
DETECT_CHARS = 4000

# ISO 639-1 code -> Snowball algorithm of PyStemmer (``Stemmer.algorithms()``).
_SNOWBALL = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german",
    "el": "greek", "es": "spanish", "et": "estonian", "eu": "basque", "fi": "finnish",
    "fr": "french", "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian",
    "id": "indonesian", "it": "italian", "lt": "lithuanian", "ne": "nepali", "nl": "dutch",
    "no": "norwegian", "nb": "norwegian", "pl": "polish", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil",
    "tr": "turkish", "yi": "yiddish",
}
#: Languages whose CJK runs are the words (their other words are analysed as English).
CJK_LANGUAGES = frozenset({"zh", "ja", "ko"})

# Han (with extensions and compatibility forms), kana, Hangul, bopomofo.
_CJK_CLASS = ("\u1100-\u11ff\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff"
              "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff"
              "\uff66-\uff9f\U00020000-\U0003134f")
_CJK = re.compile(f"[{_CJK_CLASS}]")
_CJK_SPLIT = re.compile(f"([{_CJK_CLASS}]+)")

_stemmers = threading.local()


def normalize_language(code: str) -> str:
    """A language setting as stored: lower-case ISO 639-1 (``"de"``), or ``"auto"``.
    Raises ValueError naming the code when it is not two or three letters."""
    value = code.strip().lower().replace("_", "-").split("-")[0]
    if value == AUTO or (value.isascii() and value.isalpha() and 2 <= len(value) <= 3):
        return value
    raise ValueError(f"language {code!r}: expected 'auto' or an ISO 639-1 code such as 'de'")


def detect_language(text: str) -> str:
    """The ISO 639-1 code of the language ``text`` is written in (its first
    :data:`DETECT_CHARS` characters), ``"en"`` when there is too little text to tell. Why a
    detector at all: the stemmer and stop words must match the document's language, and
    most folders do not say what language their files are in."""
    sample = text[:DETECT_CHARS]
    letters = sum(c.isalpha() for c in sample) + 2 * len(_CJK.findall(sample))
    if letters < MIN_DETECT_LETTERS:  # a CJK character counts three: it is about a word
        return ENGLISH
    code, probability = _identifier().classify(sample)
    if probability < MIN_DETECT_PROBABILITY or code == NO_LANGUAGE:
        return ENGLISH
    return str(code)


@lru_cache(maxsize=1)
def _identifier() -> Any:
    """py3langid's model with normalised probabilities, loaded on first use (~1 s), only in
    a process that has a document to detect."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a run of CJK characters (a lone character: itself)."""
    if len(run) < 2:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


@lru_cache(maxsize=64)
def _stop_words(language: str) -> frozenset[str]:
    from stop_words import StopWordError, get_stop_words

    try:
        return frozenset(w.lower() for w in get_stop_words(language))
    except StopWordError:
        return frozenset()


def _stemmer(language: str) -> Stemmer.Stemmer | None:
    """This thread's Snowball stemmer of ``language`` (PyStemmer's are not thread-safe)."""
    algorithm = _SNOWBALL.get(language)
    if algorithm is None:
        return None
    stemmers: dict[str, Stemmer.Stemmer] | None = getattr(_stemmers, "by_language", None)
    if stemmers is None:
        stemmers = _stemmers.by_language = {}
    stemmer = stemmers.get(algorithm)
    if stemmer is None:
        stemmer = stemmers[algorithm] = Stemmer.Stemmer(algorithm)
    return stemmer


def _analyze(text: str, language: str) -> tuple[list[str], int]:
    """(indexed terms of ``text`` in ``language`` in order with repeats, tokens counted)."""
    tokens: list[str] = []
    for word in WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        if _CJK.search(word) is None:
            tokens.append(word)
        else:
            tokens.extend(p for p in _CJK_SPLIT.split(word) if p)
    terms: list[str] = []
    plain: list[str] = []
    cjk_language = language in CJK_LANGUAGES
    counted = 0  # every word token, and every bigram of a CJK run
    for token in tokens:
        if _CJK.match(token):
            if plain:
                terms.extend(_words(plain, language, cjk_language))
                plain = []
            bigrams = cjk_bigrams(token)
            terms.extend(bigrams)
            counted += len(bigrams)
        else:
            plain.append(token)
            counted += 1
    if plain:
        terms.extend(_words(plain, language, cjk_language))
    return terms, counted


def _words(tokens: list[str], language: str, as_english: bool) -> list[str]:
    """The terms of a run of non-CJK word tokens: English rules in a CJK language, else the
    language's stop words, stems, then diacritics folded."""
    if as_english:  # Porter stems a lone "s" ("Apple's") to nothing: no empty term
        return [t for t in index_terms(" ".join(tokens))[0] if t]
    stops = _stop_words(language)
    kept = [t for t in tokens if t not in stops]
    stemmer = _stemmer(language)
    stems = stemmer.stemWords(kept) if stemmer is not None else kept
    return [f for f in (s if s.isascii() else fold_token(s) for s in stems) if f]


def language_terms(text: str, language: str) -> tuple[list[str], int]:
    """(stemmed terms of ``text`` that are indexed, in order with repeats; all tokens
    counted), analysed as ``language`` (ISO 639-1). English (and an empty code) is
    :func:`docgraph.text.index_terms` unchanged."""
    if not language or language == ENGLISH:
        return index_terms(text)
    return _analyze(text, language)


def language_query_terms(text: str, language: str) -> list[str]:
    """The distinct terms a query searches for when read as ``language`` (at most 64)."""
    if not language or language == ENGLISH:
        return query_terms(text)
    terms, _ = _analyze(text, language)
    return list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]


def query_terms_for(text: str, languages: Iterable[str]) -> list[str]:
    """The distinct terms of a query read in each of ``languages`` (English first, the rest
    in sorted order; none: English), at most 64. A query's language is not known and short
    queries are too short to detect, so it is read as every language its namespaces hold:
    a term one reading makes and no document of that namespace has matches nothing."""
    ordered = sorted(set(languages) or {ENGLISH}, key=lambda c: (c != ENGLISH, c))
    terms: dict[str, None] = {}
    for language in ordered:
        terms.update(dict.fromkeys(language_query_terms(text, language)))
    return list(terms)[:MAX_QUERY_TERMS]
