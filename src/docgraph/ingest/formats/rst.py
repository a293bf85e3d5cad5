"""reStructuredText (``.rst``: Sphinx, CMake and Python docs) through docutils.

The text is parsed into a docutils doctree and walked: sections give headings (their
depth is the level), paragraphs, list items (bullet, enumerated, definition, field and
option lists), table rows (``header: cell; ...``) and literal blocks (``::``,
``.. code-block::``, doctests) as code. The first section title is the title; the
bibliographic fields at the top (``:Author:``, ``:Date:``, ...) are metadata.

Real documentation folders are written for Sphinx, whose directives and roles docutils
does not know. Here an unknown directive keeps its arguments (a signature, as written;
``versionadded`` and its kin in Sphinx's words, ``New in version 3.5: ...``) and its
content as text (``.. cmake:command:: add_executable`` with its description), a navigation or
file-reading one (``toctree``, ``include``-like, ``index``, ``highlight``, ``auto*``)
yields nothing, and an unknown role renders its text (``:ref:`Title <target>``` gives
``Title``, ``:func:`~a.b``` gives ``b``). docutils' system messages are suppressed
(report and halt level 5) and never reach the body. Nothing outside the text is read:
file insertion, raw passthrough and configuration files are off.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable, Iterator
from typing import Any

from docgraph.ingest.blocks import clean, paragraph_blocks, row_text, title_from_name
from docgraph.ingest.decode import decode_text
from docgraph.ingest.limits import ExtractLimits
from docgraph.model import Block, BlockKind, ExtractedDocument

RST_MEDIA_TYPE = "text/x-rst"
# docutils' inline parser takes time quadratic in a paragraph's length on unclosed markup
# ('*a ' repeated: 60,000 characters take 10 s); a file with a longer paragraph is read as
# plain text instead (real documentation has none).
LONGEST_PARSED_PARAGRAPH = 20_000
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")

# docutils settings: no file access, no configuration files, no messages in the tree or
# on stderr, exceptions raised instead of sys.exit.
_SETTINGS: dict[str, Any] = {
    "_disable_config": True,
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "report_level": 5,
    "halt_level": 5,
    "traceback": True,
    "doctitle_xform": False,
    "syntax_highlight": "none",
    "smart_quotes": False,
    "embed_stylesheet": False,
    "line_length_limit": 1_000_000,
}

# Directives (Sphinx's, docutils' own file-reading ones) whose output is navigation,
# configuration or another file's text: they give nothing.
_SILENT_DIRECTIVES = frozenset({
    "toctree", "index", "highlight", "literalinclude", "include", "tabularcolumns",
    "sectionauthor", "moduleauthor", "codeauthor", "module", "currentmodule",
    "default-domain",
    "default-role", "role", "raw", "image", "figure", "graphviz", "only", "ifconfig",
    "cmake-module", "automodule", "autoclass", "autofunction", "automethod",
    "autoattribute", "autodata", "autoexception", "autosummary", "autoprogram",
    "contents", "sectnum", "header", "footer", "meta", "title",
})
_VERSION_LABELS = {"versionadded": "New in version", "versionchanged": "Changed in version",
                   "deprecated": "Deprecated since version",
                   "versionremoved": "Removed in version"}
_ROLE_TARGET = re.compile(r"^(.*?)\s*<[^<>]*>$", re.DOTALL)


def extract_rst(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """A reStructuredText file: sections, paragraphs, lists, tables and literal blocks."""
    from docutils.core import publish_doctree

    text = decode_text(data, name)
    limits.check_text(name, len(text))
    longest = max(map(len, _PARAGRAPH_BREAK.split(text)))
    if longest > LONGEST_PARSED_PARAGRAPH:  # docutils' inline parser is quadratic in it
        return ExtractedDocument(title_from_name(name), tuple(paragraph_blocks(text)),
                                 RST_MEDIA_TYPE, {"read_as": (
                                     f"plain text: a paragraph of {longest} characters, over "
                                     f"the {LONGEST_PARSED_PARAGRAPH} parsed as "
                                     "reStructuredText")})
    _install_permissive_lookups()
    settings = {**_SETTINGS, "warning_stream": io.StringIO()}
    tree = publish_doctree(text, source_path=name, settings_overrides=settings)
    walker = _Walker()
    walker.walk_children(tree, depth=0)
    metadata = walker.metadata
    title = next((b.text for b in walker.blocks if b.kind is BlockKind.HEADING), None)
    return ExtractedDocument(title or title_from_name(name), tuple(walker.blocks),
                             RST_MEDIA_TYPE, metadata)


class _Walker:
    """Doctree nodes to blocks, in document order."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.metadata: dict[str, str] = {}

    def add(self, kind: BlockKind, text: str, level: int = 0) -> None:
        text = text.strip("\n") if kind is BlockKind.CODE else clean(text)
        if text.strip():
            self.blocks.append(Block(kind, text, level))

    def walk_children(self, node: Any, depth: int) -> None:
        from docutils import nodes

        for child in node.children:
            if isinstance(child, nodes.Element):
                self.walk(child, depth)

    def walk(self, node: Any, depth: int) -> None:
        from docutils import nodes

        if isinstance(node, nodes.section):
            title = node.next_node(nodes.title)
            if title is not None and title.parent is node:
                self.add(BlockKind.HEADING, _flat(title), min(depth + 1, 6))
            for child in node.children:
                if child is not title and isinstance(child, nodes.Element):
                    self.walk(child, depth + 1)
        elif isinstance(node, nodes.Invisible | nodes.system_message | nodes.problematic
                        | nodes.image | nodes.raw | nodes.label):
            return  # comments, targets, substitution definitions; messages; pictures;
            # footnote numbers
        elif isinstance(node, nodes.docinfo):
            for field in node.children:
                label = (field[0].astext() if isinstance(field, nodes.field)
                         else getattr(field, "tagname", ""))
                value = field[-1].astext() if isinstance(field, nodes.field) else field.astext()
                self.metadata[clean(label).lower()] = clean(value)
        elif isinstance(node, nodes.topic) and "contents" in node.get("classes", ()):
            return  # a generated table of contents
        elif isinstance(node, nodes.literal_block | nodes.doctest_block):
            self.add(BlockKind.CODE, node.astext())
        elif isinstance(node, nodes.line_block):
            self.add(BlockKind.PARAGRAPH, " ".join(_lines(node)))
        elif isinstance(node, nodes.table):
            self.table(node)
        elif isinstance(node, nodes.list_item):
            self.list_item(node, depth)
        elif isinstance(node, nodes.definition_list_item | nodes.field | nodes.option_list_item):
            self.labelled_item(node, depth)
        elif isinstance(node, nodes.TextElement):  # paragraphs, rubrics, captions, ...
            self.add(BlockKind.PARAGRAPH, _flat(node))
        else:  # lists, quotes, admonitions, containers, figures, footnotes, ...
            self.walk_children(node, depth)

    def list_item(self, node: Any, depth: int) -> None:
        """A list item: its leading paragraphs as one item, nested blocks after it."""
        from docutils import nodes

        lead: list[str] = []
        rest = list(node.children)
        while rest and isinstance(rest[0], nodes.paragraph):
            lead.append(_flat(rest.pop(0)))
        self.add(BlockKind.LIST_ITEM, " ".join(lead))
        for child in rest:
            if isinstance(child, nodes.Element):
                self.walk(child, depth)

    def labelled_item(self, node: Any, depth: int) -> None:
        """``term: definition`` for definition, field and option list items."""
        from docutils import nodes

        label = " ".join(_flat(c) for c in node.children
                         if isinstance(c, nodes.term | nodes.field_name | nodes.option_group
                                       | nodes.classifier))
        body = next((c for c in node.children
                     if isinstance(c, nodes.definition | nodes.field_body | nodes.description)),
                    None)
        paragraphs: list[str] = []
        rest: list[Any] = []
        if body is not None:
            rest = list(body.children)
            while rest and isinstance(rest[0], nodes.paragraph):
                paragraphs.append(_flat(rest.pop(0)))
        text = " ".join(paragraphs)
        self.add(BlockKind.LIST_ITEM, f"{label}: {text}" if label and text else label or text)
        for child in rest:
            if isinstance(child, nodes.Element):
                self.walk(child, depth)

    def table(self, node: Any) -> None:
        """One row block per body row, labelled with the header row's cells."""
        from docutils import nodes

        title = node.next_node(nodes.title)
        if title is not None and title.parent is node:
            self.add(BlockKind.PARAGRAPH, _flat(title))
        header: list[str] = []
        for group in node.findall(nodes.tgroup):
            for part in group.children:
                if not isinstance(part, nodes.thead | nodes.tbody):
                    continue
                for row in part.children:
                    cells = [clean(_flat(entry)) for entry in row.children]
                    if isinstance(part, nodes.thead):
                        header = cells
                    else:
                        self.add(BlockKind.TABLE_ROW, row_text(header, cells))


def _flat(node: Any) -> str:
    """A node's text, without comments and system messages; an unresolved reference or
    substitution (docutils' ``problematic``) as its words, without its markup."""
    from docutils import nodes

    parts: list[str] = []
    for text in node.findall(nodes.Text):
        above = list(_ancestors(text, node))
        if any(isinstance(p, nodes.system_message | nodes.comment
                          | nodes.substitution_definition) for p in above):
            continue
        if isinstance(node, nodes.problematic) or any(
                isinstance(p, nodes.problematic) for p in above):
            parts.append(str(text).strip("`|_"))  # an unresolved reference: its words
        else:
            parts.append(str(text))
    return "".join(parts).replace("\n", " ")


def _ancestors(node: Any, top: Any) -> Iterator[Any]:
    parent = node.parent
    while parent is not None and parent is not top:
        yield parent
        parent = parent.parent


def _lines(node: Any) -> list[str]:
    from docutils import nodes

    return [_flat(line) for line in node.findall(nodes.line)]


@functools.cache
def _install_permissive_lookups() -> None:
    """Make docutils' directive and role lookups fall back to permissive handlers for the
    names it does not know (Sphinx's and CMake's), once per process. Known names are
    untouched; what was an error becomes text."""
    from docutils.parsers.rst import directives, roles

    find_directive = directives.directive
    find_role = roles.role

    def directive(name: str, language: Any, document: Any) -> tuple[Any, list[Any]]:
        found, messages = find_directive(name, language, document)
        if found is None:
            return _directive_for(name.lower()), messages
        return found, messages

    def role(name: str, language: Any, lineno: int, reporter: Any) -> tuple[Any, list[Any]]:
        found, messages = find_role(name, language, lineno, reporter)
        return (found if found is not None else _text_role), messages

    # docutils looks both up by module attribute at every use: wrap them in place.
    directives.directive = directive  # type: ignore[assignment]
    roles.role = role  # type: ignore[assignment]
    code = _literal_code()
    for name in ("code", "code-block", "sourcecode"):
        directives.register_directive(name, code)


def _literal_code() -> type[Any]:
    from docutils import nodes
    from docutils.parsers.rst import Directive

    class Code(Directive):
        """Sphinx's ``code-block`` (any options: ``linenos``, ``emphasize-lines``,
        ``caption``, ...) as a literal block of its content."""

        has_content = True
        optional_arguments = 1
        option_spec = _AnyOptions()

        def run(self) -> list[Any]:
            code = "\n".join(self.content)
            return [nodes.literal_block(code, code)]

    return Code


class _AnyOptions(dict[str, Callable[[str], Any]]):
    """An option spec that accepts every option (unknown directives take any)."""

    def __missing__(self, key: str) -> Callable[[str], Any]:
        return _unchanged

    def __bool__(self) -> bool:
        return True


def _unchanged(value: str) -> str:
    return value or ""


@functools.cache
def _directive_for(name: str) -> type[Any]:
    """A directive class for the unknown directive ``name``: silent or text-keeping."""
    from docutils import nodes
    from docutils.parsers.rst import Directive

    silent = name.rsplit(":", 1)[-1] in _SILENT_DIRECTIVES or name.startswith("auto")

    class Permissive(Directive):
        has_content = True
        optional_arguments = 100
        final_argument_whitespace = True
        option_spec = _AnyOptions()

        def run(self) -> list[Any]:
            if silent:
                return []
            out: list[Any] = []
            if self.arguments:
                argument = " ".join(self.arguments).replace("\\ ", " ")
                label = _VERSION_LABELS.get(name.rsplit(":", 1)[-1])
                if label is None:  # a signature (function, command, option): as written
                    out.append(nodes.paragraph(argument, argument))
                else:  # Sphinx's wording: 'New in version 3.5: ...', the note parsed
                    version, _, note = argument.partition(" ")
                    argument = f"{label} {version}:" + (f" {note}" if note else "")
                    inline, messages = self.state.inline_text(argument, self.lineno)
                    out.append(nodes.paragraph(argument, "", *inline))
                    out.extend(messages)
            if self.content:
                box = nodes.container()
                self.state.nested_parse(self.content, self.content_offset, box)
                out.append(box)
            return out

    return Permissive


def _text_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any,
               options: dict[str, Any] | None = None,
               content: list[str] | None = None) -> tuple[list[Any], list[Any]]:
    """An unknown role as its text: the title of ``Title <target>``, the last part of
    ``~a.b``, the text without a leading ``!``."""
    from docutils import nodes
    from docutils.utils import unescape

    shown = unescape(text)
    titled = _ROLE_TARGET.match(shown)
    if titled is not None and titled.group(1):
        shown = titled.group(1)
    elif shown.startswith("~"):
        shown = shown[1:].rsplit(".", 1)[-1]
    shown = shown.lstrip("!")
    return [nodes.literal(rawtext, shown)], []
