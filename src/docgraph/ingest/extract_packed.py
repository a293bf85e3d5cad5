"""Formats whose bytes are packed: PDF (compressed streams) and DOCX (a zip of XML parts).

Both are unpacked under :class:`~docgraph.ingest.limits.ExtractLimits`: a DOCX is checked
from its zip directory before python-docx opens it, a PDF's streams are decoded under
pypdf's output bounds and its page contents and text are counted page by page, so a
decompression bomb is refused as too large within seconds.
"""

from __future__ import annotations

import io
import re
from typing import Any

from docgraph.errors import ExtractionError, FileTooLarge
from docgraph.ingest.blocks import clean, row_text, title_from_name
from docgraph.ingest.limits import ExtractLimits, bounded_pdf, check_zip
from docgraph.ingest.pdf_structure import (
    Line,
    PageLines,
    page_blocks,
    read_outline,
    strip_running_lines,
)
from docgraph.model import Block, BlockKind, ExtractedDocument

DOCX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def extract_pdf(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """PDF via pypdf, with structure (:mod:`docgraph.ingest.pdf_structure`): the page of
    every block, headings from the outline or from heading-like lines, running headers,
    footers and page numbers removed, and the document's own metadata. The title is the
    metadata title, else the first page's top heading, else the file name."""
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    pages: list[list[Line]] = []
    try:
        with bounded_pdf(limits):
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted:
                raise ExtractionError(f"{name}: PDF is encrypted")
            unpacked = chars = 0
            for page in reader.pages:
                contents = page.get_contents()
                if contents is not None:
                    unpacked += len(contents.get_data())
                    limits.check_unpacked(name, "its page contents", unpacked)
                collector = PageLines()
                page.extract_text(visitor_text=collector)
                collector.end_line()
                chars += sum(len(line.text) for line in collector.lines)
                limits.check_text(name, chars)
                pages.append(collector.lines)
            metadata = _pdf_metadata(reader.metadata)
            outline = read_outline(reader)
    except ExtractionError:
        raise
    except LimitReachedError as exc:
        raise FileTooLarge(f"{name}: too large: a PDF limit was reached while unpacking "
                           f"({exc}); loader.max_unpacked_bytes is {limits.max_unpacked_bytes}"
                           ) from exc
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable PDF ({exc})") from exc
    blocks = page_blocks(strip_running_lines(pages), outline)
    if not any(b.kind is not BlockKind.HEADING for b in blocks):
        raise ExtractionError(f"{name}: PDF has no extractable text (scanned image?)")
    metadata["pages"] = str(len(pages))
    title = metadata.get("title") or next(
        (b.text for b in blocks if b.kind is BlockKind.HEADING and b.level == 1 and b.page == 1),
        title_from_name(name))
    return ExtractedDocument(title, tuple(blocks), "application/pdf", metadata)


# A metadata title that is only a file name or a placeholder says nothing about the document.
_PLACEHOLDER_TITLE = re.compile(
    r"(untitled|document\d*|microsoft (word|powerpoint) - .*"
    r"|.*\.(docx?|pdf|tex|dvi|pptx?|odt|rtf))",
    re.IGNORECASE)


def _pdf_metadata(info: Any) -> dict[str, str]:
    """Title, author, subject, keywords and the creation/modification dates (ISO 8601)."""
    if info is None:
        return {}
    out: dict[str, str] = {}
    for key, attribute in (("title", "title"), ("author", "author"), ("subject", "subject")):
        try:
            value = clean(str(getattr(info, attribute) or ""))
        except Exception:  # an undecodable entry: leave it out
            continue
        if value and not (key == "title" and _PLACEHOLDER_TITLE.fullmatch(value)):
            out[key] = value
    keywords = info.get("/Keywords")
    if keywords:
        out["keywords"] = clean(str(keywords))
    for key, attribute in (("created", "creation_date"), ("modified", "modification_date")):
        try:
            moment = getattr(info, attribute)
        except Exception:  # a date pypdf cannot parse: leave it out
            continue
        if moment is not None:
            out[key] = moment.isoformat()
    return out


def extract_docx(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """DOCX via python-docx: 'Heading N'/'Title' styles, paragraphs, list paragraphs, tables."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    check_zip(data, name, limits)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable DOCX ({exc})") from exc
    # A paragraph's style is looked up by id among all styles each time python-docx is asked
    # (milliseconds per paragraph); each id is resolved once here instead.
    style_names: dict[str | None, str] = {}

    def style_name(paragraph: Any) -> str:
        style_id = paragraph._p.style
        if style_id not in style_names:
            style = document.part.get_style(style_id, WD_STYLE_TYPE.PARAGRAPH)
            style_names[style_id] = (style.name if style is not None else "") or ""
        return style_names[style_id]

    blocks: list[Block] = []
    chars = 0
    title = clean(document.core_properties.title or "")
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            text = clean(item.text)
            if not text:
                continue
            style = style_name(item)
            match = re.match(r"Heading (\d)", style)
            if style == "Title":
                title = title or text
                blocks.append(Block(BlockKind.HEADING, text, 1))
            elif match:
                blocks.append(Block(BlockKind.HEADING, text, int(match.group(1))))
            elif "List" in style:
                blocks.append(Block(BlockKind.LIST_ITEM, text))
            else:
                blocks.append(Block(BlockKind.PARAGRAPH, text))
            chars += len(text)
        elif isinstance(item, Table):
            rows = [[clean(c.text) for c in row.cells] for row in item.rows]
            header = rows[0] if rows else []
            for cells in rows[1:]:
                text = row_text(header, cells)
                if text:
                    blocks.append(Block(BlockKind.TABLE_ROW, text))
                    chars += len(text)
        limits.check_text(name, chars)
    if not title:
        title = next(
            (b.text for b in blocks if b.kind is BlockKind.HEADING and b.level == 1),
            title_from_name(name),
        )
    return ExtractedDocument(title, tuple(blocks), DOCX_MEDIA_TYPE)
