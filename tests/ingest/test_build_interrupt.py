"""Builds that keep their work: ``docgraph index`` interrupted with Ctrl-C (SIGINT to its
process group, as a terminal sends it) or killed (SIGKILL) keeps every document it committed
(batches of at most ``COMMIT_EVERY_DOCUMENTS``; their chunks searchable by BM25 even where
the build had not embedded them yet), says so, and the same command continues without
reading them again, embedding just the chunks still pending; ``status`` shows a build in
progress and counts ``index`` runs as builds. Real CLI processes, SQLite index and signals;
the embedder is the hashing one slowed down (``tests/slow_embed_child.py``) so the build is
interrupted midway."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docgraph.ingest.pipeline import COMMIT_EVERY_DOCUMENTS
from tests.conftest import REPO
from tests.helpers import write_files

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process groups and signals")

FILES = 60
WORDS = ("alpha", "bravo", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "iris",
         "juniper", "kestrel", "lumen")


def _corpus(root: Path) -> Path:
    """``FILES`` small markdown files of one chunk each, all different."""
    return write_files(root, {
        f"notes/note-{i:03d}.md": f"# Note {i}\n\nThe {WORDS[i % 12]} report {i} says "
                                  f"{WORDS[(i * 7) % 12]} and {WORDS[(i * 5) % 12]} again.\n"
        for i in range(FILES)})


def _env(delay: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")}
    env["DOCGRAPH_EMBED__MODEL"] = "hashing"
    env["DOCGRAPH_TEST_EMBED_DELAY"] = str(delay)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _cli(tmp: Path, *args: str, delay: float = 0.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.slow_embed_child",
                           "--index", str(tmp / "i.db"), *args],
                          cwd=tmp, env=_env(delay), capture_output=True, text=True,
                          timeout=180)


def _documents(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return int(con.execute("SELECT count(*) FROM documents").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


def _start_build(tmp: Path, folder: Path, command: str = "index") -> subprocess.Popen[str]:
    if command == "refresh":  # the registered folder, built by the refresher
        added = _cli(tmp, "sources", "add", str(folder), "--domain", "default")
        assert added.returncode == 0, added.stderr
    args = ["index", str(folder)] if command == "index" else ["refresh"]
    return subprocess.Popen([sys.executable, "-m", "tests.slow_embed_child", "--index",
                             str(tmp / "i.db"), *args],
                            cwd=tmp, env=_env(0.2), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_documents(process: subprocess.Popen[str], db: Path, at_least: int) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = _documents(db)
        if found >= at_least:
            return found
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.kill()
    raise AssertionError("the build committed nothing in time")


def _pending(db: Path) -> int:
    """Chunks committed without their vector yet (docgraph.store.pending)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
        return int(con.execute("SELECT count(*) FROM chunks WHERE vector = x''").fetchone()[0])


def _status(tmp: Path) -> dict[str, object]:
    done = _cli(tmp, "status", "--json")
    assert done.returncode == 0, done.stderr
    builds = json.loads(done.stdout)["builds"]
    assert len(builds) == 1
    return dict(builds[0])


def _rerun_continues(tmp: Path, folder: Path, kept: int) -> None:
    pending = _pending(tmp / "i.db")  # kept, not embedded yet: one chunk per document
    assert pending <= kept
    again = _cli(tmp, "index", str(folder))
    assert again.returncode == 0, again.stderr
    out = " ".join(again.stdout.split())
    left = FILES - kept
    # the kept documents are unchanged (not read again, their vectors kept), the rest
    # added, and the kept chunks still pending embedded now
    assert f"{left} added, 0 updated, {kept} unchanged, 0 removed" in out, out
    assert f"{left} chunks written ({left} embedded, 0 reused)" in out, out
    assert (f"{pending} chunks an interrupted build left unembedded now embedded" in out
            if pending else "left unembedded" not in out), out
    assert _documents(tmp / "i.db") == FILES and _pending(tmp / "i.db") == 0
    status = _status(tmp)
    assert status["last_outcome"] == "ok" and status["staleness_seconds"] is not None


@pytest.mark.parametrize("command", ["index", "refresh"])
def test_ctrl_c_keeps_committed_documents_and_the_rerun_continues(tmp_path: Path,
                                                                  command: str) -> None:
    folder = _corpus(tmp_path / "corpus")
    db = tmp_path / "i.db"
    build = _start_build(tmp_path, folder, command)
    try:
        _wait_for_documents(build, db, COMMIT_EVERY_DOCUMENTS)
        running = _status(tmp_path)  # another process sees the build in progress
        assert running["last_outcome"] == "running", running
        assert re.search(rf"\d+ of {FILES} files", str(running["in_progress"])), running
        seen = _documents(db)
        os.killpg(build.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        out, err = build.communicate(timeout=120)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
    assert build.returncode == 130, (out, err)
    assert "Traceback" not in err, err
    found = re.search(r"interrupted: (\d+) documents kept, run the same command to continue",
                      " ".join(err.split()))
    assert found, err
    kept = int(found.group(1))
    assert seen <= kept <= FILES  # all of them when Ctrl-C came while it embedded
    assert _documents(db) == kept
    interrupted = _status(tmp_path)
    assert interrupted["last_outcome"] == "error"
    assert "interrupted" in json.dumps(interrupted["errors"])
    _rerun_continues(tmp_path, folder, kept)


def test_killed_build_keeps_committed_documents(tmp_path: Path) -> None:
    folder = _corpus(tmp_path / "corpus")
    db = tmp_path / "i.db"
    build = _start_build(tmp_path, folder)
    try:
        _wait_for_documents(build, db, COMMIT_EVERY_DOCUMENTS)
        os.killpg(build.pid, signal.SIGKILL)
        build.communicate(timeout=60)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
    kept = _documents(db)
    assert COMMIT_EVERY_DOCUMENTS <= kept <= FILES
    assert _status(tmp_path)["last_outcome"] == "interrupted"  # no process builds it now
    _rerun_continues(tmp_path, folder, kept)


def test_interrupted_rebuild_deletes_nothing_it_had_not_visited(tmp_path: Path) -> None:
    """Every file changed since the last build; Ctrl-C midway: the documents not reached
    yet keep their old version (nothing is deleted or emptied), and the same command
    updates only those."""
    folder = _corpus(tmp_path / "corpus")
    db = tmp_path / "i.db"
    first = _cli(tmp_path, "index", str(folder))
    assert first.returncode == 0, first.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
        before = {row[0]: row[1] for row in con.execute(
            "SELECT path, content_hash FROM documents")}
    for i, path in enumerate(sorted(folder.rglob("*.md"))):
        path.write_text(path.read_text(encoding="utf-8") + f"\nRevision {i} of this note.\n",
                        encoding="utf-8")
    build = _start_build(tmp_path, folder)
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            def revised() -> int:
                now = con.execute("SELECT path, content_hash FROM documents").fetchall()
                return sum(1 for path, digest in now if before.get(path) != digest)
            deadline = time.monotonic() + 120
            while revised() < COMMIT_EVERY_DOCUMENTS and time.monotonic() < deadline:
                assert build.poll() is None, build.communicate()
                time.sleep(0.05)
            os.killpg(build.pid, signal.SIGINT)
            out, err = build.communicate(timeout=120)
            kept = revised()
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
    assert build.returncode == 130, (out, err)
    assert f"interrupted: {kept} documents kept" in " ".join(err.split())
    assert COMMIT_EVERY_DOCUMENTS <= kept <= FILES
    assert _documents(db) == FILES  # the files not reached keep their old version
    again = _cli(tmp_path, "index", str(folder))
    assert again.returncode == 0, again.stderr
    out = " ".join(again.stdout.split())
    assert f"0 added, {FILES - kept} updated, {kept} unchanged, 0 removed" in out, out
