"""Admin settings: the deployment-wide ``store``, ``loader``, ``index``, ``refresh`` and
``llm`` (the chat model) sections (the admin tab), readable by anyone and changeable only
by an admin.

They are ordinary sections of ``docgraph.toml``; :meth:`AdminSettings.update` validates a
change with the same models as the file, applies it to the running index (its composition root) and
writes it back to the file (comments and other sections preserved). What applies when:

* ``index`` and ``llm`` - at once (the chat model is rebuilt from ``[llm]`` when next used;
  its API key stays in the environment variable ``llm.api_key_env`` names, never in the
  file); ``refresh`` - from the refresher's next cycle (``refresh.in_serve``
  when ``docgraph serve`` next starts);
* ``loader`` - from the next build, to documents that change (run ``docgraph reindex
  --full`` to re-chunk everything);
* ``store`` - at the next start (the open catalog is not swapped under running work).

The embedding model (``embed.model``) is not an admin-tab setting: every stored vector
belongs to it. Changing it is refused unless ``full_reindex=True`` asks for a full re-index
explicitly, which drops and re-embeds every chunk (the warning says how many).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from docgraph.config import (
    DEFAULT_CONFIG_FILE,
    EmbedSettings,
    IndexSettings,
    LlmSettings,
    LoaderSettings,
    RefreshSettings,
    StoreSettings,
    describe_validation_error,
)
from docgraph.errors import ConfigError, DocgraphError, EmbeddingModelMismatch, RefreshBusy

if TYPE_CHECKING:
    from docgraph.ingest.pipeline import ProgressCallback
    from docgraph.lifecycle.ports import AdminRoot

log = logging.getLogger(__name__)

ADMIN_SECTIONS: dict[str, type[BaseModel]] = {
    "store": StoreSettings,
    "loader": LoaderSettings,
    "index": IndexSettings,
    "refresh": RefreshSettings,
    "llm": LlmSettings,
}
_ALL_SECTIONS: dict[str, type[BaseModel]] = {**ADMIN_SECTIONS, "embed": EmbedSettings}


class AdminRequired(DocgraphError):
    """A non-admin tried to change deployment-wide settings."""


@dataclass
class AdminUpdate:
    """What :meth:`AdminSettings.update` changed, where it was written, and what to know."""

    changed: dict[str, dict[str, Any]] = field(default_factory=dict)
    written_to: Path | None = None
    restart_required: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reindexed_chunks: int = 0


def _parse_value(raw: Any) -> Any:
    """CLI values arrive as strings: JSON where it parses (numbers, lists, booleans)."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _group(changes: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"loader": {...}}`` or ``{"loader.chunk_tokens": 300}`` -> section -> key -> value."""
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        if "." in key:
            section, name = key.split(".", 1)
            grouped.setdefault(section, {})[name] = _parse_value(value)
        elif isinstance(value, Mapping):
            grouped.setdefault(key, {}).update({k: _parse_value(v) for k, v in value.items()})
        else:
            raise ConfigError(f"admin setting {key!r}: use 'section.key' or a section table")
    for section in grouped:
        if section not in _ALL_SECTIONS:
            raise ConfigError(
                f"{section!r} is not an admin setting section; admin sections are "
                f"{', '.join(ADMIN_SECTIONS)} (and embed.model with a full re-index)"
            )
    return grouped


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class AdminSettings:
    """Reads and changes the admin settings of one index (``root``: the composition root,
    see :class:`~docgraph.lifecycle.ports.AdminRoot`)."""

    def __init__(self, root: AdminRoot, config_file: str | Path | None = None) -> None:
        self.root = root
        self._config_file = Path(config_file) if config_file else None

    @property
    def config_file(self) -> Path:
        """The TOML file changes are written to (the one the settings were loaded from)."""
        if self._config_file is not None:
            return self._config_file
        return Path(os.environ.get("DOCGRAPH_CONFIG", DEFAULT_CONFIG_FILE))

    def view(self) -> dict[str, dict[str, Any]]:
        """The current admin sections (and the embedding model), as plain values."""
        settings = self.root.settings
        out = {name: _plain(getattr(settings, name).model_dump()) for name in ADMIN_SECTIONS}
        out["embed"] = {"model": settings.embed.model}
        return out

    def update(
        self,
        changes: Mapping[str, Any],
        *,
        is_admin: bool,
        full_reindex: bool = False,
        persist: bool = True,
        progress: ProgressCallback | None = None,
    ) -> AdminUpdate:
        """Validate, apply and (by default) write admin settings.

        ``changes`` maps sections to ``{key: value}`` or ``"section.key"`` to a value.
        Raises :class:`AdminRequired` unless ``is_admin``, :class:`ConfigError` for an
        unknown or invalid setting (nothing is changed then), and
        :class:`EmbeddingModelMismatch` for an embedding model change without
        ``full_reindex``. ``progress`` follows the full re-index document by document."""
        if not is_admin:
            raise AdminRequired("admin settings are deployment-wide; only an admin may change "
                                "them")
        grouped = _group(changes)
        settings = self.root.settings
        validated: dict[str, BaseModel] = {}
        result = AdminUpdate()
        for section, values in grouped.items():
            model = _ALL_SECTIONS[section]
            current = getattr(settings, section)
            try:
                validated[section] = model.model_validate({**current.model_dump(), **values})
            except ValidationError as exc:
                raise ConfigError(describe_validation_error(
                    exc, "the admin settings", environ={}, section=(section,))) from exc
            before = current.model_dump()
            after = validated[section].model_dump()
            diff = {k: after[k] for k in values if before.get(k) != after.get(k)}
            if diff:
                result.changed[section] = _plain(diff)
        embed = validated.get("embed")
        new_embedder = None
        if isinstance(embed, EmbedSettings) and "model" in result.changed.get("embed", {}):
            chunks = sum(ns.chunks for ns in self.root.store.stats())
            cost = (f"changing embed.model from {settings.embed.model!r} to "
                    f"{embed.model!r} invalidates every stored vector: all {chunks} chunks "
                    "(and community reports) are dropped and re-embedded")
            if not full_reindex:
                raise EmbeddingModelMismatch(
                    f"{cost}; refused - request a full re-index explicitly "
                    "(full_reindex=True, `docgraph admin set ... --full-reindex`)"
                )
            refresher = self.root.refresher
            leader = None if refresher.leading else refresher.leader()
            if leader is not None:  # the re-index would be refused after the switch
                raise RefreshBusy(f"{cost}, and the refresh of this index is led by {leader}; "
                                  "change it there, or stop that process first (nothing was "
                                  "changed)")
            from docgraph.embedding.embedders import make_embedder

            new_embedder = make_embedder(embed)
            result.warnings.append(cost)
            log.warning("%s", cost)
        # Everything validated: apply.
        for section, section_settings in validated.items():
            if section not in result.changed:
                continue
            if section == "store":
                result.restart_required.append("store")
                continue
            setattr(settings, section, section_settings)
            if section == "refresh" and "in_serve" in result.changed[section]:
                result.restart_required.append("refresh.in_serve")
            if section == "embed" and new_embedder is None:
                result.restart_required.append("embed")
            if section == "loader":
                result.warnings.append(
                    "loader changes apply to documents as they change; run "
                    "`docgraph reindex --full` to re-chunk every document now"
                )
        for section, keys in result.changed.items():
            for key in keys:
                variable = f"DOCGRAPH_{section.upper()}__{key.upper()}"
                if variable in os.environ:
                    result.warnings.append(f"{section}.{key} is overridden by ${variable}, "
                                           "which wins over docgraph.toml at the next start")
        if persist and result.changed:
            result.written_to = self._write(result.changed)
            # Every other process of the index applies these within a few seconds.
            self.root.shared_settings.record(result.changed)
        if new_embedder is not None:
            # The new model's ranking constants (its profile) replace the old model's,
            # except values set explicitly; setting the embedder rebuilds the cohort
            # engine's settings from them.
            settings.select_model(settings.embed.model)
            self.root.embedder = new_embedder
            reports = self.root.reindex_full(progress)
            result.reindexed_chunks = sum(r.chunks_embedded for r in reports)
        return result

    def _write(self, changed: dict[str, dict[str, Any]]) -> Path:
        """Write the changed keys into the TOML file, keeping everything else as it was."""
        import tomlkit

        path = self.config_file
        try:
            document = tomlkit.parse(path.read_text(encoding="utf-8")) if path.is_file() \
                else tomlkit.document()
        except Exception as exc:
            raise ConfigError(f"cannot read {path} to update it: {exc}") from exc
        for section, values in changed.items():
            if section not in document:
                document.add(section, tomlkit.table())
            table = document[section]
            for key, value in values.items():
                if value is None:  # TOML has no null: an unset key is left out
                    table.pop(key, None)
                else:
                    table[key] = value
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            text = tomlkit.dumps(document)
            tmp.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
            tmp.replace(path)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc}") from exc
        return path
