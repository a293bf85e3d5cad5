"""Scans: images and PDFs without a text layer are read by Tesseract (the ``ocr`` extra),
every block marked ``ocr`` with its page; without OCR such a file fails with "no text
layer", never as an empty document."""

from __future__ import annotations

import pytest

from docgraph.errors import ExtractionError, FileTooLarge
from docgraph.ingest.extract import extract
from docgraph.ingest.formats import ocr
from docgraph.ingest.limits import ExtractLimits
from tests import office_fixtures
from tests.programs import needs_ocr


@needs_ocr
def test_scanned_image_is_recognised_and_marked_ocr():
    png = office_fixtures.scanned_page_png(["Dock D-14 was fixed on 28 March.",
                                            "Kit PLV-CS-220-B costs 186 euros."])
    document = extract(png, "scans/dock.png")
    assert document.media_type == "image/png"
    assert document.metadata == {"ocr": "true"}
    text = " ".join(b.text for b in document.blocks)
    assert "Dock D-14 was fixed on 28 March." in text and "PLV-CS-220-B" in text
    assert all(b.ocr and b.page == 1 for b in document.blocks)


@needs_ocr
def test_pdf_without_text_layer_is_recognised_page_by_page():
    pdf = office_fixtures.scanned_pdf([["Page one names Daventry."],
                                       ["Page two names Rotterdam."]])
    document = extract(pdf, "scans/two-pages.pdf")
    assert document.metadata == {"pages": "2", "ocr": "true"}
    assert [(b.page, b.ocr, b.text) for b in document.blocks] == [
        (1, True, "Page one names Daventry."), (2, True, "Page two names Rotterdam.")]


@needs_ocr
def test_ocr_pages_hook_recognises_only_the_pages_asked_for():
    pdf = office_fixtures.scanned_pdf([["First page text."], ["Second page text."]])
    found = ocr.ocr_pages(pdf, "mixed.pdf", ExtractLimits(), [2])
    assert list(found) == [2]
    assert [b.text for b in found[2]] == ["Second page text."]
    with pytest.raises(ExtractionError, match=r"mixed.pdf: no page 3"):
        ocr.ocr_pages(pdf, "mixed.pdf", ExtractLimits(), [3])


@needs_ocr
def test_scanned_pages_of_a_digital_pdf_are_recognised_in_page_order():
    pdf = office_fixtures.mixed_pdf(["Typed cover page about Daventry.",
                                     ["Scanned page two names Rotterdam."],
                                     "Typed page three about Milton Keynes."])
    document = extract(pdf, "reports/mixed.pdf")
    assert [(b.page, b.ocr) for b in document.blocks] == [(1, False), (2, True), (3, False)]
    assert document.blocks[1].text == "Scanned page two names Rotterdam."
    assert (document.metadata["pages"], document.metadata["ocr_pages"]) == ("3", "2")


def test_a_mixed_pdf_without_ocr_keeps_its_text_and_names_the_pages_not_read(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no tesseract program to be found
    ocr.ocr_unavailable.cache_clear()
    try:
        pdf = office_fixtures.mixed_pdf(["Typed page one.", ["Scanned page two."]])
        document = extract(pdf, "mixed.pdf")
    finally:
        ocr.ocr_unavailable.cache_clear()
    assert [(b.page, b.text) for b in document.blocks] == [(1, "Typed page one.")]
    assert document.metadata["pages_not_read"].startswith("2: no text layer (install the ocr")


@needs_ocr
def test_a_page_too_large_to_render_is_refused():
    pdf = office_fixtures.scanned_pdf([["Some text."]])
    with pytest.raises(FileTooLarge, match=r"big.pdf: too large: page 1 rendered for OCR"):
        extract(pdf, "big.pdf", ExtractLimits(max_unpacked_bytes=100_000))


@needs_ocr
def test_a_scan_with_more_pages_than_max_ocr_pages_is_refused_before_recognition():
    pdf = office_fixtures.scanned_pdf([["One."], ["Two."], ["Three."]])
    with pytest.raises(FileTooLarge, match=r"long.pdf: too large: 3 pages to recognise by "
                       r"OCR, over loader.max_ocr_pages \(2\)"):
        extract(pdf, "long.pdf", ExtractLimits(max_ocr_pages=2))
    with pytest.raises(FileTooLarge, match="max_ocr_pages"):
        ocr.ocr_pages(pdf, "long.pdf", ExtractLimits(max_ocr_pages=2), [1, 2, 3])


def test_max_ocr_pages_is_a_loader_setting():
    from docgraph.config import load_settings
    from docgraph.errors import ConfigError

    settings = load_settings(loader={"max_ocr_pages": 7})
    assert ExtractLimits.from_loader(settings.loader).max_ocr_pages == 7
    with pytest.raises(ConfigError, match="max_ocr_pages"):
        load_settings(loader={"max_ocr_pages": 0})


def test_without_tesseract_a_scan_fails_as_no_text_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no tesseract program to be found
    ocr.ocr_unavailable.cache_clear()
    try:
        png = office_fixtures.scanned_page_png(["Some text."])
        with pytest.raises(ExtractionError, match=r"^page.png: no text layer \(install the ocr"):
            extract(png, "page.png")
        pdf = office_fixtures.scanned_pdf([["Some text."]])
        with pytest.raises(ExtractionError, match=r"^scan.pdf: no text layer \(install the ocr"):
            extract(pdf, "scan.pdf")
    finally:
        ocr.ocr_unavailable.cache_clear()


def test_a_pdf_with_text_is_not_sent_to_ocr():
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.cell(text="Plain text layer.")
    document = extract(bytes(pdf.output()), "text.pdf")
    assert [(b.text, b.ocr) for b in document.blocks] == [("Plain text layer.", False)]


@needs_ocr
def test_tesseract_runs_with_one_openmp_thread(tmp_path, monkeypatch):
    """Tesseract's OpenMP threads fight the embedding model's for the cores (one page: 2.4 s
    of CPU with its default threads, 0.7 s with one): the program gets OMP_THREAD_LIMIT=1,
    and the process's own environment is left as it was (the embedding engines read it)."""
    import shutil

    import pytesseract

    seen = tmp_path / "env.txt"
    real = shutil.which(pytesseract.pytesseract.tesseract_cmd)
    wrapper = tmp_path / "tesseract"
    wrapper.write_text(f'#!/bin/sh\necho "limit=$OMP_THREAD_LIMIT" > {seen}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(wrapper))
    monkeypatch.delenv("OMP_THREAD_LIMIT", raising=False)
    png = office_fixtures.scanned_page_png(["Dock D-14 was fixed on 28 March."])
    document = extract(png, "scans/dock.png")
    assert "Dock D-14 was fixed on 28 March." in " ".join(b.text for b in document.blocks)
    assert seen.read_text().strip() == "limit=1"
    assert "OMP_THREAD_LIMIT" not in __import__("os").environ


@needs_ocr
def test_a_failing_tesseract_names_the_file(tmp_path, monkeypatch):
    import shutil

    import pytesseract

    real = shutil.which(pytesseract.pytesseract.tesseract_cmd)
    broken = tmp_path / "tesseract"  # answers --version (OCR is there), fails on a page
    broken.write_text(f'#!/bin/sh\n[ "$1" = --version ] && exec {real} "$@"\n'
                      "echo 'cannot read image' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(broken))
    png = office_fixtures.scanned_page_png(["Dock D-14 was fixed on 28 March."])
    with pytest.raises(ExtractionError, match=r"scans/dock.png.*exit 3.*cannot read image"):
        extract(png, "scans/dock.png")
