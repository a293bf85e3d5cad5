"""A backup of the embedded index taken while a real ``docgraph serve`` answers queries and its
refresher writes, restored into a new path and served again, answers as the source did at
the backup's moment.

The source's answers "at the backup's moment" are asked of the live server right after the
backup fixed its snapshot; the attempt counts only when the source's documents and chunks
did not change between the snapshot and the last of those answers (else a refresh wrote in
between and the answers are of a later state: the backup is taken again), and when a refresh
did write while the copy went on (so the copy was taken under writes). Then: ``docgraph
restore`` refuses the live index, naming the server's process; restored into a new path by
``docgraph restore`` and read through the governed service the server's
``search_documents`` calls (same caller, k and mode), the same queries get the same evidence
ids; and ``docgraph backup`` from the command line under the same load reports a verified
copy.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from docgraph import DocGraph
from docgraph.serve.auth import BearerTokens
from docgraph.store.sqlite.backup import backup_index
from tests.deployment import Deployment, embedded_store
from tests.helpers import write_files

POLICY = "assignments:\n  - {user: alice, role: ops, domain: ops}\n"
CORPUS = {
    "runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n",
    "leave.md": "# Leave\n\nStaff get twenty weeks of parental leave after a birth.\n",
    "rotterdam.md": "# Rotterdam outage\n\nThe Rotterdam depot lost power for six hours.\n",
}
QUERIES = ("Kestrel lidar status", "depot power report", "parental leave weeks",
           "unit cleaned")
ATTEMPTS = 4
PAGE_BYTES = 8192
COPY_SECONDS = 3.0  # how long a copy lasts (pauses between steps): refreshes write meanwhile
SETTLED_S = 1.5  # longer than a refresh interval: no round started in it wrote anything
DEADLINE_S = 90.0  # a bound on waiting, never an assertion of speed


def _new_file(folder: Path, n: int) -> None:
    (folder / f"status-{n:03d}.md").write_text(
        f"# Status report {n}\n\nKestrel unit {n} lidar cleaned; depot power checked "
        f"{n} times.\n", encoding="utf-8")


def _ask(url: str, token: str, query: str) -> list[str]:
    answer = httpx.post(url + "/api/v1/search_documents", timeout=60,
                        json={"query_text": query, "k": 5},
                        headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return [hit["chunk_id"] for hit in answer.json()["results"]]


def _content(index: Path) -> tuple[object, ...]:
    """What answers depend on: the documents and chunks of the index, read now."""
    db = sqlite3.connect(f"{index.resolve().as_uri()}?mode=ro", uri=True,
                         isolation_level=None)
    try:
        return _content_of(db)
    finally:
        db.close()


def _settled(index: Path, files: int) -> bool:
    """Whether the refresher indexed ``files`` status files and then wrote nothing for
    :data:`SETTLED_S` (its graph phase included)."""
    if _status_files(index) != files:
        return False
    before = _content(index)
    time.sleep(SETTLED_S)
    return _content(index) == before


def _status_files(index: Path) -> int:
    db = sqlite3.connect(f"{index.resolve().as_uri()}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT count(*) FROM documents WHERE path LIKE 'status-%'").fetchone()
        return int(row[0])
    finally:
        db.close()


#: What answers are read from (what a refresh writes): the catalog and the graph; of the
#: sources, not when each was last indexed (every refresh round writes that).
CONTENT = (*(f"SELECT * FROM {table}" for table in (
    "namespaces", "documents", "chunks", "terms", "chunk_tombstones", "entities",
    "chunk_entities", "entity_edges", "communities", "community_members")),
    "SELECT id, urn, namespace_id, display_name, public_url FROM sources")


def _content_of(db: sqlite3.Connection) -> tuple[object, ...]:
    """Every row of every table answers are read from, as one snapshot (``db`` reads in a
    transaction; the tables are small)."""
    began = not db.in_transaction
    if began:
        db.execute("BEGIN")
    try:
        return tuple(tuple(sorted(map(repr, db.execute(query)))) for query in CONTENT)
    finally:
        if began:
            db.execute("COMMIT")


def _governed_answers(config: Path) -> dict[str, list[str]]:
    """The restored index's answers through the governed service the server's
    ``search_documents`` calls (same caller, k and mode)."""
    import docgraph

    with DocGraph.open(config_file=config) as graph:
        governance, caller = docgraph.governed(graph, user="alice")
        answers = {}
        for query in QUERIES:
            hits = governance.retrieve(caller, query, k=5, mode="vector_first").hits
            answers[query] = [governance.identity().key(hit.namespace, hit.chunk_id)
                              for hit in hits]
        return answers


def _wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def test_a_backup_under_load_restores_the_answers_of_its_moment(tmp_path: Path) -> None:
    index = tmp_path / "live" / "index.db"
    corpus = write_files(tmp_path / "ops", CORPUS)
    live = Deployment(tmp_path, embedded_store(index), POLICY,
                      "[refresh]\ninterval_seconds = 1.0\n")
    restored_root = tmp_path / "restored"
    restored_root.mkdir()
    again = Deployment(restored_root, embedded_store(restored_root / "index.db"), POLICY)
    stop = threading.Event()
    served: list[int] = []

    def keep_asking(url: str, token: str) -> None:
        while not stop.wait(0.05):
            served.append(len(_ask(url, token, QUERIES[len(served) % len(QUERIES)])))

    try:
        with DocGraph.open(config_file=live.config) as graph:
            graph.index(corpus, "ops")
            token = BearerTokens(graph.token_store).add("alice")
        server, url = live.serve_process()
        asking = threading.Thread(target=keep_asking, args=(url, token))
        asking.start()
        written = [1, 2, 3]
        for n in written:  # the refresher indexes files written while it serves
            _new_file(corpus, n)
        moment: dict[str, object] = {}

        def at_the_snapshot(db: sqlite3.Connection) -> None:
            moment["content"] = _content_of(db)
            moment["answers"] = {query: _ask(url, token, query) for query in QUERIES}
            moment["after"] = _content(index)
            written.append(len(written) + 1)
            _new_file(corpus, written[-1])  # for the refresher to write during the copy

        backup = None
        for attempt in range(ATTEMPTS):
            _wait_for("the refresher to finish", lambda: _settled(index, len(written)))
            steps = index.stat().st_size // PAGE_BYTES // 4 + 1
            taken = tmp_path / f"backup-{attempt}.db"
            backup_index(index, taken, pages_per_step=4, pause_s=COPY_SECONDS / steps,
                         on_snapshot=at_the_snapshot)
            written_during_copy = _content(index) != moment["content"]
            if moment["after"] == moment["content"] and written_during_copy:
                backup = taken
                break
        assert backup is not None, f"no clean moment in {ATTEMPTS} backups"
        cli_backup = live.run("backup", str(tmp_path / "cli-backup.db"),
                              "--pages-per-step", "8")
        stop.set()
        asking.join(60)
        assert len(served) > 0 and server.poll() is None  # it served all along

        refused = live.attempt("restore", str(backup))
        assert refused.returncode == 1
        assert str(index) in refused.stderr and f"process {server.pid}" in refused.stderr
        again.run("restore", str(backup))
    finally:
        stop.set()
        live.stop()
    restored = _governed_answers(again.config)
    assert restored == moment["answers"]
    assert any(any("status-" in hit for hit in hits) for hits in restored.values())
    assert "verified (integrity_check ok)" in " ".join(cli_backup.split())
