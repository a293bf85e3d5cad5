"""Navigation chunks: lists of links ("See also", "Related", tables of contents).

A short list of links names the pages it points to, so on a short query it looks like the
best match (few tokens, every one of them the query's, link targets repeating the link
text) and outranks the pages themselves. Ranking weighs such a chunk as navigation: its
fused relevance is multiplied by a weight below one (``index.navigation_weight`` for hybrid
search, ``retrieval.navigation_weight`` for cohort search). It is never dropped: a
query that only it answers still finds it.

Whether a chunk is navigation is read from what every backend stores, its text and its
section path, so no index needs a new column and chunks indexed before this existed are
judged the same way. List items are stored as ``- item`` lines (see
:mod:`docgraph.ingest.chunk`). A chunk is navigation when nearly all of its lines are list
items and either

- most items are just links (Markdown ``[text](target)``, ``[text][ref]``, a bare URL),
  with at most a few words beside them, and there are at least two; or
- its section is titled as navigation (``See also``, ``Related``, ``Related pages``,
  ``Navigation``, ``Further reading``, ``Links``, ...) and every item is short (formats
  whose extractors keep a link's text but not its target: HTML, reStructuredText,
  AsciiDoc).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from docgraph.text import WORD

# The share of a chunk's lines that must be list items, and of those items that must be
# links, for a chunk to be a link list.
LIST_SHARE = 0.8
LINK_SHARE = 0.6
# Words beside an item's links (a short description) that still leave it "just a link";
# the most words an item under a navigation title may have.
WORDS_BESIDE_LINK = 5
SHORT_ITEM_WORDS = 8

_LINK = re.compile(r"!?\[[^\]\n]*\]\([^)\n]*\)|\[[^\]\n]+\]\[[^\]\n]*\]"
                   r"|<?(?:https?|ftp)://[^\s>]+>?")
_TITLE = re.compile(
    r"(?:see also|related(?: (?:pages|topics|articles|links|documents|documentation|"
    r"reading|commands|guides))?|navigation|further reading|(?:useful |external )?links"
    r"|more information|read more|siehe auch|voir aussi|véase también)",
    re.IGNORECASE)


def is_navigation(text: str, section_path: Sequence[str]) -> bool:
    """Whether the chunk with this stored ``text`` and ``section_path`` is a list of links
    (see the module docstring)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    items = [line[2:] for line in lines if line.startswith("- ")]
    if not items or len(items) < LIST_SHARE * len(lines):
        return False
    linked = sum(1 for item in items if _just_a_link(item))
    if len(items) >= 2 and linked >= LINK_SHARE * len(items):
        return True
    title = section_path[-1].strip().rstrip(":").strip() if section_path else ""
    return (_TITLE.fullmatch(title) is not None
            and all(len(WORD.findall(item)) <= SHORT_ITEM_WORDS for item in items))


def _just_a_link(item: str) -> bool:
    """An item that is one or more links with at most a few words beside them."""
    beside, links = _LINK.subn(" ", item)
    return links > 0 and len(WORD.findall(beside)) <= WORDS_BESIDE_LINK


def navigation_factor(text: str, section_path: Sequence[str], weight: float) -> float:
    """``weight`` for a navigation chunk, 1 for any other."""
    return weight if weight != 1.0 and is_navigation(text, section_path) else 1.0
