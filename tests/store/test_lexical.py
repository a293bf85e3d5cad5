"""BM25 of the embedded store: hostile query text is only data, matches are exactly the rows
sharing a (stemmed, folded) word with the query, scores equal SQLite FTS5's ``bm25()``, and
the in-memory posting lists stay right through appends, deletes and compaction."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.model import ChunkDraft
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from docgraph.store.lexical import (
    BREADCRUMB_WEIGHT,
    TEXT_WEIGHT,
    PostingIndex,
    TermDictionary,
    term_ids,
)
from docgraph.store.sqlite import SCHEMA_VERSION, EmbeddedChunkIndex, SQLiteCatalog
from docgraph.text import MAX_QUERY_TERMS, STOPWORDS, index_terms, query_terms, words

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


class Lexicon:
    """ROWS (breadcrumb = row number) in a term table and a posting index, searched the way
    :class:`EmbeddedChunkIndex` searches them."""

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.execute("CREATE TABLE terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)")
        self.terms = TermDictionary()
        self.index = PostingIndex()
        self.rows = rows
        self.add(rows, first_rowid=1)

    def add(self, rows: list[tuple[str, str]], first_rowid: int, namespace: int = 1,
            kind: int = 0) -> None:
        self.db.execute("BEGIN")
        encoded, learnt = self.terms.encode(self.db, rows)
        self.db.execute("COMMIT")
        self.terms.committed(learnt)
        n = len(rows)
        self.index.append(
            np.arange(first_rowid, first_rowid + n, dtype=np.int64),
            np.full(n, namespace, np.int32), np.full(n, kind, np.int8), [e.blob for e in encoded],
            np.array([e.length for e in encoded], np.float32),
        )

    def search(self, text: str, k: int = 100, namespaces: list[int] | None = None,
               kind: int = 0) -> list[tuple[int, float]]:
        terms = query_terms(text)
        found = term_ids(self.db, terms)
        return self.index.search([found[t] for t in terms if t in found], k, namespaces or [1],
                                 kind)

    def texts(self, text: str) -> list[str]:
        return sorted(self.rows[rowid - 1][1] for rowid, _ in self.search(text))


@pytest.fixture(scope="module")
def lexicon() -> Iterator[Lexicon]:
    yield Lexicon([("", row) for row in ROWS])


def words_of(text: str) -> set[str]:
    return set(index_terms(text)[0])


HOSTILE = [
    "'", '"', '""', "%", ";", "*", "NEAR(a b)", "NEAR(river bank, 2)", "a AND b", "OR",
    "NOT x", "x NOT spot", "col:term", "body:term", "{body}: term", "^start", "-x", "(", ")",
    "'; DROP TABLE terms; --", "\x00", "x\x00spot", "😀", "🔥 running 🔥", "中文", "مرحبا",
    'say "hello', "run*", "star*", '"quoted" x', "term1 + term2", "a:b:c", "[x]", "\\",
    "x' OR '1'='1", "AND OR NOT NEAR", "\u200b\ufeff", "café", "CAFE", "Straße",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_query_matches_exactly_the_rows_sharing_a_word(lexicon, query):
    wanted = set(query_terms(query))
    expected = sorted(row for row in ROWS if words_of(row) & wanted)
    assert lexicon.texts(query) == expected


def test_the_term_table_survives_an_injection_attempt(lexicon):
    before = lexicon.db.execute("SELECT count(*) FROM terms").fetchone()[0]
    assert lexicon.texts("'; DROP TABLE terms; --") == [  # 'terms' is the word 'term'
        "col term start caret", "drop table students is a classic joke"]
    assert lexicon.db.execute("SELECT count(*) FROM terms").fetchone()[0] == before


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("NEAR(river bank)", ["near the river bank"]),  # NEAR is a word, not an operator
        ("NOT spot", ["quoted x marks the spot", "the and or not"]),  # NOT is a word too
        ("col:term", ["col term start caret"]),  # no column filter
        ("^start", ["col term start caret"]),  # no initial-token anchor
        ("-x", ["quoted x marks the spot"]),
        ("star*", ["percent semicolon star"]),  # no prefix query: 'start' is not found
    ],
)
def test_query_operators_are_plain_words(lexicon, query, expected):
    assert lexicon.texts(query) == sorted(expected)


def test_very_long_query_is_capped_and_still_runs(lexicon):
    query = " ".join(f"word{i}" for i in range(2000)) + " kestrel"
    assert len(query_terms(query)) == MAX_QUERY_TERMS
    assert lexicon.texts(query) == []  # 'kestrel' came after the cap
    assert lexicon.texts("x" * 10_000) == []
    assert lexicon.texts("kestrel " + "? " * 5000) == [ROWS[1]]


@pytest.mark.parametrize(
    "query", ["", "   ", "?!.,;:", "'\"", "()", "---", "***", "___", "'; --", "😀🔥", "\x00\x01",
              "the and or", "what is it"]
)
def test_query_without_searchable_words_finds_nothing(lexicon, query):
    assert query_terms(query) == []
    assert lexicon.search(query) == []


def test_terms_are_folded_stemmed_deduplicated_and_in_order():
    assert query_terms("what is the kestrel") == ["kestrel"]
    assert query_terms("Run run RUN running, Fast!") == ["run", "fast"]
    assert query_terms("Kestrel K2 error E-417") == ["kestrel", "k2", "error", "e", "417"]


def test_stemming_case_diacritics_and_scripts_match(lexicon):
    assert lexicon.texts("running") == sorted([ROWS[0], ROWS[1]])  # 'run' and 'running'
    assert lexicon.texts("robot") == [ROWS[1]]
    assert lexicon.texts("KESTREL") == [ROWS[1]]
    assert lexicon.texts("cafe") == [ROWS[4]]
    assert lexicon.texts("CAFÉ") == [ROWS[4]]
    assert lexicon.texts("Straße") == [ROWS[7]]
    assert lexicon.texts("测试") == [ROWS[5]]
    assert lexicon.texts("مرحبا") == [ROWS[6]]
    assert lexicon.texts("ＫＥＳＴＲＥＬ") == [ROWS[1]]  # full-width input


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(lexicon, text):
    for rowid, score in lexicon.search(text):
        assert 1 <= rowid <= len(ROWS) and score > 0


# ---------------------------------------------------------------- scores equal FTS5 bm25()

CORPUS = [
    ("Robots", "The kestrel robot patrols the warehouse at night and reports faults."),
    ("Robots > Firmware", "Firmware updates for the kestrel robot ship every month."),
    ("Warehouse", "The warehouse stores spare parts, batteries and robot arms."),
    ("Outages", "An outage in Rotterdam stopped every robot for two hours."),
    ("Outages > Causes", "The Rotterdam outage was caused by a faulty firmware update."),
    ("People", "Joost manages the Rotterdam site; Maria leads firmware."),
    ("Batteries", "Batteries are charged in the warehouse; spare batteries stay cold."),
    ("Glossary", "A fault code is shown when a robot stops; E-417 means a sensor fault."),
]
QUERIES = ["kestrel robot", "rotterdam outage firmware", "spare batteries warehouse",
           "fault code E-417", "who manages the Rotterdam site", "robot"]


def fts5_scores(query: str) -> dict[int, float]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(breadcrumb, text,"
               " tokenize='porter unicode61 remove_diacritics 2')")
    db.executemany("INSERT INTO f(rowid, breadcrumb, text) VALUES (?, ?, ?)",
                   [(i + 1, b, t) for i, (b, t) in enumerate(CORPUS)])
    plain = [w for w in dict.fromkeys(words(query)) if w not in STOPWORDS]  # FTS5 stems them
    expression = " OR ".join(f'"{w}"' for w in plain)
    return {int(r): -float(s) for r, s in db.execute(
        "SELECT rowid, bm25(f, ?, ?) FROM f WHERE f MATCH ?",
        (BREADCRUMB_WEIGHT, TEXT_WEIGHT, expression))}


@pytest.mark.parametrize("query", QUERIES)
def test_scores_equal_sqlite_fts5_bm25(query, monkeypatch):
    import docgraph.store.bm25 as bm25

    # FTS5's bm25() has k1 = 1.2 and b = 0.75 built in; with those, ours is the same formula.
    monkeypatch.setattr(bm25, "K1", 1.2)
    monkeypatch.setattr(bm25, "B", 0.75)
    ours = dict(Lexicon(CORPUS).search(query))
    reference = fts5_scores(query)
    assert ours.keys() == reference.keys()
    for rowid, score in reference.items():
        assert ours[rowid] == pytest.approx(score, rel=1e-5)


# ---------------------------------------------------------------- appends, deletes, compaction


def _random_rows(rng: np.random.Generator, n: int) -> list[tuple[str, str]]:
    vocabulary = [f"w{i}" for i in range(300)]
    weights = 1.0 / np.arange(1, 301)
    weights /= weights.sum()
    return [("doc", " ".join(rng.choice(vocabulary, size=int(rng.integers(5, 40)), p=weights)))
            for _ in range(n)]


def test_posting_index_after_appends_and_deletes_equals_a_fresh_build():
    rng = np.random.default_rng(7)
    rows = _random_rows(rng, 3000)
    grown = Lexicon(rows[:2000])
    for start in range(2000, 3000, 100):  # small appends stay in the unindexed tail
        grown.add(rows[start:start + 100], first_rowid=start + 1)
    dead = rng.choice(np.arange(1, 3001), size=1600, replace=False)  # > 1/4: compacts
    grown.index.remove(np.sort(dead).astype(np.int64))
    assert len(grown.index) == 1400

    survivors = [i for i in range(1, 3001) if i not in set(dead.tolist())]
    fresh = Lexicon([])
    fresh.db = grown.db  # same term ids
    fresh.terms = grown.terms
    for i in survivors:
        fresh.add([rows[i - 1]], first_rowid=i)
    for query in ["w1 w7", "w250", "w3 w40 w299", "w0"]:
        got, want = grown.search(query, k=50), fresh.search(query, k=50)
        assert [r for r, _ in got] == [r for r, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)


KIND_QUERIES = ["w1 w7", "w250", "w3 w40 w299", "w0", "w12 w13 w14 w15"]


def _kind_scores(lexicon: Lexicon, kind: int) -> dict[str, dict[int, float]]:
    return {q: dict(lexicon.search(q, k=10_000, kind=kind)) for q in KIND_QUERIES}


def test_rows_of_another_kind_never_move_a_kinds_scores():
    """Community reports (kind 1) added, deleted and added anew, through the unindexed tail,
    the term-major copy and a compaction: every text row (kind 0) keeps its exact score, and
    the reports score as an index holding only them would."""
    rng = np.random.default_rng(11)
    texts, reports = _random_rows(rng, 2000), _random_rows(rng, 1600)
    grown = Lexicon(texts)
    want = _kind_scores(grown, 0)
    assert all(want.values())
    for start in range(0, 1600, 400):  # appended in steps: tail, then a re-index
        grown.add(reports[start:start + 400], first_rowid=3001 + start, kind=1)
        assert _kind_scores(grown, 0) == want
    assert len(grown.index) == 3600
    # every report deleted (> 1/4 of the rows dead: compacts), then written again
    grown.index.remove(np.arange(3001, 4601, dtype=np.int64))
    assert _kind_scores(grown, 0) == want
    assert _kind_scores(grown, 1) == {q: {} for q in KIND_QUERIES}
    grown.add(reports, first_rowid=5001, kind=1)
    assert _kind_scores(grown, 0) == want

    alone = Lexicon([])
    alone.db, alone.terms = grown.db, grown.terms  # same term ids
    alone.add(reports, first_rowid=5001)
    expected, got = _kind_scores(alone, 0), _kind_scores(grown, 1)
    for query, scores in expected.items():
        assert scores and got[query].keys() == scores.keys()
        assert [got[query][r] for r in scores] == pytest.approx(list(scores.values()),
                                                                rel=1e-12)
    # the text rows go: the reports keep their scores
    grown.index.remove(np.arange(1, 2001, dtype=np.int64))
    assert _kind_scores(grown, 0) == {q: {} for q in KIND_QUERIES}
    assert _kind_scores(grown, 1) == got
    # a kind no row has, or an unknown one, matches nothing
    assert grown.search("w1", kind=2) == [] and grown.search("w1", kind=99) == []


def test_scores_for_uses_the_statistics_of_the_kind_asked():
    lexicon = Lexicon([("a", "kestrel robot"), ("b", "heron crane")])
    texts = dict(lexicon.search("kestrel heron"))
    lexicon.add([("r", "kestrel kestrel heron report")] * 5, first_rowid=3, kind=1)
    found = term_ids(lexicon.db, query_terms("kestrel heron"))
    ids = list(found.values())
    rowids = np.arange(1, 8, dtype=np.int64)
    assert lexicon.index.scores_for(ids, rowids, [1]) == texts
    reports = lexicon.index.scores_for(ids, rowids, [1], kind=1)
    assert sorted(reports) == [3, 4, 5, 6, 7]
    assert reports == dict(lexicon.search("kestrel heron", kind=1))


def test_search_respects_namespace_and_kind():
    lexicon = Lexicon([("a", "kestrel robot")])
    lexicon.add([("b", "kestrel robot")], first_rowid=2, namespace=2)
    assert [r for r, _ in lexicon.search("kestrel", namespaces=[1])] == [1]
    assert [r for r, _ in lexicon.search("kestrel", namespaces=[2])] == [2]
    assert lexicon.search("kestrel", namespaces=[3]) == []
    assert lexicon.index.search([1], 10, [1], kind=1) == []


def test_idf_never_goes_negative_for_a_term_in_most_rows():
    import docgraph.store.lexical as lexical

    lexicon = Lexicon([("x", "common rare")] + [("x", "common")] * 9)
    hits = dict(lexicon.search("common rare"))
    assert len(hits) == 10 and min(hits.values()) > 0
    assert max(hits, key=lambda r: hits[r]) == 1
    # 'common' is in every row: its idf is floored, not negative; lengths count 'x' too
    k1, b = lexical.K1, lexical.B
    assert hits[2] == pytest.approx(1e-6 * (k1 + 1) / (1 + k1 * (1 - b + b * 2 / 2.1)), rel=1e-6)
    assert math.isfinite(hits[1])


# ---------------------------------------------------------------- the catalog keeps them


def _write(catalog: SQLiteCatalog, source, path: str, texts: list[str]) -> None:
    rng = np.random.default_rng(len(texts))
    vectors = rng.normal(size=(len(texts), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    catalog.write_document(DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path), title=path,
        content_hash=str(hash(tuple(texts))), change_token="t", media_type="text/plain",
        chunks=[ChunkDraft(i, t, (), 3, None, None, None) for i, t in enumerate(texts)],
        breadcrumbs=[f"[{path}]"] * len(texts), embedded_texts=texts, vectors=vectors,
    ))


def test_an_index_of_schema_1_is_migrated_and_searchable(tmp_path):
    path = tmp_path / "old.db"
    catalog = SQLiteCatalog(path)
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    _write(catalog, source, "a.txt", ["kestrel robots patrol", "rotterdam outage report"])
    catalog.close()
    # Turn it into what docgraph wrote before BM25 moved out of FTS5.
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript("""
        DROP TRIGGER chunks_ad;
        ALTER TABLE chunks DROP COLUMN terms;
        ALTER TABLE chunks DROP COLUMN term_count;
        DROP TABLE terms;
        CREATE VIRTUAL TABLE chunks_fts USING fts5(breadcrumb, text, content='chunks',
            content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, text)
                VALUES ('delete', old.id, old.breadcrumb, old.text);
            INSERT INTO chunk_tombstones(chunk_id) VALUES (old.id);
        END;
        INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
        UPDATE meta SET value = '1' WHERE key = 'schema_version';
    """)
    db.close()

    catalog = SQLiteCatalog(path)
    version = catalog.connection().execute(
        "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    assert int(version) == SCHEMA_VERSION
    index = EmbeddedChunkIndex(catalog, 8)
    hits = index.lexical_search("outage in Rotterdam", 5, frozenset({"ns"}))
    assert [catalog.chunks_by_rowid([h.rowid])[h.rowid].text for h in hits] == [
        "rotterdam outage report"]
    _write(catalog, source, "a.txt", ["kestrel robots patrol"])  # deletes work after it
    assert index.lexical_search("rotterdam", 5, frozenset({"ns"})) == []
    catalog.close()
