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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from docgraph.graph.extract import VocabularyMatcher
from docgraph.graph.normalize import canonical_key
from docgraph.text import STOPWORDS

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


class Vocabulary:
    """Word ids shared by every chunk a builder has tokenized, with what selection needs to
    know of each word, computed once per word (``wordfreq`` lookups are the costly part).
    Ids only grow; selection never depends on their order."""

    def __init__(self, language: str) -> None:
        self.language = language
        self.ids: dict[str, int] = {}
        self.words: list[str] = []
        self._frequency = array("d")
        self._may_bound = array("b")
        self._long_enough = array("b")

    def tokenize(self, text: str) -> ChunkTokens:
        """The word ids of ``text`` (casefolded) and its words per run, a run being a stretch
        of words separated by single spaces (the only shape the phrase matcher finds)."""
        ids = array("i")
        runs = array("i")
        vocabulary = self.ids
        for run in _RUN.findall(_fold(text)):
            words = run.split(" ")
            for word in words:
                found = vocabulary.get(word)
                if found is None:
                    found = vocabulary[word] = len(vocabulary)
                    self.words.append(word)
                ids.append(found)
            runs.append(len(words))
        return ChunkTokens(np.frombuffer(ids, dtype=np.int32), np.frombuffer(runs, dtype=np.int32))

    def facts(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_],
                             npt.NDArray[np.bool_]]:
        """Per word id: general-language frequency, whether it may start or end a phrase
        (not a function word, stopword or letterless token) and whether it is 3+ letters."""
        if len(self._frequency) < len(self.words):
            general = general_frequencies(self.language)
            for word in self.words[len(self._frequency):]:
                frequency = _general_frequency(word, general)
                self._frequency.append(frequency)
                self._may_bound.append(len(word) >= 2 and _has_letter(word)
                                       and word not in STOPWORDS
                                       and frequency < _FUNCTION_WORD_FREQUENCY)
                self._long_enough.append(len(word) >= 3)
        return (np.frombuffer(self._frequency, dtype=np.float64),
                np.frombuffer(self._may_bound, dtype=np.int8).astype(bool),
                np.frombuffer(self._long_enough, dtype=np.int8).astype(bool))


@dataclass(frozen=True, slots=True)
class ChunkTokens:
    """One chunk's running words as vocabulary ids, and the number of words of each run."""

    ids: npt.NDArray[np.int32]
    runs: npt.NDArray[np.int32]


def _stack(chunks: Sequence[ChunkTokens]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                                   npt.NDArray[np.int64]]:
    """(word id per running word, its chunk number, its run number) of all chunks."""
    if not chunks:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    ids = np.concatenate([c.ids for c in chunks]).astype(np.int64)
    lengths = np.concatenate([c.runs for c in chunks]).astype(np.int64)
    run_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    words_per_chunk = np.array([len(c.ids) for c in chunks], dtype=np.int64)
    chunk_of = np.repeat(np.arange(len(chunks), dtype=np.int64), words_per_chunk)
    return ids, chunk_of, run_of


def _codes(ids: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], size: int,
           base: int) -> npt.NDArray[np.int64]:
    """Each run of ``size`` word ids from ``starts`` as one integer (base-``base`` digits, so
    numeric order is lexicographic order of the runs)."""
    codes = ids[starts].copy()
    for k in range(1, size):
        codes *= base
        codes += ids[starts + k]
    return codes


def _decode(codes: npt.NDArray[np.int64], size: int, base: int) -> npt.NDArray[np.int64]:
    """The word ids (one row per code) of :func:`_codes`."""
    rows = np.empty((len(codes), size), dtype=np.int64)
    rest = codes.copy()
    for k in range(size - 1, -1, -1):
        rows[:, k] = rest % base
        rest //= base
    return rows


def _distinct_per_group(group: npt.NDArray[np.int64], chunk: npt.NDArray[np.int64],
                        groups: int, chunks: int) -> npt.NDArray[np.int64]:
    """How many distinct chunks each group occurs in (a sparse matrix sums the duplicate
    (group, chunk) pairs in linear time; no sort of all occurrences)."""
    matrix = sp.csr_matrix((np.ones(len(group), dtype=np.int32), (group, chunk)),
                           shape=(groups, chunks))
    matrix.sum_duplicates()
    indptr: npt.NDArray[np.int64] = np.asarray(matrix.indptr, dtype=np.int64)
    return np.diff(indptr)


def _gram_counts(ids: npt.NDArray[np.int64], run_of: npt.NDArray[np.int64],
                 allowed: npt.NDArray[np.bool_], size: int, base: int
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Occurrences of every run of ``size`` words inside one run whose running words are all
    ``allowed`` (one flag per running word): sorted codes (:func:`_codes`) and counts."""
    starts = np.arange(max(len(ids) - size + 1, 0))
    ok = allowed[starts].copy()
    for k in range(1, size):
        ok &= (run_of[starts + k] == run_of[starts]) & allowed[starts + k]
    codes, counts = np.unique(_codes(ids, starts[ok], size, base), return_counts=True)
    return codes, counts.astype(np.int64)


def _lookup(codes: npt.NDArray[np.int64], counts: npt.NDArray[np.int64],
            wanted: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Count of each of ``wanted`` in (``codes``, ``counts``), 0 when absent."""
    if len(codes) == 0:
        return np.zeros(len(wanted), dtype=np.int64)
    at = np.minimum(np.searchsorted(codes, wanted), len(codes) - 1)
    return np.where(codes[at] == wanted, counts[at], 0)


def select_keyphrases(texts: Iterable[str], params: KeyphraseParams) -> list[Keyphrase]:
    """The key phrases of a namespace whose chunk texts are ``texts``, by canonical key."""
    vocabulary = Vocabulary(params.language)
    return choose_keyphrases([vocabulary.tokenize(t) for t in texts], vocabulary, params)


def choose_keyphrases(chunks: Sequence[ChunkTokens], vocabulary: Vocabulary,
                      params: KeyphraseParams) -> list[Keyphrase]:
    """The key phrases of a namespace whose chunks, tokenized with ``vocabulary`` (whose
    language must be ``params.language``), are ``chunks``: all counting is over their word
    ids, so a build that kept its chunks' tokens never reads their text again."""
    frequency, may_bound, long_enough = vocabulary.facts()
    words = vocabulary.words
    ids, chunk_of, run_of = _stack(chunks)
    n_chunks = len(chunks)
    total = len(ids)
    if total == 0:
        return []
    n_words = len(words)
    max_chunks = max(params.min_chunks, int(params.max_chunk_share * n_chunks))
    word_count = np.bincount(ids, minlength=n_words).astype(np.float64)
    word_chunks = _distinct_per_group(ids, chunk_of, n_words, n_chunks)
    with np.errstate(divide="ignore"):
        specificity = np.log10(word_count / total / frequency)
    may_bound = may_bound & (word_chunks >= params.min_chunks)
    may_inner = word_chunks >= params.min_chunks  # a phrase's chunks contain each word
    # Runs of 2+ words hold only such words: numbered densely among themselves, they make
    # small n-gram codes whatever the size of the (process-wide, growing) vocabulary.
    inner_words = np.flatnonzero(may_inner)
    dense = np.full(n_words, -1, dtype=np.int64)
    dense[inner_words] = np.arange(len(inner_words))
    base = max(len(inner_words), 1)
    if base ** params.max_words >= 2 ** 62:
        raise ValueError(f"{base} words in {params.min_chunks}+ chunks: too many for"
                         f" {params.max_words}-word codes")
    dense_ids = dense[ids]

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
        if size == 1:
            codes, which, occurrences = np.unique(ids[starts], return_inverse=True,
                                                  return_counts=True)
            distinct = codes[:, None]
        else:
            codes, which, occurrences = np.unique(_codes(dense_ids, starts, size, base),
                                                  return_inverse=True, return_counts=True)
            distinct = inner_words[_decode(codes, size, base)]
        in_chunks = _distinct_per_group(which, chunk_of[starts], len(codes), n_chunks)
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
            sub_codes, sub_counts = _gram_counts(dense_ids, run_of, may_inner[ids],
                                                 size - 1, base)
            for side in (distinct[rows, :-1], distinct[rows, 1:]):
                flat = np.arange(len(side), dtype=np.int64) * (size - 1)
                contained = _lookup(sub_codes, sub_counts,
                                    _codes(dense[side.ravel()], flat, size - 1, base))
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
        in_chunks_total = sum(v[1] for v in variants)  # an upper bound: spellings may share
        if in_chunks_total > max_chunks:  # chunks
            continue
        out.append(Keyphrase(
            key=key,
            surfaces=tuple(sorted(v[0] for v in variants)),
            chunks=in_chunks_total,
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
