"""Slide decks, workbooks, OpenDocument and EPUB: each format's structure (sections, pages,
records with their column names, metadata), hidden parts skipped, and bounded unpacking."""

from __future__ import annotations

import io
import zipfile

import pytest

from docgraph.errors import ExtractionError, FileTooLarge
from docgraph.ingest.extract import extract
from docgraph.ingest.limits import ExtractLimits
from docgraph.model import BlockKind
from tests import backend_graphs, office_fixtures
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

H, P, LI, ROW = BlockKind.HEADING, BlockKind.PARAGRAPH, BlockKind.LIST_ITEM, BlockKind.TABLE_ROW


def _triples(document):
    return [(b.kind, b.text, b.page) for b in document.blocks]


def test_pptx_has_a_section_per_slide_with_the_slide_number_as_page():
    document = extract(office_fixtures.pptx_deck(), "decks/rollout.pptx")
    assert document.title == "Heron rollout plan"
    assert _triples(document) == [
        (H, "Rollout waves", 1),
        (LI, "Wave one starts at Daventry", 1),
        (LI, "Wave two covers Rotterdam", 1),
        (P, "Speaker notes: Mention the 25 % wave cap.", 1),
        (H, "Spare parts", 2),
        (ROW, "Part: PLV-CS-220-B; Price: 186", 2),
        (ROW, "Part: HR-7; Price: 940", 2),
        (P, "Prices in euros.", 2),
    ]
    assert document.metadata["slides"] == "3"
    assert document.metadata["hidden_slides_skipped"] == "3"  # "Draft ideas" is not text


def test_xlsx_rows_carry_their_header_and_formulas_give_cached_values():
    document = extract(office_fixtures.xlsx_workbook(), "parts.xlsx")
    assert document.title == "Parts price list"
    assert [(b.kind, b.text) for b in document.blocks] == [
        (H, "Parts"),
        (ROW, "Part: PLV-CS-220-B; Unit price: 186; Quantity: 2; Total: 372"),
        (ROW, "Part: HR-7 lidar; Unit price: 940; Quantity: 1; Total: 940"),
        (H, "Sites"),
        (ROW, "Site: Daventry; Robots: 40"),
    ]
    assert document.metadata == {"sheets": "3", "hidden_sheets_skipped": "Margins"}


def test_ods_reads_only_values_of_a_million_repeated_rows_and_skips_hidden_sheets():
    document = extract(office_fixtures.ods_workbook(), "parts.ods")
    assert document.title == "Parts on ODS"
    assert [(b.kind, b.text) for b in document.blocks] == [
        (H, "Parts"),
        (ROW, "Part: PLV-CS-220-B; Price: 186"),
        (ROW, "Part: HR-7 lidar; Price: 940"),
    ]
    assert document.metadata == {"sheets": "2", "hidden_sheets_skipped": "Margins"}


def test_odt_keeps_outline_headings_lists_and_tables():
    document = extract(office_fixtures.odt_document(), "survey.odt")
    assert document.title == "Site survey"
    assert [(b.kind, b.text, b.level) for b in document.blocks] == [
        (H, "Site survey", 1),
        (P, "The Daventry site has 40 robots.", 0),
        (H, "Findings", 2),
        (LI, "Dock D-14 raises E-508", 0),
        (LI, "Wi-Fi is weak in aisle 9", 0),
        (ROW, "Dock: D-14; Status: fixed", 0),
    ]


def test_epub_chapters_in_reading_order_without_navigation():
    document = extract(office_fixtures.epub_book(), "handbook.epub")
    assert document.title == "Halyard field handbook"
    assert [(b.kind, b.text) for b in document.blocks] == [
        (H, "Safety"),
        (P, "Stop the fleet from Roost before entering aisles."),
        (H, "Docking"),  # the chapter has no heading: its table-of-contents title
        (P, "Docks need contact spring kit PLV-CS-220-B."),
    ]
    assert document.metadata == {"author": "Mei Tanaka", "language": "en"}


@pytest.mark.parametrize("name, make", [
    ("deck.pptx", office_fixtures.pptx_deck),
    ("book.xlsx", office_fixtures.xlsx_workbook),
    ("book.ods", office_fixtures.ods_workbook),
    ("text.odt", office_fixtures.odt_document),
    ("book.epub", office_fixtures.epub_book),
])
def test_zip_formats_are_refused_from_their_directory_before_unpacking(name, make):
    limits = ExtractLimits(max_unpacked_bytes=1024)
    with pytest.raises(FileTooLarge, match=rf"{name}: too large: its \d+ members"):
        extract(make(), name, limits)


@pytest.mark.parametrize("name", ["deck.pptx", "book.xlsx", "book.ods", "text.odt",
                                  "book.epub"])
def test_a_broken_office_file_fails_naming_it(name):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("nonsense.xml", "<x/>")
    with pytest.raises(ExtractionError, match=rf"^{name}: "):
        extract(archive.getvalue(), name)


def test_text_limit_holds_inside_a_workbook():
    # The workbook's visible sheets hold about 170 characters of records.
    with pytest.raises(FileTooLarge, match=r"parts.xlsx: too large: more than 100 characters"):
        extract(office_fixtures.xlsx_workbook(), "parts.xlsx", ExtractLimits(max_text_chars=100))


def test_office_formats_index_with_their_sections_on_every_backend(tmp_path, make_graph):
    folder = write_files(tmp_path / "office", {
        "rollout.pptx": office_fixtures.pptx_deck(),
        "parts.xlsx": office_fixtures.xlsx_workbook(),
        "parts.ods": office_fixtures.ods_workbook(),
        "survey.odt": office_fixtures.odt_document(),
        "handbook.epub": office_fixtures.epub_book(),
    })
    graph = make_graph()
    report = graph.index(folder, namespace="office")
    assert report.failed == []
    assert sorted(report.added) == ["handbook.epub", "parts.ods", "parts.xlsx", "rollout.pptx",
                                    "survey.odt"]
    chunks = list(graph.store.chunks_by_rowid(range(1, 1000)).values())
    sections = {(c.source_path, c.section_path) for c in chunks}
    assert {("rollout.pptx", ("Rollout waves",)), ("rollout.pptx", ("Spare parts",)),
            ("parts.xlsx", ("Parts",)), ("parts.xlsx", ("Sites",)),
            ("survey.odt", ("Site survey", "Findings")),
            ("handbook.epub", ("Docking",))} <= sections
    text = "\n".join(c.text for c in chunks)
    assert "Secret backlog item" not in text and "61 %" not in text  # hidden slide, sheet
    hits = graph.search("lidar total price", namespaces={"office"}, k=3)
    assert hits[0].source_path == "parts.xlsx"
    assert "Total: 940" in hits[0].text
