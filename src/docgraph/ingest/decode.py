"""Bytes of a text file whose encoding nobody declared, to text.

Folders hold whatever editors wrote: UTF-8 with or without a BOM, Windows "Unicode"
(UTF-16, often without a BOM), cp1252 and latin-1, UTF-8 with a few damaged bytes. Each
becomes readable text instead of mojibake or a failure; only data that is evidently not
text (NUL bytes that UTF-16 does not explain, many control characters) is refused.
"""

from __future__ import annotations

from docgraph.errors import ExtractionError

# UTF-32 before UTF-16: the UTF-32-LE mark starts with the UTF-16-LE one.
_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_SAMPLE = 4096
# C0 controls that text does not contain (tab, newlines, form feed and ESC of coloured
# logs are allowed), plus DEL.
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\v\f\r\x1b") + b"\x7f"
#: Share of control bytes above which data is taken to be binary.
MAX_CONTROL_SHARE = 0.05


def check_not_binary(data: bytes, name: str) -> None:
    """Raise :class:`ExtractionError` naming the file when ``data`` is evidently not text:
    NUL bytes that UTF-16 does not explain, or many control characters."""
    if any(data.startswith(bom) for bom, _ in _BOMS):
        return
    if b"\x00" in data[:_SAMPLE]:
        if _utf16_without_bom(data[:_SAMPLE]) is None:
            raise ExtractionError(f"{name}: looks binary (NUL bytes), not text")
        return
    if data and (len(data) - len(data.translate(None, _CONTROL))) > MAX_CONTROL_SHARE * len(data):
        raise ExtractionError(f"{name}: looks binary (control characters), not text")


def decode_text(data: bytes, name: str) -> str:
    """The text of ``data`` (the file ``name``); raises :class:`ExtractionError` naming the
    file when the bytes are binary, not text. NUL characters are dropped."""
    check_not_binary(data, name)
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _drop_nul(data[len(bom):].decode(encoding, errors="replace"))
    utf16 = _utf16_without_bom(data[:_SAMPLE]) if b"\x00" in data[:_SAMPLE] else None
    if utf16 is not None:
        return _drop_nul(data.decode(utf16, errors="replace"))
    try:
        return _drop_nul(data.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    # UTF-8 with some damaged bytes keeps its valid characters; text in a legacy 8-bit
    # encoding rarely forms valid UTF-8 sequences, so it has more errors than valid ones.
    text = data.decode("utf-8", errors="replace")
    errors = text.count("\ufffd")
    valid = len(text) - len(text.encode("ascii", errors="ignore")) - errors
    if valid >= errors:
        return _drop_nul(text)
    try:
        return _drop_nul(data.decode("cp1252"))
    except UnicodeDecodeError:
        return _drop_nul(data.decode("latin-1"))


def _utf16_without_bom(sample: bytes) -> str | None:
    """'utf-16-le' or 'utf-16-be' when the NUL bytes sit where UTF-16 puts them for Latin
    script (every other byte), else None."""
    even, odd = sample[0::2], sample[1::2]
    if not odd:
        return None
    if odd.count(0) >= len(odd) // 2 and even.count(0) == 0:
        return "utf-16-le"
    if even.count(0) >= len(even) // 2 and odd.count(0) == 0:
        return "utf-16-be"
    return None


def _drop_nul(text: str) -> str:
    return text.replace("\x00", "") if "\x00" in text else text
