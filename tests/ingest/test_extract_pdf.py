"""PDF structure: pages, section paths from the outline or from heading-like lines, running
headers and footers removed, the PDF's metadata and title (PDFs written by fpdf2)."""

from __future__ import annotations

from docgraph.ingest.chunk import chunk_document
from docgraph.ingest.extract import extract
from docgraph.model import BlockKind, ExtractedDocument
from tests.conftest import REPO
from tests.pdf_fixtures import long_pdf, manual_pdf

EXPECTED = [
    (1, "heading", 1, "Kestrel K2 Service Manual"),
    (1, "paragraph", 0, "This manual covers the Kestrel K2 picker. Keep it with the robot."),
    (1, "heading", 2, "Safety"),
    (1, "paragraph", 0, "Error E-417 means the lidar is blocked. Clean the lidar window "
                        "before a restart."),
    (2, "heading", 2, "Maintenance"),
    (2, "heading", 3, "Battery"),
    (2, "paragraph", 0, "Replace the battery pack BAT-48 every 3,000 charging cycles."),
    (3, "heading", 3, "Firmware"),
    (3, "paragraph", 0, "The Kestrel K2 runs firmware 4.2.1. Upgrade it from the Roost "
                        "console."),
    (3, "list_item", 0, "Stop the robot at a charger."),
    (3, "list_item", 0, "Start the upgrade and wait for the green light."),
]


def _blocks(doc: ExtractedDocument) -> list[tuple[int | None, str, int, str]]:
    return [(b.page, b.kind.value, b.level, b.text) for b in doc.blocks]


def _count(texts):  # type: ignore[no-untyped-def]
    return [len(t.split()) for t in texts]


def test_outline_gives_sections_and_every_block_its_page():
    doc = extract(manual_pdf(), "manuals/kestrel-k2.pdf")
    assert _blocks(doc) == EXPECTED
    assert doc.media_type == "application/pdf"


def test_outline_finds_headings_set_like_body_text():
    """Headings in the body font are headings only because the outline names them."""
    with_outline = extract(manual_pdf(plain_headings=True), "m.pdf")
    assert _blocks(with_outline) == EXPECTED
    without = extract(manual_pdf(plain_headings=True, outline=False), "m.pdf")
    assert not [b for b in without.blocks if b.kind is BlockKind.HEADING]
    assert any(b.text.startswith("Firmware ") for b in without.blocks)  # text, not lost


def test_heading_like_lines_give_sections_without_an_outline():
    doc = extract(manual_pdf(outline=False), "m.pdf")
    assert _blocks(doc) == EXPECTED


def test_running_header_footer_and_page_numbers_are_removed():
    plain = extract(manual_pdf(running=False), "m.pdf")
    running = extract(manual_pdf(running=True), "m.pdf")
    assert _blocks(running) == _blocks(plain) == EXPECTED
    texts = " ".join(b.text for b in running.blocks)
    assert "Confidential" not in texts and "page 2 of 3" not in texts


def test_running_lines_of_a_two_page_document_and_bare_page_numbers_are_removed():
    blocks = [("h1", "Report"), ("p", "First page text."), ("page", ""),
              ("p", "Second page text.")]
    for footer in ("Kestrel K2 Service Manual - page {page} of {{nb}}", "{page}",
                   "- {page} -"):
        doc = extract(manual_pdf(blocks=blocks, footer=footer), "r.pdf")
        assert [(b.page, b.text) for b in doc.blocks] == [
            (1, "Report"), (1, "First page text."), (2, "Second page text.")], footer


def test_a_line_repeated_on_too_few_pages_stays():
    """A line at the top of two pages in six is content, not a running header."""
    words = ["lidar", "battery", "wheels", "charger", "console"]
    blocks = [("p", "Checked by the night shift.")]
    for page, word in enumerate(words):
        if page < 1:
            blocks += [("page", ""), ("p", "Checked by the night shift.")]
        blocks += [("page", ""), ("p", f"The {word} of every robot was inspected.")]
    doc = extract(manual_pdf(blocks=blocks, running=False), "audit.pdf")
    texts = [b.text for b in doc.blocks]
    assert texts.count("Checked by the night shift.") == 2
    assert len(texts) == 7 and [b.page for b in doc.blocks] == [1, 2, 3, 4, 5, 6, 7]


def test_metadata_and_title_come_from_the_pdf():
    doc = extract(manual_pdf(title="Kestrel K2 Manual", author="Ada Lovelace"), "x/k.pdf")
    assert doc.title == "Kestrel K2 Manual"
    assert doc.metadata["title"] == "Kestrel K2 Manual"
    assert doc.metadata["author"] == "Ada Lovelace"
    assert doc.metadata["pages"] == "3"
    assert doc.metadata["created"][:4].isdigit()  # ISO 8601


def test_without_a_metadata_title_the_first_heading_names_the_document():
    doc = extract(manual_pdf(title=None, author=None), "x/kestrel_k2.pdf")
    assert doc.title == "Kestrel K2 Service Manual"
    assert "author" not in doc.metadata and "title" not in doc.metadata


def test_a_placeholder_metadata_title_is_ignored():
    doc = extract(manual_pdf(title="Microsoft Word - draft3.docx"), "x/k.pdf")
    assert doc.title == "Kestrel K2 Service Manual"


def test_chunks_carry_the_first_and_last_page_of_their_blocks():
    doc = extract(manual_pdf(), "m.pdf")
    chunks = chunk_document(doc, _count, max_tokens=200)
    assert [(c.section_path, c.pages) for c in chunks] == [
        (("Kestrel K2 Service Manual",), (1, 1)),
        (("Kestrel K2 Service Manual", "Safety"), (1, 1)),
        (("Kestrel K2 Service Manual", "Maintenance", "Battery"), (2, 2)),
        (("Kestrel K2 Service Manual", "Maintenance", "Firmware"), (3, 3)),
    ]
    assert not any(c.ocr for c in chunks)


def test_a_chunk_across_a_page_break_spans_both_pages():
    blocks = [("h1", "Report"), ("p", "First page text about the fleet."), ("page", ""),
              ("p", "Second page text about the fleet.")]
    doc = extract(manual_pdf(blocks=blocks), "r.pdf")
    [chunk] = chunk_document(doc, _count, max_tokens=200)
    assert chunk.pages == (1, 2)
    assert chunk.text == "First page text about the fleet.\nSecond page text about the fleet."


def test_long_report_keeps_every_page_and_chapter():
    doc = extract(long_pdf(20), "long.pdf")
    chapters = [b for b in doc.blocks if b.kind is BlockKind.HEADING]
    assert [(h.text, h.page) for h in chapters] == [
        (f"Chapter {n + 1}: Site report", 5 * n + 1) for n in range(4)]
    paragraphs = [b for b in doc.blocks if b.kind is BlockKind.PARAGRAPH]
    assert len(paragraphs) == 60
    assert all(b.text.startswith(f"Paragraph {i % 3 + 1} of page {b.page}.")
               for i, b in enumerate(paragraphs))
    assert not [b for b in doc.blocks if "Confidential" in b.text or "page 3 of" in b.text]


def test_a_heading_wrapped_over_two_lines_is_one_heading():
    title = ("Maintenance of the lidar, the battery pack and the drive wheels of every "
             "Kestrel K2 robot in the fleet")
    body = "Clean the lidar window weekly with the cloth from the service kit. " * 3
    blocks = [("h1", "Manual"), ("h2", title), ("p", body)]
    for outline in (True, False):
        doc = extract(manual_pdf(blocks=blocks, outline=outline, running=False), "m.pdf")
        assert _blocks(doc) == [(1, "heading", 1, "Manual"), (1, "heading", 2, title),
                                (1, "paragraph", 0, body.strip())], outline


def test_a_cyclic_outline_costs_nothing_but_its_own_entries():
    import io

    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(manual_pdf(outline=False))))
    first = writer.add_outline_item(title="Loop", page_number=0)
    second = writer.add_outline_item(title="Again", page_number=1)
    second.get_object()[NameObject("/Next")] = first  # Loop -> Again -> Loop -> ...
    data = io.BytesIO()
    writer.write(data)
    doc = extract(data.getvalue(), "loop.pdf")
    assert [(b.page, b.text) for b in doc.blocks if b.kind is BlockKind.HEADING] == [
        (1, "Loop"), (2, "Again")]
    text = " ".join(b.text for b in doc.blocks)
    assert "Replace the battery pack BAT-48" in text and "green light" in text


def test_the_thresholds_quoted_in_the_architecture_are_the_code_s():

    from docgraph.ingest import pdf_structure as pdf

    text = " ".join((REPO / "docs" / "ARCHITECTURE.md")
                    .read_text(encoding="utf-8").split())
    numbers = {2: "two", 12: "twelve", 15: "fifteen"}
    assert f"lines {round((pdf.HEADING_SIZE_RATIO - 1) * 100)}% larger than the body" in text
    assert f"top or bottom {numbers[pdf.EDGE_LINES]} that recur" in text
    assert pdf.RUNNING_SHARE == 0.5 and "recur on at least half the pages" in text
    assert f"lines of up to {numbers[pdf.RUNNING_MAX_WORDS]} words" in text
    assert f"line pitch ({round((pdf.PARAGRAPH_GAP - 1) * 100)}% wider)" in text


def test_a_lone_bookmark_leaves_the_structure_to_heading_like_lines():
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(manual_pdf(outline=False))))
    writer.add_outline_item(title="Kestrel K2 Service Manual", page_number=0)
    data = io.BytesIO()
    writer.write(data)
    assert _blocks(extract(data.getvalue(), "m.pdf")) == EXPECTED


def test_bare_page_numbers_are_dropped_at_page_edges_only():
    from docgraph.ingest.pdf_structure import Line, strip_running_lines

    def page(number: str, words: str) -> list[Line]:
        body = [Line(f"{words} {n}.", 10.0, False, 700.0 - 20 * n) for n in range(4)]
        return [Line("Civil", 10.0, False, 760.0), *body, Line(number, 10.0, False, 40.0)]

    pages = [page("iv", "Lidar care"), page("v", "Battery care"), page("vi", "Wheel care")]
    kept = strip_running_lines(pages)
    assert [[line.text for line in lines] for lines in kept] == [
        [f"{words} care {n}." for n in range(4)] for words in ("Lidar", "Battery", "Wheel")]
    single = [[Line("Civil", 10.0, False, 760.0), Line("12", 10.0, False, 40.0)],
              [Line("Text of the second page.", 10.0, False, 700.0)]]
    assert [line.text for line in strip_running_lines(single)[0]] == ["Civil"]
