"""AsciiDoc (``.adoc``, ``.asciidoc``) by a structural reader of its block syntax.

No maintained pure-Python AsciiDoc parser exists (asciidoc-py is a GPL converter to
HTML/DocBook, the Lark-based parsers are alphas), so this module reads the block structure
the AsciiDoc language defines, line by line, as Asciidoctor does:

- section titles ``= Title`` (the document title, level 1) to ``====== Title`` (level 6),
  and Markdown-style ``#`` titles (the old two-line, underlined titles are not read as
  titles: their underline is ambiguous with block delimiters);
- attribute entries (``:name: value``) are defined and ``{name}`` references to them
  replaced by their values; the header's author and revision lines and its author,
  revision, description and keywords attributes are metadata;
- delimited blocks: listing ``----`` and literal ``....`` (and Markdown fences) are code,
  example ``====``, sidebar ``****``, quote ``____`` and open ``--`` blocks are read for
  their content, comment ``////`` and passthrough ``++++`` blocks are left out; a block
  closes at a line equal to its opening one (to the end of the file if none does);
- tables ``|===`` (``,===`` and ``:===`` for CSV and DSV): cells split on ``|``, grouped
  into rows by the column count (``cols`` attribute, else the first line's cells), the
  first row a header when ``%header``/``options="header"`` says so or a blank line follows
  it; each row a record ``header: cell; ...``;
- lists (``*``, ``-``, ``.``, ``1.`` items at any depth, checklists, description lists
  ``term:: text``) as list items; indented lines as literal code;
- block attribute lines (``[source,python]``, ``[[id]]``), comments (``//``),
  ``include::``/``ifdef::`` directives (never followed: no other file is read), page
  breaks and thematic breaks give nothing; block titles (``.Title``) are paragraphs.

Inline markup is reduced to its text: links and cross references (``link:u[text]``,
``https://u[text]``, ``xref:d.adoc[text]``, ``<<id,text>>``) to their text, macros
(``kbd:[...]``, ``footnote:[...]``, ``image:f[alt]``) to theirs, ``*strong*``, ``_em_``,
`` `mono` `` and ``#mark#`` to their words.
"""

from __future__ import annotations

import re

from docgraph.ingest.blocks import clean, row_text, title_from_name
from docgraph.ingest.decode import decode_text
from docgraph.ingest.limits import ExtractLimits
from docgraph.model import Block, BlockKind, ExtractedDocument

ASCIIDOC_MEDIA_TYPE = "text/asciidoc"

_SECTION = re.compile(r"(={1,6}|#{1,6})[ \t]+(?=\S)")
_ATTRIBUTE = re.compile(r":(!?[\w][\w-]*!?):(?:[ \t]+(.*))?$")
_BLOCK_ATTRIBUTES = re.compile(r"\[[^\[\]]*\]|\[\[[^\[\]]*\]\]")
_BLOCK_TITLE = re.compile(r"\.([^\s.].*)$")
_DIRECTIVE = re.compile(r"(?:include|ifdef|ifndef|ifeval|endif|toc|image)::.*\[.*\]$")
_LIST_ITEM = re.compile(r"(\*{1,5}|-|\.{1,5}|\d{1,9}\.|[a-zA-Z]\.|[ivxIVX]{1,5}\))[ \t]+(.*)$")
_CHECKBOX = re.compile(r"\[[ xX*]\][ \t]+")
_DESCRIPTION = re.compile(r"(.*?[^:;])(:{2,4}|;;)(?:[ \t]+(.*))?$")
_DELIMITERS = {"-": "code", ".": "code", "=": "compound", "*": "compound", "_": "compound",
               "/": "comment", "+": "skip"}
_DELIMITER = re.compile(r"(-{4,}|\.{4,}|={4,}|\*{4,}|_{4,}|/{4,}|\+{4,}|--)$")
_FENCE = re.compile(r"(`{3,})\w*(?:,.*)?$")
_TABLE = re.compile(r"([|,:!])={3,}$")
_CELL_SPEC = re.compile(r"(?:^|(?<=\s))(?:\d+\*|\d*(?:\.\d+)?\+)?[<^>]?(?:\.[<^>])?[adehlmsv]?\|")
_ATTR_REF = re.compile(r"\{([\w][\w-]*)\}")
# Header attributes kept as the document's metadata (the others only resolve references).
_METADATA = frozenset({"author", "authors", "email", "revnumber", "revdate", "revremark",
                       "description", "keywords"})
_BREAK = frozenset({"'''", "---", "***", "<<<", "- - -", "* * *"})

# Inline markup, reduced to text in this order. Every span is bounded (a few hundred
# characters), so text full of unclosed marks costs linear time, not quadratic.
_SPAN = r"(.{1,400}?)"
_INLINE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"<<([^,<>]{1,400}?)(?:,\s*([^<>]{1,400}?))?>>"), "\0"),  # _macro_text
    (re.compile(r"\b(?:xref|link|mailto|image|kbd|btn|menu|footnote|footnoteref|pass|"
                r"stem|latexmath|asciimath|icon|anchor|indexterm2?):([^\s\[]{0,400})"
                r"\[([^\]]{0,400})\]"), "\0"),
    (re.compile(r"\b((?:https?|ftp|irc)://[^\s\[<>]{1,400})\[([^\]]{0,400})\]"), "\0"),
    (re.compile(r"(?<![\w*])\*{1,2}(?=\S)" + _SPAN + r"(?<=\S)\*{1,2}(?![\w*])"), r"\1"),
    (re.compile(r"(?<![\w_])_{1,2}(?=\S)" + _SPAN + r"(?<=\S)_{1,2}(?![\w_])"), r"\1"),
    (re.compile(r"(?<![\w`])`{1,2}(?=\S)" + _SPAN + r"(?<=\S)`{1,2}(?![\w`])"), r"\1"),
    (re.compile(r"(?<![\w#])#{1,2}(?=\S)" + _SPAN + r"(?<=\S)#{1,2}(?![\w#])"), r"\1"),
    (re.compile(r"(?<![\w+])\+{1,3}(?=\S)" + _SPAN + r"(?<=\S)\+{1,3}(?![\w+])"), r"\1"),
    (re.compile(r"\[\[\[?[^\[\]]{0,400}\]\]\]?"), ""),  # inline anchors
    (re.compile(r"[ \t]\+$", re.MULTILINE), ""),  # hard line breaks
)


def extract_asciidoc(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """An AsciiDoc file: sections, paragraphs, lists, tables, listing and literal blocks."""
    text = decode_text(data, name)
    limits.check_text(name, len(text))
    reader = _Reader(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"),
                     name, limits)
    reader.read()
    title = next((b.text for b in reader.blocks
                  if b.kind is BlockKind.HEADING and b.level == 1), None)
    return ExtractedDocument(title or title_from_name(name), tuple(reader.blocks),
                             ASCIIDOC_MEDIA_TYPE, reader.metadata)


class _Reader:
    """The line-by-line block reader; ``blocks`` and ``metadata`` hold what it read."""

    def __init__(self, lines: list[str], name: str, limits: ExtractLimits) -> None:
        self.lines = lines
        self.name = name
        self.limits = limits
        self.substituted = 0  # characters attribute references expanded to, in all
        self.blocks: list[Block] = []
        self.metadata: dict[str, str] = {}
        self.attributes: dict[str, str] = {}
        self.pending_attributes = ""  # the last block attribute line, e.g. [%header]

    # -- output --------------------------------------------------------------------------

    def inline(self, text: str) -> str:
        """Prose with attribute references resolved and inline markup reduced to text."""
        text = self.substitute(text)
        for pattern, replacement in _INLINE:
            if replacement == "\0":
                text = pattern.sub(_macro_text, text)
            else:
                text = pattern.sub(replacement, text)
        return clean(text.replace("\n", " "))

    def substitute(self, text: str) -> str:
        """``text`` with its ``{name}`` references to defined attributes replaced. What they
        expand to counts toward ``max_text_chars`` (attributes defined by references to
        each other could otherwise grow without bound)."""
        if "{" not in text:
            return text

        def value(match: re.Match[str]) -> str:
            found = self.attributes.get(match.group(1).lower())
            if found is None:
                return match.group(0)
            self.substituted += len(found)
            self.limits.check_text(self.name, self.substituted)
            return found

        return _ATTR_REF.sub(value, text)

    def add(self, kind: BlockKind, text: str, level: int = 0) -> None:
        text = text.strip("\n") if kind is BlockKind.CODE else self.inline(text)
        if text.strip():
            self.blocks.append(Block(kind, text, level))

    # -- reading -------------------------------------------------------------------------

    def read(self) -> None:
        """Read every line: the header's attributes first, then the body."""
        self.read_lines(self.lines, header=True)

    def read_lines(self, lines: list[str], header: bool = False) -> None:
        i = 0
        paragraph: list[str] = []
        in_header = header

        def end_paragraph() -> None:
            if paragraph:
                self.add(BlockKind.PARAGRAPH, "\n".join(paragraph))
                paragraph.clear()

        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if not stripped:
                end_paragraph()
                i += 1
                continue
            if (stripped.startswith("//") and not stripped.startswith("////")) \
                    or _DIRECTIVE.match(stripped):
                i += 1  # a line comment; include::, ifdef:: and block macros give nothing
                continue
            attribute = _ATTRIBUTE.match(stripped) if not paragraph else None
            if attribute is not None:
                self.attribute(attribute.group(1), attribute.group(2) or "", in_header)
                i += 1
                continue
            section = _section(line) if not paragraph else None
            if section is not None:
                end_paragraph()
                level, title = section
                self.add(BlockKind.HEADING, title, level)
                in_header = level == 1 and in_header
                i += 1
                if in_header:  # an author line and a revision line may follow the title
                    i = self.header_lines(lines, i)
                self.pending_attributes = ""
                continue
            in_header = False
            if paragraph:  # a paragraph goes on until a blank line or a block delimiter
                if not (_DELIMITER.match(stripped) or _TABLE.match(stripped)
                        or _FENCE.match(stripped) or _LIST_ITEM.match(stripped)):
                    paragraph.append(line)
                    i += 1
                    continue
                end_paragraph()
            i = self.block(lines, i, paragraph)
        end_paragraph()

    def attribute(self, name: str, value: str, in_header: bool) -> None:
        if name.startswith("!") or name.endswith("!"):
            self.attributes.pop(name.strip("!").lower(), None)
            return
        value = self.substitute(clean(value.rstrip("\\")))
        self.attributes[name.lower()] = value
        if in_header and value and name.lower() in _METADATA:
            self.metadata[name.lower()] = value

    def header_lines(self, lines: list[str], i: int) -> int:
        """Skip the author and revision lines right under the document title, keeping
        them as metadata."""
        for key in ("author", "revision"):
            if i < len(lines) and lines[i].strip() and not _ATTRIBUTE.match(lines[i].strip()) \
                    and not lines[i].startswith("//"):
                self.metadata[key] = clean(lines[i])
                i += 1
        return i

    def block(self, lines: list[str], i: int, paragraph: list[str]) -> int:
        """Read the block starting at line ``i`` (not a paragraph continuation); return the
        index of the line after it. A plain text line starts ``paragraph``."""
        line = lines[i]
        stripped = line.strip()
        delimiter = _DELIMITER.match(stripped) or _FENCE.match(stripped)
        if delimiter is not None:
            body, after = _delimited(lines, i, delimiter.group(1))
            kind = "code" if stripped.startswith("`") else _DELIMITERS[stripped[0]]
            if kind == "code":
                self.add(BlockKind.CODE, "\n".join(body))
            elif kind == "compound":
                self.pending_attributes = ""
                self.read_lines(body)
            self.pending_attributes = ""
            return after
        table = _TABLE.match(stripped)
        if table is not None:
            body, after = _delimited(lines, i, stripped)
            self.table(body, table.group(1))
            self.pending_attributes = ""
            return after
        if _BLOCK_ATTRIBUTES.fullmatch(stripped):
            self.pending_attributes = stripped
            return i + 1
        if stripped in _BREAK or stripped == "+":
            return i + 1
        title = _BLOCK_TITLE.match(stripped)
        if title is not None and not stripped.startswith(".."):
            self.add(BlockKind.PARAGRAPH, title.group(1))
            return i + 1
        if line[:1] in (" ", "\t"):  # a literal paragraph: indented lines
            end = i
            while end < len(lines) and lines[end].strip() and lines[end][:1] in (" ", "\t"):
                end += 1
            self.add(BlockKind.CODE, _dedent(lines[i:end]))
            self.pending_attributes = ""
            return end
        item = _LIST_ITEM.match(stripped)
        description = _DESCRIPTION.match(stripped) if item is None else None
        if item is not None or (description is not None and " " not in description.group(2)):
            return self.list_item(lines, i, item, description)
        if self.pending_attributes.lower().startswith(("[source", "[listing", "[literal")):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            self.add(BlockKind.CODE, "\n".join(lines[i:end]))
            self.pending_attributes = ""
            return end
        paragraph.append(line)
        self.pending_attributes = ""
        return i + 1

    def list_item(self, lines: list[str], i: int, item: re.Match[str] | None,
                  description: re.Match[str] | None) -> int:
        """A list item and the lines that continue it (up to a blank line, another item
        or a block delimiter)."""
        if item is not None:
            text = _CHECKBOX.sub("", item.group(2), count=1)
        else:
            assert description is not None
            term, rest = description.group(1).strip(), (description.group(3) or "").strip()
            text = f"{term}: {rest}" if rest else term
        parts = [text]
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if (stripped.startswith("//") and not stripped.startswith("////")) \
                    or _DIRECTIVE.match(stripped):
                i += 1  # a comment or a conditional inside the item's lines
                continue
            if (not stripped or stripped == "+" or _LIST_ITEM.match(stripped)
                    or _DELIMITER.match(stripped) or _TABLE.match(stripped)
                    or _FENCE.match(stripped) or _BLOCK_ATTRIBUTES.fullmatch(stripped)
                    or _description_item(stripped)):
                break
            parts.append(stripped)
            i += 1
        if item is None and len(parts) > 1 and description is not None \
                and not description.group(3):  # 'term::' with its definition below it
            parts = [f"{parts[0]}: {' '.join(parts[1:])}"]
        elif item is None and len(parts) == 1 and description is not None \
                and not description.group(3):
            # 'term::' alone: its definition is the next lines' paragraph
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j][:1] in (" ", "\t") and lines[j].strip():
                definition: list[str] = []
                while j < len(lines) and lines[j].strip():
                    definition.append(lines[j].strip())
                    j += 1
                parts[0] = f"{parts[0]}: {' '.join(definition)}"
                i = j
        self.add(BlockKind.LIST_ITEM, "\n".join(parts))
        self.pending_attributes = ""
        return i

    def table(self, body: list[str], separator: str) -> None:
        """A table's rows as records, labelled with its header row's cells when it has
        one."""
        spec = self.pending_attributes.lower()
        cells_by_line: list[list[str]] = []
        blank_after_first = False
        for number, line in enumerate(body):
            if not line.strip():
                if len(cells_by_line) == 1 and number > 0:
                    blank_after_first = True
                continue
            cells_by_line.append(_cells(line, separator))
        if not cells_by_line:
            return
        columns = _column_count(spec) or len(cells_by_line[0]) or 1
        cells = [c for line_cells in cells_by_line for c in line_cells]
        rows = [cells[k:k + columns] for k in range(0, len(cells), columns)]
        if "%noheader" in spec:
            has_header = False
        elif "%header" in spec or re.search(r"options\s*=\s*\"?[^\"\]]*header", spec):
            has_header = True
        else:  # the implicit header: one first line of cells, then a blank line
            has_header = blank_after_first
        header: list[str] = []
        if has_header and rows:
            header = [self.inline(c) for c in rows.pop(0)]
        for row in rows:
            self.add(BlockKind.TABLE_ROW, row_text(header, [self.inline(c) for c in row]))


def _section(line: str) -> tuple[int, str] | None:
    """The level and title of a section title line (``== Title`` or ``== Title ==``)."""
    match = _SECTION.match(line)
    if match is None:
        return None
    marks = match.group(1)
    title = line[match.end():].rstrip()
    closing = title.rstrip(marks[0])
    if len(title) - len(closing) == len(marks) and closing[-1:] in (" ", "\t"):
        title = closing.rstrip()
    return len(marks), title


def _description_item(stripped: str) -> bool:
    match = _DESCRIPTION.match(stripped)
    return match is not None and " " not in match.group(2)


def _delimited(lines: list[str], i: int, delimiter: str) -> tuple[list[str], int]:
    """The lines inside the delimited block opening at line ``i``, and the index after its
    closing line (the end of the text when it never closes)."""
    opening = lines[i].strip()
    for j in range(i + 1, len(lines)):
        if lines[j].strip() == opening or (delimiter.startswith("`")
                                           and lines[j].strip() == delimiter):
            return lines[i + 1:j], j + 1
    return lines[i + 1:], len(lines)


def _cells(line: str, separator: str) -> list[str]:
    """The cells a table line holds: ``|a |b`` gives ``a``, ``b`` (cell specifiers such as
    ``2+|`` or ``a|`` dropped); a CSV or DSV line is split on its separator."""
    if separator in ",:":
        return [c.strip() for c in line.split(separator)]
    stripped = line.strip()
    if not stripped.startswith("|") and not _CELL_SPEC.match(stripped):
        return [stripped]  # a cell's text continued on its own line
    parts = _CELL_SPEC.split(stripped)
    return [p.strip() for p in parts[1:]] if parts and not parts[0].strip() else \
        [p.strip() for p in parts]


def _column_count(spec: str) -> int:
    match = re.search(r"cols\s*=\s*\"?([^\"\]]*)", spec)
    if match is None:
        return 0
    value = match.group(1).strip()
    repeat = re.fullmatch(r"(\d+)\*.*", value)
    if repeat is not None:
        return int(repeat.group(1))
    return len([c for c in re.split(r"[,;]", value) if c.strip()]) or 0


def _dedent(lines: list[str]) -> str:
    indent = min(len(ln) - len(ln.lstrip()) for ln in lines)
    return "\n".join(ln[indent:] for ln in lines)


def _macro_text(match: re.Match[str]) -> str:
    """The text a link, cross reference or inline macro shows."""
    target, text = match.group(1), match.group(2)
    if text:
        return text.split(",", 1)[0].strip('"') if "=" not in text.split(",", 1)[0] \
            else target
    return target

