"""Files that may need OCR are prepared in a thread beside the embedding
(``ingest/ocr_ahead.py``): the scan is recognised while the other files' chunks are
embedded, and what the build stores and reports is the same as preparing it inline."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from docgraph.config import load_settings
from docgraph.ingest.formats import ocr
from docgraph.ingest.ocr_ahead import OcrAhead
from docgraph.ingest.prepare import PreparedDocument, PrepareSpec
from docgraph.ingest.workers import PrepareFailure
from tests import office_fixtures
from tests.helpers import CountingEmbedder, write_files
from tests.programs import needs_ocr

#: How long the recognition of the scan waits for the build to start embedding. The build
#: embeds the other files' pending chunks before it takes the scan, so it never waits this
#: long; a build that recognises the scan before embedding (in its own thread) does.
EMBEDDING_STARTS_WITHIN = 10.0


class SignallingEmbedder(CountingEmbedder):
    """The deterministic test embedder, setting ``embedding`` when a build first embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = threading.Event()

    def embed_documents(self, texts: Sequence[str]):  # type: ignore[no-untyped-def]
        self.embedding.set()
        return super().embed_documents(texts)


def _folder(tmp_path):  # type: ignore[no-untyped-def]
    """Notes listed before the scan (written, their chunks pending, when it is reached),
    a broken PDF and a note after it."""
    notes = {f"a-notes/visit-{i}.md": f"# Visit {i}\n\nPriya Raman replaced the dock "
             f"controller at site {i} after error E-{400 + i}.\n" for i in range(6)}
    return write_files(tmp_path / "docs", {
        **notes,
        "m-scan.pdf": office_fixtures.scanned_pdf([["Dock D-14 was fixed in Rotterdam."]]),
        "n-broken.pdf": b"%PDF-1.4 not really",
        "z-after.md": "# After\n\nTomas Berg closed the Rotterdam ticket.\n",
    })


def _stored(graph) -> list[tuple]:  # type: ignore[no-untyped-def]
    """Every chunk (the entity graph's community reports included) in row-id order: the
    order the build wrote them (a pending chunk takes a new row id when its vector is
    filled, :mod:`docgraph.store.pending`, oldest first, so the ids themselves follow when
    the model ran)."""
    rows = graph.catalog.connection().execute(
        "SELECT d.path, c.chunk_index, c.text, c.breadcrumb, c.token_count, c.embed_hash "
        "FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id")
    return [tuple(row) for row in rows]


@needs_ocr
def test_a_scan_is_recognised_while_the_other_files_are_embedded(tmp_path, monkeypatch):
    """The scan is recognised in the background thread, and its recognition is still
    running when the build starts embedding the notes listed before it (before, it ran in
    the build's thread before any embedding). The build writes the same chunks in the same
    order (row ids, the entity graph's reports included) and reports the same files and
    failures as one preparing the scan inline, and leaves no thread behind."""
    from docgraph import DocGraph

    folder = _folder(tmp_path)
    real = ocr.recognise
    recognitions: list[tuple[bool, bool]] = []  # (in the build's thread, embedding started)

    def recognise(image, page):  # type: ignore[no-untyped-def]
        started = embedder.embedding.wait(EMBEDDING_STARTS_WITHIN)
        recognitions.append((threading.current_thread() is threading.main_thread(), started))
        return real(image, page)

    monkeypatch.setattr(ocr, "recognise", recognise)
    embedder = SignallingEmbedder()
    settings = load_settings(store={"path": tmp_path / "ahead.db"})
    with DocGraph(settings, embedder) as ahead:
        report = ahead.index(folder, namespace="ops")
        stored = _stored(ahead)
    assert recognitions == [(False, True)]
    assert not [t for t in threading.enumerate() if t.name.startswith("docgraph-ocr-ahead")]
    assert [path for path, _ in report.failed] == ["n-broken.pdf"]
    assert "n-broken.pdf" in report.failed[0][1]
    assert report.failed_phases == {"n-broken.pdf": "extract"}
    assert report.added == sorted(report.added) and len(report.added) == 8  # list order
    assert any(path == "m-scan.pdf" and "Rotterdam" in text for path, _, text, *_ in stored)
    assert any(path.startswith("community://") for path, *_ in stored)

    monkeypatch.setattr(OcrAhead, "takes", staticmethod(lambda path: False))  # inline
    embedder = SignallingEmbedder()
    embedder.embedding.set()  # inline, the scan is recognised before any embedding
    settings = load_settings(store={"path": tmp_path / "inline.db"})
    with DocGraph(settings, embedder) as inline:
        inline_report = inline.index(folder, namespace="ops")
        assert _stored(inline) == stored
    assert recognitions[1][0]  # in the build's thread
    assert inline_report.added == report.added
    assert inline_report.failed == report.failed
    assert inline_report.chunks_written == report.chunks_written


def test_outcomes_are_written_in_list_order_within_the_window():
    """However the thread runs, files are taken in the order they were listed: a file
    prepared inline waits behind a background one still being prepared (the build embeds
    meanwhile), the oldest is waited for once more than ``window`` wait, and a file that
    cannot be extracted is its own failure, in its place."""
    embedder = CountingEmbedder()
    spec = PrepareSpec(load_settings().loader, embedder.count_tokens, None)
    seconds: list[float] = []
    ahead = OcrAhead(spec, seconds, window=2)
    release = threading.Event()
    prepare = ahead._prepare

    def held(path, data):  # type: ignore[no-untyped-def]
        release.wait(EMBEDDING_STARTS_WITHIN)  # the background file finishes when released
        return prepare(path, data)

    ahead._prepare = held  # type: ignore[method-assign]
    taken: list[tuple[int, object]] = []
    waited: list[int] = []

    def meanwhile() -> bool:  # what the build does while it waits: embed one batch
        waited.append(len(taken))
        release.set()
        return False

    def take(key, outcome):  # type: ignore[no-untyped-def]
        taken.append((key, outcome))

    try:
        ahead.submit(0, "broken.pdf", b"%PDF-1.4 not really")
        ahead.write(take, meanwhile)
        ahead.add(1, prepare("n1.md", b"# N1\n\nA.\n")[0])
        ahead.write(take, meanwhile)
        assert taken == [] and waited == []  # two wait, behind the one in progress
        ahead.add(2, prepare("n2.md", b"# N2\n\nB.\n")[0])
        ahead.write(take, meanwhile)  # three: the oldest is waited for, then what is ready
        assert waited == [0] and [key for key, _ in taken] == [0, 1, 2]
        ahead.submit(3, "n3.md", b"# N3\n\nC.\n")
        ahead.write(take, meanwhile, everything=True)
    finally:
        ahead.close()
    assert [key for key, _ in taken] == [0, 1, 2, 3]
    assert isinstance(taken[0][1], PrepareFailure) and "broken.pdf" in taken[0][1].reason
    assert all(isinstance(outcome, PreparedDocument) for _, outcome in taken[1:])
    assert len(seconds) == 2  # the background files' own times, for the pool's trigger
