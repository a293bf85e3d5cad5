"""Evidence identity: one stable key per retrieved chunk (seed 000, decision D1)."""

from __future__ import annotations


def _known(value: object) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def evidence_key(
    doc_id: str | None,
    chunk_index: int | None,
    vector_id: str | int | None,
    original_rank: int,
) -> str:
    """``docId#chunk-N`` when both are known, else ``vector:<id>``, else ``rank:<originalRank>``.

    Empty strings count as unknown. The key is the dedup key of the post-processor and the
    agent-visible ``document_id`` of a projected evidence block.

    >>> evidence_key("folder/a.md", 3, 17, 1)
    'folder/a.md#chunk-3'
    >>> evidence_key(None, 3, 17, 1)
    'vector:17'
    >>> evidence_key("folder/a.md", None, None, 4)
    'rank:4'
    """
    if _known(doc_id) and chunk_index is not None:
        return f"{doc_id}#chunk-{chunk_index}"
    if _known(vector_id):
        return f"vector:{vector_id}"
    return f"rank:{original_rank}"
