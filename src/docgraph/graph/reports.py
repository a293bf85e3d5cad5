"""Community reports: extractive by default, LLM-written when a chat model is configured.

An extractive report names the community by its most central entities, lists key entities
and relationships, and quotes the sentences of member chunks that mention the most members.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from docgraph.ingest.chunk import split_sentences
from docgraph.llm import ChatModel


@dataclass(frozen=True)
class ReportInput:
    """What a report is written from."""

    members: Sequence[tuple[str, str, int, float]]  # (name, type, chunk count, centrality)
    relationships: Sequence[tuple[str, str, int]]  # (name a, name b, shared chunks)
    passages: Sequence[str]  # texts of the chunks most central to the community


def _importance(member: tuple[str, str, int, float]) -> float:
    """Centrality inside the community, damped for entities seen in very few chunks."""
    return member[3] * math.log1p(member[2])


def rank_members(
    members: Sequence[tuple[str, str, int, float]],
) -> list[tuple[str, str, int, float]]:
    """Members by importance (centrality x log(1 + chunks)), then name."""
    return sorted(members, key=lambda m: (-_importance(m), m[0]))


def community_title(members: Sequence[tuple[str, str, int, float]], top: int = 3) -> str:
    """Title from the most important members, e.g. ``Tern T3 / E-417 / Rotterdam``."""
    return " / ".join(m[0] for m in rank_members(members)[:top]) or "Community"


def central_sentences(
    passages: Sequence[str], member_names: Sequence[str], limit: int
) -> list[str]:
    """Sentences mentioning the most distinct members (ties: earlier passage first)."""
    names = [n.casefold() for n in member_names if len(n) >= 2]
    scored: list[tuple[int, int, int, str]] = []
    seen: set[str] = set()
    for p_index, passage in enumerate(passages):
        for s_index, sentence in enumerate(split_sentences(passage.replace("\n", " "))):
            folded = sentence.casefold()
            if folded in seen or len(sentence) > 600:
                continue
            seen.add(folded)
            hits = sum(1 for n in names if n in folded)
            if hits:
                scored.append((-hits, p_index, s_index, sentence.strip()))
    scored.sort()
    return [s for _, _, _, s in scored[:limit]]


def extractive_report(data: ReportInput, sentences: int = 4) -> str:
    """A Markdown report built only from the community's own entities and text."""
    ranked = rank_members(data.members)
    title = community_title(ranked)  # already ranked: sorting again keeps the order
    lines = [f"# {title}", ""]
    lines.append("Key entities: " + "; ".join(
        f"{name} ({etype}, {count} chunks)" for name, etype, count, _ in ranked[:10]
    ) + ".")
    if data.relationships:
        lines.append("Key relationships: " + "; ".join(
            f"{a} - {b} ({n} shared chunks)" for a, b, n in data.relationships[:8]
        ) + ".")
    quoted = central_sentences(data.passages, [m[0] for m in ranked[:15]], sentences)
    if quoted:
        lines += ["", "Summary: " + " ".join(quoted)]
    return "\n".join(lines)


def llm_report(data: ReportInput, model: ChatModel, sentences: int = 4) -> str:
    """A report written by a chat model from the extractive material (title kept)."""
    material = extractive_report(data, sentences=max(sentences, 8))
    summary = model.complete(
        "You write community reports for a knowledge graph. From the material below, write "
        "a factual summary (at most 120 words) of what connects these entities. Use only the "
        "material; do not invent facts.\n\n" + material
    )
    head = material.split("\n\nSummary:")[0]
    return f"{head}\n\nSummary: {summary.strip()}" if summary.strip() else material
