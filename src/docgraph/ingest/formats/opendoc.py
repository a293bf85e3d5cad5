"""Books and OpenDocument text: ``.epub`` through EbookLib, ``.odt`` through odfdo.

An EPUB's chapters are read in spine (reading) order, each through the HTML extractor
(headings, paragraphs, lists, tables; navigation and boilerplate removed); a chapter
without a heading of its own is headed by its table-of-contents title. An ODT keeps its
outline headings, paragraphs, list items and tables; tables of contents (which repeat the
headings), tracked deletions and comments are not text of the document.
"""

from __future__ import annotations

import io
import posixpath
import warnings
from typing import Any

from docgraph.errors import ExtractionError
from docgraph.ingest.blocks import clean, row_text, title_from_name
from docgraph.ingest.limits import ExtractLimits, check_zip
from docgraph.model import Block, BlockKind, ExtractedDocument

EPUB_MEDIA_TYPE = "application/epub+zip"
ODT_MEDIA_TYPE = "application/vnd.oasis.opendocument.text"

# ODT elements whose text is not the document's running text.
_ODT_SKIPPED = frozenset({
    "text:table-of-content", "text:alphabetical-index", "text:illustration-index",
    "text:tracked-changes", "office:annotation", "text:bibliography", "text:sequence-decls",
    "office:forms",
})
_ODT_CELLS = "table:table-cell|table:covered-table-cell"


def extract_odt(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """An OpenDocument text: headings (outline levels), paragraphs, list items, tables."""
    import odfdo

    check_zip(data, name, limits)
    try:
        document = odfdo.Document(io.BytesIO(data))
        body = document.body
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable ODT ({exc})") from exc
    blocks: list[Block] = []
    _odt_walk(body, blocks, in_list=False)
    limits.check_text(name, sum(len(b.text) for b in blocks))
    meta = document.meta
    title = clean(meta.get_title() or "") or next(
        (b.text for b in blocks if b.kind is BlockKind.HEADING and b.level == 1),
        title_from_name(name))
    metadata = {}
    creator = clean(meta.get_initial_creator() or "")
    if creator:
        metadata["author"] = creator
    return ExtractedDocument(title, tuple(blocks), ODT_MEDIA_TYPE, metadata)


def _odt_walk(element: Any, blocks: list[Block], in_list: bool) -> None:
    for child in element.children:
        tag = child.tag
        if tag in _ODT_SKIPPED:
            continue
        if tag == "text:h":
            text = clean(child.text_recursive)
            if text:
                level = int(child.get_attribute_integer("text:outline-level") or 1)
                blocks.append(Block(BlockKind.HEADING, text, max(1, min(level, 6))))
        elif tag == "text:p":
            text = clean(child.text_recursive)
            if text:
                blocks.append(Block(BlockKind.LIST_ITEM if in_list else BlockKind.PARAGRAPH,
                                    text))
        elif tag == "text:list":
            _odt_walk(child, blocks, in_list=True)
        elif tag == "table:table":
            _odt_table(child, blocks)
        else:
            _odt_walk(child, blocks, in_list)


def _odt_table(table: Any, blocks: list[Block]) -> None:
    rows = [[clean(cell.text_recursive) for cell in row.xpath(_ODT_CELLS)]
            for row in table.xpath("descendant::table:table-row")]
    header = rows[0] if rows else []
    for cells in rows[1:]:
        text = row_text(header, cells)
        if text:
            blocks.append(Block(BlockKind.TABLE_ROW, text))


def extract_epub(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """An EPUB 2/3 book: its chapters in reading order."""
    import ebooklib
    from ebooklib import epub

    from docgraph.ingest.extract_html import extract_html

    check_zip(data, name, limits)
    try:
        book = epub.read_epub(io.BytesIO(data), {"ignore_ncx": True})
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable EPUB ({exc})") from exc
    toc_titles = _toc_titles(book.toc)
    blocks: list[Block] = []
    chars = 0
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT \
                or isinstance(item, epub.EpubNav):
            continue
        content = item.get_content()
        try:
            with warnings.catch_warnings():  # XHTML read by the HTML parser, as intended
                warnings.simplefilter("ignore")
                chapter = extract_html(content, f"{name}/{item.file_name}", limits).blocks
        except ExtractionError:
            continue  # an empty or unreadable chapter (a cover image page)
        chapter_blocks = list(chapter)
        if not any(b.kind is BlockKind.HEADING for b in chapter_blocks):
            heading = toc_titles.get(posixpath.normpath(item.file_name))
            if heading:
                chapter_blocks.insert(0, Block(BlockKind.HEADING, heading, 1))
        blocks.extend(chapter_blocks)
        chars += sum(len(b.text) for b in chapter_blocks)
        limits.check_text(name, chars)
    metadata = {}
    for key, field in (("author", "creator"), ("language", "language"),
                       ("publisher", "publisher"), ("date", "date")):
        values = book.get_metadata("DC", field)
        if values and values[0][0]:
            metadata[key] = clean(str(values[0][0]))
    titles = book.get_metadata("DC", "title")
    title = clean(str(titles[0][0])) if titles and titles[0][0] else title_from_name(name)
    return ExtractedDocument(title, tuple(blocks), EPUB_MEDIA_TYPE, metadata)


def _toc_titles(toc: Any) -> dict[str, str]:
    """File name -> title of the table-of-contents entries (nested sections included)."""
    from ebooklib import epub

    titles: dict[str, str] = {}
    stack = list(toc) if isinstance(toc, list | tuple) else [toc]
    while stack:
        entry = stack.pop(0)
        if isinstance(entry, tuple) and len(entry) == 2:  # (Section, children)
            stack.extend(entry[1])
            entry = entry[0]
        if isinstance(entry, epub.Link | epub.Section) and getattr(entry, "href", None):
            href = posixpath.normpath(str(entry.href).split("#", 1)[0])
            titles.setdefault(href, clean(entry.title or ""))
    return titles
