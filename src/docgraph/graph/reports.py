"""Community reports: extractive by default, LLM-written when a chat model is configured.

An extractive report is titled by the community's most *specific* members (entities and key
phrases mentioned mostly together with other members, rather than the most mentioned ones;
names with a word rare in general language before common words), lists key entities and
relationships, and quotes the *central* sentences of member chunks: chunks whose stored
vectors lie closest to the community centroid (the mean of its member chunks' vectors: no
model call), sentences that share the community's vocabulary, redundant ones removed (MMR)
and boilerplate (mail headers, signatures, contact tables, lists of names, very short
lines, fragments without a verb, lines of figures) skipped. Everything is deterministic:
ties break by passage and sentence order. The report is built only from the material in
:class:`ReportInput`, so a caller-side re-assembly from visible chunks
(``governance/reports.py``) shows nothing else.
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


#: Zipf frequency (log10 of occurrences per 10^9 words of general English, ``wordfreq``) at
#: and above which a word is *common*: "prevalence" 3.7, "units" 4.8, "cells" 4.8, "fixed"
#: 4.7; below it, specific: "retrieval" 3.3, "autophagy" 2.5, "Rotterdam" 3.2, "Nordhaven" 0.
COMMON_ZIPF = 3.5
_TITLE_LANGUAGE = "en"
#: Entity types the extractor infers (not a user's vocabulary or a pattern's own type).
_INFERRED_TYPES = frozenset({"name", "phrase", "acronym"})


@functools.lru_cache(maxsize=65536)
def _zipf(word: str) -> float:
    """General-language Zipf frequency of ``word`` (0 for a word wordfreq does not know)."""
    import wordfreq

    return float(wordfreq.zipf_frequency(word, _TITLE_LANGUAGE))


def _is_common(word: str) -> bool:
    return _zipf(word) >= COMMON_ZIPF


def _title_tier(name: str, entity_type: str) -> int:
    """How well a member names a community, best first. 0: a typed entity of a vocabulary,
    or a phrase or name with a word that is rare in general language ("septic shock", "Tern
    T3", "autophagy"); 1: a single rare word the proper-name heuristic found ("Nordhaven":
    often a name used everywhere in a corpus, a brand or a site); 2: a name or phrase of two
    or more words that are all common ("risk factors", "standard treatment": a collocation
    still says more than one word); 3: a single common word ("cells", "prevalence", and the
    sentence-initial words the name heuristic takes for names: "Fixed", "Info"); 4: bare
    identifiers and acronyms (versions, codes, tickets: no word with two lower-case
    letters), field names (``unit_price_eur``), addresses and links."""
    if _WORDLIKE.search(name) is None or "@" in name or "://" in name or "_" in name:
        return 4
    if entity_type not in _INFERRED_TYPES:
        return 0
    single = len(name.split()) == 1
    words = [w for w in _words(name) if len(w) >= 2 and not any(ch.isdigit() for ch in w)]
    if any(not _is_common(w) for w in words):
        return 1 if single and entity_type == "name" else 0
    return 3 if single else 2


def _same_stem(a: str, b: str) -> bool:
    """Two words with one stem: equal, or sharing a prefix of four letters or more that
    leaves at most two letters of the shorter ("axons" / "axonal", "mitochondria" /
    "mitochondrial", "cannabinoids" / "cannabinoid")."""
    if a == b:
        return True
    shared = 0
    for x, y in zip(a, b, strict=False):  # a prefix of the shorter one
        if x != y:
            break
        shared += 1
    return shared >= 4 and shared >= min(len(a), len(b)) - 2


def _covered(words: Sequence[str], by: Sequence[str]) -> bool:
    """Every word of ``words`` has the stem of a word of ``by``."""
    return all(any(_same_stem(w, o) for o in by) for w in words)


def community_title(
    members: Sequence[tuple[str, str, int, float]],
    top: int = 3,
    specific: Mapping[str, float] | None = None,
) -> str:
    """Title from the most specific members (``specific``: name -> :func:`specificity`), in
    tiers (:func:`_title_tier`: words rare in general language and multi-word phrases before
    single common words, identifiers last), a name whose words all share a stem with the
    words of an already chosen one skipped ("axonal" after "axons"), a longer name covering
    a chosen one put in its place ("cannabinoid receptor" for "cannabinoids"); without
    scores, from the most important members, e.g. ``Tern T3 / E-417 / Rotterdam``."""
    if not specific:
        return " / ".join(m[0] for m in rank_members(members)[:top]) or "Community"
    ranked = sorted(members, key=lambda m: (_title_tier(m[0], m[1]),
                                            -specific.get(m[0], 0.0), -_importance(m), m[0]))
    chosen: list[str] = []
    chosen_words: list[list[str]] = []
    for name, *_ in ranked:
        words = sorted(set(_words(name)))
        if not words or any(_covered(words, c) for c in chosen_words):
            continue
        wider = [i for i, c in enumerate(chosen_words) if _covered(c, words)]
        if wider:  # a longer name of a chosen one's stems takes its place
            chosen[wider[0]], chosen_words[wider[0]] = name, words
            for i in reversed(wider[1:]):
                del chosen[i], chosen_words[i]
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
# letters only: "E-417." or "firmware 1.4.3." ends a sentence, "fig." or "e.g." does not
_ABBREVIATION = re.compile(r"(?:\b[^\W\d_]{1,3}|\b(?:[^\W\d_]\.)+[^\W\d_]?|\bet al)\.$",
                           re.IGNORECASE)
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
_BRACKETED = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
# Words that join a clause to what came before: a sentence starting with one was cut from
# a longer one (a chunk boundary in a lower-case text, where no capital tells).
_CONTINUATION = frozenset("and or nor of than whereas which whom whose respectively".split())
# Words after which the next word is not the sentence's verb (see _has_verb).
_FUNCTION = frozenset(
    "of in on at by for from with to into onto about after before between among during "
    "under over through without within across against along around behind beyond upon via "
    "per than as and or but nor so yet if while because since although though whether that "
    "which who whom whose what when where how why the a an this these those its their his "
    "her our your my all both each every some any no not only also just very more most "
    "such other".split())
_DETERMINER = frozenset("the a an this these those its their his her our your my that "
                        "them it us him".split())
_SUBJECT = frozenset("i we you he she it they".split())
_AUXILIARY = frozenset(
    "is are was were be been being am has have had do does did can could may might must "
    "shall should will would cannot isn't aren't wasn't weren't don't doesn't didn't can't "
    "won't".split())
_NOT_VERBS = frozenset("during thing things nothing something anything everything morning "
                       "evening string spring ceiling hundred indeed speed seed".split())
_IRREGULAR = frozenset(
    "led made took ran went got gave found kept held told said saw met paid sent built began "
    "brought bought left lost put won wrote chose rose fell grew knew drove spoke broke "
    "became came shown known given taken seen done begun grown written spent stood felt "
    "meant".split())
_NUMBERS = frozenset("one two three four five six seven eight nine ten dozens hundreds "
                     "thousands millions several many few".split())
_NOT_S = ("ss", "us", "is", "ics", "ous")
_PUNCTUATION = ".,;:!?\"'()[]{}"
_FIGURE = re.compile(r"^[(\[{$€£±+<>~≈-]*\d")
#: Share of a sentence's words that are figures (start with a digit) from which it is a line
#: of results rather than a statement.
MAX_FIGURE_SHARE = 0.3
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


def _has_verb(tokens: Sequence[str]) -> bool:
    """Whether a sentence (its whitespace-split tokens) has a verb-like word: an
    auxiliary or modal, a common irregular past ("led", "made"), a word in -ed or -ing, a
    word after a subject pronoun ("it picks"), a word other than a function word followed
    by a determiner or "that" ("uses the", "show that", "check the"), or a word in -s after
    a capitalised name or a code ("Compass stores", "the T3 carries") or followed by a
    function word ("works in"), unless it follows a function word or a number ("two
    siblings with"). Lenient on purpose: it only has to tell a clause from a title, a
    caption or a list of nouns ("expression of vasopressin in tissue samples.")."""
    words = [t.strip(_PUNCTUATION).casefold() for t in tokens]
    for i, word in enumerate(words):
        if not word.isalpha():
            continue
        before = words[i - 1] if i else ""
        after = words[i + 1] if i + 1 < len(words) else ""
        if word in _AUXILIARY or word in _IRREGULAR:
            return True
        if word not in _NOT_VERBS and len(word) >= 5 and word.endswith(("ed", "ing")):
            return True
        if word in _FUNCTION:
            continue
        if before in _SUBJECT or (after in _DETERMINER and tokens[i][-1:].isalpha()):
            return True  # not "the school, the children": a list
        if (i and len(word) >= 4 and word.endswith("s") and not word.endswith(_NOT_S)
                and before not in _FUNCTION and before not in _NUMBERS
                and (after in _FUNCTION or not tokens[i - 1].strip(_PUNCTUATION).islower())):
            return True
    return False


def is_fragment(sentence: str) -> bool:
    """A sentence that does not read on its own: no verb-like word (a title, a caption, a
    list of nouns: :func:`_has_verb`), a first word that continues a previous clause ("and",
    "which", "of"), fewer than ``MIN_WORDS`` words outside brackets (mostly a citation or a
    list of figures in parentheses), or ``MAX_FIGURE_SHARE`` of its words or more figures
    (a line of results: "14.8 (5, 9, 17) days with rhc and 13.0 (4, 7, 14) ..."; codes
    such as "E-417" are words)."""
    tokens = sentence.split()
    if sum(bool(_FIGURE.match(t)) for t in tokens) >= MAX_FIGURE_SHARE * len(tokens):
        return True
    words = [t for t in tokens if t.strip(_PUNCTUATION)]
    if not words or words[0].strip(_PUNCTUATION).casefold() in _CONTINUATION:
        return True
    if len(_WORD.findall(_BRACKETED.sub(" ", sentence))) < MIN_WORDS:
        return True
    return not _has_verb(words)


def is_boilerplate(sentence: str, cased: bool = True, strict: bool = True) -> bool:
    """A sentence not worth quoting: a mail header or field label line, a greeting or
    signature closing, a contact line (addresses, URLs, phone numbers), a table row or a
    record of ``label: value`` fields, a line that is mostly a list of names or figures, a
    fragment (no closing stop, an unopened parenthesis, or in a ``cased`` text a lower-case
    start: a chunk cut mid-sentence), or fewer than ``MIN_WORDS`` words; when ``strict``,
    also a sentence that does not read on its own (:func:`is_fragment`)."""
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
    if cased and len(alpha) >= MIN_WORDS and capital >= 0.7 * len(alpha):
        return True  # a list of names
    return strict and is_fragment(sentence)


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
