"""Text helpers every extractor shares: whitespace cleaning, paragraphs, table rows, titles."""

from __future__ import annotations

import posixpath
import re

from docgraph.model import Block, BlockKind

_WS = re.compile(r"[ \t\r\f\v]+")
_BULLET = re.compile(r"\s*([-*•]|\d+[.)])\s+")


def clean(text: str) -> str:
    """Runs of spaces and tabs (and no-break spaces) as one space, trimmed."""
    return _WS.sub(" ", text.replace("\u00a0", " ")).strip()


def title_from_name(name: str) -> str:
    """A title made from a file name: its stem, '_' and '-' as spaces."""
    stem = posixpath.splitext(posixpath.basename(name))[0]
    return clean(re.sub(r"[_\-]+", " ", stem)) or name


def paragraph_blocks(text: str) -> list[Block]:
    """Blank-line separated paragraphs; lines starting with a bullet become list items."""
    blocks: list[Block] = []
    for para in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        lines = [ln.rstrip() for ln in para.split("\n") if ln.strip()]
        if not lines:
            continue
        if all(_BULLET.match(ln) for ln in lines):
            blocks.extend(Block(BlockKind.LIST_ITEM, clean(_BULLET.sub("", ln, count=1)))
                          for ln in lines)
        else:
            blocks.append(Block(BlockKind.PARAGRAPH, clean(" ".join(lines))))
    return [b for b in blocks if b.text]


def row_text(header: list[str], cells: list[str]) -> str:
    """A table row as 'header: cell; ...' when the header fits, else 'cell | cell'."""
    if header and len(header) == len(cells):
        return "; ".join(f"{h}: {c}" for h, c in zip(header, cells, strict=True) if c)
    return " | ".join(c for c in cells if c)
