"""Extraction: each format keeps the structure (headings, lists, tables, code) and the title
a reader would expect; unreadable input fails with an ExtractionError naming the file."""

from __future__ import annotations

import io
import json

import pytest

from docgraph.errors import ExtractionError
from docgraph.ingest.extract import extract
from docgraph.model import Block, BlockKind
from tests.conftest import REPO

H, P, LI, ROW, CODE = (
    BlockKind.HEADING,
    BlockKind.PARAGRAPH,
    BlockKind.LIST_ITEM,
    BlockKind.TABLE_ROW,
    BlockKind.CODE,
)


def _pairs(blocks: tuple[Block, ...]) -> list[tuple[str, str] | tuple[str, str, int]]:
    """Blocks as short tuples: (kind, text) and (heading, text, level)."""
    return [
        (b.kind.value, b.text, b.level) if b.kind is H else (b.kind.value, b.text)
        for b in blocks
    ]


# -- Markdown ------------------------------------------------------------------------------

MARKDOWN = """\
# Deployment Guide

Read this before the first deploy.

## Setup

- install the agent
- open port 8443
  - only from the VPN

1. step one
2. step two

### Limits

| Setting | Value |
|---------|-------|
| workers | 4 |
| timeout | 30s |

```python
print("hello")
```

#### Deep heading

> A quoted *warning*.
"""


def test_markdown_keeps_headings_lists_tables_and_code():
    doc = extract(MARKDOWN.encode(), "guides/deploy.md")
    assert doc.title == "Deployment Guide"
    assert doc.media_type == "text/markdown"
    assert _pairs(doc.blocks) == [
        ("heading", "Deployment Guide", 1),
        ("paragraph", "Read this before the first deploy."),
        ("heading", "Setup", 2),
        ("list_item", "install the agent"),
        ("list_item", "open port 8443"),
        ("list_item", "only from the VPN"),
        ("list_item", "step one"),
        ("list_item", "step two"),
        ("heading", "Limits", 3),
        ("table_row", "Setting: workers; Value: 4"),
        ("table_row", "Setting: timeout; Value: 30s"),
        ("code", 'print("hello")'),
        ("heading", "Deep heading", 4),
        ("paragraph", "A quoted *warning*."),
    ]


def test_markdown_without_h1_takes_its_title_from_the_file_name():
    doc = extract(b"## Only a subsection\n\nSome text.\n", "notes/team_meeting-notes.markdown")
    assert doc.title == "team meeting notes"
    assert _pairs(doc.blocks) == [("heading", "Only a subsection", 2), ("paragraph", "Some text.")]


def test_markdown_title_is_the_first_h1_not_a_later_one():
    doc = extract(b"## Intro\n\ntext\n\n# Real Title\n\n# Second\n", "x.md")
    assert doc.title == "Real Title"


# -- plain text ----------------------------------------------------------------------------


def test_text_paragraphs_and_bullet_lists():
    text = (
        "First paragraph\nwraps onto a second line.\n\n"
        "- apples\n- pears\n\n"
        "1) one\n2) two\n\n\n"
        "Last   paragraph\twith   spaces.\n"
    )
    doc = extract(text.encode(), "shopping_list.txt")
    assert doc.title == "shopping list"
    assert doc.media_type == "text/plain"
    assert _pairs(doc.blocks) == [
        ("paragraph", "First paragraph wraps onto a second line."),
        ("list_item", "apples"),
        ("list_item", "pears"),
        ("list_item", "one"),
        ("list_item", "two"),
        ("paragraph", "Last paragraph with spaces."),
    ]


def test_text_decodes_utf8_with_bom_crlf_and_cp1252():
    doc = extract("\ufeffCafé crème\r\n\r\nNext".encode(), "a.txt")
    assert [b.text for b in doc.blocks] == ["Café crème", "Next"]
    legacy = extract("Déjà vu – “quoted”".encode("cp1252"), "legacy.txt")
    assert legacy.blocks[0].text == "Déjà vu – “quoted”"


# -- HTML ----------------------------------------------------------------------------------

HTML = b"""<!DOCTYPE html>
<html><head><title>Ops Wiki</title>
<style>h1 { color: red } .secret { }</style>
<script>var secret = "do not index";</script>
</head><body>
<nav><a href="/">Home navigation</a></nav>
<!-- a comment that is not text -->
<h1>Runbook</h1>
<p>Restart the <b>queue</b> worker first.</p>
<h2>Checks</h2>
<ul>
  <li>Disk space<ul><li>root volume</li><li>data volume</li></ul></li>
  <li>Memory</li>
</ul>
<h3>Ports</h3>
<table>
  <tr><th>Service</th><th>Port</th></tr>
  <tr><td>api</td><td>8443</td></tr>
  <tr><td>metrics</td><td>9100</td></tr>
</table>
<pre><span class="k">def</span> <span class="n">check</span>():
    return True</pre>
<script>console.log("also secret")</script>
<footer>Copyright footer</footer>
</body></html>"""


def test_html_keeps_headings_nested_lists_tables_and_code():
    doc = extract(HTML, "runbook.html")
    assert doc.title == "Runbook"
    assert doc.media_type == "text/html"
    assert _pairs(doc.blocks) == [
        ("heading", "Runbook", 1),
        ("paragraph", "Restart the queue worker first."),
        ("heading", "Checks", 2),
        ("list_item", "Disk space"),
        ("list_item", "root volume"),
        ("list_item", "data volume"),
        ("list_item", "Memory"),
        ("heading", "Ports", 3),
        ("table_row", "Service: api; Port: 8443"),
        ("table_row", "Service: metrics; Port: 9100"),
        ("code", "def check():\n    return True"),
    ]


def test_html_drops_script_style_nav_footer_and_comments():
    text = " ".join(b.text for b in extract(HTML, "runbook.html").blocks)
    for junk in ("secret", "color", "console", "navigation", "footer", "comment"):
        assert junk not in text


def test_html_without_h1_takes_the_title_tag():
    doc = extract(b"<html><head><title> Team  Page </title></head><body><p>Hi</p></body></html>",
                  "page.htm")
    assert doc.title == "Team Page"
    assert _pairs(doc.blocks) == [("paragraph", "Hi")]


def test_html_without_any_title_falls_back_to_the_file_name():
    assert extract(b"<p>Hi</p>", "weekly_status.html").title == "weekly status"


def test_html_text_appears_once_and_loose_text_is_kept():
    doc = extract(
        b"<body><blockquote><p>Quoted once.</p></blockquote>"
        b"<div>Loose intro<p>Inner para</p>loose tail</div>"
        b"<dl><dt>Term</dt><dd>Definition</dd></dl></body>",
        "a.html",
    )
    assert _pairs(doc.blocks) == [
        ("paragraph", "Quoted once."),
        ("paragraph", "Loose intro"),
        ("paragraph", "Inner para"),
        ("paragraph", "loose tail"),
        ("paragraph", "Term"),
        ("paragraph", "Definition"),
    ]


def test_html_header_row_belongs_to_its_own_table_only():
    doc = extract(
        b"<table><thead><tr><th>Name</th><th>Role</th></tr></thead>"
        b"<tbody><tr><td>Ada</td><td>Lead</td></tr></tbody></table>"
        b"<table><tr><td>x</td><td>y</td></tr></table>",
        "t.html",
    )
    assert _pairs(doc.blocks) == [("table_row", "Name: Ada; Role: Lead"), ("table_row", "x | y")]


# -- PDF -----------------------------------------------------------------------------------


def _pdf(pages: list[str], title: str | None = None) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    if title:
        pdf.set_title(title)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    return bytes(pdf.output())


def test_pdf_gives_one_paragraph_per_page_paragraph_and_the_metadata_title():
    data = _pdf(
        ["The Kestrel picker runs firmware 4.2.1.", "Error E-417 means the lidar is blocked."],
        title="Kestrel Manual",
    )
    doc = extract(data, "manuals/kestrel.pdf")
    assert doc.title == "Kestrel Manual"
    assert doc.media_type == "application/pdf"
    assert _pairs(doc.blocks) == [
        ("paragraph", "The Kestrel picker runs firmware 4.2.1."),
        ("paragraph", "Error E-417 means the lidar is blocked."),
    ]


def test_pdf_without_metadata_title_is_named_after_the_file():
    doc = extract(_pdf(["Only page."]), "site_survey.pdf")
    assert doc.title == "site survey"
    assert [b.text for b in doc.blocks] == ["Only page."]


# -- DOCX ----------------------------------------------------------------------------------


def _docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph("Staff Handbook", style="Title")
    document.add_paragraph("Welcome to the company.")
    document.add_heading("Leave", level=1)
    document.add_heading("Parental leave", level=2)
    document.add_paragraph("Twenty weeks, fully paid.")
    document.add_paragraph("Tell your manager early", style="List Bullet")
    document.add_paragraph("   ")  # empty paragraphs are skipped
    table = document.add_table(rows=3, cols=2)
    for r, (kind, days) in enumerate([("Kind", "Days"), ("Sick", "10"), ("Vacation", "25")]):
        table.cell(r, 0).text = kind
        table.cell(r, 1).text = days
    document.add_paragraph("Closing words.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_maps_styles_to_headings_lists_and_tables():
    doc = extract(_docx(), "HR/handbook.docx")
    assert doc.title == "Staff Handbook"
    assert doc.media_type.endswith("wordprocessingml.document")
    assert _pairs(doc.blocks) == [
        ("heading", "Staff Handbook", 1),
        ("paragraph", "Welcome to the company."),
        ("heading", "Leave", 1),
        ("heading", "Parental leave", 2),
        ("paragraph", "Twenty weeks, fully paid."),
        ("list_item", "Tell your manager early"),
        ("table_row", "Kind: Sick; Days: 10"),
        ("table_row", "Kind: Vacation; Days: 25"),
        ("paragraph", "Closing words."),
    ]


# -- CSV -----------------------------------------------------------------------------------


def test_csv_rows_are_labelled_with_the_header():
    data = b"name,team,city\nAda,Platform,Oslo\nBob,,Lima\n"
    doc = extract(data, "staff_list.csv")
    assert doc.title == "staff list"
    assert doc.media_type == "text/csv"
    assert _pairs(doc.blocks) == [
        ("heading", "staff list", 1),
        ("table_row", "name: Ada; team: Platform; city: Oslo"),
        ("table_row", "name: Bob; city: Lima"),  # empty cells are left out
    ]


def test_csv_sniffs_semicolons_and_quoted_cells():
    data = b'id;note\n1;"hello; world"\n2;plain\n'
    doc = extract(data, "notes.csv")
    assert [b.text for b in doc.blocks if b.kind is ROW] == [
        "id: 1; note: hello; world",
        "id: 2; note: plain",
    ]


# -- JSON ----------------------------------------------------------------------------------


def test_json_list_of_records_gives_one_row_per_record():
    records = [
        {"id": 1, "name": "Ada", "tags": ["ops", "oncall"]},
        {"id": 2, "name": "Bob", "address": {"city": "Oslo"}, "note": None},
    ]
    doc = extract(json.dumps(records).encode(), "people.json")
    assert doc.title == "people"
    assert doc.media_type == "application/json"
    assert _pairs(doc.blocks) == [
        ("table_row", "id: 1; name: Ada; tags: ops, oncall"),
        ("table_row", "id: 2; name: Bob; address.city: Oslo"),
    ]


def test_json_nested_object_keys_become_sections():
    value = {
        "title": "Service Config",
        "version": 3,
        "server": {"host": "api.internal", "port": 8443, "tls": {"cert": "/etc/cert.pem"}},
        "features": ["search", "export"],
    }
    doc = extract(json.dumps(value).encode(), "config.json")
    assert doc.title == "Service Config"
    assert _pairs(doc.blocks) == [
        ("paragraph", "title: Service Config; version: 3"),
        ("heading", "server", 1),
        ("paragraph", "host: api.internal; port: 8443"),
        ("heading", "tls", 2),
        ("paragraph", "cert: /etc/cert.pem"),
        ("heading", "features", 1),
        ("list_item", "search"),
        ("list_item", "export"),
    ]


def test_json_nesting_deeper_than_six_levels_keeps_its_values():
    value: dict[str, object] = {"leaf": "deep value"}
    for key in "hgfedcba":
        value = {key: value}
    doc = extract(json.dumps(value).encode(), "deep.json")
    assert [b.level for b in doc.blocks if b.kind is H] == [1, 2, 3, 4, 5, 6]
    assert any("deep value" in b.text for b in doc.blocks)


def test_extension_matching_is_case_insensitive():
    assert extract(b"# Hi\n", "README.MD").title == "Hi"


# -- failures ------------------------------------------------------------------------------


def _assert_fails_naming(data: bytes, name: str) -> ExtractionError:
    with pytest.raises(ExtractionError) as info:
        extract(data, name)
    assert name in str(info.value)
    return info.value


@pytest.mark.parametrize("name", ["Q3 report.xls", "archive.tar.gz", "Makefile", "photo.gif"])
def test_unsupported_extension(name):
    assert "unsupported" in str(_assert_fails_naming(b"anything", name))


def test_invalid_json():
    err = _assert_fails_naming(b'{"a": [1, 2,', "broken config.json")
    assert "invalid JSON" in str(err)


def test_corrupt_pdf():
    _assert_fails_naming(b"%PDF-1.7\n\x00\x01 this is not a pdf body", "scan 2024.pdf")


def test_pdf_truncated_half_way():
    data = _pdf(["Some text that will be cut off."])
    _assert_fails_naming(data[: len(data) // 3], "cut.pdf")


def test_corrupt_docx():
    _assert_fails_naming(b"PK\x03\x04 but not really a zip archive", "minutes.docx")


def test_binary_garbage_as_txt():
    garbage = bytes(range(256)) * 8
    err = _assert_fails_naming(garbage, "firmware dump.txt")
    assert "binary" in str(err)


@pytest.mark.parametrize("ext", [".txt", ".md", ".html", ".pdf", ".docx", ".csv", ".json"])
def test_empty_file(ext):
    _assert_fails_naming(b"", f"empty file{ext}")


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"  \n\n\t\n", "blank.md"),
        (b"\n\n", "blank.txt"),
        (b"<html><body> </body></html>", "b.html"),
        (b"[]", "empty list.json"),
        (b"{}", "empty object.json"),
    ],
)
def test_whitespace_only_documents_have_no_text(data, name):
    assert "no text" in str(_assert_fails_naming(data, name))


# -- hostile input: bombs, limits, encodings -----------------------------------------------


def test_docx_decompression_bomb_is_refused_in_seconds_at_the_default_limits():
    import time

    from docgraph.errors import FileTooLarge
    from tests.malformed import docx_with_member

    bomb = docx_with_member("word/document.xml", 300 * 1024 * 1024)  # ~2 MB on disk
    assert len(bomb) < 3 * 1024 * 1024
    started = time.monotonic()
    with pytest.raises(FileTooLarge) as err:
        extract(bomb, "minutes.docx")
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert "minutes.docx" in message and "word/document.xml" in message
    assert "loader.max_unpacked_bytes" in message


@pytest.mark.parametrize("member", ["word/media/image1.png", "customXml/item9.xml"])
def test_docx_bomb_in_any_member_is_refused(member):
    from docgraph.errors import FileTooLarge
    from docgraph.ingest.limits import ExtractLimits
    from tests.malformed import docx_with_member

    with pytest.raises(FileTooLarge, match="max_unpacked_bytes"):
        extract(docx_with_member(member, 8 * 1024 * 1024), "a.docx", ExtractLimits(4 << 20))


def test_docx_with_too_many_archive_members_is_refused():
    from docgraph.errors import FileTooLarge
    from docgraph.ingest.limits import MAX_ARCHIVE_MEMBERS
    from tests.malformed import zip_with_members

    with pytest.raises(FileTooLarge, match="members"):
        extract(zip_with_members(MAX_ARCHIVE_MEMBERS + 1), "many.docx")


def test_pdf_with_a_huge_flate_stream_is_refused_as_too_large():
    from docgraph.errors import FileTooLarge
    from docgraph.ingest.limits import ExtractLimits
    from tests.malformed import pdf

    bomb = pdf([b" " * (16 * 1024 * 1024)])
    assert len(bomb) < 100_000
    with pytest.raises(FileTooLarge, match=r"bomb\.pdf: too large.*max_unpacked_bytes"):
        extract(bomb, "bomb.pdf", ExtractLimits(max_unpacked_bytes=4 << 20))


def test_pdf_whose_pages_together_unpack_past_the_limit_is_refused():
    from docgraph.errors import FileTooLarge
    from docgraph.ingest.limits import ExtractLimits
    from tests.malformed import pdf, pdf_text_ops

    pages = [pdf_text_ops(f"page {i}") + b" " * (3 * 1024 * 1024) for i in range(3)]
    with pytest.raises(FileTooLarge, match="page contents unpack to"):
        extract(pdf(pages), "long.pdf", ExtractLimits(max_unpacked_bytes=4 << 20))
    doc = extract(pdf(pages[:1]), "short.pdf", ExtractLimits(max_unpacked_bytes=4 << 20))
    assert [b.text for b in doc.blocks] == ["page 0"]


@pytest.mark.parametrize(("data", "name"), [
    (b"word " * 3000, "long.txt"),
    (b"# T\n\n" + b"word " * 3000, "long.md"),
    (b"<p>" + b"word " * 3000 + b"</p>", "long.html"),
])
def test_text_past_max_text_chars_is_refused(data, name):
    from docgraph.errors import FileTooLarge
    from docgraph.ingest.limits import ExtractLimits

    with pytest.raises(FileTooLarge, match=rf"{name}: too large.*loader.max_text_chars \(10000\)"):
        extract(data, name, ExtractLimits(max_text_chars=10_000))
    assert extract(data, name, ExtractLimits(max_text_chars=20_000)).blocks


def test_loader_limits_quoted_in_the_docs_are_the_defaults():
    import re

    from docgraph.config import LoaderSettings

    root = REPO
    readme = (root / "README.md").read_text(encoding="utf-8")
    defaults = LoaderSettings()
    for key in ("max_file_bytes", "max_unpacked_bytes", "max_text_chars", "max_ocr_pages"):
        quoted = re.search(rf"^{key} = (\d+)", readme, re.MULTILINE)
        assert quoted and int(quoted.group(1)) == getattr(defaults, key), key
    architecture = (root / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert f"`max_unpacked_bytes` ({defaults.max_unpacked_bytes >> 20} MiB)" in architecture


def test_loader_limits_are_validated_and_named():
    from docgraph.config import load_settings
    from docgraph.errors import ConfigError

    settings = load_settings(loader={"max_unpacked_bytes": 8 << 20, "max_text_chars": 5000})
    assert (settings.loader.max_unpacked_bytes, settings.loader.max_text_chars) == (8 << 20, 5000)
    for key in ("max_unpacked_bytes", "max_text_chars"):
        with pytest.raises(ConfigError, match=key):
            load_settings(loader={key: 0})


@pytest.mark.parametrize(("data", "text"), [
    ("UTF-16 with a mark: Œuvre".encode("utf-16"), "UTF-16 with a mark: Œuvre"),
    ("UTF-16 without a mark: déjà".encode("utf-16-le"), "UTF-16 without a mark: déjà"),
    ("Big-endian UTF-16: naïve".encode("utf-16-be"), "Big-endian UTF-16: naïve"),
    ("Latin-1 text: crème brûlée".encode("latin-1"), "Latin-1 text: crème brûlée"),
    ("Damaged UTF-8: Zürich ".encode() + b"\xff" + " Gdańsk".encode(),
     "Damaged UTF-8: Zürich \ufffd Gdańsk"),
    (b"x" * 5000 + b" stray NUL\x00 past the start", "x" * 5000 + " stray NUL past the start"),
], ids=["utf16-bom", "utf16-le", "utf16-be", "latin1", "damaged-utf8", "late-nul"])
def test_undeclared_encodings_decode_to_readable_text(data, text):
    assert extract(data, "note.txt").blocks[0].text == text


def test_binary_html_is_refused_not_indexed_as_garbage():
    import random

    noise = random.Random(7).randbytes(4096)
    assert "binary" in str(_assert_fails_naming(noise, "page.html"))


@pytest.mark.parametrize(("data", "name"), [
    (b"[" * 100_000 + b"]" * 100_000, "deep.json"),
    (b"<div>" * 20_000 + b"deep" + b"</div>" * 20_000, "deep.html"),
])
def test_deep_nesting_fails_cleanly_naming_the_file(data, name):
    assert "nested too deeply" in str(_assert_fails_naming(data, name))
