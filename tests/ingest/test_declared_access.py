"""What a Markdown or HTML file says of its own readers, read from its bytes without
extracting them (for a file that failed to index: who may be told it failed)."""

from __future__ import annotations

from docgraph.ingest.declared_access import NOBODY_DECLARED, declared_access, declares_access

HR = frozenset({"group:hr"})


def test_front_matter_names_the_readers_of_markdown_and_html() -> None:
    block = b"---\ntitle: Plan\naccess: [group:hr]\n---\n"
    assert declared_access("a/plan.md", block + b"\x00\x01 binary body") == HR
    assert declared_access("a/Plan.MARKDOWN", b"+++\naccess = ['group:hr']\n+++\n# x") == HR
    assert declared_access("a/plan.html", block + b"<p>x</p>") == HR
    utf16 = ("\ufeff" + block.decode() + "# Plan\n").encode("utf-16-le")
    assert declared_access("a/plan.md", utf16) == HR  # decoded as extraction decodes it


def test_a_statement_that_cannot_be_read_fails_closed() -> None:
    assert declared_access("a/plan.md", b"---\naccess: [group:hr\n---\n# x\n") \
        == NOBODY_DECLARED  # unreadable YAML that mentions access
    assert declared_access("a/plan.md", b"---\naccess: [finance]\n---\n# x\n") \
        == NOBODY_DECLARED  # not a principal
    page = b'<html><head><META name="DocGraph-Access" content="group:hr"></head><body>'
    assert declared_access("a/page.htm", page) == NOBODY_DECLARED


def test_files_that_name_no_readers_leave_it_to_their_folder() -> None:
    assert declared_access("a/plan.md", b"# Plan\n\nNo front matter.\n") is None
    assert declared_access("a/plan.md", b"---\ntitle: Plan\n---\n# x\n") is None
    assert declared_access("a/rule.md", b"---\nA paragraph between rules.\n---\n") is None
    unclosed = b"---\naccess: [group:hr]\n" + b"x: y\n" * 20_000  # no block: Markdown
    assert declared_access("a/plan.md", unclosed) is None
    assert declared_access("a/plan.txt", b"---\naccess: [group:hr]\n---\n") is None
    assert declared_access("a/page.html", b"<p>docgraph access</p>") is None
    assert declares_access("a/b.md") and declares_access("a/b.HTM")
    assert not declares_access("a/b.pdf") and not declares_access("a/md")
