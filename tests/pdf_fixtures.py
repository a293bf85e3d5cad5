"""PDFs with structure, written by fpdf2 at test time: headings in larger bold type (with or
without an outline), a running header and footer with page numbers on every page, body text
that moves across pages, and document metadata."""

from __future__ import annotations

from typing import Any

#: (kind, text) of the manual; "page" starts a new page. Headings are h1-h3.
MANUAL: list[tuple[str, str]] = [
    ("h1", "Kestrel K2 Service Manual"),
    ("p", "This manual covers the Kestrel K2 picker. Keep it with the robot."),
    ("h2", "Safety"),
    ("p", "Error E-417 means the lidar is blocked. Clean the lidar window before a restart."),
    ("page", ""),
    ("h2", "Maintenance"),
    ("h3", "Battery"),
    ("p", "Replace the battery pack BAT-48 every 3,000 charging cycles."),
    ("page", ""),
    ("h3", "Firmware"),
    ("p", "The Kestrel K2 runs firmware 4.2.1. Upgrade it from the Roost console."),
    ("li", "Stop the robot at a charger."),
    ("li", "Start the upgrade and wait for the green light."),
]

SIZES = {"h1": 20.0, "h2": 15.0, "h3": 12.5}


def manual_pdf(*, outline: bool = True, title: str | None = "Kestrel K2 Manual",
               author: str | None = "Ada Lovelace", running: bool = True,
               blank_first_page: bool = False, plain_headings: bool = False,
               blocks: list[tuple[str, str]] | None = None,
               footer: str = "Kestrel K2 Service Manual - page {page} of {{nb}}") -> bytes:
    """The manual as a PDF: bold headings set larger than the 10 pt body, entered in the
    outline when ``outline``; a running header and footer when ``running`` (``footer``
    formatted with the page number); metadata title and author when given; an empty first
    page when ``blank_first_page`` (every later block moves one page down); headings set
    like the body text when ``plain_headings`` (then only the outline tells them apart)."""
    from fpdf import FPDF

    class Manual(FPDF):
        def header(self) -> None:
            if running and not (blank_first_page and self.page_no() == 1):
                self.set_font("helvetica", "", 8)
                self.cell(0, 6, "Halyard Robotics - Confidential", align="R")
                self.ln(10)

        def footer(self) -> None:
            if running and not (blank_first_page and self.page_no() == 1):
                self.set_y(-15)
                self.set_font("helvetica", "", 8)
                self.cell(0, 6, footer.format(page=self.page_no()), align="C")

    pdf: Any = Manual()
    pdf.set_auto_page_break(True, margin=20)
    if title:
        pdf.set_title(title)
    if author:
        pdf.set_author(author)
    pdf.add_page()
    if blank_first_page:
        pdf.add_page()
    for kind, text in blocks if blocks is not None else MANUAL:
        if kind == "page":
            pdf.add_page()
        elif kind in SIZES:
            if outline:
                pdf.start_section(text, level=int(kind[1]) - 1)
            if plain_headings:
                pdf.set_font("helvetica", "", 10)
                pdf.multi_cell(0, 5, text, new_x="LMARGIN", new_y="NEXT")
            else:
                pdf.set_font("helvetica", "B", SIZES[kind])
                pdf.multi_cell(0, SIZES[kind] * 0.5, text, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2)
        elif kind == "li":
            pdf.set_font("helvetica", "", 10)
            pdf.multi_cell(0, 5, f"- {text}", new_x="LMARGIN", new_y="NEXT")
        else:
            pdf.set_font("helvetica", "", 10)
            pdf.multi_cell(0, 5, text, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(3)
    return bytes(pdf.output())


def long_pdf(pages: int, *, outline: bool = True) -> bytes:
    """A ``pages``-page report: a chapter heading every fifth page, three paragraphs per
    page, running header and footer (for throughput measurements and edge cases)."""
    blocks: list[tuple[str, str]] = []
    for page in range(pages):
        if page:
            blocks.append(("page", ""))
        if page % 5 == 0:
            blocks.append(("h2", f"Chapter {page // 5 + 1}: Site report"))
        for n in range(3):
            blocks.append(("p", f"Paragraph {n + 1} of page {page + 1}. The Kestrel fleet at "
                                "site Rotterdam ran firmware 4.2.1 without incident; the "
                                "operators replaced two battery packs and cleaned the lidar "
                                "windows of every robot during the night shift."))
    return manual_pdf(outline=outline, blocks=blocks)
