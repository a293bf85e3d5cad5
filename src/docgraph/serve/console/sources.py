"""The Sources and Tags pages: folders (previewed, checked, added, renamed, removed), SQL
sources (passwords never stored, shown or audited) and column tags, each change audited."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from docgraph.errors import DocgraphError, SourceError
from docgraph.governance import Caller
from docgraph.serve.console.changes import audit_change, change_audited
from docgraph.serve.console.ports import ConsoleGovernance
from docgraph.sources.credentials import credential_key
from docgraph.sources.urn import normalize_urn

#: How long a preview waits for a remote folder to answer.
REACH_TIMEOUT_SECONDS = 15.0


def sources_page(governance: ConsoleGovernance) -> dict[str, Any]:
    """Every source: folders (removable), SQL sources (URLs without passwords) and the
    derived table sources (read-only)."""
    registry = governance.root.sources
    rows = registry.list()
    return {
        "folders": [r for r in rows if r.kind == "documents"],
        "sql": [{"name": q.name, "url": q.url, "backend": q.url.split(":", 1)[0],
                 "credential_env": q.credential_env} for q in registry.sql_sources()],
        "tables": [r for r in rows if r.kind == "table"],
    }


@dataclass(frozen=True)
class FolderPreview:
    """A folder as it would be registered, with what stands in the way (``error``) and
    what to know (``notes``)."""

    entered: str
    urn: str
    domain: str
    display_name: str | None
    error: str = ""
    notes: tuple[str, ...] = ()


def preview_folder(governance: ConsoleGovernance, entered: str, domain: str,
                   display_name: str | None, *, check_remote: bool = True) -> FolderPreview:
    """Normalize a folder URN and check it before saving: a bad URN, a duplicate
    registration in the same domain, a local folder that does not exist, or a remote one
    that cannot be listed (``check_remote``; see :func:`reach_folder`) is an error."""
    domain = domain.strip()
    name = (display_name or "").strip() or None
    try:
        urn = normalize_urn(entered)
    except SourceError as exc:
        return FolderPreview(entered, "", domain, name, error=str(exc))
    if not domain:
        return FolderPreview(entered, urn, domain, name,
                             error="a domain (namespace) name must not be empty")
    notes: list[str] = []
    parts = urlsplit(entered.strip())
    if parts.scheme.lower() not in ("", "file") and (parts.username or parts.password):
        notes.append("the credentials in the URN are not stored: set them with "
                     f"DOCGRAPH_SOURCE_{credential_key(urn)}_* or the secrets file")
    sources = governance.root.store.list_sources()
    if any(s.urn == urn and s.namespace == domain for s in sources):
        return FolderPreview(entered, urn, domain, name, notes=tuple(notes),
                             error=f"{urn} is already registered in domain {domain!r}")
    others = sorted(s.namespace for s in sources if s.urn == urn)
    if others:
        notes.append(f"the same folder is registered in {', '.join(others)} too (each domain "
                     "indexes it as its own namespace)")
    if urn.startswith("file://"):
        path = Path(unquote(urlsplit(urn).path))
        if not path.is_dir():
            return FolderPreview(entered, urn, domain, name, notes=tuple(notes),
                                 error=f"unreachable: {path} is not a folder on this server")
    elif check_remote:
        problem = reach_folder(governance, urn)
        if problem:
            return FolderPreview(entered, urn, domain, name, notes=tuple(notes),
                                 error=f"unreachable: {problem}")
        notes.append("reached: the folder answered a listing with the credentials the "
                     "server has for it")
    return FolderPreview(entered, urn, domain, name, notes=tuple(notes))


def reach_folder(governance: ConsoleGovernance, urn: str,
                 timeout_s: float = REACH_TIMEOUT_SECONDS) -> str | None:
    """Why the remote folder ``urn`` cannot be listed with the credentials the server has
    for it (environment or secrets file), or None when it can. Gives up after
    ``timeout_s`` (the attempt then ends in the background, bounded by the connection
    timeout of ``[sources]``)."""
    from docgraph.lifecycle.outcomes import describe_error
    from docgraph.sources.folder import FolderCrawler

    root = governance.root
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            options = root.sources.credentials.storage_options(urn)
            with FolderCrawler(urn, root.settings.loader.include, options) as crawler:
                crawler.fs.ls(crawler.root, detail=False)
            outcome.append(None)
        except Exception as exc:
            outcome.append(describe_error(exc))

    worker = threading.Thread(target=attempt, name="docgraph-console-reach", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        return f"no answer within {timeout_s:g} seconds"
    return outcome[0]


def add_folder(governance: ConsoleGovernance, admin: Caller, preview: FolderPreview) -> str:
    """Register a previewed folder (checked again) and audit it; returns what was done."""
    checked = preview_folder(governance, preview.urn or preview.entered, preview.domain,
                             preview.display_name, check_remote=False)  # the preview did
    if checked.error:
        audit_change(governance, admin, "add_source", "error",
                     f"{checked.urn or checked.entered} in {checked.domain!r}: {checked.error}")
        raise SourceError(checked.error)
    with change_audited(governance, admin, "add_source",
                        f"{checked.urn} in {checked.domain!r}"):
        record = governance.root.sources.add_folder(checked.urn, checked.domain,
                                                     display_name=checked.display_name)
    audit_change(governance, admin, "add_source", "ok",
                 f"{record.urn} in {record.namespace!r}")
    return (f"added {record.urn} to domain {record.namespace!r}; it is indexed at the next "
            "refresh")


def update_folder(governance: ConsoleGovernance, admin: Caller, urn: str, domain: str,
                  display_name: str, public_url: str) -> str:
    """Rename a folder and set or clear its public URL (the base of its citation links),
    as ``docgraph sources set`` does; audited."""
    name = display_name.strip() or None
    url = public_url.strip()
    detail = f"{urn} in {domain!r}: name {name!r}, public URL {url or None!r}"
    with change_audited(governance, admin, "update_source", detail):
        record = governance.root.sources.update_folder(
            urn, domain, display_name=name, public_url=url or None,
            clear_public_url=not url)
    audit_change(governance, admin, "update_source", "ok", detail)
    shown = record.display_name or name or "its default name"
    return (f"{record.urn} in domain {record.namespace!r} is now shown as {shown!r}"
            + (f" with citation links under {record.public_url}" if record.public_url
               else " without citation links"))


def remove_folder(governance: ConsoleGovernance, admin: Caller, urn: str, domain: str) -> str:
    """Unregister a folder and delete what was indexed from it (elected: refused while
    another process builds); audited."""
    with change_audited(governance, admin, "remove_source", f"{urn} in {domain!r}"):
        removed = governance.root.sources.remove_folder(urn, domain)
    audit_change(governance, admin, "remove_source", "ok",
                 f"{urn} in {domain!r} ({removed} document(s) removed)")
    return f"removed {urn} from domain {domain!r} and {removed} indexed document(s)"


def add_sql_source(governance: ConsoleGovernance, admin: Caller, name: str, url: str) -> str:
    """Register (or re-point) a SQL source; its password is never stored (nor shown, nor
    audited); returns what was done and where its credentials come from."""
    registry = governance.root.sources
    with change_audited(governance, admin, "add_sql_source", name):
        from docgraph.sources.registry import strip_sql_credentials

        _, stripped = strip_sql_credentials(url)
        source = registry.add_sql_source(name.strip(), url)
    audit_change(governance, admin, "add_sql_source", "ok", f"{source.name}: {source.url}")
    message = f"added SQL source {source.name!r} at {source.url}"
    if stripped:
        message += (f"; its password was not stored: set {source.credential_env}PASSWORD "
                    "or the secrets file")
    return message


def remove_sql_source(governance: ConsoleGovernance, admin: Caller, name: str) -> str:
    """Unregister a SQL source, its tags and its derived documents; audited."""
    with change_audited(governance, admin, "remove_sql_source", name):
        removed = governance.root.sources.remove_sql_source(name)
    audit_change(governance, admin, "remove_sql_source", "ok",
                 f"{name} ({removed} document(s) removed)")
    return f"removed SQL source {name!r} and {removed} derived document(s)"


# -- tags ---------------------------------------------------------------------------------

def tags_page(governance: ConsoleGovernance, source: str | None,
              schema: str | None = None) -> dict[str, Any]:
    """The SQL sources, every column tag, and - for the chosen ``source`` - its schemas and
    the tables and columns of ``schema`` (default: the database's default schema) with the
    tags already on each (or why the database could not be read)."""
    registry = governance.root.sources
    sources = [q.name for q in registry.sql_sources()]
    tags = registry.tags()
    out: dict[str, Any] = {"sql_sources": sources, "source": None, "schema": "",
                           "schemas": [], "tables": [], "error": "",
                           "tags": [{"source": t.source, "schema": t.schema, "table": t.table,
                                     "column": t.column, "tag": t.tag, "domain": t.domain,
                                     "label": t.label()} for t in tags]}
    if source is None and sources:
        source = sources[0]
    if source is None:
        return out
    if source not in sources:
        out["error"] = f"no SQL source named {source!r}"
        return out
    out["source"] = source
    try:
        with registry.reader(source) as reader:
            schema, out["schemas"], shapes = reader.describe(schema)
    except DocgraphError as exc:
        out["error"] = str(exc)
        return out
    on: dict[tuple[str, str], list[str]] = {}
    for t in tags:
        if t.source == source and t.schema == schema:
            on.setdefault((t.table, t.column), []).append(
                t.tag + (f" ({t.domain})" if t.domain else ""))
    out["schema"] = schema
    out["tables"] = [{"table": shape.table, "pk": shape.pk_column, "columns": [
        {"name": name, "type": kind, "tags": on.get((shape.table, name), [])}
        for name, kind in shape.columns]} for shape in shapes]
    return out


def set_tag(governance: ConsoleGovernance, admin: Caller, source: str, column: str, kind: str,
            entity_type: str, domain: str, schema: str | None = None) -> str:
    """Tag ``column`` (``table.column``, in ``schema`` or the default one) of ``source``
    with ``natural_language`` (in ``domain``) or ``entity:<entity_type>`` through the
    registry (it checks the column in the database); audited."""
    table, _, name = column.partition(".")
    tag = "natural_language" if kind == "natural_language" else f"entity:{entity_type.strip()}"
    detail = f"{tag} on {source}:{column}" + (f" in {domain!r}" if domain.strip() else "")
    with change_audited(governance, admin, "set_tag", detail):
        saved = governance.root.sources.set_tag(
            source, table, name, tag, schema=schema or None, domain=domain.strip() or None)
    audit_change(governance, admin, "set_tag", "ok", detail)
    where = f" in domain {saved.domain!r}" if saved.domain else ""
    follow = (" - its rows become documents at the next refresh"
              if saved.tag == "natural_language" else
              " - its values are matched as entities from the next refresh")
    return f"tagged {saved.label()} {saved.tag}{where}{follow}"


def remove_tag(governance: ConsoleGovernance, admin: Caller, source: str, schema: str, table: str,
               column: str, tag: str, domain: str) -> str:
    """Remove one tag (a ``natural_language`` tag's row documents go with it; elected);
    audited."""
    detail = f"{tag} on {source}:{schema}.{table}.{column}" + (
        f" in {domain!r}" if domain else "")
    with change_audited(governance, admin, "remove_tag", detail):
        removed = governance.root.sources.remove_tag(
            source, table, column, tag, schema=schema, domain=domain or None)
    audit_change(governance, admin, "remove_tag", "ok", f"{detail} ({removed} document(s) "
                                                        "removed)")
    return f"removed {detail} and {removed} row document(s)"
