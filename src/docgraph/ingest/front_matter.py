"""Front matter of Markdown (and HTML) files: a YAML (``---``) or TOML (``+++``) block at the
very top.

Static site generators (Jekyll, Hugo, Docusaurus, MkDocs, Astro) keep a page's title and
metadata there. Read as Markdown it is a thematic break followed by a setext heading, so
every chunk's section path and breadcrumb began with ``title: npm-ci section: 1 ...``.
:func:`split_front_matter` takes it off the text: ``title`` becomes the document's title,
the other keys its metadata (flat strings, nested values rendered compactly and bounded),
and the body is what follows the closing delimiter.

A block that parses to something other than a mapping (thematic breaks around a
paragraph: valid YAML, a string) is no front matter and stays Markdown. One that does not
parse comes back with :attr:`FrontMatter.error` saying why, and the caller keeps its lines
as text: a file never fails for its front matter.
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from docgraph.model import parse_principals

#: Front matter longer than this is not looked for (a closing delimiter further down is
#: not front matter but a thematic break in a long document).
MAX_FRONT_MATTER_CHARS = 64 * 1024
#: The key whose list of principals (``user:<id>``, ``group:<name>``) says who may read the
#: document: kept in the metadata as a sorted JSON array (:func:`front_matter_access`), or,
#: when it names something else, :data:`ACCESS_ERROR_KEY` says why (the document is then
#: not indexed: a permission that cannot be read fails closed).
ACCESS_KEY = "access"
ACCESS_ERROR_KEY = "access_error"
_MENTIONS_ACCESS = re.compile(r"^\s*[\"']?access[\"']?\s*[:=]", re.IGNORECASE | re.MULTILINE)
#: Most keys kept as metadata, and characters per value.
MAX_KEYS = 64
MAX_VALUE_CHARS = 1000

_OPENING = re.compile(r"\A\ufeff?(---|\+\+\+)[ \t]*\r?\n")
_CLOSING = {"---": re.compile(r"^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.M),
            "+++": re.compile(r"^\+\+\+[ \t]*(?:\r?\n|\Z)", re.M)}


@dataclass(frozen=True)
class FrontMatter:
    """What a Markdown file's front matter says: its ``title`` (None when it names none),
    the other keys as ``metadata``, the ``raw`` text between the delimiters, and ``error``
    when that text is not a readable mapping (then title and metadata are empty)."""

    title: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    raw: str = ""
    error: str | None = None


def split_front_matter(text: str) -> tuple[FrontMatter | None, str]:
    """The front matter at the top of ``text`` and the text after it, or None and ``text``
    when it has none. Never raises for a malformed block: it comes back with ``error``."""
    opening = _OPENING.match(text)
    if opening is None:
        return None, text
    fence = opening.group(1)
    closing = _CLOSING[fence].search(text, opening.end(), opening.end()
                                     + MAX_FRONT_MATTER_CHARS + 8)
    if closing is None:
        return None, text
    raw = text[opening.end():closing.start()]
    body = text[closing.end():]
    try:
        parsed = _parse_yaml(raw) if fence == "---" else tomllib.loads(raw)
    except Exception as exc:  # any parser failure leaves the block as text
        kind = "YAML" if fence == "---" else "TOML"
        reason = " ".join(str(exc).split())[:200]
        # a block that may say who may read the document, unreadable: fails closed
        refused = {ACCESS_ERROR_KEY: f"front matter access: unreadable {kind} ({reason})"} \
            if _MENTIONS_ACCESS.search(raw) else {}
        return FrontMatter(None, refused, raw=raw, error=f"unreadable {kind} ({reason})"), body
    if not isinstance(parsed, dict):
        if parsed is None and not raw.strip():
            return FrontMatter(None), body  # an empty block: nothing to say
        return None, text  # rules around text: Markdown, not front matter
    title: str | None = None
    metadata: dict[str, str] = {}
    for key, value in parsed.items():
        name = str(key)
        if name.casefold() == ACCESS_KEY:  # who may read it: kept exactly, or why not
            try:
                metadata[ACCESS_KEY] = json.dumps(sorted(parse_principals(value)))
            except ValueError as exc:
                metadata[ACCESS_ERROR_KEY] = f"front matter access: {exc}"
            continue
        rendered = _render(value, MAX_VALUE_CHARS)
        if name.casefold() == "title" and title is None and rendered.strip():
            title = " ".join(rendered.split())
        elif rendered and len(metadata) < MAX_KEYS:
            metadata[name] = rendered
    return FrontMatter(title, metadata, raw), body


def _parse_yaml(raw: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(raw, Loader=loader)  # the C or the Python safe loader


def _render(value: Any, budget: int) -> str:
    """``value`` as one line of at most ``budget`` characters: scalars as text (dates in
    ISO 8601), lists comma-separated, mappings as ``key: value`` pairs. Bounded while it is
    built, so aliases repeating a structure (a YAML 'billion laughs') cost ``budget``."""
    parts: list[str] = []
    left = [budget]

    def emit(text: str) -> bool:
        if left[0] <= 0:
            return False
        parts.append(text[:left[0]])
        left[0] -= len(text)
        return left[0] > 0

    def walk(item: Any, depth: int) -> bool:
        if depth > 16:  # deeper structure is left out, never recursed into without end
            return emit("…")
        if isinstance(item, dict):
            for i, (key, inner) in enumerate(item.items()):
                if (i and not emit("; ")) or not emit(f"{key}: ") or not walk(inner, depth + 1):
                    return False
            return True
        if isinstance(item, list | tuple):
            for i, inner in enumerate(item):
                if (i and not emit(", ")) or not walk(inner, depth + 1):
                    return False
            return True
        if isinstance(item, datetime.date | datetime.time):
            return emit(item.isoformat())
        if item is None:
            return True
        if isinstance(item, bool):
            return emit("true" if item else "false")
        return emit(" ".join(str(item).split()))

    walk(value, 0)
    return "".join(parts).strip()


def access_metadata(values: object, origin: str) -> dict[str, str]:
    """The metadata entry that records who may read a document from ``values`` (a list of
    principals, or one comma-separated string of them): :data:`ACCESS_KEY`, or
    :data:`ACCESS_ERROR_KEY` naming ``origin`` when a value is not a principal (fails
    closed)."""
    if isinstance(values, str):
        values = [v for v in (p.strip() for p in values.split(",")) if v]
    try:
        return {ACCESS_KEY: json.dumps(sorted(parse_principals(values)))}
    except ValueError as exc:
        return {ACCESS_ERROR_KEY: f"{origin}: {exc}"}


def front_matter_access(metadata: Mapping[str, str]) -> frozenset[str] | None:
    """The principals a document's front matter lets read it (None: it says nothing), from
    its metadata as :func:`split_front_matter` kept them."""
    raw = metadata.get(ACCESS_KEY)
    return None if raw is None else frozenset(json.loads(raw))
