"""MiniLM embeds in batches bounded by padded tokens, sorted by token length, and the
batching never changes a vector (each passage's vector is the one it gets alone)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.embedding.embedders import BATCH_TOKENS, MiniLMEmbedder, token_batches


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 256), max_size=80), st.integers(1, 64),
       st.sampled_from([0, 300, 2048]))
def test_batches_cover_every_passage_within_both_bounds(lengths, size, budget):
    batches = token_batches(lengths, size, budget)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(len(lengths)))  # each passage once
    assert [lengths[i] for i in flat] == sorted(lengths)  # shortest first
    for batch in batches:
        assert 1 <= len(batch) <= size
        if budget and len(batch) > 1:
            assert len(batch) * max(lengths[i] for i in batch) <= budget


class _Shapes:
    """The real onnxruntime session, recording the shape of each call's input."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.shapes: list[tuple[int, int]] = []

    def run(self, names: Any, feeds: dict[str, np.ndarray]) -> Any:
        self.shapes.append(feeds["input_ids"].shape)
        return self.session.run(names, feeds)


def test_mixed_lengths_run_in_token_bounded_batches_with_unchanged_vectors():
    model = MiniLMEmbedder()  # the default: 32 passages a batch
    long = [" ".join(f"word{i} topic{j} alpha beta" for j in range(60)) for i in range(10)]
    short = [f"short passage number {i}" for i in range(22)]
    texts = [t for pair in zip(long, short[:10], strict=True) for t in pair] + short[10:]
    model.embed_query("load")
    spy = _Shapes(model._session)
    model._session = spy
    vectors = model.embed_documents(texts)
    # Before: one (32, 256) call, every short passage padded to the longest.
    assert all(rows * width <= BATCH_TOKENS or rows == 1 for rows, width in spy.shapes)
    assert sum(rows for rows, _ in spy.shapes) == len(texts)
    assert max(width for _, width in spy.shapes) == model.max_tokens  # long ones truncated
    # Full-length passages two a call: 512 padded tokens (four a call at 1024 measured slower
    # on both ingest_throughput folders).
    assert max(rows for rows, width in spy.shapes if width == model.max_tokens) == 2
    alone = np.stack([model.embed_query(t) for t in texts])
    assert np.allclose(vectors, alone, atol=1e-5)
