"""The whole settings object (:class:`Settings`, one section per concern), loading it
(:func:`load_settings`), and error messages that name the invalid setting, where its value
came from and what was expected."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from docgraph.config.indexing import (
    EmbedSettings,
    GraphSettings,
    IndexSettings,
    LoaderSettings,
    RefreshSettings,
    SourcesSettings,
    StoreSettings,
)
from docgraph.config.paths import FileRelativeTomlSource
from docgraph.config.profiles import apply_profile
from docgraph.config.retrieval import RetrievalSettings
from docgraph.config.serving import (
    AuthSettings,
    GovernanceSettings,
    LlmSettings,
    RagSettings,
    ServeSettings,
)
from docgraph.config.telemetry import TelemetrySettings
from docgraph.errors import ConfigError

DEFAULT_CONFIG_FILE = "docgraph.toml"


class Settings(BaseSettings):
    """All of docgraph's settings, one section per concern."""

    model_config = SettingsConfigDict(
        env_prefix="DOCGRAPH_",
        env_nested_delimiter="__",
        extra="forbid",
        toml_file=DEFAULT_CONFIG_FILE,
    )

    store: StoreSettings = Field(default_factory=StoreSettings)
    loader: LoaderSettings = Field(default_factory=LoaderSettings)
    embed: EmbedSettings = Field(default_factory=EmbedSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    graph: GraphSettings = Field(default_factory=GraphSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rag: RagSettings = Field(default_factory=RagSettings)
    refresh: RefreshSettings = Field(default_factory=RefreshSettings)
    sources: SourcesSettings = Field(default_factory=SourcesSettings)
    governance: GovernanceSettings = Field(default_factory=GovernanceSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    _from_profile: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _model_profile(self) -> Settings:
        """The selected embedding model's constants (``docgraph.config.profiles``) for every
        ``[index]`` / ``[retrieval]`` key not set explicitly."""
        self._apply_model_profile()
        return self

    def _apply_model_profile(self) -> None:
        self._from_profile = apply_profile(
            {"index": self.index, "retrieval": self.retrieval}, self.embed.model)

    def from_profile(self) -> dict[str, dict[str, Any]]:
        """``{section: {key: value}}`` that came from the embedding model's profile rather
        than from the defaults or the user (what ``docgraph status`` and the settings page
        can show as the value's origin)."""
        return {name: dict(values) for name, values in self._from_profile.items()}

    def select_model(self, model: str) -> None:
        """Switch ``embed.model`` in place and re-apply the profiles, so the ranking
        constants follow the model (explicit values still win)."""
        self.embed.model = model
        self._apply_model_profile()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = os.environ.get("DOCGRAPH_CONFIG", DEFAULT_CONFIG_FILE)
        return (
            init_settings,
            env_settings,
            FileRelativeTomlSource(settings_cls, toml_file=toml_path),
        )


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Load settings from ``config_file`` (or the default lookup) plus keyword overrides.

    Raises :class:`ConfigError` naming the file when it is missing or invalid.
    """
    previous = os.environ.get("DOCGRAPH_CONFIG")
    try:
        if config_file is not None:
            path = Path(config_file)
            if not path.is_file():
                raise ConfigError(f"config file not found: {path}")
            os.environ["DOCGRAPH_CONFIG"] = str(path)
        where = str(config_file or os.environ.get("DOCGRAPH_CONFIG", DEFAULT_CONFIG_FILE))
        check_environment(os.environ)
        try:
            return Settings(**overrides)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc, where)) from exc
        except Exception as exc:  # TOML decode errors
            raise ConfigError(f"invalid settings (from {where} / DOCGRAPH_* env): {exc}") from exc
    finally:
        if config_file is not None:
            if previous is None:
                os.environ.pop("DOCGRAPH_CONFIG", None)
            else:
                os.environ["DOCGRAPH_CONFIG"] = previous


_ENV_PREFIX = "DOCGRAPH_"


def _closest(word: str, choices: list[str]) -> str | None:
    """The closest of ``choices`` to a misspelled ``word``, if one is close."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse a ``DOCGRAPH_<SECTION>__<KEY>`` variable whose section does not exist
    (``DOCGRAPH_EMBD__MODEL``): the environment source would ignore it silently, while the
    same typo in the settings file is an error. Variables without ``__``
    (``DOCGRAPH_CONFIG``) are not settings and are left alone."""
    sections = sorted(Settings.model_fields)
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(_ENV_PREFIX) or "__" not in upper:
            continue
        section = upper[len(_ENV_PREFIX):].split("__", 1)[0].lower()
        if section not in sections:
            guess = _closest(section, sections)
            rest = upper.split("__", 1)[1]
            raise ConfigError(
                f"environment variable {name}: there is no settings section {section!r}"
                + (f"; did you mean {guess} ({_ENV_PREFIX}{guess.upper()}__{rest})?"
                   if guess else "")
                + f" (sections: {', '.join(sections)})")


def _model_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The settings model holding the keys below ``path`` (() = the sections)."""
    model: type[BaseModel] = Settings
    for part in path:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _env_name(loc: tuple[str, ...], environ: Mapping[str, str]) -> str | None:
    """The ``DOCGRAPH_*`` variable that set the key at ``loc``, if one did."""
    wanted = (_ENV_PREFIX + "__".join(loc)).upper()
    return next((name for name in environ if name.upper() == wanted), None)


def describe_validation_error(exc: ValidationError, where: str,
                              environ: Mapping[str, str] | None = None,
                              section: tuple[str, ...] = ()) -> str:
    """One line per invalid setting: its key, the value given and where it came from, what
    is expected, and a did-you-mean for a misspelled key or choice (instead of pydantic's
    raw report and its documentation URL). ``section``: the path of the model that was
    validated when it is not the whole settings (e.g. ``("refresh",)``)."""
    environ = os.environ if environ is None else environ
    lines: list[str] = []
    for error in exc.errors():
        loc = section + tuple(str(part) for part in error["loc"])
        key = ".".join(loc) or "settings"
        variable = _env_name(loc, environ)
        origin = f"from {variable}" if variable else f"in {where}"
        value = error.get("input")
        shown = f" = {value!r}" if not isinstance(value, dict) else ""
        kind = error["type"]
        if kind == "extra_forbidden":
            holder = _model_at(loc[:-1])
            known = sorted(holder.model_fields) if holder is not None else []
            guess = _closest(loc[-1], known)
            parent = ".".join(loc[:-1])
            dotted = f"{parent}." if parent else ""
            what = "section" if not parent else "key"
            lines.append(f"unknown settings {what} {key} ({origin})"
                         + (f"; did you mean {dotted}{guess}?" if guess else "")
                         + (f" (known: {', '.join(known)})" if known else ""))
            continue
        message = str(error["msg"])
        expected = re.sub(r"^(Input|Value) should be ", "", message)
        expected = expected if expected != message else message[0].lower() + message[1:]
        line = f"{key}{shown} ({origin}): expected {expected}"
        choices = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
        guess = _closest(value, choices) if choices and isinstance(value, str) else None
        if guess:
            line += f"; did you mean {guess!r}?"
        lines.append(line)
    count = len(lines)
    head = "invalid setting" if count == 1 else f"{count} invalid settings"
    return f"{head}: " + "; ".join(lines) if count == 1 else head + ":\n  " + "\n  ".join(lines)
