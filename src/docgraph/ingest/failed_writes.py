"""A build survives a document the store refuses to write.

The build writes a batch of documents in one transaction
(:meth:`~docgraph.store.base.Catalog.write_documents`): if one document's write fails, the
documents before it commit, the failing one keeps its old version, those after it are not
written, and the error propagates. Before, that error ended the build: the rest of the
batch was lost, files not yet visited were not read, and the end of the build (deleting
the documents of files gone, storing permission changes, clearing old failures, marking the
source indexed) never ran.

Now :func:`write_batch` looks at the error. When it is a value the store refused
(:func:`docgraph.store.refusals.refused_write`: a constraint, a key too long for an index,
a character the database cannot hold) the batch's documents are written again one at a
time (rewriting one already committed stores the same version again), so each refused
document is found and becomes its file's failure, with the store's message; the others
commit and the build goes on. Any other error (a full disk, a lost connection, a read-only
index, an interrupt) ends the build as it did, and so does a batch whose every document
is refused for one same reason (the store's fault, not a document's).

:func:`remember_failure` records a file's failure; a failure the store refuses to record
(its path too long for PostgreSQL's key, say) stays in the build's report and the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from docgraph.model import Access, SourceRecord
from docgraph.store.base import Catalog, DocumentWrite
from docgraph.store.refusals import refusal_reason, refused_write

log = logging.getLogger(__name__)


def write_batch(catalog: Catalog, writes: Sequence[DocumentWrite]) -> list[str | None]:
    """Write ``writes`` (each a file's document with its attachments); for each, None when
    it is written, else why the store refused it (one line naming the file's path).
    Raises what is not one document's fault (see the module)."""
    try:
        catalog.write_documents(writes)  # one transaction, each document atomic
        return [None] * len(writes)
    except Exception as exc:
        if not refused_write(exc):
            raise
        batch_error = exc
        log.info("a batch of %d documents was refused (%s); writing them one at a time",
                 len(writes), refusal_reason(exc))
    outcome: list[str | None] = []
    reasons: set[str] = set()
    for write in writes:
        try:
            catalog.write_documents([write])
        except Exception as exc:
            if not refused_write(exc):
                raise
            reasons.add(refusal_reason(exc))
            outcome.append(f"{write.path}: not stored, the store refused it "
                           f"({refusal_reason(exc)})")
        else:
            outcome.append(None)
    if len(writes) > 1 and None not in outcome and len(reasons) == 1:
        # Every document refused for one same reason: the store's fault (a constraint on
        # the batch's own statements, a broken trigger), not one document's; reported as
        # one failure per file it would hide a broken build as a partial one.
        raise batch_error
    return outcome


def remember_failure(catalog: Catalog, source: SourceRecord, path: str, reason: str,
                     access: Access) -> None:
    """Record that ``path`` could not be indexed, why, and who may be told so (``access``:
    the file's permission set; ``docgraph status`` and ``index_status`` list the failure only
    to readers it lets in); when the store refuses that record itself (a value it cannot
    hold), log it instead: the build goes on and reports the failure, which ``docgraph
    status`` then does not list."""
    try:
        catalog.record_failure(source, path, reason, access)
    except Exception as exc:
        if not refused_write(exc):
            raise
        log.warning("the failure of %s/%s could not be recorded (%s); it is in the build's "
                    "report only", source.urn, path[:200], refusal_reason(exc))


def clear_stale_failures(catalog: Catalog, source: SourceRecord,
                         failed: Sequence[tuple[str, str]], unknown: tuple[str, ...]) -> None:
    """Forget the failures of ``source`` that this build did not record again (``failed``:
    its (path, reason) list): their files now index, are unchanged since they indexed, or
    are gone. (Every file that still fails is recorded again by each build; files below a
    folder this build could not read, paths starting with one of ``unknown``, keep theirs.)"""
    failed_now = {path for path, _ in failed}
    for record in catalog.failures():
        if (record.namespace == source.namespace and record.source_urn == source.urn
                and record.path not in failed_now and not record.path.startswith(unknown)):
            catalog.clear_failure(source, record.path)
