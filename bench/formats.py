"""Extraction throughput per format, and the share of chunk text that is boilerplate.

Throughput: each format's generated document (a deck of 60 slides, a workbook of 20,000
rows, a mailbox of 300 messages, an ODT of 2,000 paragraphs, an EPUB of 30 chapters, a
3-page scan) is extracted ``--runs`` times; the median gives MB/s and pages (slides,
sheets' rows, messages, scanned pages) per second.

Boilerplate: ``--before SRC`` names the ``src`` folder of an older checkout; the sample
corpus's files that both can read are chunked by each (hashing token counts, 200 tokens)
and the chunk characters compared.

    python bench/formats.py [--runs 5] [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import io
import json
import mailbox
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import office_fixtures  # noqa: E402

from docgraph.ingest.extract import extract  # noqa: E402


def deck(slides: int) -> bytes:
    from pptx import Presentation

    presentation = Presentation()
    for n in range(slides):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = f"Slide {n}: rollout wave status"
        body = slide.placeholders[1].text_frame
        body.text = f"Wave {n} upgraded 21 robots at site {n % 7} without E-417 events."
        for i in range(4):
            body.add_paragraph().text = f"Check {i}: locd memory below {300 + i} MB after 24 h."
        slide.notes_slide.notes_text_frame.text = "Ask the shift lead for written sign-off."
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def workbook(rows: int) -> bytes:
    import xlsxwriter

    out = io.BytesIO()
    book = xlsxwriter.Workbook(out, {"in_memory": True})
    sheet = book.add_worksheet("Stock")
    sheet.write_row(0, 0, ["Part", "Description", "Depot", "On hand", "Price", "Value"])
    for r in range(1, rows + 1):
        sheet.write_row(r, 0, [f"PRT-{r:05d}", "Contact spring kit rev B", "Eindhoven", r % 40,
                               186])
        sheet.write_formula(r, 5, f"=D{r + 1}*E{r + 1}", None, (r % 40) * 186)
    book.close()
    return out.getvalue()


def mbox(messages: int) -> bytes:
    body = ("Hi Dev,\n\nAll twelve docks were checked on Monday; two needed new springs.\n"
            "The log is below.\n\nBest regards,\nGareth Pryce\nField Service Engineer\n\n"
            "On Wed, 26 Mar 2025 at 15:10, Dev wrote:\n> Could you check the docks?\n")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "box.mbox"
        box = mailbox.mbox(str(path))
        for n in range(messages):
            box.add(office_fixtures.mail_message(
                "Gareth Pryce <g@h.example>", "Dev Patel <d@b.example>", f"RE: Docks {n}",
                "Tue, 1 Apr 2025 09:30:00 +0100", body, f"<m{n}@h.example>"))
        box.close()
        return path.read_bytes()


def outlook(attachments: int) -> bytes:
    """One Outlook message with a quoted reply, a signature and CSV attachments."""
    body = ("Hi Dev,\n\nAll twelve docks were checked on Monday; two needed new springs.\n"
            "The logs are attached.\n\nBest regards,\nGareth Pryce\n\n"
            "On Wed, 26 Mar 2025 at 15:10, Dev wrote:\n> Could you check the docks?\n")
    logs = {f"dock-log-{n}.csv": ("Dock,Serial,Spring\n" + "".join(
        f"D-{d:02d},PLV2-{400 + d:04d},rev B\n" for d in range(40))).encode()
        for n in range(attachments)}
    return office_fixtures.outlook_msg(office_fixtures.mail_message(
        "Gareth Pryce <g@h.example>", "Dev Patel <d@b.example>", "RE: Docks",
        "Tue, 1 Apr 2025 09:30:00 +0100", body, "<m@h.example>", logs))


def odt(paragraphs: int) -> bytes:
    import odfdo

    document = odfdo.Document("text")
    document.body.clear()
    for n in range(paragraphs):
        if n % 20 == 0:
            document.body.append(odfdo.Header(1 + (n // 20) % 2, f"Section {n // 20}"))
        document.body.append(odfdo.Paragraph(
            f"Paragraph {n}: the Daventry site runs forty robots and twelve docks."))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def epub(chapters: int) -> bytes:
    from ebooklib import epub as lib

    book = lib.EpubBook()
    book.set_identifier("bench")
    book.set_title("Bench book")
    items = []
    for n in range(chapters):
        chapter = lib.EpubHtml(title=f"Chapter {n}", file_name=f"c{n}.xhtml")
        chapter.content = f"<h1>Chapter {n}</h1>" + "".join(
            f"<p>Paragraph {i} of chapter {n} about docking robots.</p>" for i in range(40))
        book.add_item(chapter)
        items.append(chapter)
    book.toc = items
    book.add_item(lib.EpubNcx())
    book.add_item(lib.EpubNav())
    book.spine = ["nav", *items]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "b.epub"
        lib.write_epub(str(path), book)
        return path.read_bytes()


def throughput(runs: int) -> list[dict[str, object]]:
    cases = [
        ("pptx", "deck.pptx", deck(60), 60, "slides"),
        ("xlsx", "book.xlsx", workbook(20_000), 20_000, "rows"),
        ("mbox", "box.mbox", mbox(300), 300, "messages"),
        ("msg (5 CSV attachments)", "mail.msg", outlook(5), 1, "messages"),
        ("odt", "text.odt", odt(2000), 2000, "paragraphs"),
        ("epub", "book.epub", epub(30), 30, "chapters"),
        ("scanned pdf (OCR)", "scan.pdf", office_fixtures.scanned_pdf(
            [[f"Page {n} of the dock audit names D-0{n}."] for n in range(3)]), 3, "pages"),
    ]
    results = []
    for label, name, data, units, unit in cases:
        times = []
        for _ in range(runs if unit != "pages" else max(1, runs // 2)):
            started = time.perf_counter()
            extract(data, name)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        results.append({"format": label, "bytes": len(data), "median_s": round(median, 4),
                        "MB_per_s": round(len(data) / median / 1e6, 2),
                        f"{unit}_per_s": round(units / median, 1)})
    return results


_CHUNK_CHARS = """
import json, sys
from pathlib import Path
from docgraph.errors import ExtractionError
from docgraph.ingest.extract import extract
from docgraph.ingest.chunk import chunk_document
counts = {}
for path in sorted(Path(sys.argv[1]).rglob("*")):
    if not path.is_file():
        continue
    try:
        document = extract(path.read_bytes(), path.name)
    except ExtractionError:
        continue
    chunks = chunk_document(document, lambda texts: [len(t.split()) for t in texts], 200)
    counts[str(path.relative_to(sys.argv[1]))] = sum(len(c.text) for c in chunks)
print(json.dumps(counts))
"""


def chunk_chars(src: Path) -> dict[str, int]:
    """Chunk characters per sample-corpus file as the code under ``src`` extracts them."""
    done = subprocess.run([sys.executable, "-c", _CHUNK_CHARS, str(REPO / "examples" / "corpus")],
                          env={"PYTHONPATH": str(src)}, capture_output=True, text=True,
                          check=True)
    counts: dict[str, int] = json.loads(done.stdout)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=Path, help="src folder of the code to compare with")
    args = parser.parse_args()
    for row in throughput(args.runs):
        print(json.dumps(row))
    if args.before:
        before, after = chunk_chars(args.before), chunk_chars(REPO / "src")
        common = sorted(set(before) & set(after))
        total_before = sum(before[p] for p in common)
        total_after = sum(after[p] for p in common)
        for path in common:
            if before[path] != after[path]:
                print(json.dumps({"file": path, "chars_before": before[path],
                                  "chars_after": after[path],
                                  "removed": round(1 - after[path] / before[path], 3)}))
        print(json.dumps({"files": len(common), "chars_before": total_before,
                          "chars_after": total_after,
                          "removed_share": round(1 - total_after / total_before, 4)}))


if __name__ == "__main__":
    main()
