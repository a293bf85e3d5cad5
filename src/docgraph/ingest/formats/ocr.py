"""Scans: text recognised from images and from PDF pages without a text layer.

Needs the ``ocr`` extra (pytesseract, pypdfium2) and the Tesseract program (Debian:
``tesseract-ocr``). Without them a scan is refused with "no text layer (install the ocr
extra)", never indexed as an empty document. Every block recognised here has
``ocr=True`` and the page it came from.

:func:`extract_pdf_or_scan` is the PDF entry point: the text layer first, then
:func:`ocr_pages` on the pages that are only images (a mixed PDF), or the whole file when no
page has text. :func:`extract_scanned_pdf` handles a PDF none of
whose pages has text, :func:`extract_image` a scanned page saved as an image.

Work is bounded like every other format: an image or rendered page may not hold more
pixels (at 3 bytes each) than ``loader.max_unpacked_bytes``; pages render at
:data:`OCR_DPI` or less to stay under :data:`MAX_PAGE_PIXELS`; a file may have at most
``loader.max_ocr_pages`` pages recognised.
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from docgraph.errors import ExtractionError, FileTooLarge
from docgraph.ingest.blocks import paragraph_blocks, title_from_name
from docgraph.ingest.limits import ExtractLimits
from docgraph.model import Block, ExtractedDocument

#: Resolution pages are rendered at for recognition (Tesseract reads 300 dpi best).
OCR_DPI = 300
#: Most pixels a rendered page may have (an A4 page at 300 dpi has 8.7 million).
MAX_PAGE_PIXELS = 40_000_000
#: Tesseract's language(s); ``eng`` ships with the Debian package.
OCR_LANGUAGES = "eng"
NO_TEXT_LAYER = "no text layer (install the ocr extra: pip install 'docgraph[ocr]' and the " \
    "tesseract-ocr system package)"


@functools.cache
def ocr_unavailable() -> str | None:
    """Why OCR cannot run here (a missing module or program), or None when it can."""
    try:
        import pypdfium2  # noqa: F401
        import pytesseract
    except ImportError as exc:
        return f"{exc.name} is not installed"
    try:
        pytesseract.get_tesseract_version()
    except Exception as exc:  # TesseractNotFoundError, or a broken installation
        return f"the tesseract program is not available ({type(exc).__name__})"
    return None


def _require_ocr(name: str) -> None:
    reason = ocr_unavailable()
    if reason is not None:
        raise ExtractionError(f"{name}: {NO_TEXT_LAYER}; {reason}")


def recognise(image: Any, page: int | None) -> list[Block]:
    """The text Tesseract reads in a PIL image, as paragraph blocks marked ``ocr``.

    Tesseract runs with one OpenMP thread (``OMP_THREAD_LIMIT=1``, as Tesseract's own docs
    advise for throughput): with its default of every core, one scanned page of the sample
    corpus took 2.7-3.2 s of wall and 2.4 s of CPU on 2 cores beside the embedding model,
    with one thread 0.8-1.1 s and 0.7 s. pytesseract passes the process's environment to
    the program unchanged, so the page goes to ``tesseract stdin stdout`` here, with the
    limit set for that program alone (the embedding engines keep their threads)."""
    import pytesseract

    buffer = io.BytesIO()
    image.convert("L").save(buffer, format="PNG")
    done = subprocess.run(
        [pytesseract.pytesseract.tesseract_cmd, "stdin", "stdout", "-l", OCR_LANGUAGES],
        input=buffer.getvalue(), capture_output=True, check=False,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    )
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise RuntimeError(f"tesseract failed (exit {done.returncode}): {reason}")
    text = done.stdout.decode("utf-8", "replace")
    return [Block(b.kind, b.text, b.level, page, True) for b in paragraph_blocks(text)]


def ocr_pages(data: bytes, name: str, limits: ExtractLimits,
              pages: Sequence[int]) -> dict[int, list[Block]]:
    """Recognise the text of ``pages`` (1-based numbers) of the PDF ``data``: page number
    -> its blocks (``ocr=True``, ``page`` set). Raises :class:`ExtractionError` naming the
    file when OCR is not installed, :class:`~docgraph.errors.FileTooLarge` when a page
    would render larger than the limits allow or yields too much text."""
    import pypdfium2

    _require_ocr(name)
    limits.check_ocr_pages(name, len(pages))
    try:
        pdf = pypdfium2.PdfDocument(data)
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable PDF ({exc})") from exc
    found: dict[int, list[Block]] = {}
    chars = 0
    try:
        count = len(pdf)
        for number in pages:
            if not 1 <= number <= count:
                raise ExtractionError(f"{name}: no page {number} (the PDF has {count})")
            page = pdf[number - 1]
            width, height = page.get_size()  # points, 1/72 inch
            scale = OCR_DPI / 72
            pixels = width * height * scale * scale
            if pixels > MAX_PAGE_PIXELS:
                scale *= (MAX_PAGE_PIXELS / pixels) ** 0.5
                pixels = MAX_PAGE_PIXELS
            limits.check_unpacked(name, f"page {number} rendered for OCR", int(pixels * 3))
            image = page.render(scale=scale).to_pil()
            found[number] = recognise(image, number)
            chars += sum(len(b.text) for b in found[number])
            limits.check_text(name, chars)
    finally:
        pdf.close()
    return found


def is_scanned_pdf(data: bytes, limits: ExtractLimits) -> bool:
    """Whether the PDF is a scan: readable, no page has text, and some page shows an image
    (a blank or vector-only PDF is not a scan: OCR would find nothing)."""
    from pypdf import PdfReader

    from docgraph.ingest.limits import bounded_pdf

    try:
        with bounded_pdf(limits):
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted:
                return False
            if any((page.extract_text() or "").strip() for page in reader.pages):
                return False
            return any(_has_image(page) for page in reader.pages)
    except Exception:
        return False


def _has_image(page: Any) -> bool:
    """Whether a page's resources hold an image XObject (directly or in a form XObject),
    read from the object dictionaries without decoding any stream."""
    stack: list[Any] = [page.get("/Resources")]
    seen = 0
    while stack and seen < 1000:
        reference: Any = stack.pop()
        seen += 1
        resources: Any = reference.get_object() if reference is not None else None
        if not hasattr(resources, "get"):
            continue
        entry: Any = resources.get("/XObject")
        xobjects: Any = entry.get_object() if entry is not None else None
        if not hasattr(xobjects, "values"):
            continue
        for ref in xobjects.values():
            xobject = ref.get_object()
            subtype = xobject.get("/Subtype")
            if subtype == "/Image":
                return True
            if subtype == "/Form":
                stack.append(xobject.get("/Resources"))
    return False


def page_count(data: bytes) -> int:
    """Pages of a PDF, counted by pypdf (a core dependency), for the scan's metadata."""
    from pypdf import PdfReader

    return len(PdfReader(io.BytesIO(data)).pages)


def extract_scanned_pdf(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """A PDF without any text layer, every page recognised."""
    _require_ocr(name)
    pages = page_count(data)
    limits.check_ocr_pages(name, pages)
    found = ocr_pages(data, name, limits, range(1, pages + 1))
    blocks = tuple(b for number in sorted(found) for b in found[number])
    return ExtractedDocument(title_from_name(name), blocks, "application/pdf",
                             {"pages": str(pages), "ocr": "true"})


IMAGE_MEDIA_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                     ".tif": "image/tiff", ".tiff": "image/tiff"}


def extract_image(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """A scanned page saved as an image (PNG, JPEG, TIFF; every frame of a multi-page
    TIFF is a page)."""
    import posixpath

    from PIL import Image, ImageSequence

    _require_ocr(name)
    try:
        image = Image.open(io.BytesIO(data))
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable image ({exc})") from exc
    blocks: list[Block] = []
    limits.check_ocr_pages(name, getattr(image, "n_frames", 1))
    for number, frame in enumerate(ImageSequence.Iterator(image), start=1):
        width, height = frame.size
        limits.check_unpacked(name, f"page {number} ({width}x{height} pixels)",
                              width * height * 3)
        blocks.extend(recognise(frame, number))
        limits.check_text(name, sum(len(b.text) for b in blocks))
    media_type = IMAGE_MEDIA_TYPES.get(posixpath.splitext(name.lower())[1], "image/*")
    return ExtractedDocument(title_from_name(name), tuple(blocks), media_type, {"ocr": "true"})


def extract_pdf_or_scan(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """A PDF through its text layer; pages without text that show an image (scanned pages
    in an otherwise digital PDF) are recognised by OCR and put in page order among the
    text. A readable PDF of images none of whose pages has text (a scan) is recognised
    whole, or refused as "no text layer" when OCR is not installed; a mixed PDF without
    OCR keeps its text pages and names the pages it could not read in its metadata
    (``pages_not_read``)."""
    from docgraph.ingest.extract_packed import extract_pdf

    try:
        document = extract_pdf(data, name, limits)
    except FileTooLarge:
        raise
    except ExtractionError:
        if not is_scanned_pdf(data, limits):
            raise
        return extract_scanned_pdf(data, name, limits)
    return _with_scanned_pages(document, data, name, limits)


def _with_scanned_pages(document: ExtractedDocument, data: bytes, name: str,
                        limits: ExtractLimits) -> ExtractedDocument:
    """``document`` (from the text layer) with its image-only pages recognised."""
    pages = int(document.metadata.get("pages", "0") or 0)
    with_text = {b.page for b in document.blocks}
    if all(number in with_text for number in range(1, pages + 1)):
        return document  # the common case: no second parse
    scanned = image_only_pages(data, limits, [n for n in range(1, pages + 1)
                                              if n not in with_text])
    if not scanned:
        return document
    metadata = dict(document.metadata)
    if ocr_unavailable() is not None:
        metadata["pages_not_read"] = ", ".join(map(str, scanned)) + f": {NO_TEXT_LAYER}"
        return replace(document, metadata=metadata)
    found = ocr_pages(data, name, limits, scanned)
    blocks: list[Block] = []
    pending = sorted(found)
    for block in document.blocks:
        while pending and block.page is not None and pending[0] < block.page:
            blocks.extend(found[pending.pop(0)])
        blocks.append(block)
    for number in pending:
        blocks.extend(found[number])
    metadata["ocr_pages"] = ", ".join(map(str, scanned))
    return replace(document, blocks=tuple(blocks), metadata=metadata)


def image_only_pages(data: bytes, limits: ExtractLimits, candidates: Sequence[int]
                     ) -> list[int]:
    """Which of the 1-based ``candidates`` pages have no text at all and show an image
    (pages the text layer left empty for another reason, e.g. a page holding only a
    running footer, are not scans)."""
    from pypdf import PdfReader

    from docgraph.ingest.limits import bounded_pdf

    out: list[int] = []
    try:
        with bounded_pdf(limits):
            reader = PdfReader(io.BytesIO(data))
            for number in candidates:
                page = reader.pages[number - 1]
                if not (page.extract_text() or "").strip() and _has_image(page):
                    out.append(number)
    except Exception:
        return []
    return out
