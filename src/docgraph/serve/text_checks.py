"""Checks that request text is well-formed Unicode before anything else touches it.

JSON may spell a lone UTF-16 surrogate (``"\\ud800"``, e.g. an emoji cut in half by a
JavaScript host). Python's ``json`` turns it into a ``str`` that cannot be encoded as UTF-8,
so it would fail far from the request (in the tokenizer, in SQLite, or while the answer is
serialized, which can take a whole transport down). These helpers find such text and say
which argument holds it, so the request can be refused with a message the caller can act on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from docgraph.governance.inputs import (
    UNPAIRED_SURROGATE,
    describe_unpaired_surrogate,
    unpaired_surrogate_at,
)

__all__ = ["UNPAIRED_SURROGATE", "describe_unpaired_surrogate", "unpaired_surrogate_at"]


def printable_key(key: str) -> str:
    """``key`` safe to put into an error message (a lone surrogate becomes ``\\ud800``)."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True, slots=True)
class SurrogateFinding:
    """Where in a parsed JSON value a lone surrogate was found."""

    #: Keys and list indices from the root to the offending string (keys made printable).
    path: tuple[str | int, ...]
    #: What is wrong, e.g. ``contains an unpaired UTF-16 surrogate (U+D800 at character 0)``.
    problem: str

    def where(self, skip: int = 0) -> str:
        """The dotted path below its first ``skip`` parts (``arguments.query_text``)."""
        return ".".join(str(part) for part in self.path[skip:]) or "value"


def find_unpaired_surrogate(data: Any) -> SurrogateFinding | None:
    """The first string (value or object key) in a parsed JSON value holding a lone
    surrogate, or None; a bad key is reported as the path ending in that (printable) key.
    Iterative, so nesting depth cannot exhaust the stack, and linear in the input size."""
    for where, text, in_key in _strings(data):
        index = unpaired_surrogate_at(text)
        if index is not None:
            path = _unwind(where)
            if in_key:
                path = (*path, printable_key(text))
            return SurrogateFinding(path, describe_unpaired_surrogate(text, index))
    return None


#: A path as a chain of (parent, key or index) links, so descending costs O(1).
_Link = tuple["_Link", str | int] | None


def _unwind(link: _Link) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    while link is not None:
        link, part = link
        parts.append(part)
    return tuple(reversed(parts))


def _strings(data: Any) -> Iterator[tuple[_Link, str, bool]]:
    """Every string in ``data`` (depth-first, document order): where it is, the string,
    and whether it is an object key."""
    stack: list[tuple[_Link, Any]] = [(None, data)]
    while stack:
        link, value = stack.pop()
        if isinstance(value, str):
            yield link, value, False
        elif isinstance(value, dict):
            children: list[tuple[_Link, Any]] = []
            for key, child in value.items():
                if isinstance(key, str) and unpaired_surrogate_at(key) is not None:
                    yield link, key, True
                children.append(((link, printable_key(str(key))), child))
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend(((link, i), child) for i, child in reversed(list(enumerate(value))))
