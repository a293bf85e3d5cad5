"""How a build went, phase by phase: the outcomes the refresher records for each source
(:class:`~docgraph.lifecycle.history.PhaseOutcome`) from an ingest report or from the
exception that stopped a source or the graph build."""

from __future__ import annotations

import traceback

from docgraph.errors import DocgraphError
from docgraph.ingest.pipeline import IngestReport
from docgraph.lifecycle.history import PHASES
from docgraph.model import Outcome, PhaseOutcome

#: The per-source phases, ``crawl`` .. ``store`` (the graph phases are per namespace).
INGEST_PHASES = PHASES[:6]
#: Functions whose frames in a traceback place a graph-build error in ``communities``.
COMMUNITY_FRAMES = frozenset({"detect_communities", "_community_rows", "_write_report",
                              "_embed_reports", "extractive_report", "llm_report"})


def describe_error(exc: BaseException) -> str:
    """The message of a deliberate docgraph error; ``Type: message`` for anything else."""
    text = " ".join(str(exc).split())
    if isinstance(exc, DocgraphError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def phases_after_failure(source: str, failed: str, message: str,
                          done: dict[str, float]) -> list[PhaseOutcome]:
    """``ok`` for the phases before ``failed``, ``error`` for it, ``skipped`` after it."""
    out: list[PhaseOutcome] = []
    reached = False
    for phase in INGEST_PHASES:
        if phase == failed:
            out.append(PhaseOutcome(source, phase, "error", message, 0, done.get(phase, 0.0)))
            reached = True
        elif reached:
            out.append(PhaseOutcome(source, phase, "skipped", f"{failed} failed", 0, 0.0))
        else:
            out.append(PhaseOutcome(source, phase, "ok", "", 0, done.get(phase, 0.0)))
    return out


def phases_of_report(source: str, report: IngestReport) -> list[PhaseOutcome]:
    """Per-phase outcomes of a source build that ran to the end."""
    sec = report.seconds
    fetch_failed = [(p, r) for p, r in report.failed if report.failed_phases.get(p) == "crawl"]
    store_failed = [(p, r) for p, r in report.failed if report.failed_phases.get(p) == "store"]
    other_failed = [(p, r) for p, r in report.failed
                    if report.failed_phases.get(p) not in ("crawl", "store")]
    changed = len(report.added) + len(report.updated)
    listed = changed + report.unchanged + len(report.failed)
    crawl_message = f"{listed} listed, {report.bodies_read} fetched"
    crawl: Outcome = "ok"
    if fetch_failed:
        crawl = "error"
        reason = fetch_failed[0][1]
        crawl_message += (f"; {len(fetch_failed)} could not be fetched (kept as indexed before),"
                          f" first: {reason}")
    extract: Outcome = "partial" if other_failed else "ok"
    extract_message = f"{changed} extracted"
    if other_failed:
        extract_message += (f"; {len(other_failed)} skipped (kept as indexed before), first: "
                            f"{other_failed[0][1]}")
    store: Outcome = "partial" if store_failed else "ok"
    store_message = (f"{len(report.added)} added, {len(report.updated)} updated, "
                     f"{len(report.removed)} removed, {report.unchanged} unchanged")
    if store_failed:
        store_message += (f"; {len(store_failed)} refused by the store (kept as indexed "
                          f"before), first: {store_failed[0][1]}")
    return [
        PhaseOutcome(source, "crawl", crawl, crawl_message, report.bodies_read,
                     sec.get("list", 0.0) + sec.get("read", 0.0)),
        PhaseOutcome(source, "extract", extract, extract_message, changed, sec.get("extract", 0.0)),
        PhaseOutcome(source, "chunk", "ok", f"{report.chunks_written} chunks",
                     report.chunks_written, sec.get("chunk", 0.0)),
        PhaseOutcome(source, "embed", "ok",
                     f"{report.chunks_embedded} embedded, {report.chunks_reused} reused",
                     report.chunks_embedded, sec.get("embed", 0.0)),
        PhaseOutcome(source, "entities", "ok", "", report.chunks_written,
                     sec.get("entities", 0.0)),
        PhaseOutcome(source, "store", store, store_message, changed + len(report.removed),
                     sec.get("store", 0.0)),
    ]


def graph_phase_of(exc: BaseException) -> str:
    """``communities`` if the error was raised while detecting communities or writing their
    reports, else ``graph``."""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.name in COMMUNITY_FRAMES or any(f"{name}(" in (frame.line or "")
                                                  for name in COMMUNITY_FRAMES):
            return "communities"
    return "graph"
