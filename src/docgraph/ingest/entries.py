"""Which listed files a folder build visits: one per document id.

Names that differ only in Unicode normalization (NFC and NFD) or in '\\' versus '/' share
one document id (:func:`docgraph.sources.urn.document_id`); a build must never write one id
twice, so it keeps one file of each such group and reports the others.
"""

from __future__ import annotations

from collections.abc import Mapping

from docgraph.model import DocumentRecord
from docgraph.sources.folder import FileEntry
from docgraph.sources.urn import document_id


def one_per_document_id(urn: str, entries: list[FileEntry],
                        existing: Mapping[str, DocumentRecord]
                        ) -> tuple[list[FileEntry], list[tuple[str, str]]]:
    """The entries with distinct document ids, and (path, reason) for each left out. Of a
    group sharing an id, the one already indexed under it is kept (so its document is
    updated, not replaced), else the first in path order."""
    indexed = {document.doc_id: path for path, document in existing.items()}
    groups: dict[str, list[FileEntry]] = {}
    for entry in entries:
        groups.setdefault(document_id(urn, entry.name_path), []).append(entry)
    dropped: list[tuple[str, str]] = []
    for doc_id, group in groups.items():
        if len(group) < 2:
            continue
        kept = next((e for e in group if indexed.get(doc_id) == e.relative_path), group[0])
        dropped += [(entry.relative_path, f"skipped: same document id as "
                     f"{kept.relative_path!a} (the names are equal once normalized)")
                    for entry in group if entry is not kept]
    if not dropped:
        return entries, []
    left_out = {path for path, _ in dropped}
    return [e for e in entries if e.relative_path not in left_out], dropped
