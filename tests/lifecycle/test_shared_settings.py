"""Admin settings changed by one process apply in every other process of the same index,
on the embedded file and on PostgreSQL alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from tests import store_backends
from tests.helpers import CountingEmbedder
from tests.pg import pgvector_server  # noqa: F401  (fixture used by the postgres backend)
from tests.store_backends import Backend

# On the embedded file and on PostgreSQL.
backend = store_backends.product_backend


def _open(backend: Backend, config: Path) -> DocGraph:
    settings = load_settings(config, store=backend.store_settings())
    graph = DocGraph(settings, CountingEmbedder())
    graph.config_file = config
    return graph


def test_a_change_by_one_process_applies_in_the_others(
        backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "docgraph.toml"
    config.write_text("[index]\nrrf_k = 60\n", encoding="utf-8")
    first, second = _open(backend, config), _open(backend, config)
    try:
        second.shared_settings.interval_s = 0.0  # check on every read
        assert second.settings.index.rrf_k == 60
        first.admin.update({"index.rrf_k": 25, "refresh.interval_seconds": 900,
                            "loader.chunk_tokens": 300}, is_admin=True)
        # The other process applies it on its next read of the settings, without a restart.
        assert second.settings.index.rrf_k == 25
        assert second.settings.refresh.interval_seconds == 900
        assert second.settings.loader.chunk_tokens == 300
        # A process opened later starts with it, whatever its own file says.
        other_config = tmp_path / "other.toml"
        other_config.write_text("[index]\nrrf_k = 70\n", encoding="utf-8")
        third = _open(backend, other_config)
        assert third.settings.index.rrf_k == 25
        third.close()
        # An environment variable still wins over the stored value.
        monkeypatch.setenv("DOCGRAPH_INDEX__RRF_K", "40")
        fourth = _open(backend, config)
        assert fourth.settings.index.rrf_k == 40
        assert fourth.settings.refresh.interval_seconds == 900
        fourth.close()
    finally:
        first.close()
        second.close()


def test_unshared_sections_and_bad_stored_values_are_left_alone(
        backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "docgraph.toml"
    config.write_text("[index]\nrrf_k = 60\n", encoding="utf-8")
    first = _open(backend, config)
    try:
        # `store` says where the database is: never taken from the database itself.
        first.shared_settings.store.record({"store": {"pg_ef_search": 10}}, 1.0)
        # A value this version cannot validate (e.g. written by another version): ignored.
        first.shared_settings.store.record({"index": {"rrf_k": -5}}, 2.0)
        second = _open(backend, config)
        assert second.settings.store.pg_ef_search == first.settings.store.pg_ef_search
        assert second.settings.index.rrf_k == 60
        assert "ignoring stored admin settings of [index]" in caplog.text
        second.close()
    finally:
        first.close()
