"""Structure-aware chunking.

Rules, in order of strength:
1. A heading always ends the current chunk; chunks never span two sections.
2. Otherwise a chunk ends between blocks (paragraph, list item, table row, code block)
   when the next block would push it past ``max_tokens``.
3. A block longer than ``max_tokens`` is split between sentences; only a single sentence
   longer than the limit is split inside, between words, and only a single word longer
   than the limit inside the word (:func:`~docgraph.budgets.split_run`).
Sizes are counted in the embedding model's own tokens, and no chunk has more than
``char_limit(max_tokens)`` characters either: WordPiece counts any word over 100 characters
as one token, so a token limit alone let a 2 MB run without spaces become one chunk.
Every chunk knows its section path, previous, next and parent chunk (the first chunk of its
section, or for a section's first chunk, the first chunk of the nearest enclosing section),
the first and last page of its blocks when the format has pages, and whether any of its
blocks was OCR'd.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from docgraph.budgets import TokenCounter, char_limit, split_run
from docgraph.model import Block, BlockKind, ChunkDraft, ExtractedDocument

__all__ = ["TokenCounter", "chunk_document", "split_sentences"]

# A sentence ends after its terminal punctuation *and* any closing quotes/brackets; the match
# covers them so they stay with the sentence they close (re.split would drop them).
_SENTENCE_END = re.compile(
    r"[.!?…][\"'”’»)\]]*\s+(?=[\"'“‘«(\[]?[A-Z0-9À-ÖØ-ÞΑ-ΩЀ-Я])"
    r"|[。！？][」』”’)）\]]*\s*"
)


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences (Latin punctuation followed by a capital, or CJK stops).

    Nothing but the whitespace between sentences is removed.
    """
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start : match.end()])
        start = match.end()
    sentences.append(text[start:])
    return [s.strip() for s in sentences if s.strip()]


def _render(block: Block) -> str:
    return f"- {block.text}" if block.kind is BlockKind.LIST_ITEM else block.text


@dataclass
class _Piece:
    text: str
    tokens: int


@dataclass
class _Packed:
    """A finished chunk's text and size, with the first and last page of its blocks and
    whether any of them was OCR'd."""

    text: str
    tokens: int
    pages: tuple[int, int] | None
    ocr: bool


class _Packer:
    """Greedy packing of pieces into chunks of at most ``max_tokens`` tokens and
    ``char_limit(max_tokens)`` characters."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.max_chars = char_limit(max_tokens)
        self.done: list[_Packed] = []
        self.parts: list[str] = []
        self.tokens = 0
        self.chars = 0
        self.pages: tuple[int, int] | None = None
        self.ocr = False

    def add(self, piece: _Piece, separator: str, page: int | None = None,
            ocr: bool = False) -> None:
        if self.parts and (self.tokens + piece.tokens > self.max_tokens
                           or self.chars + len(separator) + len(piece.text) > self.max_chars):
            self.flush(separator)
        self.chars += len(piece.text) + (len(separator) if self.parts else 0)
        self.parts.append(piece.text)
        self.tokens += piece.tokens
        if page is not None:
            self.pages = ((page, page) if self.pages is None
                          else (min(self.pages[0], page), max(self.pages[1], page)))
        self.ocr = self.ocr or ocr

    def flush(self, separator: str = "\n") -> None:
        if self.parts:
            self.done.append(_Packed(separator.join(self.parts), self.tokens, self.pages,
                                     self.ocr))
        self.parts, self.tokens, self.chars, self.pages, self.ocr = [], 0, 0, None, False


def _too_long(text: str, tokens: int, max_tokens: int) -> bool:
    return tokens > max_tokens or len(text) > char_limit(max_tokens)


def _split_long_sentence(sentence: str, max_tokens: int, count: TokenCounter) -> list[_Piece]:
    """Words packed up to the limits; a word over them alone is cut into slices."""
    words = sentence.split()
    counts = count(words)
    max_chars = char_limit(max_tokens)
    pieces: list[_Piece] = []
    current: list[str] = []
    total = chars = 0
    for word, n in zip(words, counts, strict=True):
        if current and (total + n > max_tokens or chars + 1 + len(word) > max_chars):
            pieces.append(_Piece(" ".join(current), total))
            current, total, chars = [], 0, 0
        if _too_long(word, n, max_tokens):
            pieces.extend(_Piece(text, tokens) for text, tokens
                          in split_run(word, max_tokens, count))
            continue
        chars += len(word) + (1 if current else 0)
        current.append(word)
        total += n
    if current:
        pieces.append(_Piece(" ".join(current), total))
    return pieces


def _split_block(text: str, max_tokens: int, count: TokenCounter) -> list[_Piece]:
    """Pieces of an over-long block: whole sentences packed up to the limit."""
    sentences = split_sentences(text) or [text]
    packer = _Packer(max_tokens)
    for sentence, n in zip(sentences, count(sentences), strict=True):
        if _too_long(sentence, n, max_tokens):
            for piece in _split_long_sentence(sentence, max_tokens, count):
                packer.add(piece, " ")
        else:
            packer.add(_Piece(sentence, n), " ")
    packer.flush(" ")
    return [_Piece(p.text, p.tokens) for p in packer.done]


def chunk_document(
    document: ExtractedDocument, count_tokens: TokenCounter, max_tokens: int
) -> list[ChunkDraft]:
    """Cut ``document`` into chunks of at most ``max_tokens`` tokens (and
    ``char_limit(max_tokens)`` characters) along its structure."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    body = [b for b in document.blocks if b.kind is not BlockKind.HEADING]
    block_tokens = dict(zip(map(id, body), count_tokens([_render(b) for b in body]), strict=True))

    sections: list[tuple[tuple[str, ...], list[_Packed]]] = []
    stack: list[tuple[int, str]] = []
    packer = _Packer(max_tokens)

    def close_section() -> None:
        packer.flush()
        if packer.done:
            sections.append((tuple(t for _, t in stack), packer.done))
        packer.done = []

    for block in document.blocks:
        if block.kind is BlockKind.HEADING:
            close_section()
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.text))
            continue
        text = _render(block)
        tokens = block_tokens[id(block)]
        if _too_long(text, tokens, max_tokens):
            packer.flush()
            for piece in _split_block(text, max_tokens, count_tokens):
                packer.add(piece, "\n", block.page, block.ocr)
                packer.flush()
        else:
            packer.add(_Piece(text, tokens), "\n", block.page, block.ocr)
    close_section()
    return _link(sections)


def _link(sections: list[tuple[tuple[str, ...], list[_Packed]]]) -> list[ChunkDraft]:
    drafts: list[ChunkDraft] = []
    total = sum(len(chunks) for _, chunks in sections)
    latest_first: dict[tuple[str, ...], int] = {}  # section path -> its most recent first chunk
    index = 0
    for path, chunks in sections:
        enclosing = next(
            (latest_first[path[:cut]] for cut in range(len(path) - 1, -1, -1)
             if path[:cut] in latest_first),
            None,
        )
        first = index
        latest_first[path] = first
        for position, packed in enumerate(chunks):
            drafts.append(
                ChunkDraft(
                    index=index,
                    text=packed.text,
                    section_path=path,
                    token_count=packed.tokens,
                    prev_index=index - 1 if index > 0 else None,
                    next_index=index + 1 if index + 1 < total else None,
                    parent_index=enclosing if position == 0 else first,
                    pages=packed.pages,
                    ocr=packed.ocr,
                )
            )
            index += 1
    return drafts
