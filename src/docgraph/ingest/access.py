"""Who may read each document of one folder build, and the permission changes it stores.

A document's permission set (:data:`~docgraph.model.Access`) comes from the most specific
source that speaks of it: its own front matter (``access:``, kept by
:func:`~docgraph.ingest.front_matter.split_front_matter`), else the folder's sidecars
(:mod:`docgraph.sources.access_rules`), else none (everyone the namespace is granted to).

A build decides it for every listed file, changed or not: a file whose content did not change
but whose permission did (a sidecar edited) gets its new set stored without being read or
re-embedded (:meth:`StoreCatalog.set_document_access`), so a revocation takes effect at the
next refresh. A document whose permission source cannot be read is not indexed, and one
indexed before is withheld from everyone (its set becomes empty) until the source can be
read again: it fails closed and is reported with the reason, never shown to more people
than it may be.
"""

from __future__ import annotations

import logging

from docgraph.errors import SourceError
from docgraph.ingest.front_matter import ACCESS_ERROR_KEY, ACCESS_KEY, front_matter_access
from docgraph.model import Access, DocumentRecord
from docgraph.sources.access_rules import (
    MAX_SIDECAR_BYTES,
    AccessRules,
    AccessUnreadable,
    Sidecar,
    parse_sidecar,
)
from docgraph.sources.folder import FolderCrawler

log = logging.getLogger(__name__)

#: The permission set of a document withheld because its permission source cannot be read.
NOBODY: frozenset[str] = frozenset()


class BuildAccess:
    """The permission decisions of one folder build (see the module docstring)."""

    def __init__(self, rules: AccessRules) -> None:
        self.rules = rules
        #: Documents (row id -> set) whose stored set this build changes without a write.
        self.changes: dict[int, Access] = {}

    @classmethod
    def of_folder(cls, crawler: FolderCrawler) -> BuildAccess:
        """Read and parse every sidecar the crawler's listing met (after ``list_files``);
        one that cannot be read counts as broken (its files fail closed)."""
        sidecars: list[Sidecar] = []
        for entry in crawler.sidecars:
            folder = entry.relative_path.rpartition("/")[0]
            try:
                data = crawler.read(entry, MAX_SIDECAR_BYTES)
            except SourceError as exc:
                sidecars.append(Sidecar(folder, error=f"cannot be read ({exc})"))
                continue
            if len(data) > MAX_SIDECAR_BYTES:
                sidecars.append(Sidecar(folder, error=f"over {MAX_SIDECAR_BYTES} bytes"))
                continue
            sidecars.append(parse_sidecar(folder, data))
        return cls(AccessRules(sidecars))

    def of_file(self, path: str) -> Access:
        """The set the folder's sidecars give ``path``; raises :class:`AccessUnreadable`."""
        return self.rules.access_for(path)

    def of_document(self, path: str, metadata: dict[str, str] | None) -> Access:
        """The set of a prepared document at ``path``: its front matter's, else the
        sidecars'. Raises :class:`AccessUnreadable` (its front matter names something
        other than principals, or a sidecar above it is broken)."""
        folder_access = self.of_file(path)
        if metadata and ACCESS_ERROR_KEY in metadata:
            raise AccessUnreadable(f"{path}: {metadata[ACCESS_ERROR_KEY]}")
        if metadata and ACCESS_KEY in metadata:
            return front_matter_access(metadata)
        return folder_access

    def unchanged(self, document: DocumentRecord, path: str) -> None:
        """A file not read again: store its new set if the sidecars changed it (a set its
        own front matter gives is the file's, unchanged with it)."""
        if ACCESS_KEY in document.metadata:
            return
        try:
            wanted = self.of_file(path)
        except AccessUnreadable:
            wanted = NOBODY  # the caller reports it; the old set must not stand
        if wanted != document.access:
            self.changes[document.id] = wanted

    def withhold(self, document: DocumentRecord | None) -> None:
        """A document whose permission source cannot be read: an indexed one is hidden from
        everyone until it can be read again."""
        if document is not None and document.access != NOBODY:
            self.changes[document.id] = NOBODY
