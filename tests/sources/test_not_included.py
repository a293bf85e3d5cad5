"""Files of a folder that match no ``loader.include`` pattern are counted, by type, in the
build's report and the CLI says how many were not indexed and why, instead of leaving
them out silently. Hidden files are neither indexed nor counted."""

from __future__ import annotations

import fsspec
from typer.testing import CliRunner

from docgraph.sources.folder import FolderCrawler
from tests.helpers import write_files

FOLDER = {
    "guide.md": "# Guide\n\nThe Rotterdam depot opens at six.\n",
    "diagrams/a.svg": "<svg/>",
    "diagrams/b.svg": "<svg/>",
    "diagrams/c.SVG": "<svg/>",
    "old/q1.xls": b"\xd0\xcf\x11\xe0",
    "old/q2.xls": b"\xd0\xcf\x11\xe0",
    "Makefile": "all:\n",
    "tools/build.py": "print('hi')\n",
    ".DS_Store": b"\0\0",
    ".git/config": "[core]\n",
}


def test_the_report_counts_files_matching_no_include_pattern_by_type(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", FOLDER)
    report = make_graph().index(folder, namespace="docs")
    assert report.added == ["guide.md"]
    assert report.not_included == {"*.svg": 3, "*.xls": 2, "no extension": 1, "*.py": 1}
    assert report.not_included_summary() == (
        "7 files not indexed: not in loader.include "
        "(*.svg: 3, *.xls: 2, *.py: 1, others: 1)")
    assert report.not_included_summary(top=5) == (
        "7 files not indexed: not in loader.include "
        "(*.svg: 3, *.xls: 2, *.py: 1, no extension: 1)")


def test_a_folder_whose_files_all_match_include_reports_nothing_left_out(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {"guide.md": FOLDER["guide.md"],
                                             ".DS_Store": b"\0"})
    report = make_graph().index(folder, namespace="docs")
    assert report.not_included == {}
    assert report.not_included_summary() is None


def test_a_remote_folder_counts_them_too():
    fs = fsspec.filesystem("memory")
    fs.pipe({"/notincl/a.md": b"# A\n\ntext", "/notincl/b.rst": b"B\n=\n",
             "/notincl/sub/Makefile": b"all:", "/notincl/.hidden.svg": b"x",
             "/notincl/c.svg": b"<svg/>"})
    try:
        crawler = FolderCrawler("memory:///notincl", ["*.md"])
        assert [e.relative_path for e in crawler.list_files()] == ["a.md"]
        assert crawler.not_included == {"*.rst": 1, "no extension": 1, "*.svg": 1}
    finally:
        fs.rm("/notincl", recursive=True)


def test_the_index_command_says_how_many_files_were_not_indexed_and_why(tmp_path,
                                                                        monkeypatch):
    from docgraph.serve.cli import app

    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    folder = write_files(tmp_path / "docs", FOLDER)
    done = CliRunner().invoke(app, ["--index", str(tmp_path / "index.db"), "index",
                                    str(folder), "--namespace", "docs"])
    assert done.exit_code == 0, done.output
    assert "7 files not indexed: not in loader.include (*.svg: 3, *.xls: 2, *.py: 1" \
        in " ".join(done.output.split())
