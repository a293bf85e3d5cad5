"""Errors docgraph raises on purpose. Each message names the input that caused it."""

from __future__ import annotations


class DocgraphError(Exception):
    """Base class of every error docgraph raises deliberately."""


class ConfigError(DocgraphError):
    """A setting or configuration file is invalid."""


class SourceError(DocgraphError):
    """A source (folder URN) cannot be registered or crawled."""


class ExtractionError(DocgraphError):
    """A file could not be turned into text; the message says which file and why."""


class EmbeddingModelMismatch(DocgraphError):
    """The index was built with another embedding model than the one configured."""


class EmbeddingError(DocgraphError):
    """The embedding model failed or returned vectors of the wrong shape."""


class StoreError(DocgraphError):
    """The catalog or chunk index rejected an operation."""


class InvalidQuery(DocgraphError):
    """A search request is malformed (empty query, bad k, unknown mode, no namespaces)."""


class UnsupportedByBackend(DocgraphError):
    """The configured store backend does not offer this feature (the message names both)."""
