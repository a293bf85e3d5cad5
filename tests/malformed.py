"""Generators of well-formed, malformed and hostile documents, made at test time (no binary
fixtures): minimal PDFs with chosen content streams, DOCX files and zip bombs."""

from __future__ import annotations

import io
import zipfile
import zlib

_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def pdf_text_ops(text: str) -> bytes:
    """A content stream that shows ``text`` (ASCII, no parentheses) on one line."""
    return b"BT /F1 12 Tf 72 700 Td (" + text.encode("ascii") + b") Tj ET\n"


def pdf(pages: list[bytes], compress: bool = True) -> bytes:
    """A PDF whose pages have the given content streams (Flate-compressed unless told)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for content in pages:
        page_number = len(objects) + 1
        kids.append(b"%d 0 R" % page_number)
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
                       b" /Resources << /Font << /F1 %d 0 R >> >> >>"
                       % (page_number + 1, page_number + 2))
        body = zlib.compress(content, 1) if compress else content
        flate = b" /Filter /FlateDecode" if compress else b""
        objects.append(b"<< /Length %d%s >>\nstream\n" % (len(body), flate) + body
                       + b"\nendstream")
        objects.append(_FONT)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objects) + 1, xref))
    return out.getvalue()


def text_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text``."""
    return pdf([pdf_text_ops(text)])


def encrypted_pdf() -> bytes:
    """A one-page PDF encrypted with a user password."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    writer.encrypt("secret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx(paragraphs: list[str]) -> bytes:
    """A DOCX with one paragraph per string."""
    import docx as python_docx

    document = python_docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_with_member(name: str, size: int, chunk: bytes = b"\0") -> bytes:
    """A valid DOCX plus (or with its ``name`` replaced by) a member of ``size`` bytes made of
    ``chunk`` repeated: a decompression bomb when ``size`` is large (it compresses ~1000:1).
    For ``word/document.xml`` the member is a document body of repeated paragraphs."""
    source = zipfile.ZipFile(io.BytesIO(docx(["seed paragraph"])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for info in source.infolist():
            if info.filename != name:
                archive.writestr(info, source.read(info))
        head, tail = b"", b""
        if name == "word/document.xml":
            head = (b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document '
                    b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
                    b"<w:body>")
            tail = b"</w:body></w:document>"
            chunk = b"<w:p><w:r><w:t>Kestrel lidar firmware paragraph.</w:t></w:r></w:p>"
        block = chunk * max(1, (1024 * 1024) // len(chunk))
        with archive.open(name, "w", force_zip64=True) as member:
            member.write(head)
            written = len(head) + len(tail)
            while written < size:
                piece = block[: size - written]
                member.write(piece)
                written += len(piece)
            member.write(tail)
    return out.getvalue()


def zip_with_members(count: int) -> bytes:
    """A zip archive of ``count`` empty members."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for i in range(count):
            archive.writestr(f"m{i}", b"")
    return out.getvalue()
