"""``docs/settings.md`` is generated from the settings models
(:mod:`docgraph.config.reference`): it must be what they generate now, and every setting
must say what it does. After changing a setting, regenerate the file with
``python -m docgraph.config.reference docs/settings.md``."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from docgraph.config import load_settings, reference
from docgraph.config.section import Section
from tests.conftest import REPO

DOC = REPO / "docs" / "settings.md"
REGENERATE = "python -m docgraph.config.reference docs/settings.md"


def test_settings_md_is_what_the_models_generate() -> None:
    assert DOC.is_file(), f"docs/settings.md is missing: run `{REGENERATE}`"
    assert DOC.read_text(encoding="utf-8") == reference.render(), (
        f"docs/settings.md differs from the settings models: run `{REGENERATE}`")


def test_every_setting_has_a_description() -> None:
    assert reference.undocumented() == [], "give these settings a description= in config/"


def test_every_setting_is_in_the_reference_with_its_environment_variable() -> None:
    text = DOC.read_text(encoding="utf-8")
    count = 0
    for section, _, key, _ in reference.fields():
        count += 1
        assert f"## `[{section}]`" in text
        assert f"| `{key}`" in text
        assert f"`DOCGRAPH_{section.upper()}__{key.upper()}`" in text
    assert count >= 70


def test_the_named_environment_variables_set_the_settings(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A variable the reference names reaches its setting (one per section)."""
    monkeypatch.chdir(tmp_path)  # no docgraph.toml here
    monkeypatch.delenv("DOCGRAPH_CONFIG", raising=False)
    values = {("store", "milvus_collection"): "other", ("loader", "chunk_tokens"): "128",
              ("embed", "model"): "hashing", ("graph", "levels"): "3",
              ("rag", "return_n"): "7", ("serve", "port"): "9001",
              ("refresh", "keep_builds"): "5", ("llm", "timeout_s"): "5.5"}
    for (section, key), value in values.items():
        monkeypatch.setenv(reference.env_name(section, key), value)
    settings = load_settings()
    for (section, key), value in values.items():
        assert str(getattr(getattr(settings, section), key)) == value


def test_a_setting_without_a_description_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The renderer refuses to leave a hole: a new field without ``description=`` fails
    the reference, naming it."""

    class Bare(Section):
        """A section under test."""

        documented: int = Field(default=1, description="Has one.")
        bare: int = 2

    class Holder(BaseModel):
        extra: Bare = Field(default_factory=Bare)

    monkeypatch.setattr(reference, "Settings", Holder)
    assert reference.undocumented() == ["extra.bare"]
    with pytest.raises(ValueError, match=r"extra\.bare"):
        reference.render()
