#!/usr/bin/env python3
"""Build the Office and mail documents of the docgraph sample corpus.

Writes, under ``examples/corpus/``:

- ``engineering/tern-5.3.1-rollout-rtm-1.pptx``: the slide deck of the Tern 5.3.1
  rollout at Nordhaven RTM-1 (four waves, go/no-go criteria, speaker notes, one hidden
  slide);
- ``support/spare-parts-stock-2025-04.xlsx``: the spare-parts stock workbook (stock
  values as formulas with their results stored, a hidden sheet of cost prices);
- ``support/brightwell-dock-audit.mbox``: a two-message mail export about the Daventry
  dock audit, the reply quoting the request, signed, with the audit log attached as CSV;
- ``support/field-service-visit-rtm-1-2025-04-08.pdf``: a signed field service visit
  report as a scanner makes it: one page that is only an image (no text layer), read by
  OCR (Pillow draws the page, fpdf2 wraps it in a PDF).

Usage (from the repository root)::

    pip install python-pptx XlsxWriter Pillow fpdf2
    python examples/make_office_samples.py

The output is deterministic: fixed document dates, fixed MIME boundaries, normalised ZIP
entry timestamps and a fixed PDF creation date, so re-running the script with the same
library versions produces byte-identical files.
"""

from __future__ import annotations

import io
import sys
import time
import zipfile
from datetime import datetime
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path

try:
    import xlsxwriter
    from pptx import Presentation
    from pptx.util import Inches, Pt
except ImportError as exc:  # pragma: no cover - guidance for users
    sys.exit(f"make_office_samples.py needs python-pptx and XlsxWriter ({exc}); "
             "run: pip install python-pptx XlsxWriter")

CORPUS = Path(__file__).resolve().parent / "corpus"
ZIP_DATE = (2025, 1, 1, 0, 0, 0)
DECK_DATE = datetime(2025, 4, 3, 9, 0)


def normalise_zip(data: bytes) -> bytes:
    """Rewrite a ZIP container with fixed timestamps and attributes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, \
            zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=ZIP_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.create_system = 3
            entry.external_attr = 0o644 << 16
            zout.writestr(entry, zin.read(info.filename))
    return out.getvalue()


# -- slide deck ---------------------------------------------------------------------------

WAVES = [
    ["Wave", "Date", "Start", "Robots", "Zone"],
    ["1", "Tuesday 8 April 2025", "22:00", "T3-001 to T3-021", "Ambient picking A"],
    ["2", "Wednesday 9 April 2025", "22:00", "T3-022 to T3-042", "Ambient picking B"],
    ["3", "Thursday 10 April 2025", "22:00", "T3-043 to T3-063", "Chilled zone"],
    ["4", "Friday 11 April 2025", "21:00", "T3-064 to T3-084", "Outbound docks"],
]


def build_deck() -> bytes:
    deck = Presentation()
    props = deck.core_properties
    props.title = "Tern 5.3.1 rollout at Nordhaven RTM-1"
    props.author = "Lukas Becker"
    props.created = props.modified = DECK_DATE
    props.last_modified_by = "Lukas Becker"
    props.revision = 1

    slide = deck.slides.add_slide(deck.slide_layouts[0])
    slide.shapes.title.text = "Tern 5.3.1 rollout at Nordhaven RTM-1"
    slide.placeholders[1].text = ("Go-live plan for the week of 7 April 2025 - Lukas Becker, "
                                  "Field Service, Halyard Robotics")

    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Why we upgrade in waves"
    body = slide.placeholders[1].text_frame
    body.text = "Roost 3.8.2 lets a site upgrade at most 25 % of its fleet in one wave"
    for line in ("RTM-1 runs 84 Tern T3 robots, so the rollout is four waves of 21 robots",
                 "Tern 5.3.1 fixes the locd map-tile cache leak (ENG-2291) behind INC-2025-007",
                 "It also closes CVE-2025-29174 on the diagnostic service, TCP 8443"):
        body.add_paragraph().text = line
    slide.notes_slide.notes_text_frame.text = (
        "Joost van Dijk asked for the wave order in writing; send him this deck after the "
        "call.")

    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Wave schedule"
    shape = slide.shapes.add_table(len(WAVES), len(WAVES[0]), Inches(0.4), Inches(1.6),
                                   Inches(9.2), Inches(3.0))
    for r, row in enumerate(WAVES):
        for c, value in enumerate(row):
            cell = shape.table.cell(r, c)
            cell.text = value
            cell.text_frame.paragraphs[0].font.size = Pt(12)

    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Go / no-go criteria before each wave"
    body = slide.placeholders[1].text_frame
    body.text = "locd resident memory below 300 MB after 24 hours on the previous wave"
    for line in ("No E-417 events on robots already upgraded",
                 "Written sign-off from the Nordhaven shift lead before the wave starts"):
        body.add_paragraph().text = line
    slide.notes_slide.notes_text_frame.text = (
        "Rollback: reinstall Tern 5.2.4 from Roost, about 6 minutes per robot.")

    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Internal: commercial notes"
    slide.placeholders[1].text = "The on-site days are part of the goodwill offer."
    slide._element.set("show", "0")  # hidden slide: not part of the presentation

    out = io.BytesIO()
    deck.save(out)
    return normalise_zip(out.getvalue())


# -- workbook -----------------------------------------------------------------------------

STOCK = [
    # part, description, depot, on hand, reorder level, unit price EUR
    ("PLV-CS-220-B", "Contact spring kit rev B (40 N)", "Milton Keynes", 14, 10, 186),
    ("PLV-CS-220-B", "Contact spring kit rev B (40 N)", "Eindhoven", 22, 10, 186),
    ("PLV-CNT-PAD", "Charging contact pad pair", "Milton Keynes", 31, 20, 96),
    ("TRN-LDR-270", "Safety LiDAR scanner 270 degree, complete", "Milton Keynes", 3, 2, 3120),
    ("TRN-LDR-270", "Safety LiDAR scanner 270 degree, complete", "Eindhoven", 5, 2, 3120),
    ("TRN-NAV-C", "Navigation computer rev C", "Eindhoven", 7, 4, 2760),
    ("TRN-BAT-48-40", "Battery pack 48 V 40 Ah LiFePO4", "Milton Keynes", 9, 6, 3950),
    ("HRN-ENC-MST", "Mast height encoder", "Eindhoven", 4, 3, 610),
]
DEPOTS = [
    ("Milton Keynes", "Halyard UK spares depot, Milton Keynes", "Sam Okafor", "UK and Ireland"),
    ("Eindhoven", "Halyard central warehouse, Eindhoven", "Femke Jansen", "EU"),
]


def build_workbook() -> bytes:
    out = io.BytesIO()
    book = xlsxwriter.Workbook(out, {"in_memory": True})
    book.set_properties({"title": "Spare parts stock, April 2025", "author": "Sam Okafor",
                         "created": DECK_DATE})
    stock = book.add_worksheet("Stock")
    stock.write_row(0, 0, ["Part number", "Description", "Depot", "On hand", "Reorder level",
                           "Unit price EUR", "Stock value EUR"])
    for i, (part, description, depot, on_hand, reorder, price) in enumerate(STOCK, start=1):
        stock.write_row(i, 0, [part, description, depot, on_hand, reorder, price])
        stock.write_formula(i, 6, f"=D{i + 1}*F{i + 1}", None, on_hand * price)
    depots = book.add_worksheet("Depots")
    depots.write_row(0, 0, ["Depot", "Address", "Stock keeper", "Ships to"])
    for i, row in enumerate(DEPOTS, start=1):
        depots.write_row(i, 0, list(row))
    costs = book.add_worksheet("Cost prices")
    costs.write_row(0, 0, ["Part number", "Cost price EUR"])
    costs.write_row(1, 0, ["PLV-CS-220-B", 71])
    costs.hide()
    book.close()
    return normalise_zip(out.getvalue())


# -- mail export --------------------------------------------------------------------------

AUDIT_LOG = """\
dock,serial,spring_revision,action,peak_contact_temp_c,result
D-01,PLV2-0371,B,none,46,pass
D-02,PLV2-0377,B,none,48,pass
D-03,PLV2-0401,A,fitted PLV-CS-220-B,71,fixed
D-04,PLV2-0366,B,none,45,pass
D-05,PLV2-0412,B,none,49,pass
D-06,PLV2-0359,B,none,44,pass
D-07,PLV2-0392,B,none,47,pass
D-08,PLV2-0385,B,none,50,pass
D-09,PLV2-0448,B,none,46,pass
D-10,PLV2-0361,B,none,45,pass
D-11,PLV2-0433,A,fitted PLV-CS-220-B,69,fixed
D-14,PLV2-0419,B,fitted 28 March (SUP-4502),48,pass
"""

REQUEST = """\
Hi Gareth,

After D-14 I would rather not wait for the next one. Could you check the contact springs on
all twelve docks at Daventry while you are on site on Monday?

Thanks,
Dev Patel
Shift Engineer, Brightwell Daventry
"""

REPLY = """\
Hi Dev,

I checked all twelve Plover P2 docks at Daventry on Monday 31 March. Two of them still had the
rev A springs that the retrofit should have replaced: D-03 and D-11. Both ran above 65 C at the
contacts under load, so I fitted contact spring kit PLV-CS-220-B on both and they are back in
service. The other ten docks are fine. The full audit log with serials and peak contact
temperatures is attached.

I have also asked Niamh to add the missed serials to INC-2025-004 so the retrofit list is
corrected.

Best regards,
Gareth Pryce
Field Service Engineer, Halyard Robotics UK
+44 1908 555 0177

On Wed, 26 Mar 2025 at 15:10, Dev Patel <dev.patel@brightwell.example> wrote:
> Hi Gareth,
>
> After D-14 I would rather not wait for the next one. Could you check the contact springs on
> all twelve docks at Daventry while you are on site on Monday?
"""


def _message(sender: str, to: str, subject: str, date: str, message_id: str,
             body: str) -> EmailMessage:
    message = EmailMessage(policy=default_policy)
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Date"] = date
    message["Message-ID"] = message_id
    message.set_content(body)
    return message


def build_mbox() -> bytes:
    request = _message("Dev Patel <dev.patel@brightwell.example>",
                       "Gareth Pryce <gareth.pryce@halyard.example>",
                       "Contact springs on the other Daventry docks",
                       "Wed, 26 Mar 2025 15:10:00 +0000", "<dock-audit-1@brightwell.example>",
                       REQUEST)
    reply = _message("Gareth Pryce <gareth.pryce@halyard.example>",
                     "Dev Patel <dev.patel@brightwell.example>",
                     "RE: Contact springs on the other Daventry docks",
                     "Tue, 1 Apr 2025 09:30:00 +0100", "<dock-audit-2@halyard.example>",
                     REPLY)
    reply["In-Reply-To"] = "<dock-audit-1@brightwell.example>"
    reply.add_attachment(AUDIT_LOG.encode(), maintype="text", subtype="csv",
                         filename="daventry-dock-audit-2025-03-31.csv")
    reply.set_boundary("halyard-dock-audit-2025")
    parts = []
    for message, sender, when in (
            (request, "dev.patel@brightwell.example", (2025, 3, 26, 15, 10, 0, 2, 85, 0)),
            (reply, "gareth.pryce@halyard.example", (2025, 4, 1, 8, 30, 0, 1, 91, 0))):
        stamp = time.asctime(time.struct_time(when))
        lines = bytes(message).replace(b"\r\n", b"\n").split(b"\n")
        escaped = b"\n".join(b">" + ln if ln.startswith(b"From ") else ln for ln in lines)
        parts.append(f"From {sender} {stamp}\n".encode() + escaped.rstrip(b"\n") + b"\n\n")
    return b"".join(parts)


SCAN_LINES = [
    "HALYARD ROBOTICS - FIELD SERVICE VISIT REPORT",
    "",
    "Report number: FSV-2025-0419",
    "Site: Nordhaven RTM-1, Rotterdam",
    "Visit date: Tuesday 8 April 2025",
    "Engineer: Sanne Kuipers, Halyard Robotics Benelux",
    "",
    "Work done:",
    "Replaced the safety LiDAR scanner TRN-LDR-270 on",
    "robot T3-051 after it collided with a pallet in",
    "aisle 14 of the chilled zone on 7 April.",
    "The damaged scanner, serial LDR-88213, goes back",
    "to the Tilburg depot for repair.",
    "Robot T3-051 passed the stop-distance test and was",
    "back in service at 16:40.",
    "",
    "Customer signature: Joost van Dijk",
    "Site Operations Manager, Nordhaven",
]


def build_scan() -> bytes:
    """A one-page PDF that holds only a picture of the page (no text layer)."""
    try:
        from fpdf import FPDF
        from PIL import Image, ImageDraw, ImageFont
    except ImportError as exc:  # pragma: no cover - guidance for users
        sys.exit(f"make_office_samples.py needs Pillow and fpdf2 for the scan ({exc}); "
                 "run: pip install Pillow fpdf2")
    font = ImageFont.load_default(size=44)
    page = Image.new("L", (1654, 2339), 255)  # A4 at 200 dpi, greyscale like a scanner
    draw = ImageDraw.Draw(page)
    for i, line in enumerate(SCAN_LINES):
        draw.text((150, 180 + 78 * i), line, fill=20, font=font)
    draw.line((150, 180 + 78 * len(SCAN_LINES) + 40, 900, 180 + 78 * len(SCAN_LINES) + 40),
              fill=60, width=3)  # the signature line
    image = io.BytesIO()
    page.save(image, format="PNG", optimize=True)
    pdf = FPDF(unit="pt", format="A4")
    pdf.set_creation_date(datetime(2025, 4, 8, 17, 5))
    pdf.set_producer("Halyard scan station")
    pdf.add_page()
    pdf.image(io.BytesIO(image.getvalue()), x=0, y=0, w=pdf.w, h=pdf.h)
    return bytes(pdf.output())


def main() -> None:
    outputs = {
        "engineering/tern-5.3.1-rollout-rtm-1.pptx": build_deck(),
        "support/spare-parts-stock-2025-04.xlsx": build_workbook(),
        "support/brightwell-dock-audit.mbox": build_mbox(),
        "support/field-service-visit-rtm-1-2025-04-08.pdf": build_scan(),
    }
    for path, data in outputs.items():
        target = CORPUS / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"wrote {target.relative_to(CORPUS.parent)} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
