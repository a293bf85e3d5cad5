"""Turn file bytes into an :class:`ExtractedDocument`: ordered structural blocks and a title.

Each format keeps the structure it has: headings (with levels), paragraphs, list items,
table rows and code blocks. The chunker cuts only between blocks (or between sentences
of one over-long block), so structure here decides where chunks end. PDF and DOCX, which
unpack, live in :mod:`docgraph.ingest.extract_packed`, HTML in
:mod:`docgraph.ingest.extract_html`, the formats of slide decks, workbooks, mail,
OpenDocument, EPUB, reStructuredText, AsciiDoc and scans in :mod:`docgraph.ingest.formats`;
every format is extracted within :class:`~docgraph.ingest.limits.ExtractLimits`.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from docgraph.errors import ExtractionError
from docgraph.ingest.blocks import clean, paragraph_blocks, row_text, title_from_name
from docgraph.ingest.decode import decode_text
from docgraph.ingest.extract_html import extract_html
from docgraph.ingest.extract_packed import extract_docx
from docgraph.ingest.formats.asciidoc import extract_asciidoc
from docgraph.ingest.formats.mail import (
    extract_eml,
    extract_mbox,
    extract_msg,
    mail_thread_text,
)
from docgraph.ingest.formats.ocr import IMAGE_MEDIA_TYPES, extract_image, extract_pdf_or_scan
from docgraph.ingest.formats.opendoc import extract_epub, extract_odt
from docgraph.ingest.formats.rst import extract_rst
from docgraph.ingest.formats.sheets import extract_ods, extract_xlsx
from docgraph.ingest.formats.slides import extract_pptx
from docgraph.ingest.front_matter import FrontMatter, split_front_matter
from docgraph.ingest.limits import ExtractLimits
from docgraph.model import Block, BlockKind, ExtractedDocument


def _text_of(data: bytes, name: str, limits: ExtractLimits) -> str:
    text = decode_text(data, name)
    limits.check_text(name, len(text))
    return text


def extract_text(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """Plain text: paragraphs separated by blank lines. A mail thread exported as text
    (header blocks of ``From:``/``Date:``/``To:``/``Subject:`` lines) is read as mail:
    one section per message, headers as metadata, quotes and signatures removed."""
    text = _text_of(data, name, limits)
    thread = mail_thread_text(text, name, limits)
    if thread is not None:
        return thread
    return ExtractedDocument(title_from_name(name), tuple(paragraph_blocks(text)), "text/plain")


@functools.cache
def _markdown_parser() -> Any:
    """One CommonMark + tables parser for the process (building one costs ~1 ms; parsing
    keeps its state per call, so sharing it is safe)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table")


def extract_markdown(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """Markdown via markdown-it: headings, paragraphs, list items, table rows, code.

    YAML (``---``) or TOML (``+++``) front matter is no text: its ``title`` is the title
    (over a first level-1 heading), its other keys the document's metadata; a block
    that is not a readable mapping stays in the text as one paragraph
    (:mod:`docgraph.ingest.front_matter`). A text of only ATX headings and plain
    paragraphs (the common case for notes and abstracts) takes an exact fast path instead
    of the parser (see :func:`_plain_markdown`).
    """
    text = _text_of(data, name, limits)
    front, text = split_front_matter(text)
    plain = _plain_markdown(text)
    if plain is not None:
        blocks, title = plain
        document = ExtractedDocument(title or title_from_name(name), tuple(blocks),
                                     "text/markdown")
    else:
        document = _parsed_markdown(text, name)
    return document if front is None else _with_front_matter(document, front)


def _with_front_matter(document: ExtractedDocument, front: FrontMatter) -> ExtractedDocument:
    """``document`` with what its front matter says: title and metadata, or, for a block
    that could not be read, its text as a first paragraph."""
    if front.error is not None:
        raw = clean(front.raw.strip())
        blocks = (Block(BlockKind.PARAGRAPH, raw), *document.blocks) if raw else document.blocks
        return replace(document, blocks=blocks,
                       metadata={**document.metadata, **front.metadata,
                                 "front_matter": front.error})
    title = clean(front.title) if front.title else document.title
    blocks = document.blocks
    if not any(b.text.strip() for b in blocks):
        # A page that is only front matter (Hugo's _index.md, a section landing page) is
        # indexed by what it says of itself, not refused as "no text found".
        summary = [clean(v) for v in (front.title, front.metadata.get("description")) if v]
        blocks = tuple(Block(BlockKind.PARAGRAPH, t) for t in summary if t)
    return replace(document, title=title, blocks=blocks,
                   metadata={**document.metadata, **front.metadata})


# First characters (after up to three spaces) of a line that may open a block other than a
# paragraph: lists, quotes, fences, thematic breaks, setext underlines, HTML, link
# reference definitions, table delimiter rows; '#' is handled as an ATX heading.
_MD_OTHER_BLOCK = frozenset("*+-=_`~<>|:[")
_MD_ORDERED_ITEM = re.compile(r"\d{1,9}[.)](?:[ \t]|$)")
_MD_ATX_HEADING = re.compile(r"(#{1,6})(?:[ \t]+(.*))?$")


def _plain_markdown(text: str) -> tuple[list[Block], str | None] | None:
    """Blocks and title of a Markdown text made only of ATX headings and paragraphs,
    exactly as :func:`_parsed_markdown` gives them; None if any line could be anything
    else (then the real parser decides). Paragraph content is its lines joined by
    newlines, as markdown-it's inline token content is."""
    if "\r" in text or "\0" in text:
        return None  # markdown-it normalizes these first
    blocks: list[Block] = []
    title: str | None = None
    paragraph: list[str] = []

    def end_paragraph() -> None:
        if paragraph:
            content = clean("\n".join(paragraph).strip())
            if content:
                blocks.append(Block(BlockKind.PARAGRAPH, content))
            paragraph.clear()

    for line in text.split("\n"):
        stripped = line.lstrip(" ")
        if not stripped.strip(" \t"):
            end_paragraph()
            continue
        first = stripped[0]
        if len(line) - len(stripped) > 3 or first == "\t":
            return None  # indented code, or indentation measured with tabs
        if first == "#":
            match = _MD_ATX_HEADING.match(stripped)
            if match is None:
                return None
            content = (match.group(2) or "").strip()
            if content.endswith("#"):
                return None  # a closing sequence, or a literal '#': leave it to the parser
            end_paragraph()
            content = clean(content)
            if content:
                level = len(match.group(1))
                blocks.append(Block(BlockKind.HEADING, content, level))
                if title is None and level == 1:
                    title = content
        elif first in _MD_OTHER_BLOCK or _MD_ORDERED_ITEM.match(stripped):
            return None
        else:
            paragraph.append(line)
    end_paragraph()
    return blocks, title


def _parsed_markdown(text: str, name: str) -> ExtractedDocument:
    """The general path: markdown-it tokens to blocks."""
    tokens = _markdown_parser().parse(text)
    blocks: list[Block] = []
    title: str | None = None
    i = 0
    list_depth = 0
    row_cells: list[str] | None = None
    header: list[str] = []
    in_thead = False
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "heading_open":
            level = int(tok.tag[1])
            content = clean(tokens[i + 1].content)
            if content:
                blocks.append(Block(BlockKind.HEADING, content, level))
                if title is None and level == 1:
                    title = content
            i += 3
            continue
        if tok.type in ("bullet_list_open", "ordered_list_open"):
            list_depth += 1
        elif tok.type in ("bullet_list_close", "ordered_list_close"):
            list_depth -= 1
        elif tok.type == "thead_open":
            in_thead, header = True, []
        elif tok.type == "thead_close":
            in_thead = False
        elif tok.type == "tr_open":
            row_cells = []
        elif tok.type in ("th_open", "td_open") and row_cells is not None:
            row_cells.append(clean(tokens[i + 1].content))
        elif tok.type == "tr_close" and row_cells is not None:
            if in_thead:
                header = row_cells
            else:
                blocks.append(Block(BlockKind.TABLE_ROW, row_text(header, row_cells)))
            row_cells = None
        elif tok.type == "inline" and row_cells is None:
            content = clean(tok.content)
            if content:
                kind = BlockKind.LIST_ITEM if list_depth > 0 else BlockKind.PARAGRAPH
                blocks.append(Block(kind, content))
        elif tok.type in ("fence", "code_block"):
            content = tok.content.strip()
            if content:
                blocks.append(Block(BlockKind.CODE, content))
        i += 1
    return ExtractedDocument(title or title_from_name(name), tuple(blocks), "text/markdown")


def extract_csv(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """CSV: one table-row block per record, as 'column: value; ...' with the header."""
    text = _text_of(data, name, limits)
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(io.StringIO(text), dialect))
    if not rows:
        raise ExtractionError(f"{name}: empty CSV")
    header = [clean(h) for h in rows[0]]
    blocks = [Block(BlockKind.HEADING, title_from_name(name), 1)]
    for cells in rows[1:]:
        row = row_text(header, [clean(c) for c in cells])
        if row:
            blocks.append(Block(BlockKind.TABLE_ROW, row))
    return ExtractedDocument(title_from_name(name), tuple(blocks), "text/csv")


def extract_json(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """JSON: records (objects in a list) become blocks of 'key: value' pairs; nested keys
    are flattened to dotted paths and top-level keys of an object become sections."""
    try:
        value = json.loads(_text_of(data, name, limits))
    except json.JSONDecodeError as exc:
        raise ExtractionError(f"{name}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
    title = title_from_name(name)
    if isinstance(value, dict) and isinstance(value.get("title"), str):
        title = clean(value["title"])
    blocks: list[Block] = []
    _json_blocks(value, blocks, level=1)
    return ExtractedDocument(title, tuple(blocks), "application/json")


def _flatten(value: Any, prefix: str = "") -> Iterable[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
        yield f"{prefix}: {', '.join(str(v) for v in value)}"
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _flatten(v, f"{prefix}[{i}]")
    elif value is not None and str(value) != "":
        yield f"{prefix}: {value}" if prefix else str(value)


def _json_blocks(value: Any, blocks: list[Block], level: int) -> None:
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict | list):
                text = "; ".join(_flatten(item))
                if text:
                    blocks.append(Block(BlockKind.TABLE_ROW, clean(text)))
            elif item is not None:
                blocks.append(Block(BlockKind.LIST_ITEM, clean(str(item))))
    elif isinstance(value, dict):
        scalars = {k: v for k, v in value.items() if not isinstance(v, dict | list)}
        if scalars:
            blocks.append(Block(BlockKind.PARAGRAPH, clean("; ".join(_flatten(scalars)))))
        for key, item in value.items():
            if not isinstance(item, dict | list):
                continue
            if level <= 6:
                blocks.append(Block(BlockKind.HEADING, str(key), level))
                _json_blocks(item, blocks, level + 1)
            else:  # no heading level left: keep the data as flattened 'a.b: value' pairs
                text = "; ".join(_flatten(item, str(key)))
                if text:
                    blocks.append(Block(BlockKind.PARAGRAPH, clean(text)))
    elif value is not None:
        blocks.append(Block(BlockKind.PARAGRAPH, clean(str(value))))


Extractor = Callable[[bytes, str, ExtractLimits], ExtractedDocument]

EXTRACTORS: dict[str, Extractor] = {
    ".md": extract_markdown,
    ".markdown": extract_markdown,
    ".rst": extract_rst,
    ".adoc": extract_asciidoc,
    ".asciidoc": extract_asciidoc,
    ".txt": extract_text,
    ".text": extract_text,
    ".html": extract_html,
    ".htm": extract_html,
    ".pdf": extract_pdf_or_scan,
    ".docx": extract_docx,
    ".csv": extract_csv,
    ".json": extract_json,
    ".pptx": extract_pptx,
    ".xlsx": extract_xlsx,
    ".xlsm": extract_xlsx,
    ".ods": extract_ods,
    ".odt": extract_odt,
    ".epub": extract_epub,
    ".eml": extract_eml,
    ".mbox": extract_mbox,
    ".msg": extract_msg,
    **dict.fromkeys(IMAGE_MEDIA_TYPES, extract_image),
}


def extract(data: bytes, name: str, limits: ExtractLimits | None = None) -> ExtractedDocument:
    """Extract ``data`` (the bytes of file ``name``) by its extension, within ``limits``
    (default: the default ``[loader]`` limits).

    Raises :class:`ExtractionError` naming the file when the format is unsupported, the
    bytes cannot be parsed, or no text comes out; :class:`~docgraph.errors.FileTooLarge`
    (a subclass) when the file unpacks to, or yields, more than ``limits`` allow.
    """
    limits = limits or ExtractLimits()
    ext = posixpath.splitext(name.lower())[1]
    extractor = EXTRACTORS.get(ext)
    if extractor is None:
        raise ExtractionError(f"{name}: unsupported file type {ext or '(none)'!r}")
    try:
        document = extractor(data, name, limits)
    except ExtractionError:
        raise
    except RecursionError as exc:
        raise ExtractionError(f"{name}: cannot extract (nested too deeply)") from exc
    except Exception as exc:
        raise ExtractionError(f"{name}: cannot extract ({type(exc).__name__}: {exc})") from exc
    limits.check_text(name, sum(len(b.text) for b in document.blocks))
    if not any(b.text.strip() for b in document.blocks):
        raise ExtractionError(f"{name}: no text found")
    return document
