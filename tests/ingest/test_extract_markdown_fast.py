"""The plain-Markdown fast path gives exactly what the markdown-it path gives, or declines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.ingest.extract import _parsed_markdown, _plain_markdown, extract

WORDS = st.sampled_from([
    "alpha", "Beta", "C#", "x_y", "*emph*", "`code`", "a|b", "[link](u)", "&amp;", "\\*",
    "<b>", "naïve", "中文", "2.", "1)", "-5", "#tag", "##", "http://x.y", "\u00a0", "\f", "\v",
    "\x1c", "\u2028", "\t", "  ", "", ":", "!", "e.g.", "IL-6", "#", "x #", "===", "---",
])
PREFIXES = st.sampled_from([
    "", "", "", "", " ", "  ", "   ", "    ", "\t", "# ", "## ", "###### ", "####### ", "#",
    "#\t", " # ", "- ", "* ", "+ ", "1. ", "2) ", "> ", "```", "~~~", "<div>", "[a]: ",
    "| ", ": ", "***", "___", "===", "---", "= ", "_ ", "12345678901. ",
])
LINE = st.builds(lambda p, ws, end: p + " ".join(ws) + end, PREFIXES,
                 st.lists(WORDS, max_size=6), st.sampled_from(["", "", " ", "  ", " #", "\t"]))
DOC = st.lists(st.one_of(LINE, st.just("")), max_size=12).map("\n".join)


@settings(max_examples=500, deadline=None)
@given(DOC)
def test_fast_path_equals_the_parser_whenever_it_answers(text):
    fast = _plain_markdown(text)
    if fast is None:
        return
    parsed = _parsed_markdown(text, "doc.md")
    blocks, title = fast
    assert tuple(blocks) == parsed.blocks
    assert (title or "doc") == parsed.title


def test_headings_and_paragraphs_take_the_fast_path():
    text = ("# Alterations of white matter\n\nThe developing brain; IL-6 (p < 0.05) and C#.\n"
            "A second line of the same paragraph.\n\n## Methods\n  Indented by two.\n")
    assert _plain_markdown(text) is not None
    document = extract(text.encode(), "a.md")
    assert document == _parsed_markdown(text, "a.md")
    assert document.title == "Alterations of white matter"
    assert [b.text for b in document.blocks][1] == (
        "The developing brain; IL-6 (p < 0.05) and C#.\nA second line of the same paragraph.")


def test_any_other_construct_goes_to_the_parser():
    for text in ("# T\n\n- item", "# T\n\n    code", "Title\n===", "a | b\n--|--\n1 | 2",
                 "x\n\n1. one", "> quote", "```\ncode\n```", "[a]: http://x", "# T #",
                 "<div>x</div>", "a\r\nb"):
        assert _plain_markdown(text) is None, text
