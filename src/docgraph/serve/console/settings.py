"""The Settings page: the admin sections (validated, applied, written to the settings file
and shared with the index's other processes, as ``docgraph admin set`` does), the chat
model, and the change of embedding model with the full re-index it forces; audited."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from docgraph.errors import ConfigError, DocgraphError
from docgraph.governance import Caller
from docgraph.lifecycle.admin import ADMIN_SECTIONS
from docgraph.serve.console.changes import BackgroundJob, audit_change, change_audited
from docgraph.serve.console.ports import ConsoleGovernance, ConsoleIndex

log = logging.getLogger(__name__)

READ_ONLY_SETTINGS = frozenset({"store.url"})


def _setting_text(value: Any) -> str:
    """How a setting's value is shown and edited: strings as they are, ``null`` as empty,
    everything else as JSON (the same values ``docgraph admin set`` takes)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _masked(key: str, value: Any) -> Any:
    if key == "store.url" and isinstance(value, str) and value:
        from sqlalchemy.engine import make_url

        try:
            return make_url(value).render_as_string(hide_password=True)
        except Exception:
            return "(set; not shown)"
    return value


#: Settings that only mean something for one value of another: ``{key: (deciding key,
#: the value it must have, what that is called)}``. The others are not shown (a PostgreSQL
#: URL beside an embedded store, Milvus options beside the embedded chunk index).
BACKEND_SETTINGS: dict[str, tuple[str, str, str]] = {
    "store.path": ("store.backend", "embedded", "the embedded (SQLite) store"),
    "store.url": ("store.backend", "postgres", "the PostgreSQL store"),
    "store.pg_ef_search": ("store.backend", "postgres", "the PostgreSQL store"),
    "store.milvus_uri": ("store.index", "milvus", "the Milvus chunk index"),
    "store.milvus_collection": ("store.index", "milvus", "the Milvus chunk index"),
    "store.milvus_token_env": ("store.index", "milvus", "the Milvus chunk index"),
}


def _field_help(section: str, key: str) -> str:
    """The setting's description (the settings model's field description)."""
    model = ADMIN_SECTIONS[section]
    info = model.model_fields.get(key)
    return " ".join((info.description or "").split()) if info is not None else ""


def _choices(section: str, key: str) -> list[str]:
    """The values a ``Literal`` setting takes (empty for any other)."""
    info = ADMIN_SECTIONS[section].model_fields.get(key)
    annotation = info.annotation if info is not None else None
    if get_origin(annotation) is Literal:
        return [str(v) for v in get_args(annotation)]
    return []


def settings_page(governance: ConsoleGovernance) -> dict[str, Any]:
    """The admin sections (store, loader, index, refresh) with each value as text, its
    description, which ones are read-only here, the embedding model and the file changes
    are written to. Settings of a backend not in use are left out, each section naming
    what it left out (``hidden``)."""
    admin = governance.root.admin
    view = admin.view()
    current = {f"{section}.{key}": value for section in ADMIN_SECTIONS
               for key, value in view[section].items()}
    sections = []
    for section in ADMIN_SECTIONS:
        if section == "llm":  # its own form: see chat_model_view
            continue
        fields, hidden = [], []
        for key, value in view[section].items():
            name = f"{section}.{key}"
            needs = BACKEND_SETTINGS.get(name)
            if needs is not None and str(current.get(needs[0])) != needs[1]:
                hidden.append({"key": name, "when": f"{needs[0]} = {needs[1]!r}",
                               "what": needs[2]})
                continue
            choices = _choices(section, key)
            fields.append({
                "key": name, "id": name.replace(".", "-"),
                "value": _setting_text(_masked(name, value)),
                "kind": "bool" if isinstance(value, bool) else "choice" if choices else "text",
                "choices": choices, "help": _field_help(section, key),
                "read_only": name in READ_ONLY_SETTINGS})
        sections.append({"name": section, "fields": fields, "hidden": hidden})
    return {"sections": sections, "embedding_model": view["embed"]["model"],
            "config_file": str(admin.config_file), "chat": chat_model_view(governance)}


#: What a kind of pydantic error expects, for messages a person reads.
_EXPECTED = {
    "float_parsing": "a number", "float_type": "a number", "int_parsing": "a whole number",
    "int_type": "a whole number", "int_from_float": "a whole number",
    "bool_parsing": "true or false", "bool_type": "true or false",
    "string_type": "text", "list_type": 'a JSON list, e.g. ["*.md", "*.pdf"]',
    "path_type": "a file path",
}


def setting_problems(exc: BaseException) -> str | None:
    """A refused admin setting as ``key: what is wrong, what is expected`` (one per
    problem, ``; `` between them), from the pydantic validation error behind ``exc``; None
    when there is none behind it."""
    from pydantic import ValidationError

    cause = exc.__cause__
    if not isinstance(cause, ValidationError):
        return None
    section = next((name for name, model in ADMIN_SECTIONS.items()
                    if model.__name__ == cause.title), "")
    problems = []
    for error in cause.errors(include_url=False):
        where = ".".join(str(part) for part in error.get("loc", ()))
        key = f"{section}.{where}" if section and where else where or section
        got = error.get("input")
        context = error.get("ctx") or {}
        kind = str(error.get("type", ""))
        expected = _EXPECTED.get(kind)
        if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            sign = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
                    "less_than_equal": "<="}[kind]
            bound = next(iter(context.values()), "")
            expected = f"a number {sign} {bound}"
        elif kind == "literal_error":
            expected = f"one of {context.get('expected', '')}"
        wrong = "missing" if kind == "missing" else f"{json.dumps(got, default=str)} is not " \
                                                    "accepted"
        message = str(error.get("msg", "")).rstrip(".")
        problems.append(f"{key}: {wrong}, expected {expected}" if expected else
                        f"{key}: {wrong} ({message[:1].lower() + message[1:]})")
    return "; ".join(problems) or None


def chat_model_view(governance: ConsoleGovernance) -> dict[str, Any]:
    """The chat model of ``[llm]``: endpoint, model name, the environment variable the API
    key is read from and whether it is set in this process (never the key itself)."""
    import os

    llm = governance.root.settings.llm
    return {"base_url": llm.base_url or "", "model": llm.model or "",
            "api_key_env": llm.api_key_env, "key_set": bool(os.environ.get(llm.api_key_env)),
            "timeout_s": llm.timeout_s}


def change_chat_model(governance: ConsoleGovernance, admin: Caller, base_url: str,
                      model: str) -> list[tuple[str, str]]:
    """Set the chat model's endpoint and model name (both, or neither to clear it) through
    :class:`~docgraph.lifecycle.admin.AdminSettings`: validated, applied, written to the
    settings file as ``docgraph admin set llm.base_url=... llm.model=...`` does, shared with
    the index's other processes; audited. Only these two keys: the API key stays in the
    environment variable ``llm.api_key_env`` names, which the console neither shows nor
    changes. Raises :class:`~docgraph.errors.ConfigError` (nothing changed)."""
    base_url, model = base_url.strip(), model.strip()
    problem = None
    if bool(base_url) != bool(model):
        problem = ("give both the endpoint and the model name, or clear both (no chat "
                   "model)")
    elif base_url:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            problem = f"endpoint {base_url!r}: expected an http:// or https:// URL"
        elif parts.username or parts.password:
            problem = ("the endpoint must not carry credentials: the API key is read from "
                       "the environment variable named by llm.api_key_env")
    if problem is not None:
        audit_change(governance, admin, "chat_model", "error", problem)
        raise ConfigError(problem)
    changes = {"llm.base_url": json.dumps(base_url) if base_url else None,
               "llm.model": json.dumps(model) if model else None}
    with change_audited(governance, admin, "chat_model", None):
        result = governance.root.admin.update(changes, is_admin=True)
    if not result.changed:
        return [("ok", "nothing changed")]
    done = (f"chat model {model!r} at {base_url}" if base_url else
            "no chat model (community reports and global search stay extractive)")
    audit_change(governance, admin, "chat_model", "ok", done)
    messages: list[tuple[str, str]] = [("ok", f"set {done}")]
    if result.written_to is not None:
        messages.append(("ok", f"written to {result.written_to}"))
    messages += [("note", w) for w in result.warnings]
    return messages


def change_settings(governance: ConsoleGovernance, admin: Caller,
                    submitted: dict[str, str]) -> list[tuple[str, str]]:
    """Apply the settings whose submitted text differs from the current one (read-only ones
    never), through :class:`~docgraph.lifecycle.admin.AdminSettings` - validated, applied
    and written to the settings file as ``docgraph admin set`` does; audited. Returns the
    messages to show. Raises :class:`~docgraph.errors.ConfigError` (nothing changed) for
    an invalid value."""
    current = {f["key"]: f["value"] for section in settings_page(governance)["sections"]
               for f in section["fields"] if not f["read_only"]}
    changes = {key: text for key, text in submitted.items()
               if key in current and text.strip() != current[key]}
    if not changes:
        return [("ok", "nothing changed")]
    try:
        with change_audited(governance, admin, "settings", ", ".join(sorted(changes))):
            result = governance.root.admin.update(
                {k: (None if v.strip() == "" else v.strip()) for k, v in changes.items()},
                is_admin=True)
    except ConfigError as exc:
        readable = setting_problems(exc)
        if readable is None:
            raise
        raise ConfigError(readable) from exc
    done = [f"{section}.{key} = {json.dumps(value)}"
            for section, values in result.changed.items() for key, value in values.items()]
    audit_change(governance, admin, "settings", "ok", "; ".join(done) or "nothing changed")
    messages: list[tuple[str, str]] = [("ok", "changed " + ", ".join(done)
                                        if done else "nothing changed")]
    if result.written_to is not None:
        messages.append(("ok", f"written to {result.written_to}"))
    if result.restart_required:
        messages.append(("note", "applies at the next start: "
                                 + ", ".join(result.restart_required)))
    messages += [("note", w) for w in result.warnings]
    return messages


@dataclass
class ModelChange(BackgroundJob):
    """A change of the embedding model: the full re-index it forces runs in a background
    thread (through the elected leadership, like every build), reporting its progress."""

    root: ConsoleIndex
    model: str = ""
    done_files: int = 0
    total_files: int = 0
    chunks_written: int = 0

    def preview(self, model: str) -> tuple[str, str]:
        """``(warning, error)`` for switching to ``model``: what the re-index costs, or why
        it cannot happen (an unknown model, the same model, another process leads, a
        change already running). Loads nothing into the index."""
        from docgraph.config import EmbedSettings
        from docgraph.embedding.embedders import make_embedder

        model = model.strip()
        current = self.root.settings.embed.model
        if self.running:
            return "", f"the change to {self.model!r} is still running"
        if not model or model == current:
            return "", f"the index already uses {current!r}"
        try:
            make_embedder(EmbedSettings(model=model))
        except DocgraphError as exc:
            return "", str(exc)
        refresher = self.root.refresher
        leader = None if refresher.leading else refresher.leader()
        if leader is not None:
            return "", (f"the refresh of this index is led by {leader}: change the model "
                        "there, or stop that process first")
        chunks = sum(ns.chunks for ns in self.root.store.stats())
        return (f"changing embed.model from {current!r} to {model!r} invalidates every "
                f"stored vector: all {chunks} chunks (and community reports) are dropped "
                "and re-embedded; searches find less until the re-index ends"), ""

    def start(self, governance: ConsoleGovernance, admin: Caller, model: str) -> tuple[bool, str]:
        """Start the change (checked again first); ``(started, what happened)``."""
        warning, error = self.preview(model)
        if error:
            audit_change(governance, admin, "embedding_model", "error", f"{model}: {error}")
            return False, error
        running = self.model

        def reset() -> None:
            self.model = model.strip()
            self.done_files = self.total_files = self.chunks_written = 0

        if not self._launch("docgraph-console-reindex", lambda: self._run(governance, admin),
                            reset):
            return False, f"the change to {running!r} is still running"
        return True, f"re-indexing with {self.model!r}: {warning}"

    def _run(self, governance: ConsoleGovernance, admin: Caller) -> None:
        def progress(state: Any) -> None:
            self.done_files, self.total_files = state.done_files, state.total_files
            self.chunks_written = state.chunks_written

        try:
            result = self.root.admin.update({"embed.model": self.model}, is_admin=True,
                                            full_reindex=True, progress=progress)
            self.message = (f"now embedded with {self.model!r}: {result.reindexed_chunks} "
                            "chunk(s) re-embedded")
            audit_change(governance, admin, "embedding_model", "ok", self.message)
        except Exception as exc:
            if not isinstance(exc, DocgraphError):
                log.exception("embedding model change failed")
            self.error = f"{type(exc).__name__}: {exc}"
            audit_change(governance, admin, "embedding_model", "error",
                         f"{self.model}: {self.error}")

    def view(self) -> dict[str, Any]:
        """The state for the Settings page."""
        return {"running": self.running, "model": self.model, "started_at": self.started_at,
                "finished_at": self.finished_at, "done_files": self.done_files,
                "total_files": self.total_files, "chunks_written": self.chunks_written,
                "message": self.message, "error": self.error}
