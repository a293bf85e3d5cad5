"""Workbooks: ``.xlsx`` through openpyxl and ``.ods`` through odfdo, one section per sheet.

A sheet's first non-empty row is its header; every later row becomes one record
``header: value; ...`` (the CSV rule), so each row carries its column names. Formulas give
their cached values (openpyxl ``data_only``: the value the spreadsheet application last
computed). Hidden sheets are skipped and listed in the metadata.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterable, Sequence
from typing import Any

from docgraph.errors import ExtractionError
from docgraph.ingest.blocks import clean, row_text, title_from_name
from docgraph.ingest.limits import ExtractLimits, check_zip
from docgraph.model import Block, BlockKind, ExtractedDocument

XLSX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
ODS_MEDIA_TYPE = "application/vnd.oasis.opendocument.spreadsheet"
#: Most copies made of one repeated ODS row or cell that holds a value.
MAX_REPEAT = 1000


def cell_text(value: Any) -> str:
    """A cell value as text: whole floats without '.0', dates without a midnight time."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return clean(str(value))


def sheet_blocks(sheet: str, rows: Iterable[Sequence[Any]], name: str,
                 limits: ExtractLimits, chars: int) -> tuple[list[Block], int]:
    """A sheet as a heading and one record per row after the header row; returns the
    blocks and the running character count (checked against ``limits``)."""
    blocks = [Block(BlockKind.HEADING, sheet, 1)]
    header: list[str] | None = None
    for values in rows:
        cells = [cell_text(v) for v in values]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            continue
        if header is None:
            header = cells
            continue
        width = max(len(header), len(cells))
        names = header + [f"column {i + 1}" for i in range(len(header), width)]
        names = [h or f"column {i + 1}" for i, h in enumerate(names)]
        text = row_text(names, cells + [""] * (width - len(cells)))
        if text:
            blocks.append(Block(BlockKind.TABLE_ROW, text))
            chars += len(text)
            limits.check_text(name, chars)
    if header is not None and len(blocks) == 1:  # a sheet of one row: keep it as a record
        blocks.append(Block(BlockKind.TABLE_ROW, " | ".join(c for c in header if c)))
    return (blocks if len(blocks) > 1 else []), chars


def extract_xlsx(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """An Excel workbook (read-only, cached formula values)."""
    import openpyxl

    check_zip(data, name, limits)
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable XLSX ({exc})") from exc
    try:
        blocks: list[Block] = []
        hidden: list[str] = []
        chars = 0
        for worksheet in workbook.worksheets:
            if worksheet.sheet_state != "visible":
                hidden.append(worksheet.title)
                continue
            found, chars = sheet_blocks(clean(worksheet.title), worksheet.iter_rows(
                values_only=True), name, limits, chars)
            blocks.extend(found)
        title = clean(workbook.properties.title or "") or title_from_name(name)
    finally:
        workbook.close()
    return ExtractedDocument(title, tuple(blocks), XLSX_MEDIA_TYPE,
                             _hidden_metadata(hidden, len(workbook.worksheets)))


def _hidden_metadata(hidden: list[str], sheets: int) -> dict[str, str]:
    metadata = {"sheets": str(sheets)}
    if hidden:
        metadata["hidden_sheets_skipped"] = ", ".join(hidden)
    return metadata


def extract_ods(data: bytes, name: str, limits: ExtractLimits) -> ExtractedDocument:
    """An OpenDocument spreadsheet (the cached value of every cell, formulas included)."""
    import odfdo

    check_zip(data, name, limits)
    try:
        document = odfdo.Document(io.BytesIO(data))
        tables = document.body.get_tables()
    except Exception as exc:
        raise ExtractionError(f"{name}: not a readable ODS ({exc})") from exc
    hidden_styles = _hidden_table_styles(document)
    blocks: list[Block] = []
    hidden: list[str] = []
    chars = 0
    for table in tables:
        if table.style in hidden_styles:
            hidden.append(table.name or "")
            continue
        found, chars = sheet_blocks(clean(table.name or ""), _ods_rows(table), name, limits,
                                    chars)
        blocks.extend(found)
    title = clean(document.meta.get_title() or "") or title_from_name(name)
    return ExtractedDocument(title, tuple(blocks), ODS_MEDIA_TYPE,
                             _hidden_metadata(hidden, len(tables)))


def _hidden_table_styles(document: Any) -> set[str]:
    """Names of the table styles that hide a sheet (``table:display="false"``)."""
    hidden: set[str] = set()
    for style in document.get_styles("table"):
        properties = getattr(style, "get_properties", lambda: None)()
        if properties and properties.get("table:display") == "false":
            hidden.add(str(style.name))
    return hidden


def _ods_rows(table: Any) -> Iterable[list[Any]]:
    """The rows of an ODS table as stored. A repeated row or cell (``number-rows-repeated``
    / ``number-columns-repeated``: how a formatted but empty range is written, often a
    million times) is expanded only when it holds a value, and then at most
    :data:`MAX_REPEAT` times, so an empty range costs nothing."""
    for row in table.xpath("descendant::table:table-row"):
        values: list[Any] = []
        for cell in row.xpath("table:table-cell|table:covered-table-cell"):
            value = cell.value
            repeat = min(cell.repeated or 1, MAX_REPEAT) if value is not None else 1
            values.extend([value] * repeat)
        if any(v is not None for v in values):
            for _ in range(min(row.repeated or 1, MAX_REPEAT)):
                yield values
