"""Per-model constants (issue 35): selecting an embedding model selects its profile's fusion
and cohort constants; a value set explicitly still wins; the engines read what the
settings resolved."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest

from docgraph.config import load_settings, profiles
from docgraph.config.profiles import MODEL_PROFILES, ModelProfile
from docgraph.config.settings import Settings
from docgraph.retrieve.cohort_settings import CohortSettings

E5 = "e5-small-4bit"


def _e5_values() -> list[tuple[str, str, object]]:
    values = [(section, key, value) for section, keys in MODEL_PROFILES[E5].values.items()
              for key, value in keys.items()]
    assert values, "e5-small-4bit's profile sets no constant: nothing would follow the model"
    return values


def test_selecting_e5_gives_its_constants() -> None:
    settings = load_settings(embed={"model": E5})
    for section, key, value in _e5_values():
        assert getattr(getattr(settings, section), key) == value, f"{section}.{key}"
    assert settings.from_profile() == {s: dict(v) for s, v in MODEL_PROFILES[E5].values.items()}
    cohort = CohortSettings.from_config(settings.retrieval)  # what the engine is built from
    for section, key, value in _e5_values():
        if section == "retrieval":
            assert getattr(cohort, key) == value


def test_the_default_model_keeps_the_section_defaults() -> None:
    settings = load_settings()
    assert settings.embed.model == "minilm-l6-int8"
    for section, key, _ in _e5_values():
        field = type(getattr(settings, section)).model_fields[key]
        assert getattr(getattr(settings, section), key) == field.default
    assert settings.from_profile() == {}


def test_a_value_in_the_settings_file_wins_over_the_profile(tmp_path: Path) -> None:
    section, key, value = _e5_values()[0]
    mine = 7 if isinstance(value, int) and not isinstance(value, bool) else 0.33
    assert mine != value
    toml = tmp_path / "docgraph.toml"
    toml.write_text(f'[embed]\nmodel = "{E5}"\n\n[{section}]\n{key} = {mine}\n',
                    encoding="utf-8")
    settings = load_settings(toml)
    assert getattr(getattr(settings, section), key) == mine
    assert key not in settings.from_profile().get(section, {})
    # every other key of the profile still follows the model
    for other_section, other_key, other_value in _e5_values()[1:]:
        assert getattr(getattr(settings, other_section), other_key) == other_value


def test_an_environment_variable_wins_over_the_profile(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    section, key, value = _e5_values()[0]
    mine = 7 if isinstance(value, int) and not isinstance(value, bool) else 0.33
    monkeypatch.setenv(f"DOCGRAPH_{section.upper()}__{key.upper()}", str(mine))
    settings = load_settings(embed={"model": E5})
    assert getattr(getattr(settings, section), key) == mine


def test_switching_the_model_switches_the_constants_but_not_explicit_ones() -> None:
    settings = load_settings(retrieval={"rrf_k": 33})
    settings.select_model(E5)
    for section, key, value in _e5_values():
        expected = 33 if (section, key) == ("retrieval", "rrf_k") else value
        assert getattr(getattr(settings, section), key) == expected
    settings.select_model("minilm-l6-int8")
    assert settings.retrieval.rrf_k == 33
    for section, key, _ in _e5_values():
        if (section, key) != ("retrieval", "rrf_k"):
            field = type(getattr(settings, section)).model_fields[key]
            assert getattr(getattr(settings, section), key) == field.default


def test_every_profile_value_is_valid_for_its_setting() -> None:
    """A profile is applied without validation, so its values are checked here."""
    for model, profile in MODEL_PROFILES.items():
        assert profile.model == model
        for section, values in profile.values.items():
            assert section in profiles.PROFILE_SECTIONS
            holder = type(getattr(Settings(), section))
            holder.model_validate(dict(values))  # raises naming the bad key


def test_every_profile_is_what_the_tuning_bench_shipped() -> None:
    """The profiles hold exactly the values ``bench/model_tune.py`` chose on the tuning halves
    and confirmed on the test halves (``shipped`` in its committed result), so a re-run that
    changes a choice cannot leave a stale constant behind (e5's ``coverage_weight`` 0.05 left
    when GraphRAG-Bench novel joined the objective)."""
    result = Path(__file__).resolve().parents[2] / "bench" / "results" / "model_tune.json"
    shipped = json.loads(result.read_text(encoding="utf-8"))["shipped"]
    assert set(shipped) <= set(MODEL_PROFILES)
    for model, sections in shipped.items():
        expected = {name: dict(values) for name, values in sections.items() if values}
        actual = {name: dict(values) for name, values in MODEL_PROFILES[model].values.items()}
        assert actual == expected, model


def test_a_model_without_profile_keeps_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism alone, with a stand-in profile table (no tuned numbers involved)."""
    table = MappingProxyType({"hashing": ModelProfile("hashing", {"index": {"rrf_k": 77}})})
    monkeypatch.setattr(profiles, "MODEL_PROFILES", table)
    assert load_settings(embed={"model": "hashing"}).index.rrf_k == 77
    assert load_settings(embed={"model": "hashing"}, index={"rrf_k": 5}).index.rrf_k == 5
    default = type(load_settings().index).model_fields["rrf_k"].default
    assert load_settings(embed={"model": "minilm-l6-int8"}).index.rrf_k == default


def test_the_engines_of_an_index_use_the_selected_models_constants(make_graph) -> None:  # type: ignore[no-untyped-def]
    """A real DocGraph (SQLite index, the deterministic test embedder standing in for the
    model's vectors) builds its cohort engine and hybrid searcher from the resolved
    settings: e5's constants reach the engines with no [index]/[retrieval] in the file."""
    graph = make_graph(embed={"model": E5})
    engine = graph.cohort_engine()
    searcher = graph.searcher()
    for section, key, value in _e5_values():
        if section == "retrieval":
            assert getattr(engine.settings, key) == value, key
        else:
            assert getattr(searcher.settings, key) == value, key


def test_an_admin_model_change_brings_the_new_models_constants(make_graph, monkeypatch  # type: ignore[no-untyped-def]
                                                               ) -> None:
    """Switching embed.model at run time (admin, with the full re-index it forces) gives the
    cohort engine the new model's constants, and an explicit value still wins."""
    from docgraph.embedding.embedders import HashingEmbedder

    class Replacement(HashingEmbedder):
        name = "replacement"

    monkeypatch.setattr("docgraph.embedding.embedders.make_embedder",
                        lambda settings: Replacement())
    graph = make_graph(retrieval={"seed_pool": 9})
    graph.admin.update({"embed.model": E5}, is_admin=True, full_reindex=True, persist=False)
    engine = graph.cohort_engine()
    for section, key, value in _e5_values():
        if section == "retrieval":
            assert getattr(graph.settings.retrieval, key) == value
            assert getattr(engine.settings, key) == value, key
    assert engine.settings.seed_pool == 9
