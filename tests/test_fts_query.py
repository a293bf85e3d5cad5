"""Free user text becomes a safe FTS5 MATCH expression: never a syntax error, never an
operator, and it matches exactly the rows sharing a (stemmed) word with the query."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.store.fts_query import MAX_TERMS, fts5_terms, to_fts5_query

TOKENIZE = "porter unicode61 remove_diacritics 2"  # as the real chunk index

ROWS = [
    "The runner was running fast down the hill",
    "Kestrel robots run firmware 4.2.1 in the warehouse",
    "drop table students is a classic joke",
    "near the river bank",
    "café crème brûlée recipe",
    "中文 测试 文档",
    "مرحبا بالعالم",
    "Die Straße ist lang",
    "the and or not",
    "col term start caret",
    "quoted x marks the spot",
    "percent semicolon star",
]


@pytest.fixture(scope="module")
def db() -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(":memory:")
    con.execute(f"CREATE VIRTUAL TABLE docs USING fts5(body, tokenize='{TOKENIZE}')")
    con.executemany("INSERT INTO docs(body) VALUES (?)", [(r,) for r in ROWS])
    # A scratch table with the same tokenizer: its vocabulary is the oracle for which
    # (stemmed, folded) tokens a piece of text has.
    con.execute(f"CREATE VIRTUAL TABLE scratch USING fts5(body, tokenize='{TOKENIZE}')")
    con.execute("CREATE VIRTUAL TABLE scratch_vocab USING fts5vocab(scratch, 'row')")
    yield con
    con.close()


def tokens(db: sqlite3.Connection, text: str) -> set[str]:
    """The index terms FTS5 itself makes of ``text``."""
    db.execute("DELETE FROM scratch")
    db.execute("INSERT INTO scratch(body) VALUES (?)", (text,))
    return {row[0] for row in db.execute("SELECT term FROM scratch_vocab")}


def search(db: sqlite3.Connection, text: str) -> list[str] | None:
    expression = to_fts5_query(text)
    if expression is None:
        return None
    rows = db.execute("SELECT body FROM docs WHERE docs MATCH ? ORDER BY rowid", (expression,))
    return [r[0] for r in rows]


HOSTILE = [
    "'", '"', '""', "%", ";", "*", "NEAR(a b)", "NEAR(river bank, 2)", "a AND b", "OR",
    "NOT x", "x NOT spot", "col:term", "body:term", "{body}: term", "^start", "-x", "(", ")",
    "'; DROP TABLE docs; --", "\x00", "x\x00spot", "😀", "🔥 running 🔥", "中文", "مرحبا",
    'say "hello', "run*", "star*", '"quoted" x', "term1 + term2", "a:b:c", "[x]", "\\",
    "x' OR '1'='1", "AND OR NOT NEAR", "\u200b\ufeff", "café", "CAFE", "Straße",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_query_never_raises_and_matches_only_rows_sharing_a_word(db, query):
    result = search(db, query)
    query_tokens = tokens(db, query)
    if result is None:
        assert fts5_terms(query) == []
        return
    for row in result:
        assert tokens(db, row) & query_tokens, f"{row!r} shares no word with {query!r}"
    # ...and it finds every row with one of its (non-stopword) terms.
    wanted = tokens(db, " ".join(fts5_terms(query)))
    assert result == [r for r in ROWS if tokens(db, r) & wanted]


def test_the_table_survives_an_injection_attempt(db):
    assert search(db, "'; DROP TABLE docs; --") == ["drop table students is a classic joke"]
    assert db.execute("SELECT count(*) FROM docs").fetchone()[0] == len(ROWS)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("NEAR(river bank)", ["near the river bank"]),  # NEAR is a word, not an operator
        ("NOT spot", ["the and or not", "quoted x marks the spot"]),  # NOT is a word too
        ("col:term", ["col term start caret"]),  # no column filter
        ("^start", ["col term start caret"]),  # no initial-token anchor
        ("-x", ["quoted x marks the spot"]),
        ("star*", ["percent semicolon star"]),  # no prefix query: 'start' is not found
    ],
)
def test_fts5_operators_are_plain_words(db, query, expected):
    assert search(db, query) == expected


def test_very_long_query_is_capped_and_still_runs(db):
    query = " ".join(f"word{i}" for i in range(2000)) + " kestrel"
    assert len(query) > 10_000
    assert len(fts5_terms(query)) == MAX_TERMS
    assert search(db, query) == []  # 'kestrel' came after the cap
    assert search(db, "x" * 10_000) == []
    assert search(db, "kestrel " + "? " * 5000) == [ROWS[1]]


@pytest.mark.parametrize(
    "query", ["", "   ", "?!.,;:", "'\"", "()", "---", "***", "___", "'; --", "😀🔥", "\x00\x01"]
)
def test_punctuation_only_query_gives_none(query):
    assert fts5_terms(query) == []
    assert to_fts5_query(query) is None


def test_stopwords_are_dropped_unless_they_are_all_there_is(db):
    assert fts5_terms("what is the kestrel") == ["kestrel"]
    assert to_fts5_query("the and or") == '"the" OR "and" OR "or"'
    assert search(db, "The AND or") == [ROWS[0], ROWS[1], ROWS[3], ROWS[8], ROWS[10]]


def test_terms_are_lowered_deduplicated_and_in_order():
    assert fts5_terms("Run run RUN fast, Fast!") == ["run", "fast"]
    assert to_fts5_query("Kestrel K2 error E-417") == (
        '"kestrel" OR "k2" OR "error" OR "e" OR "417"'
    )


def test_porter_stemming_still_matches(db):
    assert search(db, "running") == [ROWS[0], ROWS[1]]  # 'run' and 'running'
    assert search(db, "robot") == [ROWS[1]]


def test_case_diacritics_and_sharp_s_still_match(db):
    assert search(db, "KESTREL") == [ROWS[1]]
    assert search(db, "cafe") == [ROWS[4]]
    assert search(db, "CAFÉ") == [ROWS[4]]
    assert search(db, "Straße") == [ROWS[7]]
    assert search(db, "STRASSE") == []  # unicode61 does not fold ß to ss; neither do we


def test_non_latin_scripts_match(db):
    assert search(db, "测试") == [ROWS[5]]
    assert search(db, "مرحبا") == [ROWS[6]]


def test_fullwidth_input_is_normalized(db):
    assert search(db, "ＫＥＳＴＲＥＬ") == [ROWS[1]]


_EXPRESSION = re.compile(r'"[^"]+"( OR "[^"]+")*')


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_arbitrary_text_never_makes_match_raise(db, text):
    expression = to_fts5_query(text)
    if expression is None:
        return
    assert _EXPRESSION.fullmatch(expression)
    db.execute("SELECT rowid FROM docs WHERE docs MATCH ?", (expression,)).fetchall()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([*HOSTILE, "run", "river", "the", "x", "中文"]), max_size=8))
def test_mixtures_of_hostile_fragments_match_only_rows_sharing_a_word(db, parts):
    query = " ".join(parts)
    result = search(db, query)
    if result is None:
        return
    query_tokens = tokens(db, query)
    assert all(tokens(db, row) & query_tokens for row in result)
