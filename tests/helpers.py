"""Test helpers shared by several test modules."""

from __future__ import annotations

from pathlib import Path

from docgraph.embedding.embedders import HashingEmbedder


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting how many passages it embedded."""

    def __init__(self) -> None:
        self.embedded = 0

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        self.embedded += len(texts)
        return super().embed_documents(texts)


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create ``files`` (relative path -> content) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root
