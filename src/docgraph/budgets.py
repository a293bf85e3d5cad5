"""Bounds on text size in characters as well as tokens.

Token counts alone do not bound how much text there is: WordPiece maps any word over 100
characters to one ``[UNK]`` token, and the hashing embedder counts a run of word characters
as one token, so a 2 MB hex dump without a space counts as a handful of tokens. Every size
limit in tokens (a chunk's ``chunk_tokens``, a read's ``token_budget``) therefore also
allows at most :data:`CHARS_PER_TOKEN` characters per token: :func:`char_limit`. Real text
stays far below it (English WordPiece text averages under 4 characters a token, the
sample corpus at most 5.4), so the character bound only ever cuts runs without spaces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

TokenCounter = Callable[[Sequence[str]], list[int]]

#: Characters allowed per token of a limit (see the module docstring).
CHARS_PER_TOKEN = 10
#: Appended to a text cut short by :func:`cut_to_budget`.
TRUNCATION_MARK = " […]"

_WORD = re.compile(r"\S+\s*")


def char_limit(tokens: int) -> int:
    """The most characters a text within ``tokens`` tokens may have."""
    return tokens * CHARS_PER_TOKEN


def cost(tokens: int, chars: int) -> int:
    """What a text of ``tokens`` tokens and ``chars`` characters costs against a token
    limit: its tokens, or more when it is longer than those tokens allow in characters."""
    return max(tokens, -(-chars // CHARS_PER_TOKEN))


def clip(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` within ``max_chars`` characters: unchanged, or its start ending in
    :data:`TRUNCATION_MARK`; and whether it was cut."""
    if len(text) <= max_chars:
        return text, False
    return text[:max(0, max_chars - len(TRUNCATION_MARK))].rstrip() + TRUNCATION_MARK, True


def split_run(run: str, max_tokens: int, count: TokenCounter) -> list[tuple[str, int]]:
    """Cut ``run`` (text without whitespace) into consecutive slices of at most
    ``char_limit(max_tokens)`` characters and ``max_tokens`` tokens, with their token counts.

    A slice still over ``max_tokens`` tokens (punctuation-dense text such as minified code)
    is halved until it fits; a single character is never cut.
    """
    width = char_limit(max_tokens)
    slices = [run[i:i + width] for i in range(0, len(run), width)]
    pieces: list[tuple[str, int]] = []
    for piece, n in zip(slices, count(slices), strict=True):
        if n <= max_tokens or len(piece) == 1:
            pieces.append((piece, n))
        else:
            half = -(-len(piece) // 2)
            for part in (piece[:half], piece[half:]):
                pieces.extend(split_run(part, max_tokens, count))
    return pieces


def cut_to_budget(text: str, budget: int, count: TokenCounter) -> tuple[str, int]:
    """The longest start of ``text`` within ``budget`` tokens and ``char_limit(budget)``
    characters, :data:`TRUNCATION_MARK` included, with its token count.

    The cut falls between words; a first word too long on its own is cut inside
    (:func:`split_run`). Returns ``text`` unchanged when it fits.
    """
    (whole,) = count([text])
    if cost(whole, len(text)) <= budget:
        return text, whole
    (mark_tokens,) = count([TRUNCATION_MARK])
    tokens_left = max(1, budget - mark_tokens)
    chars_left = char_limit(budget) - len(TRUNCATION_MARK)
    # only the start can fit: one character past the room, so a word cut there never does
    words = [m.group() for m in _WORD.finditer(text.lstrip()[:chars_left + 1])]
    kept: list[str] = []
    used = chars = 0
    for word, n in zip(words, count(words), strict=True):
        if used + n > tokens_left or chars + len(word) > chars_left:
            if not kept:  # one word over the budget: its first slice
                room = max(1, min(tokens_left, chars_left // CHARS_PER_TOKEN))
                piece, n = split_run(word.rstrip(), room, count)[0]
                kept, used = [piece], n
            break
        kept.append(word)
        used += n
        chars += len(word)
    cut = "".join(kept).rstrip() + TRUNCATION_MARK
    return cut, count([cut])[0]
