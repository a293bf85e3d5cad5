"""Slide decks (``.pptx``) through python-pptx: one section per slide.

Each slide's title is its heading (``Slide N`` when it has none); body placeholders give
list items (their paragraphs are bullets), text boxes paragraphs, tables one record per
row with the header names carried into each, grouped shapes in order; speaker notes
follow as paragraphs marked ``Speaker notes:``. Every block's ``page`` is the slide
number. Hidden slides are skipped and listed in the metadata.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from docgraph.errors import ExtractionError
from docgraph.ingest.blocks import clean, paragraph_blocks, row_text, title_from_name
from docgraph.ingest.limits import ExtractLimits, check_zip
from docgraph.model import Block, BlockKind, ExtractedDocument

PPTX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
NOTES_PREFIX = "Speaker notes: "


def extract_pptx(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """A PowerPoint deck: a level-1 section per visible slide, ``page`` = slide number."""
    from pptx import Presentation

    check_zip(data, name, limits)
    try:
        deck = Presentation(io.BytesIO(data))
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable PPTX ({exc})") from exc
    blocks: list[Block] = []
    hidden: list[str] = []
    chars = 0
    for number, slide in enumerate(deck.slides, start=1):
        if slide._element.get("show") == "0":
            hidden.append(str(number))
            continue
        title_shape = slide.shapes.title
        title = clean(title_shape.text_frame.text) if title_shape is not None \
            and title_shape.has_text_frame else ""
        slide_blocks = [Block(BlockKind.HEADING, title or f"Slide {number}", 1, number)]
        for shape in slide.shapes:
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            slide_blocks.extend(_shape_blocks(shape, number))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None:
                for block in paragraph_blocks(notes.text):
                    slide_blocks.append(Block(BlockKind.PARAGRAPH, NOTES_PREFIX + block.text,
                                              page=number))
        blocks.extend(slide_blocks)
        chars += sum(len(b.text) for b in slide_blocks)
        limits.check_text(name, chars)
    metadata = {"slides": str(len(deck.slides))}
    if hidden:
        metadata["hidden_slides_skipped"] = ", ".join(hidden)
    core = deck.core_properties
    if core.author:
        metadata["author"] = clean(core.author)
    title = clean(core.title or "") or next(
        (b.text for b in blocks if b.kind is BlockKind.HEADING), title_from_name(name))
    return ExtractedDocument(title, tuple(blocks), PPTX_MEDIA_TYPE, metadata)


def _shape_blocks(shape: Any, page: int) -> Iterable[Block]:
    """The blocks of one shape: text frame paragraphs, table rows, group members."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        for member in shape.shapes:
            yield from _shape_blocks(member, page)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[clean(cell.text) for cell in row.cells] for row in shape.table.rows]
        header = rows[0] if rows else []
        for cells in rows[1:]:
            text = row_text(header, cells)
            if text:
                yield Block(BlockKind.TABLE_ROW, text, page=page)
        return
    if not shape.has_text_frame:
        return
    bullets = shape.is_placeholder and _is_body_placeholder(shape)
    for paragraph in shape.text_frame.paragraphs:
        text = clean(paragraph.text.replace("\v", " "))
        if text:
            kind = BlockKind.LIST_ITEM if bullets else BlockKind.PARAGRAPH
            yield Block(kind, text, page=page)


def _is_body_placeholder(shape: Any) -> bool:
    from pptx.enum.shapes import PP_PLACEHOLDER

    try:
        kind = shape.placeholder_format.type
    except ValueError:
        return False
    return kind in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)
