"""Key phrases of a namespace from corpus statistics: entities that need no capital letters.

The vocabulary, pattern and proper-name extractors (:mod:`docgraph.graph.extract`) find
almost nothing in text written in lower case (chat logs, tickets, transcripts, many
scientific abstracts). This module picks a namespace's *key phrases* from the statistics of
all its chunks, whatever their letter case:

- **specific terms**: single words far more frequent in the namespace than in general
  language (general-language frequencies come from the ``wordfreq`` package, e.g.
  ``insulin`` or ``apoptosis`` in medical abstracts, not ``patients`` or ``study``'s
  neighbours ``the`` or ``with``);
- **collocations**: runs of two or more words that occur together far more often than their
  words' frequencies predict (``heart failure``, ``quality of life``), containing at least
  one specific word.

Both must occur in at least ``min_chunks`` chunks and in at most ``max_chunk_share`` of
them (a word in every other chunk links everything to everything and separates nothing),
and must be *topical*: repeated within the chunks that use them more than a word spread at
random would be (residual IDF, Church and Gale 1995), which sets apart ``insulin`` from
``measured`` or ``enhanced``, unless they hold a word rare in general language and are very
specific (a gene named once in each of three abstracts). A phrase of three or more words
that is mostly a shorter phrase in passing context (``heart failure patients``) is left to
the shorter one.

Selection is a pure function of the multiset of chunk texts (counts, thresholds, then
canonical keys in sorted order), so equal namespaces give equal phrase sets whatever the
order or the row ids of their chunks. The chosen phrases become a :class:`VocabularyMatcher`
layer of type ``phrase`` under the same :func:`~docgraph.graph.normalize.canonical_key`
as every other entity, so ``Heart failure`` found as a phrase and ``Heart Failure`` found as
a proper name are one entity.
"""

from __future__ import annotations

import functools
import math
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from docgraph.graph.extract import VocabularyMatcher
from docgraph.graph.normalize import canonical_key
from docgraph.store.lexical import STOPWORDS

PHRASE_TYPE = "phrase"

# A run of words separated by single spaces: the only shape the vocabulary matcher can find
# again (it matches the casefolded text literally, on word boundaries).
_RUN = re.compile(r"\w+(?:[-'’]\w+)*(?: \w+(?:[-'’]\w+)*)*")
# General-language frequency (share of running words) above which a word cannot start or end
# a phrase: function words (the, of, with, were, which, ...), about Zipf 5.5 and above.
_FUNCTION_WORD_FREQUENCY = 10 ** (5.5 - 9)
# Frequency assumed for a word general language does not know (about once in 10^9 words).
_UNKNOWN_FREQUENCY = 1e-9


@dataclass(frozen=True, slots=True)
class KeyphraseParams:
    """How key phrases are chosen (see the module docstring); ``language`` names the
    ``wordfreq`` word list of general-language frequencies."""

    language: str = "en"
    max_words: int = 3
    min_chunks: int = 3
    max_chunk_share: float = 0.05
    min_specificity: float = 1.0  # log10(namespace frequency / general frequency)
    min_association: float = 1.0  # log10(observed / expected) of a phrase's words together
    min_residual_idf: float = 0.5  # bits; or, for a phrase with a word rare in general
    max_rare_frequency: float = 1e-6  # language (Zipf 3 and below), a specificity of at
    min_specificity_alone: float = 2.0  # least this
    max_per_chunk: int = 5  # phrase entities a chunk keeps (highest TF-IDF)
    max_extension: float = 0.5  # a phrase of 3+ words in at most this share of the uses of
    # its shorter part (without its first or last word) is that part in context

    def fingerprint(self) -> str:
        """Changes whenever the same texts could give other phrases."""
        return (f"{self.language}:{self.max_words}:{self.min_chunks}:{self.max_chunk_share}"
                f":{self.min_specificity}:{self.min_association}:{self.min_residual_idf}"
                f":{self.max_rare_frequency}:{self.min_specificity_alone}"
                f":{self.max_extension}:{self.max_per_chunk}")


@dataclass(frozen=True, slots=True)
class Keyphrase:
    """A chosen phrase: canonical key, every spelling seen (casefolded, sorted), chunks that
    contain it, occurrences and its ranking score (specificity of its most specific word)."""

    key: str
    surfaces: tuple[str, ...]
    chunks: int
    occurrences: int
    score: float


def check_language(language: str) -> None:
    """Raise ``LookupError`` unless ``wordfreq`` has word frequencies for ``language`` (a
    directory listing: the lists themselves load at the first graph build)."""
    import wordfreq

    if language not in wordfreq.available_languages():
        raise LookupError(f"wordfreq has no word frequencies for language {language!r}")


@functools.lru_cache(maxsize=4)
def general_frequencies(language: str) -> dict[str, float]:
    """Word -> share of running words in general ``language`` (``wordfreq``'s large list
    when there is one, else its small list); raises ``LookupError`` for an unknown language."""
    import wordfreq

    for wordlist in ("large", "small"):
        try:
            frequencies = wordfreq.get_frequency_dict(language, wordlist)
        except LookupError:
            continue
        if frequencies:
            return dict(frequencies)
    raise LookupError(f"wordfreq has no word frequencies for language {language!r}")


def _fold(text: str) -> str:
    """Casefolded text of the same length (the vocabulary matcher's view of it)."""
    folded = text.casefold()
    if len(folded) == len(text):
        return folded
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else ""


_PARTS = re.compile(r"[-'’]")
_DIGIT = re.compile(r"\d")


def _general_frequency(word: str, general: dict[str, float]) -> float:
    """General-language frequency of ``word``; a compound (``long-term``) not listed whole
    gets the combined frequency of its listed parts, ``1 / sum(1 / f)`` (the word lists are
    of single tokens); a word nobody lists gets a frequency of one in 10^9."""
    found = general.get(word)
    if found is not None:
        return found
    if sum(ch.isdigit() for ch in word) > 1:  # the lists write every digit of a number as 0
        found = general.get(_DIGIT.sub("0", word))
        if found is not None:
            return found
    parts = [p for p in _PARTS.split(word) if p]
    if len(parts) > 1 and all(p in general for p in parts):
        return 1.0 / sum(1.0 / general[p] for p in parts)
    return _UNKNOWN_FREQUENCY


def _has_letter(word: str) -> bool:
    return any(ch.isalpha() for ch in word)


def _tokens(texts: Iterable[str]) -> tuple[list[str], npt.NDArray[np.int64],
                                           npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """(distinct words, word id per running word, its chunk number, its run number, number
    of chunks); a run is a stretch of words separated by single spaces. Running words are
    gathered in a compact array (4 bytes each), not a list of Python ints."""
    vocabulary: dict[str, int] = {}
    ids = array("i")
    run_lengths = array("i")
    runs_per_chunk = array("i")
    for text in texts:
        runs = _RUN.findall(_fold(text))
        runs_per_chunk.append(len(runs))
        for run in runs:
            words = [vocabulary.setdefault(w, len(vocabulary)) for w in run.split(" ")]
            ids.extend(words)
            run_lengths.append(len(words))
    lengths = np.frombuffer(run_lengths, dtype=np.int32).astype(np.int64)
    run_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    chunk_of_run = np.repeat(np.arange(len(runs_per_chunk), dtype=np.int64),
                             np.frombuffer(runs_per_chunk, dtype=np.int32))
    chunk_of = np.repeat(chunk_of_run, lengths)
    return (list(vocabulary), np.frombuffer(ids, dtype=np.int32).astype(np.int64), chunk_of,
            run_of, len(runs_per_chunk))


def _unique_rows(rows: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64],
                                                       npt.NDArray[np.int64]]:
    """Distinct rows of a 2-D integer array in lexicographic order, and the row index of
    every input row."""
    if len(rows) == 0:
        return rows, np.zeros(0, dtype=np.int64)
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    group = np.cumsum(new) - 1
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = group
    return ordered[new], inverse


def _as_keys(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
    """Each row of a 2-D integer array as one comparable opaque value."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return rows.view(np.dtype((np.void, 8 * rows.shape[1]))).ravel()


def _gram_counts(ids: npt.NDArray[np.int64], run_of: npt.NDArray[np.int64],
                 allowed: npt.NDArray[np.bool_], size: int
                 ) -> tuple[npt.NDArray[np.void], npt.NDArray[np.int64]]:
    """Occurrences of every run of ``size`` words inside one run whose words are all
    ``allowed``: sorted opaque keys (:func:`_as_keys`) and their counts."""
    starts = np.arange(max(len(ids) - size + 1, 0))
    ok = allowed[ids[starts]]
    for k in range(1, size):
        ok &= (run_of[starts + k] == run_of[starts]) & allowed[ids[starts + k]]
    starts = starts[ok]
    keys, counts = np.unique(_as_keys(np.stack([ids[starts + k] for k in range(size)], axis=1)),
                             return_counts=True)
    return keys, counts.astype(np.int64)


def _lookup(keys: npt.NDArray[np.void], counts: npt.NDArray[np.int64],
            rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Count of each row of ``rows`` in (``keys``, ``counts``), 0 when absent."""
    wanted = _as_keys(rows)
    at = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
    if len(keys) == 0:
        return np.zeros(len(wanted), dtype=np.int64)
    return np.where(keys[at] == wanted, counts[at], 0)


def select_keyphrases(texts: Iterable[str], params: KeyphraseParams) -> list[Keyphrase]:
    """The key phrases of a namespace whose chunk texts are ``texts``, by canonical key."""
    general = general_frequencies(params.language)
    words, ids, chunk_of, run_of, n_chunks = _tokens(texts)
    total = len(ids)
    if total == 0:
        return []
    max_chunks = max(params.min_chunks, int(params.max_chunk_share * n_chunks))
    word_count = np.bincount(ids, minlength=len(words)).astype(np.float64)
    pairs = np.unique(chunk_of * len(words) + ids)
    word_chunks = np.bincount(pairs % len(words), minlength=len(words))
    frequency = np.array([_general_frequency(w, general) for w in words])
    specificity = np.log10(word_count / total / frequency)
    may_bound = np.array([len(w) >= 2 and _has_letter(w) and w not in STOPWORDS
                          for w in words]) & (frequency < _FUNCTION_WORD_FREQUENCY)
    may_bound &= word_chunks >= params.min_chunks
    may_inner = word_chunks >= params.min_chunks  # a phrase's chunks contain each word
    long_enough = np.array([len(w) >= 3 for w in words])

    by_key: dict[str, list[tuple[str, int, int, float]]] = {}
    for size in range(1, params.max_words + 1):
        if total < size:
            break
        starts = np.arange(total - size + 1)
        ok = may_bound[ids[starts]] & may_bound[ids[starts + size - 1]]
        if size == 1:
            ok &= long_enough[ids[starts]]
        for k in range(1, size):
            ok &= (run_of[starts + k] == run_of[starts]) & may_inner[ids[starts + k]]
        starts = starts[ok]
        if len(starts) == 0:
            continue
        grams = np.stack([ids[starts + k] for k in range(size)], axis=1)
        distinct, which = _unique_rows(grams)
        occurrences = np.bincount(which, minlength=len(distinct))
        in_chunks = np.bincount(np.unique(chunk_of[starts] * len(distinct) + which)
                                % len(distinct), minlength=len(distinct))
        # Residual IDF: observed IDF minus the IDF a Poisson-spread term would have.
        expected_df = n_chunks * -np.expm1(-occurrences / n_chunks)
        keep = (in_chunks >= params.min_chunks) & (in_chunks <= max_chunks)
        residual_idf = np.log2(expected_df / np.maximum(in_chunks, 1))
        score = specificity[distinct].max(axis=1)
        keep &= score >= params.min_specificity
        rare = frequency[distinct].min(axis=1) <= params.max_rare_frequency
        keep &= (residual_idf >= params.min_residual_idf) | (
            rare & (score >= params.min_specificity_alone))
        if size > 1:
            expected = total * np.prod(word_count[distinct] / total, axis=1)
            keep &= np.log10(occurrences / expected) >= params.min_association
        if size > 2 and keep.any():
            # A longer phrase that is mostly a shorter one in a passing context ("amyloid
            # plaques changed", "heart failure patients") adds nothing: the shorter one is
            # the entity.
            rows = np.flatnonzero(keep)
            sub_keys, sub_counts = _gram_counts(ids, run_of, may_inner, size - 1)
            for side in (distinct[rows, :-1], distinct[rows, 1:]):
                contained = _lookup(sub_keys, sub_counts, side)
                keep[rows[occurrences[rows] <= params.max_extension * contained]] = False
        for row in np.flatnonzero(keep).tolist():
            gram = " ".join(words[w] for w in distinct[row].tolist())
            key = canonical_key(gram, PHRASE_TYPE)
            if key:
                by_key.setdefault(key, []).append(
                    (gram, int(in_chunks[row]), int(occurrences[row]), float(score[row])))
    out: list[Keyphrase] = []
    for key in sorted(by_key):
        variants = by_key[key]
        chunks = sum(v[1] for v in variants)  # an upper bound: spellings may share chunks
        if chunks > max_chunks:
            continue
        out.append(Keyphrase(
            key=key,
            surfaces=tuple(sorted(v[0] for v in variants)),
            chunks=chunks,
            occurrences=sum(v[2] for v in variants),
            score=max(v[3] for v in variants),
        ))
    return out


def phrase_weights(phrases: Iterable[Keyphrase], chunks: int) -> dict[str, float]:
    """Phrase key -> its IDF among the namespace's ``chunks`` chunks."""
    return {p.key: math.log(max(chunks, 1) / max(p.chunks, 1)) + 1.0 for p in phrases}


def phrase_matcher(phrases: Iterable[Keyphrase]) -> VocabularyMatcher:
    """A vocabulary of type ``phrase`` matching every spelling of every phrase, each mapped to
    its phrase's canonical key."""
    matcher = VocabularyMatcher()
    for phrase in phrases:
        matcher.add(PHRASE_TYPE, phrase.surfaces, canonical=phrase.key)
    return matcher
