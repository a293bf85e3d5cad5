"""PostgreSQL-only behaviour: versioned migrations, exact term statistics, the HNSW index,
and clear errors for features that still need the embedded store."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.errors import ConfigError, StoreError
from docgraph.model import ChunkDraft, DocumentRecord, SourceRecord
from docgraph.sources.urn import document_id, normalize_urn
from docgraph.store.base import DocumentWrite
from tests.helpers import CountingEmbedder, write_files
from tests.pg import PostgresServer, pgvector_server  # noqa: F401

pytest.importorskip("psycopg")
from docgraph.store.postgres import PostgresCatalog, PostgresChunkIndex
from docgraph.store.postgres.schema import SCHEMA_VERSION


@pytest.fixture
def pg_url(pgvector_server: PostgresServer) -> Iterator[str]:  # noqa: F811
    import uuid

    name = f"t_{uuid.uuid4().hex[:12]}"
    url = pgvector_server.create_database(name)
    try:
        yield url
    finally:
        pgvector_server.drop_database(name)


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    rows = rng.normal(size=(n, d)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _write_texts(catalog: PostgresCatalog, source: SourceRecord, path: str, texts: list[str],
                 vectors: np.ndarray, *, breadcrumb: str = "", section: tuple[str, ...] = (),
                 tokens: int = 1, content_hash: str = "h") -> DocumentRecord:
    """Write ``texts`` as the chunks of document ``path`` (one breadcrumb for all)."""
    return catalog.write_document(DocumentWrite(
        source=source, path=path, doc_id=document_id(source.urn, path), title=path,
        content_hash=content_hash, change_token="t", media_type="text/plain",
        chunks=[ChunkDraft(i, t, section, tokens, None, None, None)
                for i, t in enumerate(texts)],
        breadcrumbs=[breadcrumb] * len(texts), embedded_texts=texts, vectors=vectors))


def test_migrations_are_versioned_idempotent_and_refuse_newer_schemas(pg_url: str) -> None:
    first = PostgresCatalog(pg_url)
    assert first.schema_version() == SCHEMA_VERSION
    second = PostgresCatalog(pg_url)  # re-opening applies nothing
    assert second.schema_version() == SCHEMA_VERSION
    with first.transaction() as db:
        db.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer"):
        PostgresCatalog(pg_url)
    first.close()
    second.close()


def test_an_index_from_before_migration_4_is_upgraded_in_place(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A database at schema 3: postings keyed without tf/doc_len, a full-precision HNSW index.
    import docgraph.store.postgres.catalog as pg_store
    from docgraph.store.postgres.schema import MIGRATIONS

    monkeypatch.setattr(pg_store, "MIGRATIONS", MIGRATIONS[:3])
    monkeypatch.setattr(pg_store, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(pg_store, "hnsw_index_statements", lambda d: (
        f"CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw_{d} ON chunks"
        f" USING hnsw ((embedding::vector({d})) vector_cosine_ops)",))
    old = PostgresCatalog(pg_url)
    # The write below is today's code: lend the old schema the page, metadata, parent, line,
    # access and own-terms columns it writes, and take them away before the upgrade adds them.
    later_columns = (("chunks", "page_first integer"), ("chunks", "page_last integer"),
                     ("chunks", "ocr boolean NOT NULL DEFAULT false"),
                     ("documents", "metadata jsonb NOT NULL DEFAULT '{}'::jsonb"),
                     ("documents", "parent_id bigint"), ("documents", "line_hashes jsonb"),
                     ("documents", "lines_dropped jsonb NOT NULL DEFAULT '[]'::jsonb"),
                     ("documents", "access jsonb"), ("chunks", "lexical tsvector"),
                     ("documents", "language text"))
    for table, column in later_columns:
        old.connection().execute(f"ALTER TABLE {table} ADD COLUMN {column}")
    old.connection().execute("CREATE TABLE community_access_sources (community_id integer,"
                             " doc_id text, access jsonb, PRIMARY KEY (community_id, doc_id))")
    old.set_embedding_model("m", 8)
    urn = normalize_urn(tmp_path)
    with old.transaction() as db:  # the source row as the code of schema 3 wrote it
        db.execute("INSERT INTO namespaces (name) VALUES ('ns')")
        (source_id,) = db.execute(
            "INSERT INTO sources (urn, namespace_id, scheme, created_at) SELECT %s, id,"
            " 'file', 0 FROM namespaces WHERE name = 'ns' RETURNING id", (urn,)).fetchone()
    source = SourceRecord(int(source_id), urn, "ns", "file")
    vectors = _unit_rows(np.random.default_rng(3), 30, 8)
    _write_texts(old, source, "a", [f"heron number {i}" for i in range(30)], vectors,
                 breadcrumb="[a]")
    for table, column in later_columns:
        old.connection().execute(f"ALTER TABLE {table} DROP COLUMN {column.split()[0]}")
    old.connection().execute("DROP TABLE community_access_sources")
    old.close()
    monkeypatch.undo()

    upgraded = PostgresCatalog(pg_url)
    assert upgraded.schema_version() == SCHEMA_VERSION
    indexes = dict(upgraded.connection().execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN ('chunks', 'postings')"
    ).fetchall())
    assert "chunks_embedding_hnsw_8" not in indexes
    assert "halfvec" in indexes["chunks_embedding_hnsw_half_8"]
    assert "INCLUDE (tf, doc_len)" in indexes["postings_pkey"]
    index = PostgresChunkIndex(upgraded, 8)
    # (BM25 of schema 3 is not today's query: the statistics are per kind since migration 17,
    # whose upgrade tests/store/test_bm25_kinds.py compares score by score)
    hits = index.lexical_search("heron 7", 5, frozenset({"ns"}))
    assert len(hits) == 5 and hits[0].score > hits[1].score
    assert upgraded.chunks_by_rowid([hits[0].rowid])[hits[0].rowid].text == "heron number 7"
    # Through the HNSW index:
    monkeypatch.setattr("docgraph.store.postgres.index.EXACT_SCAN_ROWS", 0)
    top = index.dense_search(vectors[7], 3, frozenset({"ns"}))
    assert upgraded.chunks_by_rowid([top[0].rowid])[top[0].rowid].text == "heron number 7"
    assert top[0].score == pytest.approx(1.0, abs=1e-6)  # re-scored in full precision
    upgraded.close()


def test_unreachable_server_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(StoreError, match="cannot connect") as caught:
        PostgresCatalog("postgresql://u:secret@127.0.0.1:1/db")
    assert "secret" not in str(caught.value)


def test_hnsw_candidate_count_is_a_checked_setting() -> None:
    with pytest.raises(ConfigError, match="pg_ef_search"):
        load_settings(store={"pg_ef_search": 5})


def test_postgres_backend_needs_a_url() -> None:
    with pytest.raises((ConfigError, ValueError), match=r"store\.url"):
        load_settings(store={"backend": "postgres"})


def test_term_statistics_equal_a_recount_after_writes_and_deletes(pg_url: str,
                                                                  tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    catalog = PostgresCatalog(pg_url)
    catalog.set_embedding_model("m", 8)
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    words = ["otter", "badger", "crane", "heron", "Straße", "café", "running", "runs"]
    docs = []
    for round_ in range(6):
        for d in range(4):
            texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 9))))
                     for _ in range(int(rng.integers(1, 5)))]
            path = f"d{d}.txt"
            docs.append(_write_texts(catalog, source, path, texts,
                                     _unit_rows(rng, len(texts), 8),
                                     breadcrumb=f"[{path} > Sect]", section=("Sect",),
                                     tokens=3, content_hash=f"{round_}"))
        if round_ % 2:
            catalog.delete_document(docs[-1])
    db = catalog.connection()
    kept = {(k, t): df for k, t, df in db.execute("SELECT kind, term, df FROM terms")}
    recount = {(k, t): df for k, t, df in db.execute(
        "SELECT c.kind, u.lexeme, count(*) FROM chunks c, unnest(c.lexemes) u GROUP BY 1, 2")}
    assert kept == recount
    assert db.execute("SELECT kind, n, total_len FROM corpus_kind_stats WHERE n > 0"
                      ).fetchall() == db.execute(
        "SELECT 'text', (SELECT count(*) FROM chunks),"
        " coalesce(sum(array_length(u.positions, 1)), 0) FROM chunks c, unnest(c.lexemes) u"
    ).fetchall()
    n, total = db.execute("SELECT n, total_len FROM corpus_stats").fetchone()
    assert n == db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert total == db.execute(
        "SELECT coalesce(sum(array_length(u.positions, 1)), 0)"
        " FROM chunks c, unnest(c.lexemes) u").fetchone()[0]
    postings = db.execute("SELECT count(*) FROM postings").fetchone()[0]
    assert postings == sum(recount.values())
    counts = db.execute("SELECT namespace_id, kind, n FROM chunk_counts WHERE n > 0"
                        " ORDER BY 1, 2").fetchall()
    assert counts == db.execute("SELECT namespace_id, kind, count(*) FROM chunks"
                                " GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    # Diacritics and stemming match the embedded tokenizer's behaviour.
    index = PostgresChunkIndex(catalog, 8)
    assert index.lexical_search("cafe", 3, frozenset({"ns"})) == \
        index.lexical_search("café", 3, frozenset({"ns"}))
    catalog.close()


def test_dense_search_uses_the_hnsw_index(pg_url: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    catalog = PostgresCatalog(pg_url)
    catalog.set_embedding_model("m", 8)
    source = catalog.add_source(normalize_urn(tmp_path), "ns")
    vectors = _unit_rows(rng, 2000, 8)
    _write_texts(catalog, source, "a", [f"t{i}" for i in range(2000)], vectors,
                 breadcrumb="[a]")
    db = catalog.connection()
    db.execute("ANALYZE chunks")
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN SELECT id FROM chunks WHERE namespace_id = ANY(%s) AND kind = 'text'"
        " ORDER BY embedding::halfvec(8) <=> %s::halfvec(8) LIMIT 5",
        ([catalog.namespace_ids(["ns"])["ns"]], vectors[0])))
    assert "chunks_embedding_hnsw_half_8" in plan
    index = PostgresChunkIndex(catalog, 8)
    top = index.dense_search(vectors[42], 1, frozenset({"ns"}))
    assert catalog.chunks_by_rowid([top[0].rowid])[top[0].rowid].text == "t42"
    catalog.close()


def test_a_selective_namespace_filter_is_exact(pg_url: str, tmp_path: Path) -> None:
    # 4,000 random 384-d vectors (a hard case for a graph index), 5% of them in "small". A
    # filtered HNSW walk mostly visits rows of "big" and misses true neighbours in "small";
    # the few rows of "small" are scanned exactly instead.
    rng = np.random.default_rng(11)
    dim, per_doc = 384, 100
    catalog = PostgresCatalog(pg_url)
    catalog.set_embedding_model("m", dim)
    sources = {ns: catalog.add_source(normalize_urn(tmp_path / ns), ns) for ns in ("big", "small")}
    vectors = _unit_rows(rng, 4000, dim)
    small_rows: list[np.ndarray] = []
    with catalog.bulk_load():
        for d in range(40):
            ns = "small" if d % 20 == 0 else "big"
            part = vectors[d * per_doc:(d + 1) * per_doc]
            if ns == "small":
                small_rows.append(part)
            _write_texts(catalog, sources[ns], f"d{d}", [f"c{d}-{i}" for i in range(per_doc)],
                         part)
    catalog.connection().execute("ANALYZE chunks")
    small = np.concatenate(small_rows)
    # Make the planner prefer the HNSW index to sorting the filtered rows, as it does on
    # bigger tables (at 20k chunks a 10% namespace got recall@10 0.44 that way).
    catalog.connection().execute("SET enable_sort = off")
    index = PostgresChunkIndex(catalog, dim)
    found = total = 0
    for query in rng.normal(size=(30, dim)).astype(np.float32):
        query /= np.linalg.norm(query)
        exact = set(np.argsort(-(small @ query))[:10].tolist())
        rows = index.dense_search(query, 10, frozenset({"small"}))
        texts = catalog.chunks_by_rowid([r.rowid for r in rows])
        got = set()
        for r in rows:
            d, i = texts[r.rowid].text[1:].split("-")
            got.add((int(d) // 20) * per_doc + int(i))
        assert [r.score for r in rows] == sorted((r.score for r in rows), reverse=True)
        found += len(exact & got)
        total += 10
    assert found / total == 1.0
    catalog.close()


def test_docgraph_offers_search_graph_and_refresh_on_postgres(pg_url: str,
                                                             tmp_path: Path) -> None:
    write_files(tmp_path / "docs", {"a.md": "# A\n\nOtters hold hands while sleeping.\n"})
    graph = DocGraph(load_settings(store={"backend": "postgres", "url": pg_url,
                                          "pg_ef_search": 123}), CountingEmbedder())
    try:
        assert graph.chunk_index().ef_search == 123  # type: ignore[attr-defined]
        graph.index(tmp_path / "docs", namespace="zoo")
        assert graph.search("otters", namespaces={"zoo"}, k=1)[0].source_path == "a.md"
        assert graph.status().namespaces[0].chunks == 1
        # the graph and cohort search live in the PostgreSQL catalog too
        assert graph.search("otters", namespaces={"zoo"}, mode="vector_first")[0].source_path \
            == "a.md"
        assert isinstance(graph.entities({"zoo"}), list)  # a graph to ask, no error
        [report] = graph.refresh()  # the refresher runs on PostgreSQL: nothing changed
        assert (report.unchanged, report.chunks_embedded) == (1, 0)
        assert graph.remove_folder(tmp_path / "docs", namespace="zoo") == 1
    finally:
        graph.close()


def test_migrate_copies_an_embedded_index_without_re_embedding(pg_url: str,
                                                               tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from docgraph.serve.cli import app
    from tests.conftest import SAMPLE_CORPUS

    index_path = tmp_path / "index.db"
    embedder = CountingEmbedder()
    queries = ["What caused the Rotterdam outage?", "What does error E-417 mean?",
               "parental leave", "badge reader certificate"]
    embedded = DocGraph(load_settings(store={"path": index_path}), embedder)
    try:
        built = embedded.index(SAMPLE_CORPUS, namespace="demo")
        write_files(tmp_path / "more", {"x.md": "# Extra\n\nA second namespace.\n"})
        embedded.index(tmp_path / "more", namespace="extra")
        before = {(q, m): [(h.chunk_id, round(h.score, 4), h.pages) for h in
                           embedded.search(q, namespaces={"demo"}, k=5, mode=m)]
                  for q in queries for m in ("dense", "hybrid")}
        metadata = {d.path: d.metadata for d in embedded.store.list_documents({"demo"})}
        lines = {s.urn: embedded.store.line_counts(s, 1) for s in embedded.store.list_sources()}
    finally:
        embedded.close()

    result = CliRunner().invoke(app, ["--index", str(index_path), "migrate", "--to", pg_url])
    assert result.exit_code == 0, result.output
    assert f"{built.chunks_written + 1} chunks" in result.output

    count = embedder.embedded
    moved = DocGraph(load_settings(store={"backend": "postgres", "url": pg_url}), embedder)
    try:
        assert sorted(moved.namespaces()) == ["demo", "extra"]
        for (query, mode), hits in before.items():
            after = moved.search(query, namespaces={"demo"}, k=5, mode=mode)  # type: ignore[arg-type]
            if mode == "dense":  # scores: float16 (embedded) vs PostgreSQL's arithmetic
                assert [(h.chunk_id, h.pages) for h in after] == [(c, p) for c, _, p in hits]
                assert [h.score for h in after] == pytest.approx([s for _, s, _ in hits],
                                                                 abs=1e-3), query
            else:  # BM25 differs in tokenization details (PostgreSQL's analyzer): the fused
                # top hit must still be one of the embedded index's best three
                assert after[0].chunk_id in [c for c, _, _ in hits[:3]], query
        assert any(pages for hits in before.values() for _, _, pages in hits)  # PDF pages
        assert {d.path: d.metadata for d in moved.store.list_documents({"demo"})} == metadata
        assert metadata["engineering/postmortem-inc-2025-007-rotterdam.pdf"]["author"] \
            == "Mei Tanaka"
        # The mail's attachment keeps its link to its mail (and is deleted with it there).
        mail = "support/brightwell-dock-audit.mbox"
        parents = {path: d.parent for source in moved.store.list_sources()
                   for path, d in moved.store.documents_for_source(source).items()
                   if path.startswith(mail)}
        assert parents == {mail: None, f"{mail}/daventry-dock-audit-2025-03-31.csv": mail}
        assert {s.urn: moved.store.line_counts(s, 1) for s in moved.store.list_sources()} \
            == lines and any(lines.values())  # every document's line fingerprints
        again = moved.index(SAMPLE_CORPUS, namespace="demo")
        assert again.chunks_embedded == 0 and not again.added and not again.updated
    finally:
        moved.close()
    assert embedder.embedded == count + len(before)  # only the query embeddings
    rerun = CliRunner().invoke(app, ["--index", str(index_path), "migrate", "--to", pg_url])
    assert isinstance(rerun.exception, StoreError) and "already holds" in str(rerun.exception)


def test_bm25_pruning_returns_exactly_the_exhaustive_ranking(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # MaxScore skips chunks that cannot reach the top k; it must never change the answer.
    # Zipf-like words make some terms common (pruned, looked up) and some rare (essential).
    import docgraph.store.postgres.index as pg_store

    rng = np.random.default_rng(5)
    vocab = [f"w{i}x" for i in range(60)]
    probs = 1 / np.arange(1, len(vocab) + 1)
    probs /= probs.sum()
    catalog = PostgresCatalog(pg_url)
    catalog.set_embedding_model("m", 8)
    sources = {ns: catalog.add_source(normalize_urn(tmp_path / ns), ns) for ns in ("a", "b")}
    for d in range(24):
        ns = "b" if d % 4 == 0 else "a"
        texts = [" ".join(rng.choice(vocab, size=int(rng.integers(3, 30)), p=probs))
                 for _ in range(10)]
        _write_texts(catalog, sources[ns], f"d{d}", texts, _unit_rows(rng, len(texts), 8),
                     breadcrumb=f"[d{d}]", tokens=3)
    index = PostgresChunkIndex(catalog, 8)
    queries = [" ".join(rng.choice(vocab, size=int(rng.integers(1, 6)), p=probs))
               for _ in range(60)]
    cases = [(q, k, ns) for q in queries for k in (1, 5, 20)
             for ns in (frozenset({"a", "b"}), frozenset({"b"}))]
    exhaustive = {case: index.lexical_search(*case) for case in cases}
    true_scores = {(q, ns): {r.rowid: r.score for r in index.lexical_search(q, 10_000, ns)}
                   for q, _, ns in cases}
    plans: list[int] = []
    real_plan = pg_store.bm25_plan

    def recording_plan(*args: object, **kwargs: object) -> int:
        plans.append(real_plan(*args, **kwargs))  # type: ignore[arg-type]
        return plans[-1]

    monkeypatch.setattr(pg_store, "FULL_SCORE_POSTINGS", 0)  # always plan, never one pass
    monkeypatch.setattr(pg_store, "bm25_plan", recording_plan)
    # Survivors' other terms looked up by key (cheap lookups) or scanned (dear lookups).
    for ((q, k, ns), expected), probe_cost in itertools.product(exhaustive.items(),
                                                                 (1, 10**9)):
        monkeypatch.setattr(pg_store, "PROBE_COST", probe_cost)
        pruned = index.lexical_search(q, k, ns)
        # The same k best scores (chunks tied to the last bit may swap: the two paths add
        # a chunk's term scores in different orders), each chunk with its true score.
        assert [r.score for r in pruned] == pytest.approx([r.score for r in expected],
                                                           rel=1e-9), (q, k, ns)
        assert [r.score for r in pruned] == pytest.approx(
            [true_scores[q, ns][r.rowid] for r in pruned], rel=1e-9), (q, k, ns)
        assert len({r.rowid for r in pruned}) == len(pruned)
    # The pruned path really ran, and often stopped before treating every term as essential.
    assert len(plans) >= 2 * len(cases)
    assert sum(1 for p in plans if p == 1) > len(cases) // 4
    catalog.close()


def test_every_migration_after_11_can_be_undone_by_the_upgrade_tests():
    """The upgrade tests turn an index back into an older one with ``pg.MIGRATION_UNDO``; a
    migration added without its undo would make them fail for the wrong reason."""
    from docgraph.store.postgres.schema import SCHEMA_VERSION
    from tests import pg

    assert sorted(pg.MIGRATION_UNDO) == list(range(12, SCHEMA_VERSION + 1))
