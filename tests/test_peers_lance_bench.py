"""``bench/peers_lance.py``: how LanceDB's search setting is chosen on the tuning half of
the queries (so LanceDB is reported at the recall the other engines reach, as faiss's
``--nprobe auto``), and the index parameters a build passes (only those set, the rest
left to LanceDB and recorded as such). LanceDB itself is no project dependency: nothing
here imports it."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import peers
import peers_lance


def _step(nprobes: int, refine: int, got: float, ms: float) -> dict[str, object]:
    return {"nprobes": nprobes, "refine_factor": refine, "recall@10": got, "mean_ms": ms}


LADDER = [_step(1, 0, 0.20, 2.0), _step(2, 0, 0.21, 3.0),
          _step(1, 50, 0.88, 9.0), _step(2, 50, 0.96, 10.0), _step(4, 50, 0.99, 12.0),
          _step(8, 50, 0.995, 20.0), _step(64, 10, 0.985, 11.0)]


def test_the_fastest_setting_reaching_the_target_is_chosen_with_a_cheaper_one_beside() -> None:
    got = peers_lance.choose_setting(LADDER, 0.98)
    # 64:10 (11 ms) beats 4:50 (12 ms) and 8:50 (20 ms), all above 0.98
    assert got["chosen"] == [64, 10] and got["target_reached"] is True
    assert got["cheaper"] is None  # no refine-10 step at half its time
    got = peers_lance.choose_setting([s for s in LADDER if s["refine_factor"] != 10], 0.98)
    assert got["chosen"] == [4, 50]
    assert got["cheaper"] is None  # 1:50 at 9 ms is more than half of 12 ms
    got = peers_lance.choose_setting(
        [s for s in LADDER if s["refine_factor"] != 10] + [_step(16, 50, 0.999, 40.0)], 0.998)
    assert got["chosen"] == [16, 50] and got["cheaper"] == [8, 50]  # 20 ms <= 40 / 2


def test_short_of_the_target_the_best_recall_is_chosen() -> None:
    got = peers_lance.choose_setting(LADDER[:4], 0.98)
    assert got == {"chosen": [2, 50], "cheaper": None, "target_reached": False}


def test_a_build_passes_only_the_parameters_set_and_names_a_wrong_one() -> None:
    assert peers_lance.index_params("ivf_pq", None, None) == {"index_type": "IVF_PQ"}
    assert peers_lance.index_params("ivf_pq", 1024, 48) == {
        "index_type": "IVF_PQ", "num_partitions": 1024, "num_sub_vectors": 48}
    with pytest.raises(SystemExit, match=r"--lance-sub-vectors 48.*ivf_hnsw_sq"):
        peers_lance.index_params("ivf_hnsw_sq", None, 48)


def test_each_index_type_has_its_own_table_and_the_hnsw_one_keeps_the_earlier_name(
        tmp_path: object) -> None:
    from pathlib import Path

    work = Path(str(tmp_path))
    assert peers_lance.lance_dir(work, "ivf_hnsw_sq", 100_000).name == "lancedb_100000"
    assert peers_lance.lance_dir(work, "ivf_pq", 100_000).name == "lancedb_ivf_pq_100000"


def test_a_search_setting_is_parsed_or_named_when_malformed() -> None:
    assert peers.lance_setting("256:50") == (256, 50)
    with pytest.raises(SystemExit, match="'256x50'"):
        peers.lance_setting("256x50")
