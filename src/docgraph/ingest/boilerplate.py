"""Boilerplate removal shared by every format: what a reader skips is not indexed.

Text removed here never becomes a block, so it is not embedded, not BM25-indexed and not
used for entities. Three kinds are recognised:

- **mail**: quoted replies (``> ...`` lines, an "On ... wrote:" introduction and everything
  after it, Outlook's "-----Original Message-----" or a ``From:``/``Sent:`` header block
  and everything after it) and signatures (everything after a ``-- `` line; a closing
  sign-off such as "Kind regards," with the few short lines below it; a last short
  paragraph that starts with the sender's name);
- **HTML**: navigation, footers, cookie and consent banners (``<nav>``, ``<footer>``,
  ``role="navigation"``/``"contentinfo"``, elements whose id or class names a cookie,
  consent or GDPR notice);
- **mail headers in plain text**: a thread exported as text has header blocks
  (``From:``/``To:``/``Date:``/``Subject:``) that :func:`split_mail_thread` turns into
  message boundaries instead of prose;
- **lines repeated across a source** (legal footers, disclaimers): a paragraph or list
  item found in at least :func:`repeated_floor` documents of one folder (counted by the
  catalog over the :func:`line_fingerprint` s each document stores); the ingest pipeline
  drops them before chunking.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

# -- mail bodies --------------------------------------------------------------------------

_QUOTED = re.compile(r"^\s*>")
_REPLY_INTRO = re.compile(r"^\s*(On\b.{0,300}\bwrote:|Am\b.{0,300}\bschrieb .{0,100}:|"
                          r"Le\b.{0,300}\ba écrit ?:|Op\b.{0,300}\bschreef .{0,100}:)\s*$",
                          re.IGNORECASE)
_ORIGINAL = re.compile(r"^\s*-{2,}\s*(Original Message|Forwarded message|Ursprüngliche "
                       r"Nachricht|Oorspronkelijk bericht)\s*-{2,}\s*$", re.IGNORECASE)
_SIG_DELIMITER = re.compile(r"^--\s?$")
#: Closing phrases after which the rest of a message is a signature.
SIGN_OFFS = (
    "regards", "kind regards", "best regards", "warm regards", "warmest regards",
    "best wishes", "best", "all the best", "cheers", "thanks", "thank you", "many thanks",
    "thanks again", "sincerely", "yours sincerely", "yours faithfully", "yours truly",
    "respectfully", "greetings", "br", "mvg", "met vriendelijke groet",
    "mit freundlichen grüßen", "viele grüße", "cordialement", "bien à vous", "saludos",
)
_SIGN_OFF = re.compile(r"^\s*(" + "|".join(re.escape(s) for s in SIGN_OFFS) + r")\s*[,.!]?\s*$",
                       re.IGNORECASE)
# A signature below a sign-off: a few short lines (name, role, company, phone).
_SIGNATURE_MAX_LINES = 6
_SIGNATURE_MAX_LINE_CHARS = 80


def _outlook_header_at(lines: list[str], i: int) -> bool:
    """An Outlook reply header: 'From: ...' followed within four lines by 'Sent: ...' or
    'Date: ...' (and the quoted message below it)."""
    if not re.match(r"^\s*\*?From:\*?\s", lines[i]):
        return False
    return any(re.match(r"^\s*\*?(Sent|Date):\*?\s", ln) for ln in lines[i + 1:i + 5])


def strip_quoted(body: str) -> str:
    """``body`` without quoted replies: ``>`` lines, and everything from an "On ...
    wrote:" line, an "-----Original Message-----" line or an Outlook ``From:``/``Sent:``
    block on (the quoted history below them)."""
    lines = body.replace("\r\n", "\n").split("\n")
    kept: list[str] = []
    for i, line in enumerate(lines):
        if _ORIGINAL.match(line) or _outlook_header_at(lines, i):
            break
        if _REPLY_INTRO.match(line):
            break
        # An introduction wrapped over two lines: "On Mon, 3 Mar 2025, Jane Doe\n<j@x> wrote:"
        if (line.strip().lower().startswith("on ") and i + 1 < len(lines)
                and _REPLY_INTRO.match(line + " " + lines[i + 1])):
            break
        if _QUOTED.match(line):
            continue
        kept.append(line)
    return "\n".join(kept)


def strip_signature(body: str, sender: str = "") -> str:
    """``body`` without its signature: everything after a ``-- `` line; a sign-off line
    ("Kind regards,") followed by at most six short lines; or, failing both, a last short
    paragraph that starts with the sender's first name (``sender`` is the display name)."""
    lines = body.rstrip().split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if _SIG_DELIMITER.match(lines[i]):
            return "\n".join(lines[:i]).rstrip()
    tail_start = max(0, len(lines) - _SIGNATURE_MAX_LINES - 1)
    for i in range(tail_start, len(lines)):
        if _SIGN_OFF.match(lines[i]) and all(
                len(ln) <= _SIGNATURE_MAX_LINE_CHARS for ln in lines[i + 1:]):
            return "\n".join(lines[:i]).rstrip()
    first_name = sender.split()[0].strip(",\"'") if sender.split() else ""
    if first_name:
        paragraphs = re.split(r"\n\s*\n", "\n".join(lines))
        last = [ln for ln in paragraphs[-1].split("\n") if ln.strip()]
        if (len(paragraphs) > 1 and 0 < len(last) <= _SIGNATURE_MAX_LINES
                and last[0].strip().casefold().startswith(first_name.casefold())
                and all(len(ln) <= _SIGNATURE_MAX_LINE_CHARS for ln in last)
                and not last[0].rstrip().endswith((".", ":", "?", "!"))):
            return "\n\n".join(paragraphs[:-1]).rstrip()
    return "\n".join(lines).rstrip()


def clean_mail_body(body: str, sender: str = "") -> str:
    """A message body as worth indexing: quoted replies, then the signature removed."""
    return strip_signature(strip_quoted(body), sender)


# -- mail threads exported as text ----------------------------------------------------------

_HEADER_LINE = re.compile(
    r"^(From|To|Cc|Bcc|Date|Sent|Subject|Reply-To|Message-ID):[ \t]*(.*)$", re.IGNORECASE)
_SEPARATOR = re.compile(r"^\s*([=_\-*~#])\1{4,}\s*$")
# A thread's first header block must start within its first lines (after an export note).
_THREAD_HEADER_WITHIN = 12


@dataclass
class TextMessage:
    """One message of a thread exported as text: its headers (lower-case names) and body."""

    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""


def _header_block(lines: list[str], start: int) -> tuple[dict[str, str], int] | None:
    """The header block starting at ``lines[start]`` and the index after it, if it is one:
    consecutive ``Name: value`` lines (indented lines continue a value) holding ``From``,
    a date (``Date`` or ``Sent``) and ``To`` or ``Subject``."""
    headers: dict[str, str] = {}
    i, last = start, ""
    while i < len(lines):
        line = lines[i]
        match = _HEADER_LINE.match(line)
        if match:
            last = match.group(1).lower()
            headers[last] = match.group(2).strip()
        elif last and line[:1] in (" ", "\t") and line.strip():
            headers[last] = f"{headers[last]} {line.strip()}"
        else:
            break
        i += 1
    if "from" in headers and ("date" in headers or "sent" in headers) \
            and ("to" in headers or "subject" in headers):
        if "date" not in headers:
            headers["date"] = headers.pop("sent")
        return headers, i
    return None


def split_mail_thread(text: str) -> tuple[str, list[TextMessage]] | None:
    """A plain text that is a mail thread, as its preamble and messages; None if it is
    not one (no header block among its first lines).

    Separator lines (``=====``, ``-----``) are dropped; a message's body is the text up
    to the next header block."""
    lines = text.replace("\r\n", "\n").split("\n")
    nonblank = 0
    first: int | None = None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if _header_block(lines, i) is not None:
            first = i
            break
        nonblank += 1
        if nonblank >= _THREAD_HEADER_WITHIN:
            return None
    if first is None:
        return None
    preamble = "\n".join(ln for ln in lines[:first]
                         if not _SEPARATOR.match(ln) and not _HEADER_LINE.match(ln))
    messages: list[TextMessage] = []
    i = first
    current: TextMessage | None = None
    body: list[str] = []
    while i < len(lines):
        block = _header_block(lines, i) if lines[i][:1].isalpha() else None
        if block is not None and (current is None or _starts_message(lines, i)):
            if current is not None:
                current.body = "\n".join(body).strip()
                messages.append(current)
            current, body = TextMessage(block[0]), []
            i = block[1]
            continue
        if not _SEPARATOR.match(lines[i]):
            body.append(lines[i])
        i += 1
    if current is not None:
        current.body = "\n".join(body).strip()
        messages.append(current)
    return preamble.strip(), messages


def _starts_message(lines: list[str], i: int) -> bool:
    """A header block inside a thread starts a new message when a separator line or a blank
    line stands before it (an Outlook block quoted inside a body is handled as a quote)."""
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    return j < 0 or bool(_SEPARATOR.match(lines[j])) or j < i - 1


# -- HTML -------------------------------------------------------------------------------------

_HTML_JUNK_TAGS = ("script", "style", "noscript", "template", "nav", "footer", "head")
_HTML_JUNK_ROLES = frozenset({"navigation", "contentinfo", "banner", "search"})
_CONSENT = re.compile(r"cookie|consent|gdpr|cmp-|onetrust|cookiebot|privacy-banner",
                      re.IGNORECASE)


def strip_html_boilerplate(soup: Any) -> None:
    """Remove navigation, footers, scripts and cookie/consent banners from a BeautifulSoup
    tree in place (``<head>`` too: read the ``<title>`` first)."""
    for junk in soup(list(_HTML_JUNK_TAGS)):
        junk.decompose()
    doomed = []
    for element in soup.find_all(True):
        attrs = getattr(element, "attrs", None)
        if not attrs:
            continue
        role = str(attrs.get("role", "")).lower()
        names = " ".join([str(attrs.get("id", "")), *_as_list(attrs.get("class"))])
        if role in _HTML_JUNK_ROLES or (names.strip() and _CONSENT.search(names)):
            doomed.append(element)
    for element in doomed:
        if not element.decomposed:
            element.decompose()


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


# -- lines repeated across the documents of one source -------------------------------------

#: A line is repeated boilerplate when this many documents of a source hold it...
REPEATED_MIN_DOCUMENTS = 5
#: ... and they are at least this share of the source's documents.
REPEATED_SHARE = 0.4
#: Paragraphs and list items of this many characters are counted (longer ones are content).
REPEATED_CHARS = (12, 600)


def line_fingerprint(text: str) -> str | None:
    """The fingerprint a paragraph or list item is counted by across a source's documents
    (64-bit hex of its case- and whitespace-folded text), or None when it is too short or too
    long to be a repeated footer line."""
    folded = " ".join(text.split()).casefold()
    if not REPEATED_CHARS[0] <= len(folded) <= REPEATED_CHARS[1]:
        return None
    return hashlib.blake2b(folded.encode(), digest_size=8).hexdigest()


def repeated_floor(total: int) -> int:
    """How many documents must hold a line, of a source of ``total`` documents, for it to be
    repeated: at least :data:`REPEATED_MIN_DOCUMENTS` and :data:`REPEATED_SHARE` of them."""
    return max(REPEATED_MIN_DOCUMENTS, math.ceil(REPEATED_SHARE * total))
