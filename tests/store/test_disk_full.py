"""A full disk during ``docgraph index``: one clear error, nothing lost, nothing corrupted.

The disk is made full with SQLite's own page limit (``PRAGMA max_page_count`` on every
connection of the build's process): SQLite then fails the write with ``SQLITE_FULL``, the
very error a full file system gives (checked by hand on a 3 MB tmpfs: the same message
path). What must hold: exit code 1 and no traceback; the message names the disk (the file
system's mount point and free space), the index file and what was kept (the documents the
build committed; the batch being written was rolled back); the index passes SQLite's
integrity check, ``docgraph search`` answers from what was kept, and the same build run
again (with room) finishes the folder.
"""

from __future__ import annotations

import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.deployment import Deployment, embedded_store
from tests.helpers import write_files

POLICY = "assignments:\n  - {user: root, role: admin, domain: \"*\"}\n"

# The build's process, with every catalog connection limited to its pages now plus EXTRA.
LIMITED_CLI = """
import sys
from docgraph.store.sqlite import catalog
EXTRA = int(sys.argv.pop(1))
opened = catalog._connect

def limited(*args):
    db = opened(*args)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + EXTRA}")
    return db

catalog._connect = limited
from docgraph.serve.cli import main
sys.argv[0] = "docgraph"
main()
"""


def _words(rng: random.Random, count: int) -> str:
    return " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9)))
                    for _ in range(count))


def test_full_disk_during_index_names_disk_file_and_what_was_kept(tmp_path: Path) -> None:
    index = tmp_path / "index" / "index.db"
    deployment = Deployment(tmp_path, embedded_store(index), POLICY)
    rng = random.Random(7)
    write_files(tmp_path / "seed", {"seed.md": "# Seed\n\nKestrel lidar seed document.\n"})
    deployment.run("index", str(tmp_path / "seed"), "-n", "seed")
    total = 80
    folder = write_files(tmp_path / "bulk", {
        f"doc{i:03}.md": f"# Document {i}\n\nkestrel{i} {_words(rng, 300)}\n"
        for i in range(total)})

    done = subprocess.run(
        [sys.executable, "-c", LIMITED_CLI, "120", "--config", str(deployment.config),
         "index", str(folder), "-n", "bulk"],
        capture_output=True, text=True, env=deployment.env, cwd=tmp_path, timeout=300,
        check=False)

    said = " ".join(done.stderr.split())
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "the disk is full" in said, said
    assert f"index {index}" in said  # the index file
    assert re.search(r"file system mounted at /\S* \(\d", said), said  # the disk, its room
    assert "max_page_count" in said  # the limit SQLite reached, said as such
    match = re.search(r"This build committed (\d+) documents, which are kept", said)
    assert match, said
    kept = int(match.group(1))
    assert 0 < kept < total, said
    assert "batch being written was rolled back" in said

    with sqlite3.connect(index) as db:  # not corrupted, and exactly what was said is kept
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute(
            "SELECT count(*) FROM documents d JOIN namespaces n ON n.id = d.namespace_id"
            " WHERE n.name = 'bulk'").fetchone()[0] == kept
    answer = deployment.run("--user", "root", "search", "kestrel0", "-n", "bulk", "-k", "1")
    assert "doc000.md" in answer

    again = deployment.run("index", str(folder), "-n", "bulk")  # room again: it continues
    assert f"{total - kept} added" in " ".join(again.split())
