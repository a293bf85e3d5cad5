"""The structure of a PDF's text layer: lines with their font, running headers and footers,
section headings, paragraphs and the page each block comes from.

pypdf's text extraction calls a visitor with every piece of text it emits, together with
the text and transformation matrices and the font in effect. :class:`PageLines` turns those
pieces into lines that know their vertical position, font size and weight. From the lines
of every page:

* **running headers and footers** are the lines at the top or bottom of a page (the first
  and last two) whose text recurs there on at least half of the pages (two pages at
  least), digits ignored in lines of up to fifteen words; bare page numbers ("7",
  "Page 7 of 12", "- 7 -", "vii") at a page's edge are dropped on any document of two
  pages or more;
* **headings** come from the outline (bookmarks) when it has two entries or more: each is
  placed on its destination page above the first line below its destination's top, and
  the line(s) spelling its title become that heading. Without an outline, lines set
  larger than the body text (the size holding the most characters) by 15% or more, or
  short bold lines at body size, are headings; larger sizes are higher levels;
* **paragraphs** end at a blank line, at a vertical gap wider than the document's usual
  line spacing, at a heading and at a page end; lines opening with a bullet or a number
  start list items; a word hyphenated across a line break is joined again.

Every block carries its 1-based page.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from docgraph.ingest.blocks import clean
from docgraph.model import Block, BlockKind

#: A heading's font is at least this much larger than the body text's.
HEADING_SIZE_RATIO = 1.15
#: An outline with fewer entries (a lone bookmark to the first page) gives no structure:
#: heading-like lines are used instead.
MIN_OUTLINE_ENTRIES = 2
#: Lines at each edge of a page that may be a running header or footer.
EDGE_LINES = 2
#: A running header/footer recurs on at least this share of the pages (and on two).
RUNNING_SHARE = 0.5
#: Digits are ignored when comparing edge lines of at most this many words.
RUNNING_MAX_WORDS = 15
#: A vertical gap this much wider than the usual line spacing ends a paragraph.
PARAGRAPH_GAP = 1.3

_BULLET = re.compile(r"([-*•▪◦‣–]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s+")
_PAGE_NUMBER = re.compile(
    r"[-–—\s]*(?:(?:page|p\.|seite|página|pagina)\s*)?"
    r"(?:\d{1,5}|(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3}))"
    r"(?:\s*(?:of|/|von|de|di)\s*\d{1,5})?[-–—\s]*", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"\w+")
_BOLD = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.,;]$")


@dataclass(slots=True)
class Line:
    """One line of a page's text: its text, font size (points, as rendered), whether most
    of it is bold, and its baseline height from the page bottom (None when unknown)."""

    text: str
    size: float
    bold: bool
    y: float | None


@dataclass(frozen=True, slots=True)
class OutlineEntry:
    """An outline (bookmark) entry: its title, depth (1 = top), 0-based destination page
    and the destination's top (None: the page's top)."""

    title: str
    level: int
    page: int
    top: float | None


@dataclass
class PageLines:
    """The visitor pypdf calls while extracting one page's text; collects :class:`Line`."""

    lines: list[Line] = field(default_factory=list)
    _parts: list[str] = field(default_factory=list)
    _sizes: Counter[float] = field(default_factory=Counter)
    _bold_chars: int = 0
    _chars: int = 0
    _y: float | None = None

    def __call__(self, text: str, cm: Sequence[float], tm: Sequence[float],
                 font: Any, size: float) -> None:
        """One piece of extracted text with the matrices and font it was drawn with."""
        if not text:
            return
        pieces = text.split("\n")
        for number, piece in enumerate(pieces):
            if number:
                self.end_line()
            if not piece:
                continue
            self._parts.append(piece)
            visible = len(piece.strip())
            if not visible:
                continue
            scale = math.sqrt(abs((tm[0] * tm[3] - tm[1] * tm[2])
                                  * (cm[0] * cm[3] - cm[1] * cm[2])))
            rendered = round(float(size) * (scale or 1.0) * 2) / 2
            self._sizes[rendered] += visible
            self._chars += visible
            base = font.get("/BaseFont", "") if hasattr(font, "get") else ""
            if _BOLD.search(str(base)):
                self._bold_chars += visible
            if self._y is None:
                self._y = float(cm[1] * tm[4] + cm[3] * tm[5] + cm[5])

    def end_line(self) -> None:
        """Close the line being collected (a page's end closes its last line)."""
        text = clean("".join(self._parts))
        if text:
            size = self._sizes.most_common(1)[0][0] if self._sizes else 0.0
            self.lines.append(Line(text, size, self._bold_chars * 2 > self._chars, self._y))
        elif self.lines and self.lines[-1].text:
            self.lines.append(Line("", 0.0, False, None))  # a blank line: paragraph break
        self._parts.clear()
        self._sizes.clear()
        self._bold_chars = self._chars = 0
        self._y = None


def _edge_key(text: str) -> str:
    """What must recur for a line to be running: its words, digits ignored in a short line
    (page numbers, dates); a longer line must recur exactly (body text that only differs
    in its numbers is not a header)."""
    key = " ".join(text.casefold().split())
    if len(_WORD.findall(key)) > RUNNING_MAX_WORDS:
        return key
    return _DIGITS.sub("#", key)


def _edges(lines: list[Line]) -> list[int]:
    """Positions of the lines at the top and bottom of a page: by height when every line
    has one (a generator may draw its header last), else in reading order."""
    filled = [i for i, line in enumerate(lines) if line.text]
    if all(lines[i].y is not None for i in filled):
        filled.sort(key=lambda i: -(lines[i].y or 0.0))
    return sorted(set(filled[:EDGE_LINES] + filled[-EDGE_LINES:]))


def strip_running_lines(pages: list[list[Line]]) -> list[list[Line]]:
    """The pages without running headers, footers and bare page numbers."""
    if len(pages) < 2:
        return pages
    counts: Counter[str] = Counter()
    for lines in pages:
        counts.update({_edge_key(lines[i].text) for i in _edges(lines)})
    needed = max(2, math.ceil(RUNNING_SHARE * len(pages)))
    running = {key for key, n in counts.items() if n >= needed}
    out: list[list[Line]] = []
    for lines in pages:
        drop = {i for i in _edges(lines)
                if _edge_key(lines[i].text) in running or _PAGE_NUMBER.fullmatch(lines[i].text)}
        out.append([line for i, line in enumerate(lines) if i not in drop])
    return out


def _body_size(pages: list[list[Line]]) -> float:
    sizes: Counter[float] = Counter()
    for lines in pages:
        for line in lines:
            if line.text:
                sizes[line.size] += len(line.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _line_gap(pages: list[list[Line]], body: float) -> float | None:
    """The usual distance between consecutive lines of one body paragraph (None when
    positions are unknown): the smallest common gap between body lines, since paragraphs
    of one or two lines can make the wider gap between paragraphs the most common one."""
    gaps: Counter[float] = Counter()
    for lines in pages:
        for above, below in itertools.pairwise(lines):
            if (above.y is not None and below.y is not None and above.size == body
                    and below.size == body and above.y - below.y >= 0.8 * body):
                gaps[round(above.y - below.y, 1)] += 1
    if not gaps:
        return None
    common = max(gaps.values())
    return min(gap for gap, n in gaps.items() if n >= max(2, common // 5) or n == common)


def _heading_levels(pages: list[list[Line]], body: float) -> dict[tuple[float, bool], int]:
    """(size, bold) of heading-like lines -> heading level, larger fonts first."""
    found: set[tuple[float, bool]] = set()
    for lines in pages:
        for line in lines:
            if _looks_like_heading(line, body):
                found.add((line.size, line.bold))
    ordered = sorted(found, key=lambda key: (-key[0], not key[1]))
    return {key: min(level, 6) for level, key in enumerate(ordered, start=1)}


def _looks_like_heading(line: Line, body: float) -> bool:
    if not line.text or body <= 0 or len(line.text) > 150 or len(line.text.split()) > 16:
        return False
    if line.size >= body * HEADING_SIZE_RATIO:
        return any(ch.isalpha() for ch in line.text)
    return (line.bold and line.size >= body and len(line.text.split()) <= 12
            and not _SENTENCE_END.search(line.text)
            and (line.text[:1].isupper() or line.text[:1].isdigit()))


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


class _BlockWriter:
    """Builds blocks from lines: paragraphs, list items and headings, each with its page."""

    def __init__(self, line_gap: float | None) -> None:
        self.blocks: list[Block] = []
        self.line_gap = line_gap
        self._kind = BlockKind.PARAGRAPH
        self._text = ""
        self._page = 0
        self._last: Line | None = None

    def flush(self) -> None:
        text = clean(self._text)
        if text:
            self.blocks.append(Block(self._kind, text, page=self._page))
        self._text, self._last = "", None

    def heading(self, text: str, level: int, page: int) -> None:
        self.flush()
        text = clean(text)
        if text:
            self.blocks.append(Block(BlockKind.HEADING, text, min(max(level, 1), 6), page=page))

    def heading_line(self, text: str, level: int, page: int) -> None:
        """A heading-like line: continues the heading just written when it has the same
        level on the same page and no text came between (a heading wrapped over lines)."""
        last = self.blocks[-1] if self.blocks else None
        if (self._last is None and last is not None and last.kind is BlockKind.HEADING
                and last.level == level and last.page == page):
            self.blocks[-1] = Block(BlockKind.HEADING, f"{last.text} {text}", level, page=page)
        else:
            self.heading(text, level, page)

    def line(self, line: Line, page: int) -> None:
        if not line.text:
            self.flush()
            return
        bullet = _BULLET.match(line.text)
        if (self._last is None or bullet is not None or page != self._page
                or self._gap_breaks(self._last, line)):
            self.flush()
            self._page = page
            self._kind = BlockKind.LIST_ITEM if bullet else BlockKind.PARAGRAPH
            self._text = line.text[bullet.end():] if bullet else line.text
        elif self._text.endswith("-") and line.text[:1].islower():
            self._text = self._text[:-1] + line.text  # a word hyphenated across lines
        else:
            self._text += " " + line.text
        self._last = line

    def _gap_breaks(self, above: Line, below: Line) -> bool:
        if above.y is None or below.y is None or self.line_gap is None:
            return False
        gap = above.y - below.y
        return gap < 0 or gap > self.line_gap * PARAGRAPH_GAP


def page_blocks(pages: list[list[Line]], outline: Sequence[OutlineEntry]) -> list[Block]:
    """The blocks of a document's pages (running lines already removed), with headings from
    ``outline`` when it has entries on these pages, else from heading-like lines."""
    body = _body_size(pages)
    writer = _BlockWriter(_line_gap(pages, body))
    entries: dict[int, list[OutlineEntry]] = {}
    placed = [entry for entry in outline if 0 <= entry.page < len(pages)]
    if len(placed) >= MIN_OUTLINE_ENTRIES:
        for entry in placed:
            entries.setdefault(entry.page, []).append(entry)
    levels = {} if entries else _heading_levels(pages, body)
    for index, lines in enumerate(pages):
        page = index + 1
        pending = sorted(entries.get(index, []), key=lambda e: -(e.top if e.top is not None
                                                                  else math.inf))
        title_rest = ""  # what is left of the last outline title to find in the lines
        for line in lines:
            while pending and (pending[0].top is None or line.y is None
                               or pending[0].top >= line.y - 1.0):
                entry = pending.pop(0)
                writer.heading(entry.title, entry.level, page)
                title_rest = _norm(entry.title)
            text = _norm(line.text)
            if title_rest and text and title_rest.startswith(text):
                title_rest = title_rest[len(text):].strip()
                continue  # the heading's own text, already emitted from the outline
            title_rest = ""
            level = levels.get((line.size, line.bold))
            if level is not None and _looks_like_heading(line, body):
                writer.heading_line(line.text, level, page)
            else:
                writer.line(line, page)
        writer.flush()
        for entry in pending:  # destinations below the page's last line
            writer.heading(entry.title, entry.level, page)
    return writer.blocks


def read_outline(reader: Any) -> list[OutlineEntry]:
    """The outline of a pypdf reader, flattened in order; [] when it has none or it cannot
    be read (a broken outline costs the headings, not the document)."""
    out: list[OutlineEntry] = []

    def walk(items: Any, level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
                continue
            try:
                page = reader.get_destination_page_number(item)
                title = clean(str(item.title or ""))
                top = item.get("/Top")
            except Exception:  # a malformed entry: skip it, keep the rest
                continue
            if title and page is not None and page >= 0:
                out.append(OutlineEntry(title, level, int(page),
                                        None if top is None else float(top)))

    try:
        walk(reader.outline, 1)
    except Exception:
        return []
    return out
