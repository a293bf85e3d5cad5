"""Crash scenarios: a corpus, uninterrupted reference builds, kills, re-runs, checks.

A *setting* is a folder plus the index a build starts from: ``fresh`` (an empty index over the
corpus of :mod:`tests.crash_corpus`) or ``update`` (a built index whose folder then had files
edited, added, removed and touched). Its reference is the state an uninterrupted build reaches.
A *scenario* kills ``docgraph index`` at one or more points (:mod:`tests.crash_harness`),
checks the index after every kill, re-runs the build in this process and compares the result
with the reference. Used by ``tests/ingest/test_crash_consistency.py`` and ``bench/crash.py``.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docgraph.app import DocGraph
from docgraph.embedding.embedders import HashingEmbedder
from docgraph.ingest.pipeline import PARALLEL_AFTER_FILES
from docgraph.store.lexical import decode_terms
from docgraph.store.sqlite import EmbeddedChunkIndex, SQLiteCatalog
from docgraph.store.sqlite.graph import SQLiteGraphStore
from docgraph.text import text_hash
from tests.crash_corpus import make_corpus, mutate_corpus
from tests.crash_harness import (
    PHASES,
    KillPoint,
    Launcher,
    Trap,
    kill_leftovers,
    wait_gone,
)

NAMESPACE = "crash"
# A worker still starting (re-importing the caller's modules) exits once it has started;
# on 2 busy cores that can take a few seconds.
ORPHAN_TIMEOUT_S = 15.0
# From this "prepare" event on, a pooled build has started both its worker processes.
POOLED_FROM = PARALLEL_AFTER_FILES + 3


def write_config(path: Path) -> Path:
    """Settings for the killed command: the deterministic hashing embedder, two workers."""
    path.write_text('[embed]\nmodel = "hashing"\n\n[loader]\nworkers = 2\n', encoding="utf-8")
    return path


def open_index(index: Path, config: Path, embedder: HashingEmbedder | None = None) -> DocGraph:
    """The index as this process opens it: inline preparation (a pooled build writes the
    same rows, tested in test_ingest.py), so re-runs do not pay for worker start-up."""
    return DocGraph.open(index, config_file=config, embedder=embedder or HashingEmbedder(),
                         loader={"workers": 1})


def index_state(catalog: SQLiteCatalog, namespace: str) -> dict[str, Any]:
    """Everything a build decides, keyed so that two builds of the same files compare
    equal whatever their internal row ids: documents, chunks (text, vector, BM25 terms),
    entity links, entities, edges, communities with their reports, dirty flags."""
    db = catalog.connection()
    store = SQLiteGraphStore(catalog)
    terms = dict(db.execute("SELECT id, term FROM terms").fetchall())
    ns = (namespace,)
    documents = sorted(db.execute(
        "SELECT d.doc_id, d.kind, d.path, d.title, d.content_hash, d.change_token,"
        " d.media_type, d.chunk_count, (SELECT p.path FROM documents p WHERE"
        " p.id = d.parent_id) FROM documents d JOIN namespaces n ON n.id ="
        " d.namespace_id WHERE n.name = ?", ns).fetchall())
    chunks = []
    for row in db.execute(
        "SELECT d.doc_id, c.chunk_index, c.kind, c.text, c.breadcrumb, c.section_path,"
        " c.token_count, c.prev_index, c.next_index, c.parent_index, c.embed_hash, c.vector,"
        " c.terms, c.term_count FROM chunks c JOIN documents d ON d.id = c.document_id"
        " JOIN namespaces n ON n.id = c.namespace_id WHERE n.name = ?", ns):
        ids, weights = decode_terms(row[12])
        words = tuple(sorted(zip((terms[int(i)] for i in ids), weights.tolist(), strict=True)))
        chunks.append((*row[:11], hashlib.sha256(row[11]).hexdigest(), words, row[13]))
    links = sorted(db.execute(
        "SELECT d.doc_id, c.chunk_index, e.key, ce.frequency, ce.first_position, ce.score"
        " FROM chunk_entities ce JOIN chunks c ON c.id = ce.chunk_id"
        " JOIN documents d ON d.id = c.document_id JOIN entities e ON e.id = ce.entity_id"
        " JOIN namespaces n ON n.id = e.namespace_id WHERE n.name = ?", ns).fetchall())
    entities = sorted(db.execute(
        "SELECT e.key, e.name, e.type FROM entities e JOIN namespaces n ON"
        " n.id = e.namespace_id WHERE n.name = ?", ns).fetchall())
    communities = sorted(db.execute(
        "SELECT c.level, c.ordinal, c.size, c.title, c.report_doc_id FROM communities c"
        " JOIN namespaces n ON n.id = c.namespace_id WHERE n.name = ?", ns).fetchall())
    dirty = db.execute("SELECT graph_dirty FROM namespaces WHERE name = ?", ns).fetchone()
    return {
        "documents": documents,
        "chunks": sorted(chunks),
        "links": links,
        "entities": entities,
        "edges": store.edge_signature(namespace),
        "community_members": store.community_signature(namespace),
        "communities": communities,
        "graph_dirty": None if dirty is None else int(dirty[0]),
        "failures": sorted((f.path, f.reason) for f in catalog.failures()),
        "model": catalog.embedding_model(),
    }


def first_difference(got: dict[str, Any], want: dict[str, Any]) -> str | None:
    """A short description of where two index states differ, or None if they are equal."""
    for key in want:
        if got.get(key) != want[key]:
            a, b = got.get(key), want[key]
            if isinstance(a, list) and isinstance(b, list):
                extra = [x for x in a if x not in b][:2]
                missing = [x for x in b if x not in a][:2]
                return (f"{key}: {len(a)} vs {len(b)}; extra {extra!r:.300};"
                        f" missing {missing!r:.300}")
            return f"{key}: {a!r:.200} vs {b!r:.200}"
    return None


def half_written_documents(catalog: SQLiteCatalog) -> list[str]:
    """Documents whose stored chunks are not exactly chunk 0..chunk_count-1."""
    bad = []
    for doc_id, count, indexes in catalog.connection().execute(
        "SELECT d.doc_id, d.chunk_count, group_concat(c.chunk_index) FROM documents d"
        " LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.id"):
        got = sorted(int(i) for i in indexes.split(",")) if indexes else []
        if got != list(range(int(count))):
            bad.append(str(doc_id))
    return bad


def stored_embed_hashes(catalog: SQLiteCatalog) -> Counter[str]:
    """How many stored chunks (text and report) have each embedded-text hash; chunks
    committed pending (no vector yet: the killed build had not embedded them) are left
    out, since embedding them is the re-run's work, not a repeat."""
    return Counter(str(h) for (h,) in catalog.connection().execute(
        "SELECT embed_hash FROM chunks WHERE vector != x''"))


def copy_index(source: Path, target: Path) -> None:
    """A consistent copy of an index file (SQLite's online backup)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    src = sqlite3.connect(source)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


class RecordingEmbedder(HashingEmbedder):
    """The hashing embedder, remembering the hash of every text it embedded."""

    def __init__(self) -> None:
        self.hashes: Counter[str] = Counter()

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        self.hashes.update(text_hash(t) for t in texts)
        return super().embed_documents(texts)


@dataclass
class Setting:
    """A folder, the index a build of it starts from, and what an uninterrupted build
    reaches from there."""

    name: str
    folder: Path
    config: Path
    start: Path | None  # None: an empty index
    before: dict[str, Any]  # the state of ``start``
    reference: dict[str, Any]
    counts: Counter[str]  # events per phase of the uninterrupted build


def _reference_build(setting_name: str, folder: Path, config: Path, start: Path | None,
                     index: Path) -> tuple[dict[str, Any], dict[str, Any], Counter[str]]:
    if start is not None:
        copy_index(start, index)
    with open_index(index, config) as graph:
        before = index_state(graph.catalog, NAMESPACE)
        with Trap().installed() as trap:
            graph.index(folder, NAMESPACE)
        return before, index_state(graph.catalog, NAMESPACE), trap.counts


def prepare_settings(work: Path) -> dict[str, Setting]:
    """Build the ``fresh`` and ``update`` settings (folders and reference indexes) under
    ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    config = write_config(work / "docgraph.toml")
    settings: dict[str, Setting] = {}
    fresh = make_corpus(work / "fresh-corpus")
    before, reference, counts = _reference_build("fresh", fresh, config, None,
                                                 work / "fresh-reference.db")
    settings["fresh"] = Setting("fresh", fresh, config, None, before, reference, counts)

    folder = make_corpus(work / "update-corpus")
    base = work / "update-base.db"
    with open_index(base, config) as graph:
        graph.index(folder, NAMESPACE)
    mutate_corpus(folder)
    before, reference, counts = _reference_build("update", folder, config, base,
                                                 work / "update-reference.db")
    settings["update"] = Setting("update", folder, config, base, before, reference, counts)
    return settings


def scenario_shape(index: int) -> tuple[str, int]:
    """(setting, kills before the re-run) of scenario ``index``: every third scenario starts
    from a built index, every fourth kills twice in a row."""
    return ("update" if index % 3 == 2 else "fresh"), (2 if index % 4 == 3 else 1)


def scenario_shapes(kills: int) -> list[tuple[str, int]]:
    """Shapes of the scenarios that together make ``kills`` kills."""
    shapes: list[tuple[str, int]] = []
    planned = 0
    while planned < kills:
        name, chain = scenario_shape(len(shapes))
        chain = min(chain, kills - planned)
        shapes.append((name, chain))
        planned += chain
    return shapes


def kill_points(setting: Setting, chain: int, first_kill: int, seed: int,
                pooled_every: int = 0) -> list[KillPoint]:
    """Seeded kill points. Every five kills of the plan hit the five phases once each, in a
    seeded order; the event within the phase is random, and a third of the kills are
    delayed by up to 20 ms so they land inside the work that follows. A second kill in a
    row aims at the first third of its phase (the continued build has less to do). Kills
    while preparing, and one in ``pooled_every`` of the others (0: none), run with worker
    processes (their start-up costs seconds); the others prepare inline, which writes the
    same rows."""
    points = []
    for k in range(first_kill, first_kill + chain):
        rng = random.Random(f"{seed}:{k}")
        phase = kill_phase(seed, k)
        total = max(1, setting.counts[phase])
        nth = rng.randint(1, total if k == first_kill else max(1, total // 3))
        if phase == "prepare" and k == first_kill and total >= POOLED_FROM and rng.random() < 0.6:
            nth = rng.randint(POOLED_FROM, total)  # while worker processes prepare
        delay = round(rng.uniform(0.001, 0.02), 4) if rng.random() < 0.33 else 0.0
        others = sum(kill_phase(seed, j) != "prepare" for j in range(k + 1))
        pooled = phase == "prepare" or (
            pooled_every > 0 and others % pooled_every == min(2, pooled_every - 1))
        points.append(KillPoint(phase, nth, delay, 2 if pooled else 1))
    return points


def kill_phase(seed: int, k: int) -> str:
    """The phase of kill ``k`` of the plan: each block of five kills covers every phase."""
    block = list(PHASES)
    random.Random(f"{seed}:block:{k // len(PHASES)}").shuffle(block)
    return block[k % len(PHASES)]


@dataclass
class KillCheck:
    """One kill and what was found right after it."""

    point: KillPoint
    landed: bool
    workers: int  # child processes alive when it died
    starting_workers: int  # of those, worker processes still starting up
    exit_seconds: float  # until every one of them had exited
    orphans: int  # still alive after ORPHAN_TIMEOUT_S
    problems: list[str] = field(default_factory=list)


@dataclass
class ScenarioOutcome:
    """A scenario's kills, its re-run and how the result compares with the reference."""

    setting: str
    kills: list[KillCheck]
    re_embedded: int = 0  # texts the re-run embedded although a stored chunk had them
    embedded: int = 0
    difference: str | None = None  # None: converged to the reference

    @property
    def converged(self) -> bool:
        return self.difference is None

    def problems(self) -> list[str]:
        """Everything that went wrong, one line each (empty: the scenario passed)."""
        out = [f"{k.point}: {p}" for k in self.kills for p in k.problems]
        out += [f"{k.point}: {k.orphans} process(es) outlived the killed build"
                for k in self.kills if k.orphans]
        if self.re_embedded:
            out.append(f"the re-run embedded {self.re_embedded} already stored text(s)")
        if self.difference is not None:
            out.append(f"the re-run did not converge: {self.difference}")
        return out


def check_after_kill(setting: Setting, index: Path) -> list[str]:
    """What must hold right after a kill: the file is sound, every document is entirely
    its old or its new version, a graph marked clean is the graph of the stored links, and
    the index opens and searches."""
    problems = []
    db = sqlite3.connect(index)
    try:
        if (result := db.execute("PRAGMA integrity_check").fetchone()[0]) != "ok":
            problems.append(f"integrity_check: {result}")
        if db.execute("PRAGMA foreign_key_check").fetchall():
            problems.append("foreign_key_check found dangling rows")
    finally:
        db.close()
    with open_index(index, setting.config) as graph:
        problems += [f"half-written document {d}" for d in half_written_documents(graph.catalog)]
        state = index_state(graph.catalog, NAMESPACE)
        problems += mixed_versions(state, setting)
        if state["graph_dirty"] == 0:
            problems += stale_graph(setting, index, state)
        if state["model"] is not None:
            stored = {d[0] for d in state["documents"]}
            for hit in graph.search("Rotterdam firmware error E-417", namespaces={NAMESPACE}):
                if hit.doc_id not in stored:
                    problems.append(f"search returned {hit.doc_id}, which is not stored")
            problems += sidecar_disagreement(graph.catalog)
    return problems


def save_sidecar(index: Path) -> None:
    """Persist the chunk index's sidecar of ``index`` as it is now (if it has chunks), so the
    check after the next kill opens the index from it and catches up with the killed build."""
    if not index.exists():
        return
    catalog = SQLiteCatalog(index)
    try:
        model = catalog.embedding_model()
        if model is not None:
            EmbeddedChunkIndex(catalog, model[1]).save_sidecar()
    finally:
        catalog.close()


def sidecar_disagreement(catalog: SQLiteCatalog) -> list[str]:
    """Empty if the chunk index opened from the sidecar (written before the killed build)
    and caught up with the catalog answers as one rebuilt from the catalog alone."""
    model = catalog.embedding_model()
    assert model is not None
    mapped = EmbeddedChunkIndex(catalog, model[1], sidecar_after_rows=10**12)
    rebuilt = EmbeddedChunkIndex(catalog, model[1], sidecar=False)
    problems = [] if mapped.sidecar_status in ("loaded", "missing") else [
        f"sidecar {mapped.sidecar_status}"]
    names = frozenset({NAMESPACE})
    queries = list(rebuilt.vectors(range(1, rebuilt.dense.max_rowid + 1, 7)).values())[:5]
    for text in ("Rotterdam firmware error E-417", "outage report", "badge"):
        if mapped.lexical_search(text, 10, names) != rebuilt.lexical_search(text, 10, names):
            problems.append(f"sidecar index: BM25 results differ for {text!r}")
    for q in queries:
        if mapped.dense_search(q, 10, names) != rebuilt.dense_search(q, 10, names):
            problems.append("sidecar index: dense results differ")
    if len(mapped) != len(rebuilt):
        problems.append(f"sidecar index: {len(mapped)} chunks, catalog {len(rebuilt)}")
    return problems


def _by_document(state: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    docs: dict[str, list[Any]] = {d[0]: [d] for d in state["documents"] if d[1] == "document"}
    for chunk in state["chunks"]:
        if chunk[0] in docs:
            docs[chunk[0]].append(chunk)
    return {k: tuple(v) for k, v in docs.items()}


_PENDING = hashlib.sha256(b"").hexdigest()  # a chunk committed before its vector


def _settled(rows: tuple[Any, ...], like: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """``rows`` (a document's row, then its chunks) with each pending chunk's vector taken
    from the same chunk of ``like``: a version written whole whose vectors had not all
    been stored yet (docgraph.store.pending) is that version."""
    if like is None or len(like) != len(rows):
        return rows
    return (rows[0], *(
        (*mine[:11], theirs[11], *mine[12:]) if mine[11] == _PENDING else mine
        for mine, theirs in zip(rows[1:], like[1:], strict=True)))


def mixed_versions(state: dict[str, Any], setting: Setting) -> list[str]:
    """Documents whose row and chunks are neither the version before the build nor the one
    the build writes (the new one possibly with some vectors still pending)."""
    old, new = _by_document(setting.before), _by_document(setting.reference)
    return [f"document {doc_id} is neither its old nor its new version"
            for doc_id, rows in _by_document(state).items()
            if rows != old.get(doc_id) and _settled(rows, new.get(doc_id)) != new.get(doc_id)]


def stale_graph(setting: Setting, index: Path, state: dict[str, Any]) -> list[str]:
    """Empty if the graph a kill left marked clean equals one rebuilt from the stored links."""
    copy = index.with_name(index.stem + "-graphcheck.db")
    copy_index(index, copy)
    with open_index(copy, setting.config) as graph:
        graph.build_graph([NAMESPACE])
        rebuilt = index_state(graph.catalog, NAMESPACE)
    keys = ("edges", "community_members", "communities", "entities")
    diff = first_difference({k: state[k] for k in keys}, {k: rebuilt[k] for k in keys})
    return [] if diff is None else [f"graph marked clean but stale: {diff}"]


def run_scenario(launcher: Launcher, setting: Setting, points: list[KillPoint], index: Path,
                 work: Path) -> ScenarioOutcome:
    """Kill a build at each of ``points`` in turn (checking the index after each kill),
    then re-run it to the end in this process and compare with the reference."""
    if setting.start is not None:
        copy_index(setting.start, index)
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{index}{suffix}").unlink(missing_ok=True)
    outcome = ScenarioOutcome(setting.name, [])
    for point in points:
        save_sidecar(index)
        run = launcher.run_killed(point, setting.config, index, setting.folder, NAMESPACE, work)
        exit_seconds, left = wait_gone(run.children, ORPHAN_TIMEOUT_S)
        kill_leftovers(left)
        check = KillCheck(point, run.landed, len(run.children), run.starting_workers,
                          exit_seconds, len(left))
        if not run.landed and run.returncode != 0:
            check.problems.append(f"docgraph index exited with {run.returncode}")
        check.problems += check_after_kill(setting, index)
        outcome.kills.append(check)
    embedder = RecordingEmbedder()
    with open_index(index, setting.config, embedder) as graph:
        stored = stored_embed_hashes(graph.catalog)
        graph.index(setting.folder, NAMESPACE)
        outcome.re_embedded = sum((embedder.hashes & stored).values())
        outcome.embedded = sum(embedder.hashes.values())
        outcome.difference = first_difference(index_state(graph.catalog, NAMESPACE),
                                              setting.reference)
    return outcome
