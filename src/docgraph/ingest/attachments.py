"""A mail's attachments are documents of their own, path ``<mail>/<attachment>``; where a
listed file has an attachment's path, the file wins it. The two decisions that follow: which
attachments a prepared mail leaves out, and which mails a build reads again (or which gone
files it deletes first) though unchanged."""

from __future__ import annotations

from dataclasses import replace

from docgraph.ingest.prepare import PreparedDocument
from docgraph.model import DocumentRecord


def drop_shadowed_attachments(prepared: PreparedDocument, path: str, listed: set[str]) -> None:
    """Leave out the attachments whose path ``<path>/<name>`` a listed file has (an object
    store can hold ``x.mbox`` and ``x.mbox/a.pdf`` both): the file is the document of that
    path, the attachment is named in the mail's ``attachments_skipped``."""
    shadowed = [a for a in prepared.attachments if f"{path}/{a.name}" in listed]
    if not shadowed:
        return
    prepared.attachments = [a for a in prepared.attachments if a not in shadowed]
    metadata = dict(prepared.document.metadata)
    metadata.pop("attachments", None)
    if prepared.attachments:
        metadata["attachments"] = ", ".join(a.name for a in prepared.attachments)
    notes = [f"{a.name} (a file of the same path exists)" for a in shadowed]
    metadata["attachments_skipped"] = "; ".join(
        [metadata["attachments_skipped"], *notes] if "attachments_skipped" in metadata
        else notes)
    prepared.document = replace(prepared.document, metadata=metadata)


def mails_to_read_again(files: dict[str, DocumentRecord], every: dict[str, DocumentRecord],
                         listed: set[str], unread: tuple[str, ...]
                         ) -> tuple[set[str], list[str]]:
    """Indexed files to read again although unchanged, and gone files to delete before
    the build writes. A mail is read again when one of its attachments now has the path of
    a listed file (the file wins it), or when a file that was indexed under its path is
    gone (an attachment it left out may come back, so that file's document is deleted
    first). Files below a folder the build could not list (``unread``) are left as
    they are."""
    again = {d.parent for path, d in every.items()
             if d.parent is not None and path in listed}
    first: list[str] = []
    for path in sorted(files):
        if path in listed or path.startswith(unread):
            continue
        parent, _, _ = path.rpartition("/")
        while parent:
            if parent in listed and parent in files:
                again.add(parent)
                first.append(path)
                break
            parent, _, _ = parent.rpartition("/")
    return {p for p in again if p is not None}, first

