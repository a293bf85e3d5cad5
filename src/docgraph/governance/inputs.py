"""Validation of every caller-supplied value, once, at the governed entry.

Each governed operation checks its arguments here before anything else runs, so the MCP
tools, the JSON API, the CLI and the Python API reject the same inputs with the same
message (naming the argument), and nothing downstream (SQL, the trace and audit stores,
the tokenizers) ever sees a string it cannot encode. The bounds are
:mod:`docgraph.limits`; the transports only declare them in their JSON schemas (and check
that a text argument is a JSON string at all, with :func:`string_validator`).

A refusal is an :class:`InvalidArgument`: an :class:`~docgraph.errors.InvalidQuery` that
also carries the argument's name and the problem, so a transport can say it its own way
(MCP's ``invalid arguments for TOOL: ...``; a tool whose argument is spelled otherwise,
``query`` for ``query_text``, renames it).
"""

from __future__ import annotations

from collections.abc import Callable

from docgraph.errors import InvalidQuery
from docgraph.limits import MAX_QUERY_CHARS, MAX_RESULTS


class InvalidArgument(InvalidQuery):
    """A caller-supplied argument is refused: ``str()`` is ``argument: problem``."""

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"{argument}: {problem}")
        self.argument = argument
        self.problem = problem

    def renamed(self, argument: str) -> InvalidArgument:
        """The same refusal for the argument as the caller spelled it."""
        return self if argument == self.argument else InvalidArgument(argument, self.problem)


#: What an argument holding a lone surrogate is told (after its name and a colon).
UNPAIRED_SURROGATE = "contains an unpaired UTF-16 surrogate"
_NUL = "\x00"


def unpaired_surrogate_at(text: str) -> int | None:
    """Index of the first surrogate code point in ``text``, or None when it is valid text.

    In a Python ``str`` every surrogate code point is unpaired (JSON's escaped pairs are
    already joined into one character), so "encodes as UTF-8" is exactly "valid text"; the
    encoder does the scan in C."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def describe_unpaired_surrogate(text: str, index: int) -> str:
    """``contains an unpaired UTF-16 surrogate (U+D800 at character 3)``: the problem, the
    code point and where it is, without echoing the text itself."""
    return f"{UNPAIRED_SURROGATE} (U+{ord(text[index]):04X} at character {index})"


def check_string(value: object, name: str) -> str:
    """``value`` if it is a string, else :class:`InvalidArgument` naming ``name``."""
    if not isinstance(value, str):
        raise InvalidArgument(name, f"must be a string, got {type(value).__name__}")
    return value


def check_text(value: object, name: str, *, max_chars: int = MAX_QUERY_CHARS,
               required: bool = True) -> str:
    """``value`` if it is usable text, else :class:`InvalidArgument` naming ``name``.

    Refused: a non-string, blank text (when ``required``), more than ``max_chars``
    characters, an unpaired UTF-16 surrogate (e.g. half of an emoji cut by a JavaScript
    host: no encoder can store or compare it) and NUL characters (C strings end there).
    """
    value = check_string(value, name)
    if required and not value.strip():
        raise InvalidArgument(name, "must contain more than whitespace")
    if len(value) > max_chars:
        raise InvalidArgument(name, f"{len(value)} characters; the limit is {max_chars}")
    check_encodable(value, name)
    if _NUL in value:
        raise InvalidArgument(name, "contains a NUL character")
    return value


def check_optional_text(value: object, name: str, *, max_chars: int = MAX_QUERY_CHARS
                        ) -> str | None:
    """``None`` for a missing or blank value, else :func:`check_text`'s result."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return check_text(value, name, max_chars=max_chars)


def check_encodable(value: str, name: str) -> str:
    """``value`` if it holds no unpaired surrogate, else :class:`InvalidArgument`."""
    surrogate = unpaired_surrogate_at(value)
    if surrogate is not None:
        raise InvalidArgument(name, describe_unpaired_surrogate(value, surrogate))
    return value


def string_validator(*, optional: bool = False) -> Callable[[object], object]:
    """A pydantic ``BeforeValidator`` function for a transport's text argument: what a JSON
    string is, a string (with ``optional`` also null) that can be encoded (no lone
    surrogate), refused in this module's words, not pydantic's. Its content and length are
    the governed entry's to check (:func:`check_text`), once. The value passes unchanged;
    the error leaves the argument's name out, since pydantic prefixes it.

    The surrogate is refused here as well as by :func:`check_text` because text that cannot
    be encoded must not travel further through a transport than its argument model (the
    model itself is pinned to refuse it, ``tests/serve/test_serve_checks.py``)."""
    def validate(value: object) -> object:
        if value is None and optional:
            return value
        try:
            check_encodable(check_string(value, "value"), "value")
        except InvalidArgument as exc:
            raise ValueError(exc.problem) from None
        return value
    return validate


def check_count(value: object, name: str, *, low: int = 1, high: int = MAX_RESULTS) -> int:
    """``value`` if it is an integer from ``low`` to ``high``, else :class:`InvalidArgument`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(name, f"must be an integer from {low} to {high}, got {value!r}")
    return value
