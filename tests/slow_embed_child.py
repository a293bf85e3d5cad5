"""Runs the real ``docgraph`` command line with the hashing embedder slowed down by
``DOCGRAPH_TEST_EMBED_DELAY`` seconds per passage, so a test can interrupt (SIGINT) or kill a
build in its middle. Everything else - settings, SQLite index, worker processes, signals - is
the product's own."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence

import numpy as np

import docgraph.root
from docgraph.config import EmbedSettings
from docgraph.embedding.embedders import Embedder, HashingEmbedder, make_embedder

DELAY = float(os.environ.get("DOCGRAPH_TEST_EMBED_DELAY", "0"))


class SlowHashingEmbedder(HashingEmbedder):
    """The hashing embedder (same name and vectors), ``DELAY`` seconds per passage."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(DELAY * len(texts))
        return super().embed_documents(texts)


def _make(settings: EmbedSettings) -> Embedder:
    made = make_embedder(settings)
    return SlowHashingEmbedder() if isinstance(made, HashingEmbedder) else made


docgraph.root.make_embedder = _make  # type: ignore[assignment]

if __name__ == "__main__":
    from docgraph.serve.cli import main

    # Started as a terminal starts a foreground command: Ctrl-C raises KeyboardInterrupt.
    # A process that starts with SIGINT ignored keeps it ignored across exec (POSIX; what
    # `cmd &` in a script relies on), and a test runner's worker may ignore it (a whole-suite
    # run under pytest-xdist did), which made the Ctrl-C tests' builds run to the end.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    main()
