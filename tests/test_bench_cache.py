"""The benches' guard on cached dataset indexes (``bench/common.py``): an index built from
another checkout's corpus folder is discarded before it is indexed again from this one,
where it would gain the folder as a second source and hold every passage twice."""

from __future__ import annotations

import shutil
import sys

from tests.conftest import REPO
from tests.helpers import write_files

sys.path.insert(0, str(REPO / "bench"))
import common

FILES = {"a.md": "# Kestrel\n\nThe Kestrel K9 tug charges at bay 7.\n",
         "b.md": "# Heron\n\nThe Heron H7 mover parks at bay 3.\n"}


def test_an_index_built_from_another_folder_is_discarded_and_rebuilt_from_this_one(
        tmp_path, make_graph):
    other_checkout = write_files(tmp_path / "other" / "corpus", FILES)
    graph = make_graph("cache/index.db", graph={"enabled": False})
    graph.index(other_checkout, namespace="bench")
    graph.close()
    db = tmp_path / "cache" / "index.db"
    this_checkout = shutil.copytree(other_checkout, tmp_path / "this" / "corpus")

    assert not common.discard_foreign_index(db, "bench", other_checkout)  # its own folder
    assert db.is_file()
    assert not common.discard_foreign_index(db, "elsewhere", this_checkout)  # no such source
    assert common.discard_foreign_index(db, "bench", this_checkout)
    assert not db.exists() and not (tmp_path / "cache" / "index.db-wal").exists()
    assert not common.discard_foreign_index(db, "bench", this_checkout)  # nothing to discard

    rebuilt = make_graph("cache/index.db", graph={"enabled": False})
    rebuilt.index(this_checkout, namespace="bench")
    [stats] = rebuilt.status().namespaces
    assert (stats.sources, stats.documents) == (1, 2)  # not the old folder as a second source
