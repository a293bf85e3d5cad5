"""Splitting a run of capitalized words into the proper names it contains.

Extracted text often loses the line breaks and markup that separated two names: a PDF
signature ``Joost van Dijk`` / ``Site Operations Manager`` arrives as one run of capitalized
words, a table cell ``Author`` runs into the next cell's ``Mei Tanaka``. :func:`split_run`
cuts such a run at the boundaries a reader would see:

- capitalized function words inside the run (``Safety The Heron H7``);
- coordination with ``and`` (``Heron H7 and Plover P2``), unless the run ends in a word that
  names a titled thing (``Travel and Expense Policy``);
- a possessive (``Halyard's Firmware Release Manager``);
- job titles: before ``Head of`` / ``Director of`` / ``VP`` / ``Chief``, after a title word
  followed by something that is not part of the title (``Roost Platform Lead | Author``), and
  before a trailing title of two or more words when two or more words remain for the person
  (``Joost van Dijk | Site Operations Manager``);
- a line break after a short line (a signature, a heading, a form field);
- a word repeated at the boundary of a heading and its text (``Policy Policy``);
- field labels: a label word before a colon (``Caller:``) or opening a run (``Author``);
- units and currencies next to a number (``600 MB Mei Tanaka``, ``Leeds GBP 130``);
- a verb opening a sentence (``Describes Roost Fleet Manager``).

Each returned segment is a list of word tokens ``(start, end, word)`` in text order.
"""

from __future__ import annotations

import re

Token = tuple[int, int, str]

CONNECTORS = frozenset({"of", "de", "van", "von", "der", "la", "du", "and", "&"})

_TITLE_WORDS = frozenset(
    """manager director lead officer engineer head chair chairman chairwoman chairperson
    president vp svp evp ceo cto cfo coo cio ciso specialist coordinator analyst
    administrator consultant architect supervisor technician representative counsel
    secretary treasurer assistant intern founder editor advisor adviser scientist developer
    designer planner controller commander superintendent executive""".split()
)
_FUNCTION_WORDS = frozenset(
    """site operations operational sales support customer product products engineering field
    service services marketing finance financial security platform release firmware software
    hardware account accounts project program programme quality technical people hr it data
    supply chain group regional country fulfilment fulfillment logistics warehouse business
    development research legal compliance risk safety facilities shift commercial
    communications design content office network systems infrastructure devops test qa
    delivery partner channel success general managing senior junior principal chief deputy
    vice associate acting interim staff global team incident training procurement purchasing
    public relations brand digital innovation strategy treasury tax audit internal external
    trade inventory maintenance production manufacturing plant distribution transport
    executive area national district branch store""".split()
)
# Title words that start a title phrase inside a run (``Oliver Hughes VP Sales``), and those
# that do when followed by ``of`` (``Priya Raman Head of Customer Support``).
_SPLIT_BEFORE = frozenset({"vp", "svp", "evp", "chief"})
_SPLIT_BEFORE_OF = frozenset(
    {"head", "director", "president", "chair", "manager", "dean", "minister", "secretary"}
)
# Last words of names that legitimately contain "and" (``Travel and Expense Policy``).
_TITLED_HEADS = frozenset(
    """policy policies guide process procedure procedures reference manual handbook plan
    standard standards committee board council department division ministry institute
    university college school society association foundation agency commission office
    services company group act award workshop conference program programme framework
    agreement conditions regulations rules guidelines response network party museum
    hospital trust academy federation union""".split()
)
# Field labels of forms, transcripts and tables.
_LABELS = frozenset(
    """author authors owner reviewer reviewers approver approvers chair caller attendees
    participants notes products parameter subject ticket date location contact reporter
    assignee cc customer site line status priority severity agenda title version competitor
    from to""".split()
)
# Labels that open a run without a colon (``Author Mei Tanaka``); ``customer`` and ``site``
# are left out because they also start real names (``Customer Support``).
_OPENING_LABELS = _LABELS - {"customer", "site", "line", "title", "version", "status"}
# Verbs that open sentences of notes, runbooks and summaries.
_SENTENCE_VERBS = frozenset(
    """add added ask asked call called check checked close closed confirm confirmed contact
    contacted create describe described describes enable ensure escalate escalated explain
    explains follow inform informed install installed keep lists make move moved note noted
    notify open opened plan planned provide provides read reboot rebooted record remove
    replace replaced report reported request requested restart restarted review reviewed run
    schedule scheduled send sent set share shows submit tell test tested update updated
    upgrade upgraded use verify verified covers contains includes defines applies requires
    agreed approved released deployed received completed fixed""".split()
)

_POSSESSIVE_END = re.compile(r"['’]s?$")
_UNIT_BEFORE = re.compile(r"\d[ \t]*$")
_NUMBER_AFTER = re.compile(r"^[ \t]*\d")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s|\n|[-*•]\s|\")[\s*_#>`(\[]*$")
# A line break inside a run ends a name when the line before it is short (a signature, a
# heading, a form field); a long line is wrapped prose that goes on.
_WRAPPED_LINE = 50


def _fold(word: str) -> str:
    return word.casefold().strip(".,")


def _is_upper_word(word: str) -> bool:
    letters = [c for c in word if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def at_sentence_start(text: str, position: int) -> bool:
    """Whether ``position`` opens a sentence, line or list item (markup like ``**`` or
    ``## `` in between is allowed)."""
    return _SENTENCE_START.search(text[max(0, position - 8):position]) is not None


def _breaks_line(text: str, previous: Token, token: Token) -> bool:
    """Whether a line break between two words of a run ends a name there."""
    gap = text[previous[1]:token[0]]
    if "\n" not in gap:
        return False
    if text[token[1]:token[1] + 1] == ":":
        return True  # the next line opens with a field label ("Activity: ...")
    newline = previous[1] + gap.index("\n")
    line_start = text.rfind("\n", 0, previous[1]) + 1
    return newline - line_start < _WRAPPED_LINE


def split_run(text: str, tokens: list[Token], stop_words: frozenset[str]) -> list[list[Token]]:
    """The name segments of one capitalized run (``tokens`` are its words in order)."""
    if len(tokens) <= 1:  # most runs are one word: nothing to cut
        return [tokens] if tokens and _fold(tokens[0][2]) not in stop_words else []
    tokens = _drop_edges(text, tokens)
    keep_and = bool(tokens) and _fold(tokens[-1][2]) in _TITLED_HEADS
    segments: list[list[Token]] = []
    current: list[Token] = []

    def close() -> None:
        nonlocal current
        if current:
            segments.append(current)
        current = []

    for index, token in enumerate(tokens):
        word = token[2]
        folded = _fold(word)
        following = tokens[index + 1][2] if index + 1 < len(tokens) else ""
        if current and _breaks_line(text, current[-1], token):
            close()  # "Joost van Dijk" / "Site Operations Manager" on the next line
        if word[:1].isupper() and folded in stop_words:
            close()  # "Safety The Heron H7": a function word is never part of a name
            continue
        if word == "and" and not keep_and:
            close()
            continue
        if current and word == current[-1][2]:
            close()  # "Travel and Expense Policy Policy owner": a heading, then its text
            continue
        if current and (folded in _SPLIT_BEFORE
                        or (folded in _SPLIT_BEFORE_OF and following == "of")):
            close()
        current.append(token)
        if _POSSESSIVE_END.search(word) and following:
            close()
        elif (
            folded in _TITLE_WORDS and following and following[:1].isupper()
            and _fold(following) not in _TITLE_WORDS | _FUNCTION_WORDS
        ):
            close()  # "Roost Platform Lead | Author Mei Tanaka"
    close()
    out: list[list[Token]] = []
    for segment in segments:
        out.extend(_split_trailing_title(_trim(segment)))
    return [s for s in out if s]


def _drop_edges(text: str, tokens: list[Token]) -> list[Token]:
    """Remove labels, units and sentence-opening verbs at the ends of a run."""
    tokens = list(tokens)
    last_end = tokens[-1][1]
    if len(tokens) > 1 and text[last_end:last_end + 1] == ":" and _fold(tokens[-1][2]) in _LABELS:
        tokens.pop()  # "Daventry DC Caller: Dev Patel"
    if len(tokens) > 1 and _is_upper_word(tokens[-1][2]) and _NUMBER_AFTER.match(
            text[tokens[-1][1]:tokens[-1][1] + 3]):
        tokens.pop()  # "Leeds GBP 130"
    if len(tokens) > 1 and _is_upper_word(tokens[0][2]) and _UNIT_BEFORE.search(
            text[max(0, tokens[0][0] - 3):tokens[0][0]]):
        tokens.pop(0)  # "600 MB Mei Tanaka"
    while len(tokens) > 1 and _fold(tokens[0][2]) in _OPENING_LABELS:
        tokens.pop(0)  # "Products Tern T3", "Author Mei Tanaka"
    if (len(tokens) > 1 and _fold(tokens[0][2]) in _SENTENCE_VERBS
            and at_sentence_start(text, tokens[0][0])):
        tokens.pop(0)  # "Describes Roost Fleet Manager 3.8.2"
    return tokens


def _trim(segment: list[Token]) -> list[Token]:
    """Without connectors at either end, and without a leading field label."""
    start, end = 0, len(segment)
    while start < end and segment[start][2] in CONNECTORS:
        start += 1
    while end > start and segment[end - 1][2] in CONNECTORS:
        end -= 1
    segment = segment[start:end]
    while len(segment) > 1 and _fold(segment[0][2]) in _OPENING_LABELS:
        segment = segment[1:]
        while segment and segment[0][2] in CONNECTORS:
            segment = segment[1:]
    return segment


def _split_trailing_title(segment: list[Token]) -> list[list[Token]]:
    """``Joost van Dijk Site Operations Manager`` -> the person and the title, when the run
    ends in a title word preceded by title vocabulary and two or more names remain."""
    if len(segment) < 4 or _fold(segment[-1][2]) not in _TITLE_WORDS:
        return [segment]
    start = len(segment) - 1
    while start > 0 and _fold(segment[start - 1][2]) in _FUNCTION_WORDS:
        start -= 1
    person = segment[:start]
    capitalized = sum(1 for t in person if t[2][:1].isupper())
    if start == len(segment) - 1 or capitalized < 2 or person[-1][2] in CONNECTORS:
        return [segment]
    return [person, segment[start:]]
