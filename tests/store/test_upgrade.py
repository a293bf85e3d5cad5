"""An index written by an earlier docgraph opens in this one: migrated in place, searched,
and answered with the documents it held; a backup made by it restores here.

The fixtures (``tests/store/upgrade/index-<commit>.db.gz``) were built by the releases
``tests/store/upgrade/make_fixture.py`` names, with their own code (no tags exist: a release
is the commit a session's closing note names as the final one): ``0b98a97`` (schema 6, the
sixth session's stop) and ``3a25c05`` (schema 7, the seventh's, the previous release of this
one). Each holds four Markdown files indexed into namespace ``demo`` with the deterministic
``hashing`` embedder.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.store.sqlite import SCHEMA_VERSION
from docgraph.store.sqlite.backup import backup_index
from docgraph.store.sqlite.restore import restore_index

FIXTURES = Path(__file__).with_name("upgrade")
RELEASES = {"0b98a97": 6, "3a25c05": 7}  # commit -> the schema its index was written in
EXPECTED = {  # query -> the document that must come first
    "What does error E-417 mean on the Kestrel?": "runbook.md",
    "How many weeks of parental leave?": "leave.md",
    "Why did the Rotterdam depot lose power?": "outage.md",
    "What does the Kestrel K2 cost in euros?": "guide/pricing.md",
}


def _unpacked(commit: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "index.db"
    with gzip.open(FIXTURES / f"index-{commit}.db.gz", "rb") as packed, path.open("wb") as raw:
        shutil.copyfileobj(packed, raw)
    return path


def _schema(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT value FROM meta WHERE key = 'schema_version'")
                   .fetchone()[0])
    finally:
        db.close()


def _config(folder: Path) -> Path:
    config = folder / "docgraph.toml"
    config.write_text('[embed]\nmodel = "hashing"\n', encoding="utf-8")
    return config


def _first_hits(path: Path, config: Path) -> dict[str, str]:
    with DocGraph.open(path, config_file=config) as graph:
        assert set(graph.namespaces()) == {"demo"}
        return {query: graph.search(query, namespaces={"demo"}, k=3)[0].source_path
                for query in EXPECTED}


@pytest.mark.parametrize("commit", sorted(RELEASES))
def test_an_index_of_an_earlier_release_opens_migrates_and_answers(
        commit: str, tmp_path: Path) -> None:
    path = _unpacked(commit, tmp_path)
    assert _schema(path) == RELEASES[commit]
    assert _first_hits(path, _config(tmp_path)) == EXPECTED
    assert _schema(path) == SCHEMA_VERSION  # migrated in place


@pytest.mark.parametrize("commit", sorted(RELEASES))
def test_a_backup_of_an_earlier_release_restores_and_is_migrated(
        commit: str, tmp_path: Path) -> None:
    old = _unpacked(commit, tmp_path / "old")
    target = tmp_path / "new" / "index.db"
    target.parent.mkdir()
    restored = restore_index(old, target)
    assert restored.backup.schema_version == RELEASES[commit]
    assert _schema(target) == SCHEMA_VERSION
    assert _first_hits(target, _config(tmp_path)) == EXPECTED
    again = backup_index(target, tmp_path / "again.db")  # and backs up in this release
    assert again.info.schema_version == SCHEMA_VERSION
