"""Community titles and report sentences to read (issue 20): not a measurement.

    python bench/titles.py [--datasets scifact_lower,sample] [--show 30] [--limit N]
                           [--save DIR] [--load DIR]

Builds the graph of lower-cased SciFact (one chunk per abstract, the links the ingest-time
extractor finds, key phrases on, chunk vectors from the deterministic hashing embedder so
the centroid term of sentence choice is lexical, not random) and of the sample corpus
(``examples/corpus`` through ``DocGraph.index()`` with the hashing embedder), then prints
the titles and first report sentences of the ``--show`` communities with reports, evenly
spread over them in build order. ``--save DIR`` keeps every report's input (pickled) so
``--load DIR`` re-renders them with the current title and sentence code without a build.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_ROOT
from docgraph.app import DocGraph
from docgraph.config import GraphSettings, load_settings
from docgraph.embedding.embedders import HashingEmbedder
from docgraph.graph.build import GraphBuilder, make_extractor
from docgraph.graph.reports import ReportInput, extractive_report
from docgraph.model import ChunkDraft
from docgraph.store.base import DocumentWrite
from docgraph.store.sqlite import SQLiteCatalog
from docgraph.store.sqlite.graph import SQLiteGraphStore
from keyphrases import passages_of

EMBEDDER = HashingEmbedder()


class Recording(GraphBuilder):
    """A builder that keeps every report's input (``inputs``, in build order)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inputs: list[ReportInput] = []

    def _write_report(self, data: ReportInput) -> str:
        self.inputs.append(data)
        return super()._write_report(data)


def beir_inputs(name: str, limit: int | None, workdir: Path) -> list[ReportInput]:
    """Report inputs of a BEIR dataset's graph (one chunk per document)."""
    settings = GraphSettings(keyphrases=True)
    base = make_extractor(GraphSettings(keyphrases=False))
    catalog = SQLiteCatalog(workdir / f"{name}.db")
    catalog.set_embedding_model(EMBEDDER.name, EMBEDDER.dimension)
    source = catalog.add_source(f"file:///bench/{name}", name)
    for doc, text in passages_of(name, limit):
        catalog.write_document(DocumentWrite(
            source=source, path=doc, doc_id=f"file:///bench/{name}/{doc}", title=doc,
            content_hash=doc, change_token=doc, media_type="text/plain",
            chunks=[ChunkDraft(0, text, (), len(text.split()), None, None, None)],
            breadcrumbs=[f"[{doc}]"], embedded_texts=[text],
            vectors=np.asarray(EMBEDDER.embed_documents([text]), dtype=np.float32),
            entity_links=[base.links(text)]))
    builder = Recording(SQLiteGraphStore(catalog), EMBEDDER, settings, make_extractor(settings))
    builder.build(name)
    catalog.close()
    return builder.inputs


def sample_inputs(workdir: Path) -> list[ReportInput]:
    """Report inputs of the sample corpus indexed through ``DocGraph.index()``."""
    settings = load_settings()
    settings.store.path = workdir / "sample.db"
    graph = DocGraph(settings, EMBEDDER)
    try:
        graph.index(REPO_ROOT / "examples" / "corpus", namespace="sample")
        assert graph.extractor is not None
        builder = Recording(graph.graph_store, EMBEDDER, settings.graph, graph.extractor,
                            None, graph.phrase_cache)
        builder.build("sample")
    finally:
        graph.close()
    return builder.inputs


def show(name: str, inputs: list[ReportInput], count: int) -> None:
    print(f"\n== {name}: {len(inputs)} reports ==")
    step = max(len(inputs) / max(count, 1), 1.0)
    for i in sorted({int(i * step) for i in range(min(count, len(inputs)))}):
        text = extractive_report(inputs[i])
        title = text.splitlines()[0].removeprefix("# ")
        summary = text.split("Summary: ", 1)[1] if "Summary: " in text else ""
        print(f"\n[{i}] {title}\n    {summary[:400]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="scifact_lower,sample")
    parser.add_argument("--show", type=int, default=30)
    parser.add_argument("--limit", type=int, default=None, help="documents of a BEIR set")
    parser.add_argument("--save", type=Path, default=None)
    parser.add_argument("--load", type=Path, default=None)
    args = parser.parse_args()
    for name in args.datasets.split(","):
        if args.load is not None:
            inputs = pickle.loads((args.load / f"{name}.pickle").read_bytes())
        else:
            with tempfile.TemporaryDirectory() as tmp:
                inputs = (sample_inputs(Path(tmp)) if name == "sample"
                          else beir_inputs(name, args.limit, Path(tmp)))
        if args.save is not None:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{name}.pickle").write_bytes(pickle.dumps(inputs))
        show(name, inputs, args.show)


if __name__ == "__main__":
    main()
