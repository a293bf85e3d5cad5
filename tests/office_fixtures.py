"""Documents in the formats organisations keep, written by the tests with the libraries made
for them (no binary fixtures): slide decks, workbooks, OpenDocument, EPUB, mail, scans."""

from __future__ import annotations

import io
import mailbox
import tempfile
from email.message import EmailMessage
from pathlib import Path


def pptx_deck() -> bytes:
    """Three slides: bullets with speaker notes, a table, and a hidden slide."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    deck.core_properties.title = "Heron rollout plan"
    slide = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
    slide.shapes.title.text = "Rollout waves"
    body = slide.placeholders[1].text_frame
    body.text = "Wave one starts at Daventry"
    body.add_paragraph().text = "Wave two covers Rotterdam"
    slide.notes_slide.notes_text_frame.text = "Mention the 25 % wave cap."
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = "Spare parts"
    table = slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate([["Part", "Price"], ["PLV-CS-220-B", "186"], ["HR-7", "940"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    box = slide.shapes.add_textbox(Inches(1), Inches(5), Inches(6), Inches(1))
    box.text_frame.text = "Prices in euros."
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Draft ideas"
    slide.placeholders[1].text_frame.text = "Secret backlog item"
    slide._element.set("show", "0")
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_workbook() -> bytes:
    """A sheet of parts with a formula (its cached value stored), a second sheet, and a
    hidden sheet (written with XlsxWriter, which stores formula results)."""
    import xlsxwriter

    out = io.BytesIO()
    book = xlsxwriter.Workbook(out, {"in_memory": True})
    book.set_properties({"title": "Parts price list"})
    parts = book.add_worksheet("Parts")
    parts.write_row(0, 0, ["Part", "Unit price", "Quantity", "Total"])
    parts.write_row(1, 0, ["PLV-CS-220-B", 186, 2])
    parts.write_formula(1, 3, "=B2*C2", None, 372)
    parts.write_row(2, 0, ["HR-7 lidar", 940.0, 1])
    parts.write_formula(2, 3, "=B3*C3", None, 940)
    sites = book.add_worksheet("Sites")
    sites.write_row(0, 0, ["Site", "Robots"])
    sites.write_row(1, 0, ["Daventry", 40])
    secret = book.add_worksheet("Margins")
    secret.write_row(0, 0, ["Part", "Margin"])
    secret.write_row(1, 0, ["PLV-CS-220-B", "61 %"])
    secret.hide()
    book.close()
    return out.getvalue()


def ods_workbook() -> bytes:
    """A sheet of parts ending in a large empty repeated range, and a hidden sheet."""
    import odfdo

    document = odfdo.Document("spreadsheet")
    document.body.clear()
    table = odfdo.Table("Parts", width=2, height=3)
    for cell, value in {"A1": "Part", "B1": "Price", "A2": "PLV-CS-220-B", "B2": 186,
                        "A3": "HR-7 lidar", "B3": 940}.items():
        table.set_value(cell, value)
    empty = odfdo.Row(width=2)
    empty.set_attribute("table:number-rows-repeated", "1048000")
    table.append(empty)
    document.body.append(table)
    hidden = odfdo.Style("table", name="hidden-sheet")
    hidden.set_properties({"table:display": "false"}, area="table")
    document.insert_style(hidden, automatic=True)
    margins = odfdo.Table("Margins", width=2, height=2)
    for cell, value in {"A1": "Part", "B1": "Margin", "A2": "PLV-CS-220-B", "B2": "61 %"}.items():
        margins.set_value(cell, value)
    margins.style = "hidden-sheet"
    document.body.append(margins)
    document.get_part("meta").set_title("Parts on ODS")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def odt_document() -> bytes:
    """Headings, a paragraph, a list and a table."""
    import odfdo

    document = odfdo.Document("text")
    document.body.clear()
    document.body.append(odfdo.Header(1, "Site survey"))
    document.body.append(odfdo.Paragraph("The Daventry site has 40 robots."))
    document.body.append(odfdo.Header(2, "Findings"))
    document.body.append(odfdo.List(["Dock D-14 raises E-508", "Wi-Fi is weak in aisle 9"]))
    table = odfdo.Table("T", width=2, height=2)
    for cell, value in {"A1": "Dock", "B1": "Status", "A2": "D-14", "B2": "fixed"}.items():
        table.set_value(cell, value)
    document.body.append(table)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def epub_book() -> bytes:
    """Two chapters, the second without a heading of its own (its TOC title stands in)."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("halyard-handbook")
    book.set_title("Halyard field handbook")
    book.set_language("en")
    book.add_author("Mei Tanaka")
    one = epub.EpubHtml(title="Safety", file_name="one.xhtml", lang="en")
    one.content = "<h1>Safety</h1><p>Stop the fleet from Roost before entering aisles.</p>"
    two = epub.EpubHtml(title="Docking", file_name="two.xhtml", lang="en")
    two.content = ("<nav><a href='one.xhtml'>Back</a></nav>"
                   "<p>Docks need contact spring kit PLV-CS-220-B.</p>")
    for chapter in (one, two):
        book.add_item(chapter)
    book.toc = [epub.Link("one.xhtml", "Safety", "one"), epub.Link("two.xhtml", "Docking", "two")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", one, two]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "book.epub"
        epub.write_epub(str(path), book)
        return path.read_bytes()


def mail_message(sender: str, to: str, subject: str, date: str, body: str,
                 message_id: str, attachments: dict[str, bytes] | None = None,
                 cc: str | None = None) -> EmailMessage:
    """An RFC 5322 message with plain-text body and attachments."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    if cc:
        message["Cc"] = cc
    message["Subject"] = subject
    message["Date"] = date
    message["Message-ID"] = message_id
    message.set_content(body)
    for filename, data in (attachments or {}).items():
        maintype, subtype = ("text", "csv") if filename.endswith(".csv") else \
            ("application", "octet-stream")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return message


def outlook_msg(message: EmailMessage, transport_headers: bool = False) -> bytes:
    """The message as an Outlook ``.msg`` file, written by aspose-email-foss (docgraph reads
    them with python-oxmsg, an independent implementation of MS-OXMSG). With
    ``transport_headers`` it also keeps the RFC 5322 headers, as a received mail does."""
    from aspose.email_foss import msg

    mapi = msg.MapiMessage.from_email_message(message)
    if transport_headers:
        headers = "".join(f"{k}: {v}\r\n" for k, v in message.items()
                          if k.lower() not in ("content-type", "mime-version",
                                               "content-transfer-encoding"))
        mapi.set_property(msg.PropertyId.TRANSPORT_MESSAGE_HEADERS, headers)
    return bytes(mapi.to_bytes())


def mbox_bytes(messages: list[EmailMessage]) -> bytes:
    """The messages as one Unix mailbox."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "box.mbox"
        box = mailbox.mbox(str(path))
        for message in messages:
            box.add(message)
        box.flush()
        box.close()
        return path.read_bytes()


def scanned_page_png(lines: list[str]) -> bytes:
    """A white page image with ``lines`` of large black text (a scanned page)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=48)
    image = Image.new("RGB", (1700, 120 + 90 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((80, 60 + 90 * i), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def scanned_pdf(pages: list[list[str]]) -> bytes:
    """A PDF whose pages are only images of text (no text layer), via fpdf2."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    for lines in pages:
        pdf.add_page()
        pdf.image(io.BytesIO(scanned_page_png(lines)), x=20, y=20, w=555)
    return bytes(pdf.output())


def mixed_pdf(pages: list[str | list[str]]) -> bytes:
    """A PDF mixing pages with a text layer (a string: one line of text) and scanned pages
    (a list of lines drawn into an image, no text layer), in the given order."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.set_font("helvetica", size=12)
    for page in pages:
        pdf.add_page()
        if isinstance(page, str):
            pdf.cell(text=page)
        else:
            pdf.image(io.BytesIO(scanned_page_png(page)), x=20, y=20, w=555)
    return bytes(pdf.output())
