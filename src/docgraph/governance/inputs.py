"""Validation of every caller-supplied value, once, at the governed entry.

Each governed operation checks its arguments here before anything else runs, so the MCP
tools, the JSON API, the CLI and the Python API reject the same inputs with the same
message (naming the argument), and nothing downstream (SQL, the trace and audit stores,
the tokenizers) ever sees a string it cannot encode.
"""

from __future__ import annotations

from collections.abc import Callable

from docgraph.errors import InvalidQuery

# Re-exported for the modules that still import them from here (governance/service.py,
# serve/console/views.py); their home is docgraph.limits.
from docgraph.limits import MAX_ID_CHARS as MAX_ID_CHARS
from docgraph.limits import MAX_NAME_CHARS as MAX_NAME_CHARS
from docgraph.limits import MAX_PAGE as MAX_PAGE
from docgraph.limits import MAX_QUERY_CHARS, MAX_RESULTS

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


def check_text(value: object, name: str, *, max_chars: int = MAX_QUERY_CHARS,
               required: bool = True) -> str:
    """``value`` if it is usable text, else :class:`InvalidQuery` naming ``name``.

    Refused: a non-string, blank text (when ``required``), more than ``max_chars``
    characters, an unpaired UTF-16 surrogate (e.g. half of an emoji cut by a JavaScript
    host: no encoder can store or compare it) and NUL characters (C strings end there).
    """
    if not isinstance(value, str):
        raise InvalidQuery(f"{name}: must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise InvalidQuery(f"{name}: must contain more than whitespace")
    if len(value) > max_chars:
        raise InvalidQuery(f"{name}: {len(value)} characters; the limit is {max_chars}")
    surrogate = unpaired_surrogate_at(value)
    if surrogate is not None:
        raise InvalidQuery(f"{name}: {describe_unpaired_surrogate(value, surrogate)}")
    if _NUL in value:
        raise InvalidQuery(f"{name}: contains a NUL character")
    return value


def check_optional_text(value: object, name: str, *, max_chars: int = MAX_QUERY_CHARS
                        ) -> str | None:
    """``None`` for a missing or blank value, else :func:`check_text`'s result."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return check_text(value, name, max_chars=max_chars)


def text_validator(*, max_chars: int = MAX_QUERY_CHARS, optional: bool = False
                   ) -> Callable[[object], object]:
    """A pydantic ``BeforeValidator`` function: :func:`check_text` (or, ``optional``,
    :func:`check_optional_text`) run before pydantic's own checks, which refuse unpaired
    surrogates with a vaguer message. The value passes unchanged; the error leaves the
    argument's name out, since pydantic prefixes it."""
    check = check_optional_text if optional else check_text

    def validate(value: object) -> object:
        try:
            check(value, "value", max_chars=max_chars)
        except InvalidQuery as exc:
            raise ValueError(str(exc).removeprefix("value: ")) from None
        return value
    return validate


def check_count(value: object, name: str, *, low: int = 1, high: int = MAX_RESULTS) -> int:
    """``value`` if it is an integer from ``low`` to ``high``, else :class:`InvalidQuery`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidQuery(f"{name}: must be an integer from {low} to {high}, got {value!r}")
    return value
