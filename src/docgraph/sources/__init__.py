"""What to index: document folders addressed by URN, crawled through fsspec."""

from docgraph.sources.folder import FileEntry, FolderCrawler
from docgraph.sources.urn import normalize_urn, urn_scheme

__all__ = ["FileEntry", "FolderCrawler", "normalize_urn", "urn_scheme"]
