"""HTML: headings, paragraphs, list items, table rows and code, without the page's
navigation, footers and cookie banners (:mod:`docgraph.ingest.boilerplate`).

Who may read a page can be said in the page: ``<meta name="docgraph-access"
content="user:alice, group:finance">`` (several such tags add up), or an ``access:`` list
in front matter above the markup, as Jekyll and other site generators allow in HTML files
(its ``title`` and other keys are kept as for Markdown). Both at once must agree; a value
that is not a principal, or two that differ, fails closed (the page is not indexed and the
reason is reported), as for Markdown front matter."""

from __future__ import annotations

from typing import Any

from docgraph.ingest.blocks import clean, row_text, title_from_name
from docgraph.ingest.boilerplate import strip_html_boilerplate
from docgraph.ingest.decode import check_not_binary
from docgraph.ingest.front_matter import (
    ACCESS_ERROR_KEY,
    ACCESS_KEY,
    FrontMatter,
    access_metadata,
    split_front_matter,
)
from docgraph.ingest.limits import ExtractLimits
from docgraph.model import Block, BlockKind, ExtractedDocument

_HTML_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# Elements whose loose text is one paragraph of its own (and that end the text before them).
_HTML_PARAGRAPHS = frozenset({
    "p", "div", "section", "article", "main", "aside", "header", "blockquote", "figure",
    "figcaption", "caption", "dl", "dt", "dd", "ul", "ol", "menu", "address", "details",
    "summary", "form", "fieldset", "legend", "center", "body", "html", "hr",
})
_HTML_BLOCK_TAGS = _HTML_HEADINGS | _HTML_PARAGRAPHS | {"li", "pre", "table"}


def extract_html(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """HTML via BeautifulSoup/lxml: h1-h6, paragraphs, list items, table rows, pre.

    Every piece of visible text lands in exactly one block: the text directly inside a
    block element (``<li>Parent<ul><li>Child</li></ul></li>`` gives "Parent" and "Child",
    loose text in a ``<div>`` is a paragraph) and never twice (``<blockquote><p>``).
    """
    from bs4 import BeautifulSoup

    check_not_binary(data, name)  # the parser would make text of any bytes
    front, data = _front_matter(data)
    soup = BeautifulSoup(data, "lxml")
    title_tag = soup.find("title")  # before <head> goes with the junk
    page_title = clean(title_tag.get_text()) if title_tag else ""
    metadata = _access_of(soup, front)
    strip_html_boilerplate(soup)  # navigation, footers, cookie banners, scripts, <head>
    body = soup.body or soup
    blocks: list[Block] = []
    _html_walk(body, BlockKind.PARAGRAPH, 0, blocks)
    if not blocks:
        text = clean(body.get_text(" "))
        if text:
            blocks.append(Block(BlockKind.PARAGRAPH, text))
    h1 = next((b.text for b in blocks if b.kind is BlockKind.HEADING and b.level == 1), None)
    own = clean(front.title) if front is not None and front.title else None
    title = own or h1 or page_title or title_from_name(name)
    return ExtractedDocument(title, tuple(blocks), "text/html", metadata=metadata)


def _front_matter(data: bytes) -> tuple[FrontMatter | None, bytes]:
    """Front matter above the markup (None when there is none) and the markup after it."""
    if data.lstrip(b"\xef\xbb\xbf")[:3] not in (b"---", b"+++"):
        return None, data
    front, rest = split_front_matter(data.decode("utf-8", errors="replace"))
    return (None, data) if front is None else (front, rest.encode("utf-8"))


def _access_of(soup: Any, front: FrontMatter | None) -> dict[str, str]:
    """The page's metadata from its front matter and who may read it (see the module)."""
    metadata = dict(front.metadata) if front is not None else {}
    tags = soup.find_all("meta", attrs={"name": lambda v: bool(v) and
                                        v.strip().casefold() == "docgraph-access"})
    if not tags:
        return metadata
    named = [str(t.get("content") or "") for t in tags]
    said = access_metadata(",".join(named), 'page <meta name="docgraph-access">')
    if ACCESS_ERROR_KEY in metadata or ACCESS_ERROR_KEY in said:
        return {**metadata, ACCESS_ERROR_KEY: metadata.get(ACCESS_ERROR_KEY)
                or said[ACCESS_ERROR_KEY]}
    if ACCESS_KEY in metadata and metadata[ACCESS_KEY] != said[ACCESS_KEY]:
        return {**metadata, ACCESS_ERROR_KEY: (
            "the front matter's access and the page's <meta name=\"docgraph-access\"> differ"
            f" ({metadata[ACCESS_KEY]} vs {said[ACCESS_KEY]})")}
    return {**metadata, **said}


def _html_walk(element: Any, kind: BlockKind, level: int, blocks: list[Block]) -> None:
    """Emit ``element``'s own text as one ``kind`` block, and its block children in order."""
    from bs4 import Comment, Declaration, Doctype, ProcessingInstruction, Tag
    from bs4.element import NavigableString

    buffer: list[str] = []

    def flush() -> None:
        text = clean("".join(buffer))  # inline runs join as rendered: "<b>Bo</b>ld" -> "Bold"
        buffer.clear()
        if text:
            blocks.append(Block(kind, text, level))

    for child in element.children:
        if isinstance(child, Comment | Declaration | Doctype | ProcessingInstruction):
            continue
        if isinstance(child, NavigableString):
            buffer.append(str(child))
            continue
        if not isinstance(child, Tag):
            continue
        tag = child.name
        if tag == "br":
            buffer.append(" ")
        elif tag == "table":
            flush()
            _html_table(child, blocks)
        elif tag == "pre":
            flush()
            # No separator: <pre> keeps its own whitespace; highlighted code is one <span>
            # per token and must not be torn apart by inserted newlines.
            code = child.get_text().strip()
            if code:
                blocks.append(Block(BlockKind.CODE, code))
        elif tag in _HTML_HEADINGS:
            flush()
            _html_walk(child, BlockKind.HEADING, int(tag[1]), blocks)
        elif tag == "li":
            flush()
            _html_walk(child, BlockKind.LIST_ITEM, 0, blocks)
        elif tag in _HTML_PARAGRAPHS:
            flush()
            _html_walk(child, BlockKind.PARAGRAPH, 0, blocks)
        elif child.find(list(_HTML_BLOCK_TAGS)) is not None:
            flush()  # an inline element wrapping blocks (<a><div>..</div></a>)
            _html_walk(child, kind, level, blocks)
        else:
            buffer.append(child.get_text())
    flush()


def _html_table(table: Any, blocks: list[Block]) -> None:
    """One block per data row, as 'header: cell; ...' when the table has a header row."""
    header: list[str] = []
    for caption in table.find_all("caption", recursive=False):
        text = clean(caption.get_text(" "))
        if text:
            blocks.append(Block(BlockKind.PARAGRAPH, text))
    for row in table.find_all("tr"):
        if row.find_parent("table") is not table:
            continue  # a nested table's rows are part of its cell's text
        cells = row.find_all(["th", "td"], recursive=False)
        texts = [clean(c.get_text(" ")) for c in cells]
        if cells and all(c.name == "th" for c in cells):
            header = texts
            continue
        text = row_text(header, texts)
        if text:
            blocks.append(Block(BlockKind.TABLE_ROW, text))
