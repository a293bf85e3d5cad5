"""The Traces page: the newest audit records linked to their retrieval traces, a chart of
the lanes' shares of what was returned, and one trace in full."""

from __future__ import annotations

from collections import Counter
from typing import Any

from docgraph.retrieve.lanes import LANE_NAMES
from docgraph.serve.console.ports import ConsoleGovernance

#: How many audit records and traces the Traces page lists.
RECENT_LIMIT = 100


def traces_page(governance: ConsoleGovernance, limit: int = RECENT_LIMIT) -> dict[str, Any]:
    """The newest audit records (caller, outcome, duration, evidence keys), each linked to
    its retrieval trace when one was stored, and the newest traces."""
    traces = governance.root.traces.recent(limit)
    by_query: dict[tuple[str, str], str] = {}
    for t in traces:  # newest first: keep the newest trace of each (user, query)
        by_query.setdefault((str(t.get("user_id", "")), str(t.get("query_hash", ""))),
                            str(t["id"]))
    identity = governance.identity()
    records = []
    for r in governance.audit.recent(limit):
        key = (str(r.get("user_id", "")), str(r.get("query_hash", "")))
        records.append({**r, "trace_id": by_query.get(key) if key[1] else None,
                        # the ids agents and the CLI show (the record keeps the stored ones)
                        "evidence_keys": [identity.key_anywhere(str(k))
                                          for k in r.get("evidence_keys") or []]})
    return {"records": records, "chart": lane_share_chart(traces), "traces": [{
        "id": t["id"], "user_id": t.get("user_id"), "mode": t.get("mode"), "k": t.get("k"),
        "created_at": t.get("created_at"), "pool_size": t.get("pool_size", 0),
        "returned": len(t.get("final_provenance") or {}),
    } for t in traces]}


#: How pages name the engine's lanes where the tools and the CLI name them otherwise: the
#: seed lane's chunks are shown there by the lists that held them (``dense+bm25``).
LANE_LABELS = {"seed": "dense+bm25 (seed)"}


def lane_label(lane: str) -> str:
    """A trace's lane as pages name it (:data:`LANE_LABELS`, else the lane itself)."""
    return LANE_LABELS.get(lane, lane)


#: Lanes in the order charts stack them (the one lane list; others follow by name), each
#: with its colour; the chart is always accompanied by the same numbers as text.
LANE_ORDER = LANE_NAMES
LANE_COLOURS = ("#0b5cad", "#8a5a00", "#1a7f37", "#8250df", "#b42318", "#555d66")
CHART_WIDTH, CHART_HEIGHT, CHART_BARS = 640, 160, 40


def lane_share_chart(traces: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Lane shares of the returned chunks over the newest ``CHART_BARS`` traces that
    returned anything (oldest left), as SVG geometry: one stacked bar per trace, a legend
    and, per bar, the shares as text for a table. None when no trace returned anything."""
    rows = [t for t in traces if t.get("final_provenance")][:CHART_BARS][::-1]
    if not rows:
        return None
    seen = {lane for t in rows for lane in (t["final_provenance"] or {}).values()}
    lanes = [lane for lane in LANE_ORDER if lane in seen] + sorted(seen - set(LANE_ORDER))
    colour = {lane: LANE_COLOURS[min(i, len(LANE_COLOURS) - 1)] for i, lane in enumerate(lanes)}
    step = min(CHART_WIDTH / len(rows), 32.0)
    bars = []
    for i, t in enumerate(rows):
        shares = {s["lane"]: s for s in provenance_shares(t["final_provenance"])}
        y = float(CHART_HEIGHT)
        segments = []
        for lane in lanes:
            share = shares.get(lane)
            if share is None:
                continue
            height = CHART_HEIGHT * share["percent"] / 100.0
            y -= height
            segments.append({"lane": lane, "percent": share["percent"], "y": round(y, 2),
                             "height": round(height, 2), "colour": colour[lane]})
        bars.append({"id": t["id"], "x": round(i * step + 1, 2),
                     "width": round(max(step - 2, 1), 2), "segments": segments,
                     "created_at": t.get("created_at"), "user_id": t.get("user_id"),
                     "mode": t.get("mode")})
    return {"width": CHART_WIDTH, "height": CHART_HEIGHT, "bars": bars,
            "legend": [{"lane": lane, "colour": colour[lane]} for lane in lanes]}


def provenance_shares(final_provenance: dict[str, str]) -> list[dict[str, Any]]:
    """Each lane's share of the returned chunks, largest first."""
    counts = Counter(final_provenance.values())
    total = sum(counts.values())
    return [{"lane": lane, "count": n, "percent": round(100.0 * n / total, 1)}
            for lane, n in counts.most_common()] if total else []


def trace_page(governance: ConsoleGovernance, trace_id: str) -> dict[str, Any] | None:
    """One trace: candidates per lane, per-lane timings, query entities found and missing,
    and the final provenance shares; None when no trace has this id."""
    trace = governance.root.traces.get(trace_id)
    if trace is None:
        return None
    identity = governance.identity()  # ids as agents see them; the trace keeps stored ones
    candidates = {lane: [identity.key_anywhere(str(i)) for i in ids]
                  for lane, ids in (trace.get("candidates") or {}).items()}
    final = {identity.key_anywhere(str(i)): lane
             for i, lane in (trace.get("final_provenance") or {}).items()}
    return {
        "id": trace_id, "user_id": trace.get("user_id"), "mode": trace.get("mode"),
        "k": trace.get("k"), "created_at": trace.get("created_at"),
        "query_hash": trace.get("query_hash"), "pool_size": trace.get("pool_size", 0),
        "lanes": [{"lane": lane, "count": len(ids), "ids": ids}
                  for lane, ids in candidates.items()],
        "timings": sorted((trace.get("timings_ms") or {}).items(), key=lambda kv: -kv[1]),
        "found": trace.get("query_entities_found") or [],
        "missing": trace.get("query_entities_missing") or [],
        "completeness": trace.get("completeness") or {},
        "shares": provenance_shares(trace.get("final_provenance") or {}),
        "final": final,
        "notes": trace.get("notes") or [],
    }
