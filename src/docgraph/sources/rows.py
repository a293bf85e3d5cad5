"""Row documents: one document per row of a ``natural_language`` column (no SQL here).

A row document is named ``schema.table.column/<pk>``; that name is both its document id and
its path, and it is stable for as long as the row's primary key is. Its origin fields
(:class:`RowOrigin`) let retrieval re-check the row under the caller's rights.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from docgraph.model import RowOrigin


def row_doc_prefix(schema: str, table: str, column: str) -> str:
    """``schema.table.column``: the shared prefix of a column's row documents."""
    return f"{schema}.{table}.{column}"


def row_doc_id(schema: str, table: str, column: str, pk_value: object) -> str:
    """The document id (and path) of one row: ``schema.table.column/<pk>``."""
    return f"{row_doc_prefix(schema, table, column)}/{pk_value}"


def derived_source_urn(source: str, schema: str, table: str, column: str) -> str:
    """The catalog URN of a tagged column: ``sql://<source>/<schema>.<table>.<column>``.

    It is a read-only view derived from the tag registry, never registered by hand."""
    return f"sql://{source}/{row_doc_prefix(schema, table, column)}"


@dataclass(frozen=True, slots=True)
class RowDocument:
    """The current text of one row of a tagged column, with where it came from."""

    doc_id: str
    text: str
    origin: RowOrigin

    @property
    def content_hash(self) -> str:
        """sha256 of the text: the only change signal a row has."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()
