"""What to index: document folders addressed by URN (crawled through fsspec) and
table-derived sources (column tags on SQL databases, read through SQLAlchemy).

The registry (:mod:`docgraph.sources.registry`) and the SQL reader
(:mod:`docgraph.sources.tables`) are imported from their modules.
"""

from docgraph.sources.changes import ChangeToken, change_token
from docgraph.sources.credentials import Credentials, credential_key
from docgraph.sources.folder import FileEntry, FolderCrawler
from docgraph.sources.rows import RowDocument, derived_source_urn, row_doc_id
from docgraph.sources.urn import normalize_urn

__all__ = [
    "ChangeToken",
    "Credentials",
    "FileEntry",
    "FolderCrawler",
    "RowDocument",
    "change_token",
    "credential_key",
    "derived_source_urn",
    "normalize_urn",
    "row_doc_id",
]
