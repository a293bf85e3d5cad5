"""Who a file says may read it, for a file whose extraction did not get that far.

Markdown and HTML files can name their own readers (an ``access:`` list in front matter,
:mod:`docgraph.ingest.front_matter`; a page's ``<meta name="docgraph-access">``,
:mod:`docgraph.ingest.extract_html`), and that set is the most specific one. A file that
fails to index is told of (its path, the reason) only to the readers of its set
(:meth:`~docgraph.ingest.access.BuildAccess.of_failure`), so a file restricted only by its
own front matter must not fall back to its folder's set because it failed: before it did,
and ``hr-only/`` vs ``open/`` made no difference to a too-large ``open/2027-layoffs.md``
whose front matter named ``group:hr``.

:func:`declared_access` reads the set from the bytes without extracting them (the front
matter block at the top, decoded leniently; a meta tag is only looked for, since parsing
the page is what may have failed): the set named, :data:`NOBODY_DECLARED` where the file
speaks of its readers in a way that cannot be read here (fails closed), None where it
names nobody. :func:`declares_access` says which files can name their readers at all; a
file of that kind that was never read (too large, unreadable, skipped) cannot be asked.
"""

from __future__ import annotations

import posixpath
import re

from docgraph.errors import ExtractionError
from docgraph.ingest.decode import decode_text
from docgraph.ingest.extract import EXTRACTORS, extract_markdown
from docgraph.ingest.extract_html import extract_html
from docgraph.ingest.front_matter import (
    ACCESS_ERROR_KEY,
    MAX_FRONT_MATTER_CHARS,
    front_matter_access,
    split_front_matter,
)

#: Extensions whose files can name their own readers: those extracted as Markdown (front
#: matter) or HTML (front matter, the meta tag), whatever extensions the extractors take.
_HTML = frozenset(e for e, read in EXTRACTORS.items() if read is extract_html)
DECLARING_EXTENSIONS = _HTML | {e for e, read in EXTRACTORS.items() if read is extract_markdown}
#: Bytes read for the front matter: enough for the longest block that is looked for,
#: at up to four bytes a character, and its delimiters.
_HEAD_BYTES = 4 * (MAX_FRONT_MATTER_CHARS + 64)
_META_NAME = re.compile(rb"docgraph-access", re.IGNORECASE)
#: The set of a file whose own statement of its readers cannot be read here.
NOBODY_DECLARED: frozenset[str] = frozenset()


def declares_access(path: str) -> bool:
    """Whether a file at ``path`` can name its own readers (by its extension)."""
    return posixpath.splitext(path.lower())[1] in DECLARING_EXTENSIONS


def declared_access(path: str, data: bytes) -> frozenset[str] | None:
    """The readers the file ``path`` with bytes ``data`` names for itself; None where it
    names none (its folder's set holds), :data:`NOBODY_DECLARED` where it names them in a
    way that cannot be read here (an unreadable block that mentions access, a value that is
    not a principal, an HTML page that has a ``docgraph-access`` meta tag)."""
    if not declares_access(path):
        return None
    html = posixpath.splitext(path.lower())[1] in _HTML
    if html and _META_NAME.search(data):
        return NOBODY_DECLARED  # where the page's tags say, only extracting it can tell
    head = data[:_HEAD_BYTES]
    try:
        text = decode_text(head, path)  # as extraction decodes it: BOMs, UTF-16, 8-bit
    except ExtractionError:  # binary after the block: what the block says still counts
        text = head.decode("utf-8", errors="replace")
    front, _ = split_front_matter(text.replace("\x00", ""))
    if front is None:
        return None
    if ACCESS_ERROR_KEY in front.metadata:
        return NOBODY_DECLARED
    return front_matter_access(front.metadata)
