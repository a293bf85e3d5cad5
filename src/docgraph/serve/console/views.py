"""What each console page shows, gathered through the governed service and the storage
ports (never SQL): plain dicts and lists for the templates. Every function here blocks (the
store may be a PostgreSQL round trip); the routes run them in worker threads.

Changes (a source added or removed, a refresh requested, a playground query) are written to
the audit log as ``console:<action>`` records of the signed-in admin, beside the records the
governed service writes itself; the governed reads that only render a page go through
:func:`page_reader` and write none.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin
from urllib.parse import unquote, urlsplit

from docgraph.errors import ConfigError, DocgraphError, RefreshBusy, SourceError
from docgraph.evidence.quality import relevance_level
from docgraph.governance import AccessDenied, Caller, Governance
from docgraph.governance.audit import AuditRecord, UnrecordedAuditLog
from docgraph.governance.inputs import MAX_PAGE
from docgraph.governance.read import MAX_READ_BUDGET, encode_read_cursor
from docgraph.lifecycle.admin import ADMIN_SECTIONS
from docgraph.model import lane_of, page_label
from docgraph.retrieve.lanes import LANE_NAMES
from docgraph.serve.tools import GENERIC_THEMES_QUERY
from docgraph.sources.credentials import credential_key
from docgraph.sources.naming import console_document_url, split_key
from docgraph.sources.urn import normalize_urn

if TYPE_CHECKING:
    from docgraph.app import DocGraph

log = logging.getLogger(__name__)

#: How many audit records and traces the Traces page lists.
RECENT_LIMIT = 100
#: Characters of a block's text shown in the playground.
EXCERPT_CHARS = 600
#: How long a preview waits for a remote folder to answer.
REACH_TIMEOUT_SECONDS = 15.0
#: The tools the playground runs.
PLAYGROUND_TOOLS = ("lookup_knowledge", "search_documents", "explore_topics")
PLAYGROUND_MODES = ("vector_first", "graph_first", "global")


def page_reader(governance: Governance) -> Governance:
    """``governance`` for rendering pages: the same service whose reads write no audit
    records (:class:`~docgraph.governance.audit.UnrecordedAuditLog`). The console audits
    what a person changes or asks (sign-in, changes, playground queries), not the reads
    behind each page view, which would bury the agents' requests."""
    reader = copy.copy(governance)
    reader.audit = UnrecordedAuditLog(governance.audit.store)
    return reader


def audit_change(governance: Governance, admin: Caller, action: str, outcome: str,
                 detail: str) -> None:
    """Write one console change to the audit log (``console:<action>``)."""
    governance.audit.write(AuditRecord(user_id=admin.user_id, operation=f"console:{action}",
                                       outcome=outcome, role=admin.active_role,
                                       reason=detail))


@contextmanager
def change_audited(governance: Governance, admin: Caller, action: str,
                   detail: str | None) -> Iterator[None]:
    """Audit a refused change as ``console:<action>``, outcome ``error``, reason
    ``<detail>: <error>`` (the error alone when ``detail`` is None), and re-raise it."""
    try:
        yield
    except DocgraphError as exc:
        audit_change(governance, admin, action, "error",
                     str(exc) if detail is None else f"{detail}: {exc}")
        raise


# -- status -------------------------------------------------------------------------------

@dataclass(kw_only=True)
class BackgroundJob:
    """One background thread at a time, with what the console shows about it: when it
    started and finished, its message and its error. Subclasses supply the work."""

    started_at: float | None = None
    finished_at: float | None = None
    message: str = ""
    error: str = ""
    _thread: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def running(self) -> bool:
        """Whether the job's thread runs now."""
        return self._thread is not None and self._thread.is_alive()

    def _launch(self, name: str, target: Callable[[], None],
                reset: Callable[[], None] | None = None) -> bool:
        """Start ``target`` in a daemon thread unless one runs (then False); ``reset``
        clears the subclass's state first, under the same lock."""
        with self._lock:
            if self.running:
                return False
            self.started_at, self.finished_at = time.time(), None
            self.message, self.error = "", ""
            if reset is not None:
                reset()
            self._thread = threading.Thread(target=self._finishing(target), name=name,
                                            daemon=True)
            self._thread.start()
        return True

    def _finishing(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            finally:
                self.finished_at = time.time()
        return run

    def wait(self, timeout: float) -> bool:
        """Wait for the job to end (tests); True when none runs."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running


@dataclass
class RefreshJob(BackgroundJob):
    """A "refresh now" of the console: wakes the server's refresh loop when it runs, or
    builds once in a background thread (through the elected leadership, so never beside
    another builder). Requests never wait for the build."""

    graph: DocGraph

    def request(self) -> tuple[bool, str]:
        """Start a refresh (or wake the loop); ``(started, what happened)``."""
        refresher = self.graph.refresher
        if refresher.running:
            refresher.trigger()
            leader = refresher.leader()
            if refresher.leading or leader is None:
                return True, "the refresh loop of this server starts a round now"
            return False, (f"the refresh is led by {leader}; this server builds only once it "
                           "leads (the leader refreshes on its interval)")
        if not self._launch("docgraph-console-refresh", self._run):
            return False, "a refresh started from the console is still running"
        return True, "refresh started"

    def _run(self) -> None:
        try:
            result = self.graph.refresher.run_once(wait_seconds=0)
            changed = sum(b.documents_changed for b in result.builds)
            outcomes = ", ".join(f"{b.namespace}: {b.outcome}" for b in result.builds)
            self.message = (f"built {len(result.builds)} namespace(s), {changed} document(s) "
                            f"changed" + (f" ({outcomes})" if outcomes else ""))
        except RefreshBusy as exc:
            self.error = str(exc)
        except Exception as exc:
            log.exception("console refresh failed")
            self.error = f"{type(exc).__name__}: {exc}"


def status_page(governance: Governance, admin: Caller, job: RefreshJob) -> dict[str, Any]:
    """Per namespace: counts, the last build with every phase's outcome, staleness; the
    failed files with reasons; who refreshes the index and the console's own refresh."""
    graph = governance.graph
    try:
        view = governance.index_status(admin)
    except AccessDenied:  # no namespace exists yet: '*' expands to nothing
        from docgraph.governance.browse import StatusView

        info = graph.status()
        view = StatusView(info.embedding_model, graph.settings.refresh.interval_seconds,
                          [], {}, refresh_leader=info.refresh_leader,
                          this_process_leads=info.this_process_leads,
                          refresher_running=info.refresher_running)
    namespaces = []
    for b in view.builds:
        stats = view.stats.get(b.namespace)
        latest = graph.build_history.latest(b.namespace)
        namespaces.append({
            "name": b.namespace, "documents": b.documents, "chunks": b.chunks,
            "entities": stats.entities if stats else 0,
            "communities": stats.communities if stats else 0,
            "last_build_at": b.last_build_at, "last_outcome": b.last_outcome,
            "staleness_seconds": b.staleness_seconds, "overdue": b.overdue,
            "failed_documents": b.failed_documents, "in_progress": b.in_progress,
            "phases": [{"source": p.source, "phase": p.phase, "outcome": p.outcome,
                        "message": p.message, "items": p.items, "seconds": p.seconds}
                       for p in (latest.phases if latest else [])],
        })
    model = view.embedding_model
    return {
        "namespaces": namespaces,
        "failures": [{"namespace": f.namespace, "source": f.source_urn, "path": f.path,
                      "reason": f.reason, "at": f.at} for f in view.failures],
        "embedding_model": f"{model[0]} ({model[1]} dimensions)" if model else None,
        "interval": view.refresh_interval_seconds,
        "leader": view.refresh_leader, "this_process_leads": view.this_process_leads,
        "refresher_running": view.refresher_running,
        "job": {"running": job.running, "started_at": job.started_at,
                "finished_at": job.finished_at, "message": job.message, "error": job.error},
    }


# -- sources ------------------------------------------------------------------------------

def sources_page(governance: Governance) -> dict[str, Any]:
    """Every source: folders (removable), SQL sources (URLs without passwords) and the
    derived table sources (read-only)."""
    registry = governance.graph.sources
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


def preview_folder(governance: Governance, entered: str, domain: str,
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
    sources = governance.graph.store.list_sources()
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


def reach_folder(governance: Governance, urn: str,
                 timeout_s: float = REACH_TIMEOUT_SECONDS) -> str | None:
    """Why the remote folder ``urn`` cannot be listed with the credentials the server has
    for it (environment or secrets file), or None when it can. Gives up after
    ``timeout_s`` (the attempt then ends in the background, bounded by the connection
    timeout of ``[sources]``)."""
    from docgraph.lifecycle.outcomes import describe_error
    from docgraph.sources.folder import FolderCrawler

    graph = governance.graph
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            options = graph.sources.credentials.storage_options(urn)
            with FolderCrawler(urn, graph.settings.loader.include, options) as crawler:
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


def add_folder(governance: Governance, admin: Caller, preview: FolderPreview) -> str:
    """Register a previewed folder (checked again) and audit it; returns what was done."""
    checked = preview_folder(governance, preview.urn or preview.entered, preview.domain,
                             preview.display_name, check_remote=False)  # the preview did
    if checked.error:
        audit_change(governance, admin, "add_source", "error",
                     f"{checked.urn or checked.entered} in {checked.domain!r}: {checked.error}")
        raise SourceError(checked.error)
    with change_audited(governance, admin, "add_source",
                        f"{checked.urn} in {checked.domain!r}"):
        record = governance.graph.sources.add_folder(checked.urn, checked.domain,
                                                     display_name=checked.display_name)
    audit_change(governance, admin, "add_source", "ok",
                 f"{record.urn} in {record.namespace!r}")
    return (f"added {record.urn} to domain {record.namespace!r}; it is indexed at the next "
            "refresh")


def update_folder(governance: Governance, admin: Caller, urn: str, domain: str,
                  display_name: str, public_url: str) -> str:
    """Rename a folder and set or clear its public URL (the base of its citation links),
    as ``docgraph sources set`` does; audited."""
    name = display_name.strip() or None
    url = public_url.strip()
    detail = f"{urn} in {domain!r}: name {name!r}, public URL {url or None!r}"
    with change_audited(governance, admin, "update_source", detail):
        record = governance.graph.sources.update_folder(
            urn, domain, display_name=name, public_url=url or None,
            clear_public_url=not url)
    audit_change(governance, admin, "update_source", "ok", detail)
    shown = record.display_name or name or "its default name"
    return (f"{record.urn} in domain {record.namespace!r} is now shown as {shown!r}"
            + (f" with citation links under {record.public_url}" if record.public_url
               else " without citation links"))


def remove_folder(governance: Governance, admin: Caller, urn: str, domain: str) -> str:
    """Unregister a folder and delete what was indexed from it (elected: refused while
    another process builds); audited."""
    with change_audited(governance, admin, "remove_source", f"{urn} in {domain!r}"):
        removed = governance.graph.sources.remove_folder(urn, domain)
    audit_change(governance, admin, "remove_source", "ok",
                 f"{urn} in {domain!r} ({removed} document(s) removed)")
    return f"removed {urn} from domain {domain!r} and {removed} indexed document(s)"


def add_sql_source(governance: Governance, admin: Caller, name: str, url: str) -> str:
    """Register (or re-point) a SQL source; its password is never stored (nor shown, nor
    audited); returns what was done and where its credentials come from."""
    registry = governance.graph.sources
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


def remove_sql_source(governance: Governance, admin: Caller, name: str) -> str:
    """Unregister a SQL source, its tags and its derived documents; audited."""
    with change_audited(governance, admin, "remove_sql_source", name):
        removed = governance.graph.sources.remove_sql_source(name)
    audit_change(governance, admin, "remove_sql_source", "ok",
                 f"{name} ({removed} document(s) removed)")
    return f"removed SQL source {name!r} and {removed} derived document(s)"


# -- tags ---------------------------------------------------------------------------------

def tags_page(governance: Governance, source: str | None,
              schema: str | None = None) -> dict[str, Any]:
    """The SQL sources, every column tag, and - for the chosen ``source`` - its schemas and
    the tables and columns of ``schema`` (default: the database's default schema) with the
    tags already on each (or why the database could not be read)."""
    registry = governance.graph.sources
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


def set_tag(governance: Governance, admin: Caller, source: str, column: str, kind: str,
            entity_type: str, domain: str, schema: str | None = None) -> str:
    """Tag ``column`` (``table.column``, in ``schema`` or the default one) of ``source``
    with ``natural_language`` (in ``domain``) or ``entity:<entity_type>`` through the
    registry (it checks the column in the database); audited."""
    table, _, name = column.partition(".")
    tag = "natural_language" if kind == "natural_language" else f"entity:{entity_type.strip()}"
    detail = f"{tag} on {source}:{column}" + (f" in {domain!r}" if domain.strip() else "")
    with change_audited(governance, admin, "set_tag", detail):
        saved = governance.graph.sources.set_tag(
            source, table, name, tag, schema=schema or None, domain=domain.strip() or None)
    audit_change(governance, admin, "set_tag", "ok", detail)
    where = f" in domain {saved.domain!r}" if saved.domain else ""
    follow = (" - its rows become documents at the next refresh"
              if saved.tag == "natural_language" else
              " - its values are matched as entities from the next refresh")
    return f"tagged {saved.label()} {saved.tag}{where}{follow}"


def remove_tag(governance: Governance, admin: Caller, source: str, schema: str, table: str,
               column: str, tag: str, domain: str) -> str:
    """Remove one tag (a ``natural_language`` tag's row documents go with it; elected);
    audited."""
    detail = f"{tag} on {source}:{schema}.{table}.{column}" + (
        f" in {domain!r}" if domain else "")
    with change_audited(governance, admin, "remove_tag", detail):
        removed = governance.graph.sources.remove_tag(
            source, table, column, tag, schema=schema, domain=domain or None)
    audit_change(governance, admin, "remove_tag", "ok", f"{detail} ({removed} document(s) "
                                                        "removed)")
    return f"removed {detail} and {removed} row document(s)"


# -- graph --------------------------------------------------------------------------------

GRAPH_LIMIT = 50


def graph_page(governance: Governance, admin: Caller, query: str | None,
               entity: str | None) -> dict[str, Any]:
    """Entities whose name contains ``query`` (all, by mentions, without one), the
    neighbours of ``entity`` (by weight, strongest first), and the communities, all through
    the governed listings."""
    out: dict[str, Any] = {"query": query or "", "entity": entity or "", "entities": [],
                           "neighbors": [], "communities": [], "error": ""}
    try:
        out["entities"] = governance.entities(admin, query or None, limit=GRAPH_LIMIT)
        if entity:
            out["neighbors"] = sorted(  # strongest first; ties by name
                governance.neighbors(admin, entity, limit=GRAPH_LIMIT),
                key=lambda n: (-n.weight, n.entity.name.casefold()))
        out["communities"] = governance.communities(admin, limit=100)
    except AccessDenied:
        out["error"] = "the index has no namespace yet"
    except DocgraphError as exc:
        out["error"] = str(exc)
    return out


def community_page(governance: Governance, admin: Caller,
                   community_id: int) -> dict[str, Any] | None:
    """One community (members, level, size) and its report, found as ``explore_topics``
    finds reports (the global search, so the report passes the same row checks); None when
    no community in reach has this id."""
    try:
        communities = governance.communities(admin, limit=MAX_PAGE)
    except AccessDenied:
        return None
    found = next((c for c in communities if c.id == community_id), None)
    if found is None:
        return None
    report = None
    if found.report_doc_id:
        hits = governance.retrieve(admin, found.title or " ".join(found.members[:5]),
                                   k=50, mode="global").hits
        report = next((h.text for h in hits if h.doc_id == found.report_doc_id), None)
    return {"community": found, "report": report}


# -- settings -----------------------------------------------------------------------------

#: Admin settings the console shows but does not change (credentials may be in them).
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


def settings_page(governance: Governance) -> dict[str, Any]:
    """The admin sections (store, loader, index, refresh) with each value as text, its
    description, which ones are read-only here, the embedding model and the file changes
    are written to. Settings of a backend not in use are left out, each section naming
    what it left out (``hidden``)."""
    admin = governance.graph.admin
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


def chat_model_view(governance: Governance) -> dict[str, Any]:
    """The chat model of ``[llm]``: endpoint, model name, the environment variable the API
    key is read from and whether it is set in this process (never the key itself)."""
    import os

    llm = governance.graph.settings.llm
    return {"base_url": llm.base_url or "", "model": llm.model or "",
            "api_key_env": llm.api_key_env, "key_set": bool(os.environ.get(llm.api_key_env)),
            "timeout_s": llm.timeout_s}


def change_chat_model(governance: Governance, admin: Caller, base_url: str,
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
        result = governance.graph.admin.update(changes, is_admin=True)
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


def change_settings(governance: Governance, admin: Caller,
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
            result = governance.graph.admin.update(
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

    graph: DocGraph
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
        current = self.graph.settings.embed.model
        if self.running:
            return "", f"the change to {self.model!r} is still running"
        if not model or model == current:
            return "", f"the index already uses {current!r}"
        try:
            make_embedder(EmbedSettings(model=model))
        except DocgraphError as exc:
            return "", str(exc)
        refresher = self.graph.refresher
        leader = None if refresher.leading else refresher.leader()
        if leader is not None:
            return "", (f"the refresh of this index is led by {leader}: change the model "
                        "there, or stop that process first")
        chunks = sum(ns.chunks for ns in self.graph.store.stats())
        return (f"changing embed.model from {current!r} to {model!r} invalidates every "
                f"stored vector: all {chunks} chunks (and community reports) are dropped "
                "and re-embedded; searches find less until the re-index ends"), ""

    def start(self, governance: Governance, admin: Caller, model: str) -> tuple[bool, str]:
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

    def _run(self, governance: Governance, admin: Caller) -> None:
        def progress(state: Any) -> None:
            self.done_files, self.total_files = state.done_files, state.total_files
            self.chunks_written = state.chunks_written

        try:
            result = self.graph.admin.update({"embed.model": self.model}, is_admin=True,
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


# -- traces and audit ---------------------------------------------------------------------

def traces_page(governance: Governance, limit: int = RECENT_LIMIT) -> dict[str, Any]:
    """The newest audit records (caller, outcome, duration, evidence keys), each linked to
    its retrieval trace when one was stored, and the newest traces."""
    graph = governance.graph
    traces = graph.traces.recent(limit)
    by_query: dict[tuple[str, str], str] = {}
    for t in traces:  # newest first: keep the newest trace of each (user, query)
        by_query.setdefault((str(t.get("user_id", "")), str(t.get("query_hash", ""))),
                            str(t["id"]))
    identity = governance.identity()
    records = []
    for r in governance.audit.recent(limit):
        key = (str(r.get("user_id", "")), str(r.get("query_hash", "")))
        records.append({**r, "trace_id": by_query.get(key) if key[1] else None,
                        # the ids agents and the CLI show (the record keeps the stored ones)
                        "evidence_keys": [identity.key_anywhere(str(k))
                                          for k in r.get("evidence_keys") or []]})
    return {"records": records, "chart": lane_share_chart(traces), "traces": [{
        "id": t["id"], "user_id": t.get("user_id"), "mode": t.get("mode"), "k": t.get("k"),
        "created_at": t.get("created_at"), "pool_size": t.get("pool_size", 0),
        "returned": len(t.get("final_provenance") or {}),
    } for t in traces]}


#: How pages name the engine's lanes where the tools and the CLI name them otherwise: the
#: seed lane's chunks are shown there by the lists that held them (``dense+bm25``).
LANE_LABELS = {"seed": "dense+bm25 (seed)"}


def lane_label(lane: str) -> str:
    """A trace's lane as pages name it (:data:`LANE_LABELS`, else the lane itself)."""
    return LANE_LABELS.get(lane, lane)


#: Lanes in the order charts stack them (the one lane list; others follow by name), each
#: with its colour; the chart is always accompanied by the same numbers as text.
LANE_ORDER = LANE_NAMES
LANE_COLOURS = ("#0b5cad", "#8a5a00", "#1a7f37", "#8250df", "#b42318", "#555d66")
CHART_WIDTH, CHART_HEIGHT, CHART_BARS = 640, 160, 40


def lane_share_chart(traces: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Lane shares of the returned chunks over the newest ``CHART_BARS`` traces that
    returned anything (oldest left), as SVG geometry: one stacked bar per trace, a legend
    and, per bar, the shares as text for a table. None when no trace returned anything."""
    rows = [t for t in traces if t.get("final_provenance")][:CHART_BARS][::-1]
    if not rows:
        return None
    seen = {lane for t in rows for lane in (t["final_provenance"] or {}).values()}
    lanes = [lane for lane in LANE_ORDER if lane in seen] + sorted(seen - set(LANE_ORDER))
    colour = {lane: LANE_COLOURS[min(i, len(LANE_COLOURS) - 1)] for i, lane in enumerate(lanes)}
    step = min(CHART_WIDTH / len(rows), 32.0)
    bars = []
    for i, t in enumerate(rows):
        shares = {s["lane"]: s for s in provenance_shares(t["final_provenance"])}
        y = float(CHART_HEIGHT)
        segments = []
        for lane in lanes:
            share = shares.get(lane)
            if share is None:
                continue
            height = CHART_HEIGHT * share["percent"] / 100.0
            y -= height
            segments.append({"lane": lane, "percent": share["percent"], "y": round(y, 2),
                             "height": round(height, 2), "colour": colour[lane]})
        bars.append({"id": t["id"], "x": round(i * step + 1, 2),
                     "width": round(max(step - 2, 1), 2), "segments": segments,
                     "created_at": t.get("created_at"), "user_id": t.get("user_id"),
                     "mode": t.get("mode")})
    return {"width": CHART_WIDTH, "height": CHART_HEIGHT, "bars": bars,
            "legend": [{"lane": lane, "colour": colour[lane]} for lane in lanes]}


def provenance_shares(final_provenance: dict[str, str]) -> list[dict[str, Any]]:
    """Each lane's share of the returned chunks, largest first."""
    counts = Counter(final_provenance.values())
    total = sum(counts.values())
    return [{"lane": lane, "count": n, "percent": round(100.0 * n / total, 1)}
            for lane, n in counts.most_common()] if total else []


def trace_page(governance: Governance, trace_id: str) -> dict[str, Any] | None:
    """One trace: candidates per lane, per-lane timings, query entities found and missing,
    and the final provenance shares; None when no trace has this id."""
    trace = governance.graph.traces.get(trace_id)
    if trace is None:
        return None
    identity = governance.identity()  # ids as agents see them; the trace keeps stored ones
    candidates = {lane: [identity.key_anywhere(str(i)) for i in ids]
                  for lane, ids in (trace.get("candidates") or {}).items()}
    final = {identity.key_anywhere(str(i)): lane
             for i, lane in (trace.get("final_provenance") or {}).items()}
    return {
        "id": trace_id, "user_id": trace.get("user_id"), "mode": trace.get("mode"),
        "k": trace.get("k"), "created_at": trace.get("created_at"),
        "query_hash": trace.get("query_hash"), "pool_size": trace.get("pool_size", 0),
        "lanes": [{"lane": lane, "count": len(ids), "ids": ids}
                  for lane, ids in candidates.items()],
        "timings": sorted((trace.get("timings_ms") or {}).items(), key=lambda kv: -kv[1]),
        "found": trace.get("query_entities_found") or [],
        "missing": trace.get("query_entities_missing") or [],
        "completeness": trace.get("completeness") or {},
        "shares": provenance_shares(trace.get("final_provenance") or {}),
        "final": final,
        "notes": trace.get("notes") or [],
    }


# -- playground ---------------------------------------------------------------------------

def run_playground(governance: Governance, admin: Caller, tool: str, user: str,
                   role: str | None, query: str, k: int = 10,
                   mode: str = "vector_first") -> dict[str, Any]:
    """Run ``tool`` (``explore_topics``: ranked community reports, its query optional) as
    the chosen caller through the governed service (its own audit record
    names that caller) and record who ran it in a ``console:playground`` record.

    Returns the namespaces the caller resolved to and one row per evidence block (lane,
    quality score or engine score, relevance level); a denial is returned as ``error``."""
    if tool not in PLAYGROUND_TOOLS:
        raise SourceError(f"tool: one of {', '.join(PLAYGROUND_TOOLS)}")
    if mode not in PLAYGROUND_MODES:
        raise SourceError(f"mode: one of {', '.join(PLAYGROUND_MODES)}")
    out: dict[str, Any] = {"tool": tool, "user": user, "role": role, "query": query,
                           "namespaces": [], "blocks": [], "error": "",
                           "relevance_level": None, "is_low_quality": None, "trace_id": None}
    detail = f"{tool} as {user}" + (f" ({role})" if role else "")
    try:
        caller = Caller(user, role)
        # The governed operation first, so a denial is audited under the caller as any
        # denied request is; then the namespaces it resolved to, for display.
        if tool == "lookup_knowledge":
            result = governance.lookup(caller, query)
            settings = governance.evidence
            identity = governance.identity()
            out["relevance_level"] = str(result.relevance_level)
            out["is_low_quality"] = result.is_low_quality
            for rank, block in enumerate(result.blocks, 1):
                lanes = [r.removeprefix("lane:") for r in block.hit_reasons
                         if r.startswith("lane:")]
                out["blocks"].append({
                    "rank": rank, "title": block.title,
                    "key": (identity.key(block.namespace, block.evidence_key)
                            if block.namespace and block.doc_id else block.evidence_key),
                    "source": block.source, "namespace": block.namespace,
                    "section": " > ".join(block.section_path),
                    "lane": lane_of(lanes), "lanes": lanes,
                    "quality": round(block.quality_score, 3),
                    "relevance": str(relevance_level(block.quality_score,
                                                     settings.precise_threshold,
                                                     settings.low_quality_threshold)),
                    "text": _excerpt(block.content),
                })
        else:
            if tool == "explore_topics":  # community reports, as the tool ranks them
                query, mode = query or GENERIC_THEMES_QUERY, "global"
                out["query"] = query
            cohort = governance.retrieve(caller, query, k=k, mode=mode,  # type: ignore[arg-type]
                                         return_trace=True)
            if cohort.trace is not None:
                out["trace_id"] = cohort.trace.id
            identity = governance.identity()
            for hit in cohort.hits:
                out["blocks"].append({
                    "rank": hit.original_rank, "title": hit.title,
                    "key": identity.key(hit.namespace, hit.chunk_id),
                    "source": hit.source_path, "namespace": hit.namespace,
                    "section": " > ".join(hit.section_path),
                    "lane": "community report" if tool == "explore_topics" else hit.lane,
                    "lanes": list(hit.shown_lanes),
                    "quality": round(float(hit.score), 4), "relevance": hit.score_label,
                    "text": _excerpt(hit.text),
                })
        out["namespaces"] = sorted(governance.namespaces(caller))
    except AccessDenied as exc:
        out["error"] = f"access denied: {exc}"
    except DocgraphError as exc:
        out["error"] = str(exc)
    for block in out["blocks"]:  # each passage's page in the console (not a report's)
        block["also"] = [lane for lane in block["lanes"]
                         if lane not in block["lane"].split("+")]
        doc, index = split_key(block["key"])
        block["link"] = (console_document_url("", doc, index)
                         if tool != "explore_topics" and index is not None else None)
    audit_change(governance, admin, "playground", "error" if out["error"] else "ok",
                 detail + (f": {out['error']}" if out["error"] else ""))
    return out


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS - 1] + "…"


# -- documents ----------------------------------------------------------------------------

def document_page(governance: Governance, admin: Caller, item_id: str,
                  chunk: int | None = None, cursor: str | None = None) -> dict[str, Any]:
    """One page of a document as the signed-in admin may read it (the governed read, so
    audited as a ``read`` of the admin; rows the admin's row check hides are not shown):
    its chunks in order, each with its anchor (``chunk-N``), agent-visible id, section and
    pages, the page that holds ``chunk`` first (the rest by ``cursor``), and links to the
    pages before and after.

    Raises :class:`~docgraph.errors.NotFound` for an id the admin cannot read (the one
    "not found" of every read) and :class:`~docgraph.errors.InvalidQuery` for a bad
    cursor."""
    doc_part = item_id.strip()
    wanted = doc_part if chunk is None else f"{doc_part}#chunk-{chunk}"
    page = governance.read(admin, wanted, scope="document", token_budget=MAX_READ_BUDGET,
                           cursor=cursor)
    identity = governance.identity()
    public = identity.document(page.namespace, page.doc_id)
    named = identity.source_of(page.namespace, page.doc_id)
    base = console_document_url("", public)

    def link(start: int | None) -> str | None:
        return None if start is None else f"{base}?cursor={encode_read_cursor(start)}"

    return {
        "title": page.title or page.path,
        "document_id": public,
        "namespace": page.namespace,
        "source_name": None if named is None else named.name,
        "path": page.path,
        "url": identity.url(page.namespace, page.doc_id, page.path),
        "target": chunk,
        "total": len(page.span),
        "chunks": [{
            "index": c.index, "anchor": f"chunk-{c.index}",
            "id": identity.key(c.namespace, c.chunk_id),
            "section": " > ".join(c.section_path),
            "pages": page_label(c.pages) if c.pages is not None else "",
            "ocr": c.ocr, "text": c.text, "target": c.index == chunk,
        } for c in page.chunks],
        "previous": link(page.previous_start),
        "next": link(page.next_start),
    }
