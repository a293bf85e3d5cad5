"""Chunking: boundaries follow the structure, sizes never pass the limit, and every chunk
knows its section, neighbours and parent. Tokens are words here (a deterministic counter)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.ingest.chunk import chunk_document, split_sentences
from docgraph.model import Block, BlockKind, ChunkDraft, ExtractedDocument


def words(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def heading(text: str, level: int) -> Block:
    return Block(BlockKind.HEADING, text, level)


def para(text: str) -> Block:
    return Block(BlockKind.PARAGRAPH, text)


def item(text: str) -> Block:
    return Block(BlockKind.LIST_ITEM, text)


def doc(*blocks: Block, title: str = "Doc") -> ExtractedDocument:
    return ExtractedDocument(title, tuple(blocks), "text/markdown")


def chunks_of(*blocks: Block, max_tokens: int = 50) -> list[ChunkDraft]:
    return chunk_document(doc(*blocks), words, max_tokens)


# -- boundaries ----------------------------------------------------------------------------


def test_a_heading_always_starts_a_new_chunk():
    chunks = chunks_of(
        heading("Doc", 1), para("one two"), heading("A", 2), para("three four"),
        heading("B", 2), para("five"), max_tokens=100,
    )
    assert [c.text for c in chunks] == ["one two", "three four", "five"]
    assert [c.section_path for c in chunks] == [("Doc",), ("Doc", "A"), ("Doc", "B")]


def test_small_paragraphs_of_a_section_are_packed_up_to_the_limit():
    chunks = chunks_of(
        heading("S", 1), para("a1 a2 a3"), para("b1 b2 b3"), para("c1 c2 c3"),
        para("d1 d2"), para("e1 e2 e3 e4 e5 e6 e7"), max_tokens=7,
    )
    assert [c.text for c in chunks] == [
        "a1 a2 a3\nb1 b2 b3",
        "c1 c2 c3\nd1 d2",
        "e1 e2 e3 e4 e5 e6 e7",
    ]
    assert [c.token_count for c in chunks] == [6, 5, 7]


def test_list_items_are_rendered_as_bullets_and_counted_with_them():
    chunks = chunks_of(para("Intro."), item("first"), item("second"), max_tokens=100)
    assert [c.text for c in chunks] == ["Intro.\n- first\n- second"]
    assert chunks[0].token_count == 5


def test_an_over_long_paragraph_is_split_between_sentences():
    text = "Alpha one two three. Beta one two three. Gamma one two three."
    chunks = chunks_of(para(text), para("Next block."), max_tokens=9)
    assert [c.text for c in chunks] == [
        "Alpha one two three. Beta one two three.",
        "Gamma one two three.",
        "Next block.",
    ]


def test_a_single_over_long_sentence_is_split_between_words():
    sentence = " ".join(f"w{i}" for i in range(10)) + "."
    chunks = chunks_of(para(sentence), max_tokens=4)
    assert [c.text for c in chunks] == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9."]
    assert all(c.token_count <= 4 for c in chunks)


def test_token_count_is_what_the_counter_says_of_the_chunk_text():
    chunks = chunks_of(
        heading("H", 1), para("a b c"), item("d e"), para("F g. H i j k. L m n o p q."),
        max_tokens=6,
    )
    assert [c.token_count for c in chunks] == words([c.text for c in chunks])


def test_headings_only_or_empty_documents_give_no_chunks():
    assert chunks_of() == []
    assert chunks_of(heading("Lonely", 1), heading("Also lonely", 2)) == []


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_max_tokens_below_one_is_rejected(max_tokens):
    with pytest.raises(ValueError, match=str(max_tokens)):
        chunks_of(para("x"), max_tokens=max_tokens)


# -- section paths, links, parents ---------------------------------------------------------


def test_section_path_follows_the_heading_hierarchy():
    chunks = chunks_of(
        para("preamble"),
        heading("Guide", 1), para("g"),
        heading("Install", 2), para("i"),
        heading("Linux", 3), para("l"),
        heading("Windows", 3), para("w"),
        heading("Usage", 2), para("u"),  # a new h2 pops the old h3
        heading("Deep", 4), para("d"),  # skipped level
        heading("Flags", 3), para("f"),  # h3 pops the h4 under it
        heading("Appendix", 1), para("a"),  # a new h1 pops everything
    )
    assert [(c.text, c.section_path) for c in chunks] == [
        ("preamble", ()),
        ("g", ("Guide",)),
        ("i", ("Guide", "Install")),
        ("l", ("Guide", "Install", "Linux")),
        ("w", ("Guide", "Install", "Windows")),
        ("u", ("Guide", "Usage")),
        ("d", ("Guide", "Usage", "Deep")),
        ("f", ("Guide", "Usage", "Flags")),
        ("a", ("Appendix",)),
    ]


def test_prev_and_next_form_one_chain_over_the_document():
    chunks = chunks_of(
        heading("A", 1), para("one two three four five six"), heading("B", 2), para("x y"),
        para("z"), max_tokens=2,
    )
    assert len(chunks) == 5
    assert [c.index for c in chunks] == list(range(5))
    assert [c.prev_index for c in chunks] == [None, 0, 1, 2, 3]
    assert [c.next_index for c in chunks] == [1, 2, 3, 4, None]


def test_single_chunk_has_no_neighbours_and_no_parent():
    [only] = chunks_of(para("alone"))
    assert (only.prev_index, only.next_index, only.parent_index) == (None, None, None)


def test_parent_is_the_section_start_or_the_enclosing_sections_start():
    chunks = chunks_of(
        heading("Doc", 1), para("doc intro"),                      # 0
        heading("A", 2), para("A1 a. A2 a. A3 a."),               # 1, 2, 3 (split)
        heading("A.x", 3), para("ax"),                            # 4
        heading("B", 2), para("b"),                               # 5
        heading("Orphan", 1), heading("O.1", 2), para("o one"),   # 6: no chunk in "Orphan"
        max_tokens=2,
    )
    assert [c.text for c in chunks] == [
        "doc intro", "A1 a.", "A2 a.", "A3 a.", "ax", "b", "o one",
    ]
    assert [c.parent_index for c in chunks] == [None, 0, 1, 1, 1, 0, None]


def test_parent_of_a_top_section_is_the_preamble_when_there_is_one():
    chunks = chunks_of(para("preamble"), heading("One", 1), para("x"), max_tokens=5)
    assert [c.parent_index for c in chunks] == [None, 0]


# -- breadcrumb ----------------------------------------------------------------------------


def _draft(*section_path: str) -> ChunkDraft:
    return ChunkDraft(0, "t", tuple(section_path), 1, None, None, None)


@pytest.mark.parametrize(
    ("title", "path", "expected"),
    [
        ("Guide", ("Guide", "Setup", "Linux"), "[Guide > Setup > Linux]"),
        ("Guide", (" guide ", "Setup"), "[Guide > Setup]"),  # same title, case/space aside
        ("Handbook", ("Leave", "Sick leave"), "[Handbook > Leave > Sick leave]"),
        ("Guide", (), "[Guide]"),
        ("Guide", ("Setup", "Guide"), "[Guide > Setup > Guide]"),  # only the first repeats
    ],
)
def test_breadcrumb(title, path, expected):
    assert _draft(*path).breadcrumb(title) == expected


def test_breadcrumb_of_real_chunks_says_the_h1_title_once():
    extracted = doc(heading("Runbook", 1), heading("Restart", 2), heading("Queue", 3),
                    para("Drain it first."), title="Runbook")
    [chunk] = chunk_document(extracted, words, 20)
    assert chunk.breadcrumb(extracted.title) == "[Runbook > Restart > Queue]"


# -- sentence splitting --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The pump failed. Operators restarted it! Did it hold? Yes.",
         ["The pump failed.", "Operators restarted it!", "Did it hold?", "Yes."]),
        ("Version 4.2.1 shipped. 3 sites upgraded.",
         ["Version 4.2.1 shipped.", "3 sites upgraded."]),
        ("it ends. but lowercase continues", ["it ends. but lowercase continues"]),
        ("Wait... The end.", ["Wait...", "The end."]),
        ("Élan is French. Über is German.", ["Élan is French.", "Über is German."]),
        ("系统已重启。日志正常！还有问题吗？没有。",
         ["系统已重启。", "日志正常！", "还有问题吗？", "没有。"]),
        ("他说：「好的。」然后离开。", ["他说：「好的。」", "然后离开。"]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("She asked “Why?” Nobody knew.", ["She asked “Why?”", "Nobody knew."]),
        ("(See the manual.) It helps.", ["(See the manual.)", "It helps."]),
        ('It broke. "Really?" he asked.', ["It broke.", '"Really?" he asked.']),
        ("  Leading and trailing.  ", ["Leading and trailing."]),
        ("no terminal punctuation", ["no terminal punctuation"]),
        ("", []),
        ("   ", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


_PROSE = st.lists(
    st.sampled_from(["Ab", "c", "9", " ", "\n", ".", "!", "?", "…", '"', "'", "“", "”", "(", ")",
                     "]", "。", "！", "」"]),
    max_size=30,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=200), _PROSE))
def test_split_sentences_loses_nothing_but_whitespace(text):
    sentences = split_sentences(text)
    assert "".join("".join(s.split()) for s in sentences) == "".join(text.split())
    assert all(s == s.strip() and s for s in sentences)


# -- properties over random documents ------------------------------------------------------


@dataclass
class _Sentence:
    words: list[str]
    tokens: int  # as rendered (a list item's first sentence carries the "-" bullet)


@dataclass
class _Generated:
    document: ExtractedDocument
    body_words: list[str]
    word_section: list[int]  # section number of every body word
    word_sentence: list[_Sentence]  # the sentence every body word is in
    section_paths: list[tuple[str, ...]]


@st.composite
def documents(draw: st.DrawFn, max_tokens: int) -> _Generated:
    counter = iter(range(10**6))
    blocks: list[Block] = []
    body_words: list[str] = []
    word_section: list[int] = []
    word_sentence: list[_Sentence] = []
    stack: list[tuple[int, str]] = []
    section_paths: list[tuple[str, ...]] = [()]
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 3)) == 0:
            level = draw(st.integers(1, 4))
            text = f"Head{next(counter)}"
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            section_paths.append(tuple(t for _, t in stack))
            blocks.append(heading(text, level))
            continue
        is_item = draw(st.booleans())
        sentences: list[str] = []
        long_limit = max_tokens * 2 + 2
        for position in range(draw(st.integers(1, 4))):
            n = draw(st.integers(1, long_limit if draw(st.integers(0, 4)) == 0 else 4))
            ws = [f"{'W' if i == 0 else 'w'}{next(counter)}" for i in range(n)]
            ws[-1] += draw(st.sampled_from([".", "!", "?"]))
            if draw(st.integers(0, 3)) == 0:  # a quoted sentence: "W1 w2."
                ws[0], ws[-1] = '"' + ws[0], ws[-1] + '"'
            sentence = _Sentence(ws, n + (1 if is_item and position == 0 else 0))
            body_words += ws
            word_section += [len(section_paths) - 1] * n
            word_sentence += [sentence] * n
            sentences.append(" ".join(ws))
        text = " ".join(sentences)
        blocks.append(item(text) if is_item else para(text))
    return _Generated(
        ExtractedDocument("Doc", tuple(blocks), "text/plain"),
        body_words, word_section, word_sentence, section_paths,
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[int, _Generated]:
    # From 2: with a limit of 1 a list item's '- ' bullet can only be a chunk of its own.
    max_tokens = draw(st.integers(2, 12))
    return max_tokens, draw(documents(max_tokens))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_random_documents_respect_every_chunking_rule(case):
    max_tokens, generated = case
    chunks = chunk_document(generated.document, words, max_tokens)

    # Sizes: counted honestly and never past the limit.
    for chunk in chunks:
        assert chunk.token_count == len(chunk.text.split()) <= max_tokens

    # Content: every body word, unchanged and in order (bullets aside), nothing else.
    chunk_words = [[w for w in c.text.split() if w != "-"] for c in chunks]
    assert [w for ws in chunk_words for w in ws] == generated.body_words
    assert all(chunk_words), "no chunk is empty"

    # Chunks of one section only, with that section's path.
    position = 0
    spans: list[tuple[int, int]] = []
    for chunk, ws in zip(chunks, chunk_words, strict=True):
        spans.append((position, position + len(ws) - 1))
        sections = set(generated.word_section[position : position + len(ws)])
        assert len(sections) == 1, "a chunk spans a heading"
        assert chunk.section_path == generated.section_paths[sections.pop()]
        position += len(ws)

    # A boundary falls inside a sentence only when the sentence alone is over the limit.
    for (_, last), (first, _) in itertools.pairwise(spans):
        sentence = generated.word_sentence[last]
        if sentence is generated.word_sentence[first]:
            assert sentence.tokens > max_tokens, f"split inside {' '.join(sentence.words)!r}"

    # Links: one chain; the parent of a continuation chunk is its section's first chunk, the
    # parent of a section's first chunk is the first chunk of the nearest enclosing section
    # that has chunks (heading names are unique here, so a path names one section).
    section_of = [generated.word_section[begin] for begin, _ in spans]
    first_chunk: dict[tuple[str, ...], int] = {}
    for i, chunk in enumerate(chunks):
        assert chunk.index == i
        assert chunk.prev_index == (i - 1 if i else None)
        assert chunk.next_index == (i + 1 if i + 1 < len(chunks) else None)
        path = chunk.section_path
        if i and section_of[i] == section_of[i - 1]:
            assert chunk.parent_index == first_chunk[path]
            continue
        enclosing = [first_chunk[path[:cut]] for cut in range(len(path) - 1, -1, -1)
                     if path[:cut] in first_chunk]
        assert chunk.parent_index == (enclosing[0] if enclosing else None)
        first_chunk[path] = i


def test_chunks_carry_pages_and_ocr_of_their_blocks():
    blocks = (Block(BlockKind.HEADING, "Scan", 1, page=1),
              Block(BlockKind.PARAGRAPH, "one two three", page=1, ocr=True),
              Block(BlockKind.PARAGRAPH, "four five six", page=2),
              Block(BlockKind.PARAGRAPH, "seven eight nine", page=4),
              Block(BlockKind.HEADING, "Plain", 1),
              Block(BlockKind.PARAGRAPH, "no page here"))
    document = ExtractedDocument("Scan", blocks, "application/pdf")
    chunks = chunk_document(document, lambda texts: [len(t.split()) for t in texts], 6)
    assert [(c.text, c.pages, c.ocr) for c in chunks] == [
        ("one two three\nfour five six", (1, 2), True),
        ("seven eight nine", (4, 4), False),
        ("no page here", None, False),
    ]
