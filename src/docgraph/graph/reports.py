"""Community reports: extractive by default, LLM-written when a chat model is configured.

An extractive report is titled by the community's most *specific* members (entities and key
phrases mentioned mostly together with other members, rather than the most mentioned ones),
lists key entities and relationships, and quotes the *central* sentences of member chunks:
chunks whose stored vectors lie closest to the community centroid (the mean of its member
chunks' vectors: no model call), sentences that share the community's vocabulary, redundant
ones removed (MMR) and boilerplate (mail headers, signatures, contact tables, lists of names,
very short lines) skipped. Everything is deterministic: ties break by passage and sentence
order. The report is built only from the material in :class:`ReportInput`, so a caller-side
re-assembly from visible chunks (``governance/reports.py``) shows nothing else.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from docgraph.llm import ChatModel
from docgraph.model import Vector


@dataclass(frozen=True)
class ReportInput:
    """What a report is written from.

    ``passage_vectors`` (aligned with ``passages``) and ``centroid`` are the stored chunk
    vectors and the community's normalised mean vector; without them sentences are ranked
    by their words alone. ``specificity`` maps member names to :func:`specificity` scores;
    without it the title falls back to the most important members.
    """

    members: Sequence[tuple[str, str, int, float]]  # (name, type, chunk count, centrality)
    relationships: Sequence[tuple[str, str, int]]  # (name a, name b, shared chunks)
    passages: Sequence[str]  # texts of the chunks most central to the community
    passage_vectors: Sequence[Vector] | None = None
    centroid: Vector | None = None
    specificity: Mapping[str, float] | None = None


def _importance(member: tuple[str, str, int, float]) -> float:
    """Centrality inside the community, damped for entities seen in very few chunks."""
    return member[3] * math.log1p(member[2])


def rank_members(
    members: Sequence[tuple[str, str, int, float]],
) -> list[tuple[str, str, int, float]]:
    """Members by importance (centrality x log(1 + chunks)), then name."""
    return sorted(members, key=lambda m: (-_importance(m), m[0]))


def specificity(inside: int, total: int) -> float:
    """How specific an entity is to a community: the share of its ``total`` chunks that are
    ``inside`` ones (chunks where it co-occurs with another member), smoothed so one chunk is
    weak evidence, times ``log(1 + inside)``. A hub mentioned everywhere (a sender's name,
    a company in every signature) has a low share; a term used mostly with the community's
    other members has a high one."""
    if inside <= 0 or total <= 0:
        return 0.0
    return inside / (total + 1) * math.log1p(inside)


_WORD = re.compile(r"\w+")
_NON_LETTERS = re.compile(r"[\W\d_]+")


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _title_tier(name: str, entity_type: str) -> int:
    """0: words (phrases, typed entities, names of two words or more); 1: a single
    capitalised word the proper-name heuristic found (often a sentence-initial common
    word: "Fixed", "Info"); 2: bare identifiers and acronyms (versions, codes, tickets: no
    word with two lower-case letters), addresses and links."""
    if _WORDLIKE.search(name) is None or "@" in name or "://" in name:
        return 2
    return 1 if entity_type == "name" and len(name.split()) == 1 else 0


def community_title(
    members: Sequence[tuple[str, str, int, float]],
    top: int = 3,
    specific: Mapping[str, float] | None = None,
) -> str:
    """Title from the most specific members (``specific``: name -> :func:`specificity`), a
    name whose words are all in an already chosen one (or the reverse) skipped, in tiers
    (:func:`_title_tier`); without
    scores, from the most important members, e.g. ``Tern T3 / E-417 / Rotterdam``."""
    if not specific:
        return " / ".join(m[0] for m in rank_members(members)[:top]) or "Community"
    ranked = sorted(members, key=lambda m: (_title_tier(m[0], m[1]),
                                            -specific.get(m[0], 0.0), -_importance(m), m[0]))
    chosen: list[str] = []
    chosen_words: list[set[str]] = []
    for name, *_ in ranked:
        words = set(_words(name))
        if not words or any(words <= c or c <= words for c in chosen_words):
            continue
        chosen.append(name)
        chosen_words.append(words)
        if len(chosen) == top:
            break
    return " / ".join(chosen) or "Community"


# -- sentences -----------------------------------------------------------------------------

# A sentence ends at . ! ? followed by space and a letter, digit or opening mark, in any
# case (lower-cased corpora have no capital to look for), unless the word before the stop is
# a short abbreviation (e.g., et al., fig., vs.).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?\w)")
_BREAK = re.compile(r"\s*(?:[-=_*~]{4,}|;\s+(?=[\w .\[\]-]{1,30}:\s))\s*")  # rules, fields
_LABEL = re.compile(r"^[a-z][\w .\[\]-]{0,29}:\s+")  # a record's "field_name: "
_ABBREVIATION = re.compile(r"(?:\b\w{1,3}|\b(?:\w\.)+\w?|\bet al)\.$", re.IGNORECASE)
_HEADER = re.compile(
    r"^\W*(from|to|cc|bcc|subject|sent|date|reply-to|re|fw|fwd|tel|phone|fax|mobile|cell|"
    r"e-?mail|www|web|address|attachments?)\s*:", re.IGNORECASE)
_CLOSING = re.compile(
    r"^\W*(best|kind|warm)?\s*(regards|wishes)|^\W*(sincerely|cheers|thanks|thank you|"
    r"yours)\b|^\W*sent from my\b|^\W*(on .{5,80} wrote:)", re.IGNORECASE)
_CONTACT = re.compile(r"\S+@\S+\.\w+|https?://|\+?\d[\d ()./-]{7,}\d")
_FIELD = re.compile(r"(?:^|[;|,]\s*)[\w .\[\]-]{1,30}:\s")  # "label: value" fields
_ENDS = re.compile(r"[.!?][\"')\]]*$")
_WORDLIKE = re.compile(r"[^\W\d_]*[^\W\d_A-Z]{2}")  # a word with two lower-case letters
#: Member chunks a report chooses its sentences from (most members mentioned first).
CANDIDATE_CHUNKS = 16
MIN_WORDS = 6
MAX_CHARS = 600


def _split_sentences(text: str) -> list[str]:
    """Sentences of a passage: lines first (a mail or table line is never joined to the
    next), then rules and the fields of a ``label: value; label: value`` record (a long
    value is quoted without its lower-case label), then sentence stops in any letter case."""
    out: list[str] = []
    pieces = (p for line in text.splitlines() for p in _BREAK.split(line))
    for line in pieces:
        line = _LABEL.sub("", line.strip().lstrip("#>-*• ").replace("**", "").strip())
        if not line:
            continue
        start = 0
        for match in _SENTENCE_END.finditer(line):
            if _ABBREVIATION.search(line[start:match.start()]):
                continue
            out.append(line[start:match.start()].strip())
            start = match.end()
        out.append(line[start:].strip())
    return [s for s in out if s]


def is_boilerplate(sentence: str, cased: bool = True, strict: bool = True) -> bool:
    """A sentence not worth quoting: a mail header or field label line, a greeting or
    signature closing, a contact line (addresses, URLs, phone numbers), a table row or a
    record of ``label: value`` fields, a line that is mostly a list of names or figures, a
    fragment (no closing stop, an unopened parenthesis, or in a ``cased`` text a lower-case
    start: a chunk cut mid-sentence), or fewer than ``MIN_WORDS`` words."""
    words = sentence.split()
    if len(words) < MIN_WORDS or len(sentence) > MAX_CHARS or not _ENDS.search(sentence):
        return True
    if (cased and sentence[:1].islower()) or sentence.count(")") > sentence.count("("):
        return True
    if _HEADER.search(sentence) or _CLOSING.search(sentence) or sentence.count("|") >= 2:
        return True
    if len(_FIELD.findall(sentence)) >= 3 or sentence.count(" - ") >= 3:
        return True  # a record of fields or an inline list
    if len(_CONTACT.findall(sentence)) >= 1 and len(words) < 15:
        return True
    letters = len(_NON_LETTERS.sub("", sentence))
    if letters < 0.6 * (len(sentence) - sentence.count(" ")):
        return True  # mostly digits, codes or punctuation: a table or a list of figures
    alpha = [w for w in words if w[:1].isalpha()]
    capital = sum(w[0].isupper() for w in alpha)
    return cased and len(alpha) >= MIN_WORDS and capital >= 0.7 * len(alpha)  # names


@dataclass(frozen=True)
class _Candidate:
    passage: int
    index: int
    text: str
    words: frozenset[str]


@functools.lru_cache(maxsize=8192)
def _quotable(passage: str, strict: bool) -> tuple[tuple[int, str, str, frozenset[str]], ...]:
    """(sentence index, sentence, folded sentence, its words) of a passage's quotable
    sentences; cached, since one chunk is a candidate of a community at every level."""
    cased = passage != passage.casefold()
    out = []
    for s_index, sentence in enumerate(_split_sentences(passage)):
        if is_boilerplate(sentence, cased, strict):
            continue
        words = frozenset(w for w in _words(sentence) if len(w) >= 3 and not w.isdigit())
        out.append((s_index, sentence, " ".join(sentence.casefold().split()), words))
    return tuple(out)


def _candidates(passages: Sequence[str], strict: bool) -> list[_Candidate]:
    """The quotable sentences of the passages, first occurrence of each."""
    out: list[_Candidate] = []
    seen: set[str] = set()
    for p_index, passage in enumerate(passages):
        for s_index, sentence, folded, words in _quotable(passage, strict):
            if folded not in seen:
                seen.add(folded)
                out.append(_Candidate(p_index, s_index, sentence, words))
    return out


def _cosines(vectors: Sequence[Vector] | None, centroid: Vector | None, n: int) -> list[float]:
    """Each passage's cosine to the centroid (0 for all without vectors)."""
    if vectors is None or centroid is None or len(vectors) != n or n == 0:
        return [0.0] * n
    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    c = np.asarray(centroid, dtype=np.float64)
    c_norm = float(np.linalg.norm(c)) or 1.0
    # rounded: a centroid summed in another chunk order (an incremental build) must not
    # change which sentence wins
    cosines: list[float] = np.round(matrix @ c / np.maximum(norms, 1e-12) / c_norm, 6).tolist()
    return cosines


def central_sentences(
    passages: Sequence[str], member_names: Sequence[str], limit: int,
    vectors: Sequence[Vector] | None = None, centroid: Vector | None = None,
    redundancy: float = 0.6,
) -> list[str]:
    """The ``limit`` most central non-boilerplate sentences, greedily (MMR): score = 0.5 x
    the passage's cosine to the community centroid (rescaled to [0, 1] over the passages)
    + 0.5 x the sentence's share of the community vocabulary (words weighted by the number
    of passages using them, plus member names it mentions, rescaled), minus ``redundancy``
    x its largest word overlap (Jaccard) with a chosen sentence, minus 0.1 per sentence
    already quoted from the same passage. Ties: earlier passage, earlier sentence. When
    every sentence is boilerplate (a community of table records), the record lines that are
    not headers, closings or contacts are candidates instead."""
    candidates = _candidates(passages, strict=True) or _candidates(passages, strict=False)
    if not candidates:
        return []
    used_by: Counter[str] = Counter()
    for p_index in range(len(passages)):
        used_by.update(set().union(*[c.words for c in candidates if c.passage == p_index]))
    names = [n.casefold() for n in member_names if len(n) >= 2]

    def lexical(c: _Candidate) -> float:
        shared = sum(used_by[w] - 1 for w in c.words)  # words other passages use too
        hits = sum(1 for n in names if n in c.text.casefold())
        return shared / math.sqrt(len(c.words) + 1) + hits

    cos = _cosines(vectors, centroid, len(passages))
    lo, hi = min(cos), max(cos)
    passage_score = [(x - lo) / (hi - lo) if hi > lo else 0.0 for x in cos]
    raw = [lexical(c) for c in candidates]
    top = max(raw) or 1.0
    base = [0.5 * passage_score[c.passage] + 0.5 * r / top
            for c, r in zip(candidates, raw, strict=True)]
    chosen: list[int] = []
    per_passage: Counter[int] = Counter()
    while len(chosen) < min(limit, len(candidates)):
        best, best_score = -1, -math.inf
        for i, c in enumerate(candidates):
            if i in chosen:
                continue
            overlap = max((len(c.words & candidates[j].words)
                           / max(len(c.words | candidates[j].words), 1) for j in chosen),
                          default=0.0)
            score = base[i] - redundancy * overlap - 0.1 * per_passage[c.passage]
            if score > best_score:  # strict: the earlier candidate wins a tie
                best, best_score = i, score
        chosen.append(best)
        per_passage[candidates[best].passage] += 1
    return [candidates[i].text for i in chosen]


def extractive_report(data: ReportInput, sentences: int = 4) -> str:
    """A Markdown report built only from the community's own entities and text."""
    ranked = rank_members(data.members)
    title = community_title(ranked, specific=data.specificity)
    lines = [f"# {title}", ""]
    lines.append("Key entities: " + "; ".join(
        f"{name} ({etype}, {count} chunks)" for name, etype, count, _ in ranked[:10]
    ) + ".")
    if data.relationships:
        lines.append("Key relationships: " + "; ".join(
            f"{a} - {b} ({n} shared chunks)" for a, b, n in data.relationships[:8]
        ) + ".")
    quoted = central_sentences(data.passages, [m[0] for m in ranked[:15]], sentences,
                               data.passage_vectors, data.centroid)
    if quoted:
        lines += ["", "Summary: " + " ".join(quoted)]
    return "\n".join(lines)


def llm_report(data: ReportInput, model: ChatModel, sentences: int = 4) -> str:
    """A report written by a chat model from the extractive material (title kept)."""
    material = extractive_report(data, sentences=max(sentences, 8))
    summary = model.complete(
        "You write community reports for a knowledge graph. From the material below, write "
        "a factual summary (at most 120 words) of what connects these entities. Use only the "
        "material; do not invent facts.\n\n" + material
    )
    head = material.split("\n\nSummary:")[0]
    return f"{head}\n\nSummary: {summary.strip()}" if summary.strip() else material
