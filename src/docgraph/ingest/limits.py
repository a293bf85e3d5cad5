"""Per-file bounds on what extraction may unpack and produce.

A file's stored size (``loader.max_file_bytes``) says little about what extracting it costs:
a 1 MB DOCX can hold 300 MiB of XML, one Flate stream of a PDF can inflate a thousandfold.
These checks refuse such a file before or while it is unpacked, with a
:class:`~docgraph.errors.FileTooLarge` naming the limit, so one hostile file costs seconds
and bounded memory instead of the build.
"""

from __future__ import annotations

import dataclasses
import io
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from docgraph.config import (
    DEFAULT_MAX_OCR_PAGES,
    DEFAULT_MAX_TEXT_CHARS,
    DEFAULT_MAX_UNPACKED_BYTES,
    LoaderSettings,
)
from docgraph.errors import ExtractionError, FileTooLarge

#: Most members a zip-based document may list. Each costs a parsed central-directory entry
#: before any size is known; real DOCX files have tens to a few thousand.
MAX_ARCHIVE_MEMBERS = 10_000

# pypdf's per-stream output bounds (``pypdf.Configuration``), capped at max_unpacked_bytes.
_PDF_OUTPUT_LIMITS = (
    "maximum_declared_stream_length",
    "array_based_stream_maximum_output_length",
    "jbig2_maximum_output_length",
    "lzw_maximum_output_length",
    "run_length_maximum_output_length",
    "zlib_maximum_output_length",
    "brotli_maximum_output_length",
    "image_maximum_buffer_size",
    "stream_decoding_work_maximum_length",
    "xfa_decoding_work_maximum_length",
)


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """What one file may unpack to (bytes), yield (characters of text) and have recognised
    by OCR (pages)."""

    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_ocr_pages: int = DEFAULT_MAX_OCR_PAGES

    @classmethod
    def from_loader(cls, loader: LoaderSettings) -> ExtractLimits:
        """The limits configured in ``[loader]``."""
        return cls(loader.max_unpacked_bytes, loader.max_text_chars, loader.max_ocr_pages)

    def check_ocr_pages(self, name: str, pages: int) -> None:
        """Refuse a scan with more than ``max_ocr_pages`` pages to recognise."""
        if pages > self.max_ocr_pages:
            raise FileTooLarge(
                f"{name}: too large: {pages} pages to recognise by OCR, over "
                f"loader.max_ocr_pages ({self.max_ocr_pages})"
            )

    def check_text(self, name: str, chars: int) -> None:
        """Refuse a file once more than ``max_text_chars`` characters came out of it."""
        if chars > self.max_text_chars:
            raise FileTooLarge(
                f"{name}: too large: more than {self.max_text_chars} characters of text, "
                f"over loader.max_text_chars ({self.max_text_chars})"
            )

    def check_unpacked(self, name: str, what: str, size: int) -> None:
        """Refuse a file whose ``what`` unpacks to more than ``max_unpacked_bytes``."""
        if size > self.max_unpacked_bytes:
            raise FileTooLarge(
                f"{name}: too large: {what} unpack to {size} bytes, over "
                f"loader.max_unpacked_bytes ({self.max_unpacked_bytes})"
            )


def check_zip(data: bytes, name: str, limits: ExtractLimits) -> None:
    """Check a zip-based document before anything is decompressed.

    Its members' uncompressed sizes (from the central directory) must add up to at most
    ``max_unpacked_bytes``. That bound holds for the actual work too: :mod:`zipfile` never
    returns more bytes for a member than its recorded size, so a member that lies about
    its size cannot inflate past it.
    """
    # Each central-directory entry starts with this signature: counting them bounds the
    # entries :class:`zipfile.ZipFile` would parse (a chance match only overcounts).
    members = data.count(b"PK\x01\x02")
    if members > MAX_ARCHIVE_MEMBERS:
        raise FileTooLarge(f"{name}: too large: archive lists {members} members, over the "
                           f"{MAX_ARCHIVE_MEMBERS} a document may have")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise ExtractionError(f"{name}: not a zip archive ({exc})") from exc
    total = sum(info.file_size for info in infos)
    if total > limits.max_unpacked_bytes:
        largest = max(infos, key=lambda info: info.file_size)
        limits.check_unpacked(
            name, f"its {len(infos)} members (largest {largest.filename}: "
            f"{largest.file_size} bytes)", total)


@contextmanager
def bounded_pdf(limits: ExtractLimits) -> Iterator[None]:
    """Within this block pypdf decodes no stream to more than ``max_unpacked_bytes``
    (it raises ``LimitReachedError``). The setting is a context variable: other threads
    and the caller's own pypdf use are unaffected."""
    import pypdf

    base = pypdf.get_configuration()
    present = {field.name for field in dataclasses.fields(base)}
    overrides = {key: min(getattr(base, key), limits.max_unpacked_bytes)
                 for key in _PDF_OUTPUT_LIMITS if key in present}
    with pypdf.apply_configuration(**overrides):
        yield
