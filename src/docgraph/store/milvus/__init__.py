"""The Milvus chunk index (dense + BM25 in a Milvus collection), kept in step with the
catalog through a change feed. Needs the ``milvus`` extra."""
