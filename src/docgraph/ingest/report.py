"""What a build reports: :class:`IngestProgress` (running counts for a progress callback)
and :class:`IngestReport` (what one build of one source did, with timings by phase)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from docgraph.model import SourceRecord

ProgressCallback = Callable[["IngestProgress"], None]


@dataclass
class IngestProgress:
    """Running counts, passed to the progress callback after every document."""

    total_files: int = 0
    done_files: int = 0
    chunks_written: int = 0
    current: str = ""


@dataclass
class IngestReport:
    """What one build of one folder did, with timings split by phase (seconds)."""

    source: SourceRecord
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    #: Documents whose permission set changed at the source and was stored without
    #: reading or embedding them again (:mod:`docgraph.ingest.access`).
    access_changed: int = 0
    removed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # listed, gone when read: deleted
    # The chunks the written documents hold now (== what the index holds for them), split
    # into those whose vectors this build computed and those it reused from before it:
    # chunks_embedded + chunks_reused == chunks_written. A document this build writes twice
    # (the repeated-lines pass prepares again documents written earlier in the build,
    # always on a first build) counts once, with its final chunks; its first write's vectors
    # count as embedded, not as reused. (These used to be summed over every write, so a
    # first build reported more chunks written than the index held, and "reused" vectors it
    # had embedded itself minutes before.)
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    #: Passages sent to the embedding model, the repeated-lines pass's included (the work
    #: done; at least ``chunks_embedded``).
    passages_embedded: int = 0
    #: Chunks whose vectors this build stored after writing them pending (its own and any
    #: an interrupted build left: :mod:`docgraph.ingest.embed_behind`).
    pending_filled: int = 0
    bodies_read: int = 0
    workers: int = 1  # processes that prepared documents (1 = inline)
    wall_seconds: float = 0.0  # the whole build, start to end
    failed_phases: dict[str, str] = field(default_factory=dict)  # path -> phase it failed in
    # Files of the folder matching no loader.include pattern, by type ("*.rst": 8).
    not_included: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("list", "read", "extract", "chunk", "entities", "embed", "store"), 0.0
        )
    )

    # doc id -> (chunks, embedded by this build, hashes reused from before this build) of
    # the document's latest write in this build.
    _counted: dict[str, tuple[int, int, frozenset[str]]] = field(default_factory=dict,
                                                                  repr=False)

    def count_write(self, doc_id: str, hashes: list[str], found: set[str]) -> None:
        """Count one document's write: ``hashes`` of its chunks, ``found`` those whose
        vectors were reused from the index (of its earlier write in this build, or from
        before the build). A second write of a document replaces its first's counts."""
        prior = self._counted.get(doc_id)
        before = frozenset(found) if prior is None else frozenset(found) & prior[2]
        reused = sum(1 for h in hashes if h in before)
        if prior is not None:
            self.chunks_written -= prior[0]
            self.chunks_embedded -= prior[1]
            self.chunks_reused -= prior[0] - prior[1]
        self._counted[doc_id] = (len(hashes), len(hashes) - reused,
                                 before if before else frozenset())
        self.chunks_written += len(hashes)
        self.chunks_embedded += len(hashes) - reused
        self.chunks_reused += reused

    @property
    def total_seconds(self) -> float:
        """Time of all phases (with worker processes, their busy time is summed in)."""
        return sum(self.seconds.values())

    def not_included_summary(self, top: int = 3) -> str | None:
        """How many files were not indexed because no ``loader.include`` pattern matches
        them, with the ``top`` most common types: ``12 files not indexed: not in
        loader.include (*.rst: 8, *.adoc: 3, no extension: 1)``; None when there were
        none."""
        total = sum(self.not_included.values())
        if not total:
            return None
        ranked = sorted(self.not_included.items(), key=lambda item: (-item[1], item[0]))
        shown = [f"{kind}: {count}" for kind, count in ranked[:top]]
        if len(ranked) > top:
            others = sum(count for _, count in ranked[top:])
            shown.append(f"others: {others}")
        noun = "file" if total == 1 else "files"
        return f"{total} {noun} not indexed: not in loader.include ({', '.join(shown)})"
