"""Local folders with hostile contents: names that are not UTF-8, symlinks (out of the
folder, to folders, in loops), FIFOs and sockets, files that vanish or turn into symlinks
while a build runs, and failure records that must not outlive their files."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest

from docgraph.errors import FileSkipped, SourceFileVanished
from docgraph.sources.folder import FolderCrawler
from docgraph.sources.urn import normalize_urn
from tests import backend_graphs
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server


def _bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def _failures(graph) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {f.path: f.reason for f in graph.status().failures}


def test_a_name_that_is_not_utf8_indexes_under_its_escaped_name(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {"good.md": "# Good\n\nThe heron survey.\n"})
    fd = os.open(os.fsencode(folder) + b"/bad\xffname.md", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"# Bad name\n\nThe kestrel survey lives here.\n")
    os.close(fd)
    graph = make_graph()

    report = graph.index(folder, namespace="x")
    assert sorted(report.added) == ["bad%FFname.md", "good.md"] and report.failed == []
    hit = graph.search("kestrel survey", namespaces={"x"}, k=1)[0]
    assert hit.source_path == "bad%FFname.md"
    urn = normalize_urn(folder)
    assert hit.doc_id == f"{urn}/bad%FFname.md"
    assert unquote_to_bytes(hit.doc_id[len(urn) + 1:]) == b"bad\xffname.md"  # reversible
    assert graph.search("heron survey", namespaces={"x"}, k=1)[0].source_path == "good.md"

    again = graph.index(folder, namespace="x")
    assert again.unchanged == 2 and again.bodies_read == 0 and not again.added
    os.unlink(os.fsencode(folder) + b"/bad\xffname.md")
    assert graph.index(folder, namespace="x").removed == ["bad%FFname.md"]


def test_symlinks_fifos_and_sockets_are_reported_and_never_followed(
        tmp_path, make_graph, monkeypatch):
    outside = write_files(tmp_path / "outside", {
        "secret.md": "# Secret\n\nThe zebra password is hunter2.\n",
        "more/inner.md": "# Inner\n\nThe okapi codeword.\n",
    })
    folder = write_files(tmp_path / "docs", {"good.md": "# Good\n\nThe heron survey.\n"})
    (folder / "out.md").symlink_to(outside / "secret.md")
    (folder / "inside.md").symlink_to(folder / "good.md")
    (folder / "shared").symlink_to(outside / "more")  # a folder: reported whatever its name
    (folder / "loop1.md").symlink_to("loop2.md")
    (folder / "loop2.md").symlink_to("loop1.md")
    (folder / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    (folder / "notes-link").symlink_to(outside / "secret.md")  # not an included name: quiet
    os.mkfifo(folder / "pipe.md")
    monkeypatch.chdir(folder)  # a socket path must be short: bind relative to the folder
    server = socket.socket(socket.AF_UNIX)
    server.bind("sock.md")
    graph = make_graph()
    try:
        report = graph.index(folder, namespace="x")
    finally:
        server.close()

    symlink = "skipped: symlink (not followed)"
    expected = {
        "out.md": symlink, "inside.md": symlink, "shared": symlink, "loop1.md": symlink,
        "loop2.md": symlink, "dangling.md": symlink,
        "pipe.md": "skipped: FIFO (not a regular file)",
        "sock.md": "skipped: socket (not a regular file)",
    }
    assert dict(report.failed) == expected
    assert _failures(graph) == expected  # what `docgraph status` / index_status show
    assert report.added == ["good.md"]
    for words in ("zebra password hunter2", "okapi codeword"):
        assert all(h.source_path == "good.md"
                   for h in graph.search(words, namespaces={"x"}, k=5))
    second = graph.index(folder, namespace="x")
    assert dict(second.failed) == expected and second.unchanged == 1


def test_a_file_swapped_for_a_symlink_after_listing_is_not_read(tmp_path):
    outside = write_files(tmp_path / "outside", {"secret.md": "zebra password",
                                                 "sub/doc.md": "okapi codeword"})
    folder = write_files(tmp_path / "docs", {"a.md": "alpha", "sub/doc.md": "beta"})
    crawler = FolderCrawler(normalize_urn(folder), ["*.md"])
    entries = {e.relative_path: e for e in crawler.list_files()}
    (folder / "a.md").unlink()
    (folder / "a.md").symlink_to(outside / "secret.md")
    (folder / "sub" / "doc.md").unlink()
    (folder / "sub").rmdir()
    (folder / "sub").symlink_to(outside / "sub")  # a folder on the path turned into a link

    with pytest.raises(FileSkipped, match=r"symlink \(not followed\)"):
        crawler.read(entries["a.md"])
    with pytest.raises((FileSkipped, SourceFileVanished)):
        crawler.read(entries["sub/doc.md"])


def test_files_that_vanish_during_a_build_are_deleted_and_never_stop_it(tmp_path, make_graph):
    files: dict[str, str | bytes] = {"00-first.txt": b""}  # fails first: progress is called
    files.update({f"v{i}.md": f"# V{i}\n\nVanishing note {i} about herons.\n" for i in range(5)})
    files.update({f"w{i}.md": f"# W{i}\n\nWeather note {i} about kestrels.\n" for i in range(3)})
    folder = write_files(tmp_path / "docs", files)
    graph = make_graph(loader={"workers": 1})
    graph.index(folder, namespace="x")
    for name in files:
        _bump_mtime(folder / name)  # every file is read again by the next build

    def delete_the_v_files(progress) -> None:  # type: ignore[no-untyped-def]
        for i in range(5):
            (folder / f"v{i}.md").unlink(missing_ok=True)

    report = graph.index(folder, namespace="x", progress=delete_the_v_files)
    gone = [f"v{i}.md" for i in range(5)]
    assert report.vanished == gone and report.removed == gone
    assert [p for p, _ in report.failed] == ["00-first.txt"]  # nothing "stopped answering"
    assert report.unchanged == 3  # the w files were read after five vanished ones
    assert set(_failures(graph)) == {"00-first.txt"}
    hits = graph.search("vanishing note herons", namespaces={"x"}, k=10)
    assert hits and all(h.source_path.startswith("w") for h in hits)


def test_a_clean_rerun_clears_failures_of_files_that_are_gone_or_fixed(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {
        "good.md": "# Good\n\nThe heron survey.\n",
        "broken.pdf": b"%PDF-1.4 not really",
        "bad.json": '{"title": broken',
        "still-bad.json": "[1, 2",
    })
    graph = make_graph()
    graph.index(folder, namespace="x")
    assert set(_failures(graph)) == {"broken.pdf", "bad.json", "still-bad.json"}

    (folder / "broken.pdf").unlink()  # never indexed, now gone
    (folder / "bad.json").write_text('{"title": "Sites", "site": "Rotterdam"}')
    _bump_mtime(folder / "bad.json")
    report = graph.index(folder, namespace="x")
    assert report.added == ["bad.json"]
    assert set(_failures(graph)) == {"still-bad.json"}


def test_a_folder_whose_own_name_is_not_utf8_registers_and_indexes(tmp_path, make_graph):
    folder = tmp_path / os.fsdecode(b"d\xe9p\xf4t")
    write_files(folder, {"a.md": "# A\n\nThe kestrel depot.\n"})
    graph = make_graph()
    assert graph.index(folder, namespace="x").added == ["a.md"]
    hit = graph.search("kestrel depot", namespaces={"x"}, k=1)[0]
    assert hit.doc_id.endswith("/d%E9p%F4t/a.md")
    assert graph.index(folder, namespace="x").unchanged == 1


@pytest.mark.parametrize("first", ["NFD", "NFC"])
def test_nfc_and_nfd_twins_keep_the_indexed_one_and_report_the_other(
        tmp_path, make_graph, first):
    import unicodedata

    indexed = unicodedata.normalize(first, "résumé.md")
    twin = unicodedata.normalize("NFC" if first == "NFD" else "NFD", "résumé.md")
    folder = write_files(tmp_path / "docs", {indexed: "# CV\n\nThe kestrel career.\n"})
    graph = make_graph()
    assert graph.index(folder, namespace="x").added == [indexed]
    (folder / twin).write_text("# CV\n\nThe heron career.\n", encoding="utf-8")

    report = graph.index(folder, namespace="x")  # one id, two names: never written twice
    (path, reason), = report.failed
    assert path == twin and "same document id" in reason and ascii(indexed) in reason
    assert report.unchanged == 1 and not (report.added or report.removed)
    assert graph.search("kestrel career", namespaces={"x"}, k=1)[0].source_path == indexed
