"""System programs that some tests need, and what the bundled sample corpus gives without them.

``make test`` must pass on a machine with only what the README names (Python and ``make``).
A test that needs a program the Python packages do not bring (Tesseract, Chromium, Node tools,
a PostgreSQL server) skips with a reason naming the program and how to install it; under
``DOCGRAPH_REQUIRE_SERVICES=1`` (``.ci/run``) every such skip fails instead (``conftest.py``).
``.ci/run`` also runs the tests that touch these programs once with them hidden from ``PATH``
(``.ci/without-programs``), so this module's fallbacks are exercised, not just written.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable

import pytest

from docgraph.ingest.formats import ocr

#: Why OCR cannot run here (the ``ocr`` extra's modules or the ``tesseract`` program), or None.
OCR_MISSING: str | None = ocr.ocr_unavailable()

needs_ocr = pytest.mark.skipif(
    OCR_MISSING is not None,
    reason=f"needs the Tesseract OCR program (Debian: apt-get install tesseract-ocr; "
           f".ci/run does): {OCR_MISSING}")

#: The sample corpus's scanned page: only OCR reads it.
SAMPLE_SCAN = "support/field-service-visit-rtm-1-2025-04-08.pdf"


def sample_corpus_failures(prefix: str = "") -> set[str]:
    """The sample-corpus files a build here reports as failed: none with OCR, else the scan
    (``prefix``: the folder indexed, relative to ``examples/corpus``, e.g. ``"support/"``)."""
    if OCR_MISSING is None or not SAMPLE_SCAN.startswith(prefix):
        return set()
    return {SAMPLE_SCAN[len(prefix):]}


def assert_sample_build_failures(failed: Iterable[tuple[str, str]], prefix: str = "") -> None:
    """A sample-corpus build failed exactly the files it must here, each for its reason: with
    OCR nothing; without it the scan, as "no text layer" naming the missing piece."""
    failed = list(failed)
    assert {path for path, _ in failed} == sample_corpus_failures(prefix), failed
    for _, reason in failed:
        assert "no text layer" in reason and "tesseract" in reason.lower(), reason


def needs_ocr_for(sources: Iterable[str]) -> bool:
    """Whether a question whose answer lies in ``sources`` cannot be answered here (its
    only source is the scan and OCR is missing)."""
    return OCR_MISSING is not None and set(sources) <= {SAMPLE_SCAN}


def which_or_skip(program: str, install: str) -> str:
    """The path of ``program`` on ``PATH``, or skip the test naming it and ``install``."""
    found = shutil.which(program)
    if found is None:
        pytest.skip(f"needs the {program} program, not found on PATH ({install})")
    return found
