"""Optional LLM namespace routing, subordinate to entitlement: it can narrow, never widen."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from docgraph.llm import ChatModel

log = logging.getLogger(__name__)


def route_namespaces(
    query: str,
    entitled: frozenset[str],
    descriptions: Mapping[str, str],
    model: ChatModel | None,
) -> frozenset[str]:
    """Ask ``model`` which of the *entitled* namespaces fit ``query``; return the intersection
    of its answer with ``entitled``. The model sees only entitled namespaces and their
    descriptions. On any error, an empty answer, or no model, ``entitled`` is returned."""
    if model is None or len(entitled) <= 1:
        return entitled
    listing = "\n".join(f"- {ns}: {descriptions.get(ns, '')}" for ns in sorted(entitled))
    try:
        reply = model.complete(
            "Pick the namespaces that can answer the question. Reply with their names only, "
            f"comma-separated.\n\nQuestion: {query}\n\nNamespaces:\n{listing}",
            max_tokens=100,
        )
    except Exception as exc:
        log.warning("namespace routing failed, using every entitled namespace: %s", exc)
        return entitled
    picked = {token.strip().strip("-*`'\"").strip() for token in re.split(r"[,\n]", reply)}
    narrowed = frozenset(picked) & entitled
    return narrowed or entitled
