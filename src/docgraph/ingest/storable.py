"""Extracted text made storable on every backend, once, before it is chunked.

Some characters a format can carry are refused by a store or cannot be encoded at all:

* NUL (U+0000): PostgreSQL refuses it in ``text`` (psycopg: "PostgreSQL text fields cannot
  contain NUL (0x00) bytes") and in ``jsonb`` ("unsupported Unicode escape sequence"), so a
  Markdown title written ``"x\\0y"`` in YAML front matter, a JSON value ``"\\u0000"`` or a
  mail subject ``=?utf-8?q?a=00b?=`` ended the whole build there, while SQLite stored it.
  Undeclared text files already lose their NULs when decoded
  (:func:`docgraph.ingest.decode.decode_text`); the other formats' text did not.
* Lone surrogates (U+D800..U+DFFF not in a pair, e.g. JSON's ``"\\ud800"``): UTF-8 cannot
  encode them, so the file failed as an "unexpected error" (on every backend).

Neither carries meaning a reader or a search could use, so, as most indexers do, NULs are
dropped from text (title, blocks, metadata values) and lone surrogates become U+FFFD, the
replacement character a decoder writes for bytes it cannot read. In names that identify
something (metadata keys, attachment names) both become U+FFFD instead of being dropped, so
two names never merge into one and no key becomes a reserved one (``acc\\0ess`` is not
``access``). A document with none of them (nearly all) is returned as it is.

What remains that a store may refuse (a path too long for PostgreSQL's indexes, an
operator's constraint) fails that one file at the write
(:mod:`docgraph.ingest.failed_writes`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from docgraph.model import AttachedDocument, Block, ExtractedDocument

#: A UTF-16 surrogate code point: in a Python ``str`` always a lone one (a valid pair is
#: one code point above U+FFFF).
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable_text(text: str) -> str:
    """``text`` without NUL characters and with each lone surrogate as U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    if not text.isascii():
        text = _SURROGATE.sub(REPLACEMENT, text)
    return text


def storable_name(name: str) -> str:
    """A name (a metadata key, an attachment's name) with each NUL and lone surrogate as
    U+FFFD: never merged with another name, never made into a reserved key."""
    if "\x00" in name:
        name = name.replace("\x00", REPLACEMENT)
    if not name.isascii():
        name = _SURROGATE.sub(REPLACEMENT, name)
    return name


def _clean(text: str) -> bool:
    """Whether ``text`` holds neither a NUL nor a lone surrogate (the common case): UTF-8
    encodes every character but a surrogate, at C speed (5x a regular expression's)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_document(document: ExtractedDocument) -> ExtractedDocument:
    """``document`` (and each document attached to it) with every string a store keeps made
    storable (see the module); the same object when nothing needed it."""
    blocks = document.blocks
    if not all(_clean(b.text) for b in blocks):
        blocks = tuple(b if _clean(b.text) else _block(b) for b in blocks)
    metadata = document.metadata
    if not all(_clean(k) and _clean(v) for k, v in metadata.items()):
        metadata = {storable_name(k): storable_text(v) for k, v in metadata.items()}
    attachments = tuple(
        AttachedDocument(storable_name(a.name), a.content_hash, storable_document(a.document))
        for a in document.attachments)
    title = document.title
    if (blocks is document.blocks and metadata is document.metadata and _clean(title)
            and all(new.name == old.name and new.document is old.document
                    for new, old in zip(attachments, document.attachments, strict=True))):
        return document
    return replace(document, title=storable_text(title), blocks=blocks, metadata=metadata,
                   attachments=attachments)


def _block(block: Block) -> Block:
    return replace(block, text=storable_text(block.text))
