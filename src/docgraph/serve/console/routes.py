"""The console's pages and routes under ``/console``: sign-in, Status, Sources, Tags, Graph,
Settings, Traces, Playground, and a document page (``/console/documents/<id>?chunk=N``,
where results link). What every page shares (headers, templates, the session and CSRF
checks, sign-in) is :class:`~docgraph.serve.console.plumbing.ConsoleBase`; what each page
shows and changes is in :mod:`.views`.

Pages are server-rendered Jinja2 templates (autoescaped) with one stylesheet and one small
script, both served from this package (``/console/static/``): no build step, no CDN, so the
console works offline. Every response carries a Content-Security-Policy that allows only
the console's own files (no inline script), ``X-Frame-Options: DENY`` and ``no-store``.

Sign-in attempts are rate-limited per client address, and failing addresses share one
more bucket, across every server of the database (:mod:`.ratelimit`: a 429 page with
``Retry-After``). Every page but the sign-in form needs a live session
(:mod:`.sessions`); every POST also
needs the session's CSRF token in its ``csrf`` field and, when the browser sends an
``Origin``, one whose host is the request's own ``Host`` (on top of the server-wide
Host/Origin policy of :mod:`docgraph.serve.guards`, which runs before these routes).
Blocking work (store reads, source changes, queries) runs in worker threads; "refresh now"
starts a background build and returns at once.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from docgraph.errors import DocgraphError, NotFound
from docgraph.serve.console import views
from docgraph.serve.console.idp_pages import IdpSignIn
from docgraph.serve.console.plumbing import (
    PREFIX,
    SECURITY_HEADERS,
    ConsoleBase,
    template_environment,
)
from docgraph.serve.console.plumbing import form_field as _field
from docgraph.serve.console.sessions import ConsoleAuth, ConsoleSession
from docgraph.serve.tools import DocgraphTools


class Console(ConsoleBase):
    """The console of one ``docgraph serve`` process: its pages and their routes (the
    plumbing and sign-in are :class:`~docgraph.serve.console.plumbing.ConsoleBase`'s)."""

    # -- pages --------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        """``/console``: to the Status page."""
        return RedirectResponse(f"{PREFIX}/status", 303, headers=SECURITY_HEADERS)

    async def status(self, request: Request, session: ConsoleSession) -> Response:
        """Status: per namespace counts, last build per phase, staleness, failures."""
        data = await self.blocking(views.status_page, self.reader, session.caller,
                                   self.refresh_job)
        return self.render(request, "status.html", session=session, title="Status", **data)

    async def refresh(self, request: Request, session: ConsoleSession) -> Response:
        """Refresh now (never waits for the build)."""
        started, message = await self.blocking(self.refresh_job.request)  # asks the lock
        await self.blocking(views.audit_change, self.governance, session.caller, "refresh",
                            "ok" if started else "denied", message)
        return self.back(session, "status", "ok" if started else "error", message)

    async def sources(self, request: Request, session: ConsoleSession) -> Response:
        """Sources: folders, SQL sources and derived table sources."""
        data = await self.blocking(views.sources_page, self.governance)
        return self.render(request, "sources.html", session=session, title="Sources",
                           preview=None, **data)

    async def preview_source(self, request: Request, session: ConsoleSession) -> Response:
        """The folder as it would be saved (normalized URN, errors, notes), to confirm."""
        form: FormData = request.state.form
        preview = await self.blocking(views.preview_folder, self.governance,
                                      _field(form, "urn"), _field(form, "domain"),
                                      _field(form, "display_name"))
        data = await self.blocking(views.sources_page, self.governance)
        return self.render(request, "sources.html", status=400 if preview.error else 200,
                           session=session, title="Sources", preview=preview, **data)

    async def add_source(self, request: Request, session: ConsoleSession) -> Response:
        """Save a previewed folder."""
        form: FormData = request.state.form
        preview = views.FolderPreview(_field(form, "urn"), _field(form, "urn"),
                                      _field(form, "domain"),
                                      _field(form, "display_name") or None)
        return await self.act(session, "sources", "added", views.add_folder, preview)

    async def update_source(self, request: Request, session: ConsoleSession) -> Response:
        """Rename a folder or change its public URL."""
        form: FormData = request.state.form
        return await self.act(session, "sources", "changed", views.update_folder,
                              _field(form, "urn"), _field(form, "domain"),
                              _field(form, "display_name"), _field(form, "public_url"))

    async def remove_source(self, request: Request, session: ConsoleSession) -> Response:
        """Remove a folder from a domain (and its indexed documents)."""
        form: FormData = request.state.form
        return await self.act(session, "sources", "removed", views.remove_folder,
                              _field(form, "urn"), _field(form, "domain"))

    async def add_sql(self, request: Request, session: ConsoleSession) -> Response:
        """Register a SQL source (its password is dropped)."""
        form: FormData = request.state.form
        return await self.act(session, "sources", "added", views.add_sql_source,
                              _field(form, "name"), _field(form, "url"))

    async def remove_sql(self, request: Request, session: ConsoleSession) -> Response:
        """Remove a SQL source (its tags and derived documents go with it)."""
        form: FormData = request.state.form
        return await self.act(session, "sources", "removed", views.remove_sql_source,
                              _field(form, "name"))

    async def tags(self, request: Request, session: ConsoleSession) -> Response:
        """Tags: a SQL source's tables and columns, and the column tags."""
        data = await self.blocking(views.tags_page, self.governance,
                                   request.query_params.get("source"),
                                   request.query_params.get("schema") or None)
        return self.render(request, "tags.html", session=session, title="Tags", **data)

    async def set_tag(self, request: Request, session: ConsoleSession) -> Response:
        """Set a column tag."""
        form: FormData = request.state.form
        source = _field(form, "source")
        where = _tags_page(source, _field(form, "schema"))
        return await self.act(session, where, "tagged", views.set_tag, source,
                              _field(form, "column"), _field(form, "kind"),
                              _field(form, "entity_type"), _field(form, "domain"),
                              _field(form, "schema") or None)

    async def remove_tag(self, request: Request, session: ConsoleSession) -> Response:
        """Remove a column tag."""
        form: FormData = request.state.form
        source = _field(form, "source")
        where = _tags_page(source, _field(form, "schema"))
        return await self.act(session, where, "removed", views.remove_tag, source,
                              _field(form, "schema"), _field(form, "table"),
                              _field(form, "column"), _field(form, "tag"),
                              _field(form, "domain"))

    async def graph(self, request: Request, session: ConsoleSession) -> Response:
        """Graph: entity search, an entity's neighbours, the communities."""
        data = await self.blocking(views.graph_page, self.reader, session.caller,
                                   request.query_params.get("q", "").strip() or None,
                                   request.query_params.get("entity", "").strip() or None)
        return self.render(request, "graph.html", session=session, title="Graph", **data)

    async def community(self, request: Request, session: ConsoleSession) -> Response:
        """One community and its report."""
        raw = request.path_params["community_id"]
        data = await self.blocking(views.community_page, self.reader, session.caller,
                                   int(raw)) if raw.isdigit() else None
        if data is None:
            return self.refuse(request, 404, f"no community {raw!r} in reach", session)
        return self.render(request, "community.html", session=session,
                           title=f"Community: {data['community'].title}", **data)

    async def document(self, request: Request, session: ConsoleSession) -> Response:
        """A document read as the signed-in admin, opened at ``?chunk=N`` (the ``url`` of a
        search or fetch result whose source publishes none links here)."""
        item_id = request.path_params["item_id"]
        raw = request.query_params.get("chunk", "")
        if raw and not (raw.isdigit() and len(raw) <= 9):
            return self.refuse(request, 400, "chunk: a chunk number", session)
        try:
            doc = await self.blocking(views.document_page, self.governance, session.caller,
                                      item_id, int(raw) if raw else None,
                                      request.query_params.get("cursor") or None)
        except NotFound as exc:
            return self.refuse(request, 404, str(exc), session)
        except DocgraphError as exc:
            return self.refuse(request, 400, str(exc), session)
        return self.render(request, "document.html", session=session,
                           title=f"Document: {doc['title']}", doc=doc)

    async def settings(self, request: Request, session: ConsoleSession) -> Response:
        """Settings: the admin sections, editable, the embedding model and the chat
        model."""
        data = await self.blocking(views.settings_page, self.governance)
        return self.render(request, "settings.html", session=session, title="Settings",
                           change=self.model_change.view(), model_preview=None, **data)

    async def preview_model(self, request: Request, session: ConsoleSession) -> Response:
        """What changing the embedding model costs, with the step that confirms it."""
        form: FormData = request.state.form
        model = _field(form, "model").strip()
        warning, error = await self.blocking(self.model_change.preview, model)
        data = await self.blocking(views.settings_page, self.governance)
        return self.render(request, "settings.html", status=400 if error else 200,
                           session=session, title="Settings", change=self.model_change.view(),
                           model_preview={"model": model, "warning": warning, "error": error},
                           **data)

    async def change_model(self, request: Request, session: ConsoleSession) -> Response:
        """Start the confirmed model change (the re-index runs in the background)."""
        form: FormData = request.state.form
        if _field(form, "confirm") != "yes":
            return self.back(session, "settings", "error", "the model change needs its "
                                                           "confirmation")
        started, message = await self.blocking(self.model_change.start, self.governance,
                                               session.caller, _field(form, "model"))
        return self.back(session, "settings", "ok" if started else "error", message)

    async def change_settings(self, request: Request, session: ConsoleSession) -> Response:
        """Apply changed admin settings (validated; written to the settings file)."""
        form: FormData = request.state.form
        submitted = {key: value for key, value in form.multi_items()
                     if key != "csrf" and isinstance(value, str)}
        try:
            messages = await self.blocking(views.change_settings, self.governance,
                                           session.caller, submitted)
        except DocgraphError as exc:
            return self.back(session, "settings", "error", f"nothing changed: {exc}")
        session.flash.extend(messages)
        return RedirectResponse(f"{PREFIX}/settings", 303, headers=SECURITY_HEADERS)

    async def change_chat_model(self, request: Request, session: ConsoleSession) -> Response:
        """Set or clear the chat model's endpoint and model name (``[llm]``)."""
        form: FormData = request.state.form
        clear = _field(form, "action") == "clear"
        try:
            messages = await self.blocking(
                views.change_chat_model, self.governance, session.caller,
                "" if clear else _field(form, "chat_base_url"),
                "" if clear else _field(form, "chat_model"))
        except DocgraphError as exc:
            return self.back(session, "settings", "error", f"chat model not changed: {exc}")
        session.flash.extend(messages)
        return RedirectResponse(f"{PREFIX}/settings", 303, headers=SECURITY_HEADERS)

    async def traces(self, request: Request, session: ConsoleSession) -> Response:
        """Traces and audit: recent requests and traces."""
        data = await self.blocking(views.traces_page, self.governance)
        return self.render(request, "traces.html", session=session, title="Traces and audit",
                           **data)

    async def trace(self, request: Request, session: ConsoleSession) -> Response:
        """One trace."""
        trace_id = request.path_params["trace_id"]
        data = await self.blocking(views.trace_page, self.governance, trace_id)
        if data is None:
            return self.refuse(request, 404, f"no stored trace has id {trace_id!r} (traces are "
                                             "kept up to the retention bound)", session)
        return self.render(request, "trace.html", session=session, title=f"Trace {trace_id}",
                           trace=data)

    async def playground(self, request: Request, session: ConsoleSession) -> Response:
        """The playground form."""
        return self.render(request, "playground.html", session=session, title="Playground",
                           result=None, form={"tool": "lookup_knowledge", "user": "",
                                              "role": "", "query": "", "k": "10",
                                              "mode": "vector_first"},
                           problems=[], tools=views.PLAYGROUND_TOOLS, modes=views.PLAYGROUND_MODES)

    async def run_playground(self, request: Request, session: ConsoleSession) -> Response:
        """Run a query as the chosen caller and show its evidence."""
        form: FormData = request.state.form
        values = {key: _field(form, key) for key in ("tool", "user", "role", "query", "k",
                                                     "mode")}
        values["tool"] = values["tool"] or "lookup_knowledge"
        values["mode"] = values["mode"] or "vector_first"
        problems = []
        if not values["user"].strip():
            problems.append("user: name the caller to run as")
        if not values["query"].strip() and values["tool"] != "explore_topics":
            problems.append("query: must not be empty (only explore_topics runs without)")
        k = int(values["k"]) if values["k"].isdigit() else 10
        if not 1 <= k <= 50:
            problems.append("k: between 1 and 50")
        if values["tool"] not in views.PLAYGROUND_TOOLS or \
                values["mode"] not in views.PLAYGROUND_MODES:
            problems.append("tool or mode: not one the playground offers")
        result: dict[str, Any] | None = None
        if not problems:
            try:
                result = await self.blocking(
                    views.run_playground, self.governance, session.caller, values["tool"],
                    values["user"].strip(), values["role"].strip() or None,
                    values["query"].strip(), k, values["mode"])
            except DocgraphError as exc:
                problems.append(str(exc))
        return self.render(request, "playground.html", status=400 if problems else 200,
                           session=session, title="Playground", result=result, form=values,
                           problems=problems, tools=views.PLAYGROUND_TOOLS,
                           modes=views.PLAYGROUND_MODES)

    # -- routes -------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        """Every console route, under :data:`PREFIX`."""
        p = PREFIX
        return [
            Route(p, self.home, methods=["GET"]),
            Route(p + "/", self.home, methods=["GET"]),
            Route(p + "/login", self.login_form, methods=["GET"]),
            Route(p + "/login", self.login, methods=["POST"]),
            Route(p + "/logout", self.page(self.logout, post=True), methods=["POST"]),
            Route(p + "/status", self.page(self.status), methods=["GET"]),
            Route(p + "/status/refresh", self.page(self.refresh, post=True), methods=["POST"]),
            Route(p + "/sources", self.page(self.sources), methods=["GET"]),
            Route(p + "/sources/preview", self.page(self.preview_source, post=True),
                  methods=["POST"]),
            Route(p + "/sources/add", self.page(self.add_source, post=True), methods=["POST"]),
            Route(p + "/sources/update", self.page(self.update_source, post=True),
                  methods=["POST"]),
            Route(p + "/sources/remove", self.page(self.remove_source, post=True),
                  methods=["POST"]),
            Route(p + "/sources/add-sql", self.page(self.add_sql, post=True),
                  methods=["POST"]),
            Route(p + "/sources/remove-sql", self.page(self.remove_sql, post=True),
                  methods=["POST"]),
            Route(p + "/tags", self.page(self.tags), methods=["GET"]),
            Route(p + "/tags/set", self.page(self.set_tag, post=True), methods=["POST"]),
            Route(p + "/tags/remove", self.page(self.remove_tag, post=True),
                  methods=["POST"]),
            Route(p + "/graph", self.page(self.graph), methods=["GET"]),
            Route(p + "/graph/communities/{community_id}", self.page(self.community),
                  methods=["GET"]),
            Route(p + "/documents/{item_id:path}", self.page(self.document),
                  methods=["GET"]),
            Route(p + "/settings", self.page(self.settings), methods=["GET"]),
            Route(p + "/settings", self.page(self.change_settings, post=True),
                  methods=["POST"]),
            Route(p + "/settings/model", self.page(self.preview_model, post=True),
                  methods=["POST"]),
            Route(p + "/settings/model/confirm", self.page(self.change_model, post=True),
                  methods=["POST"]),
            Route(p + "/settings/chat", self.page(self.change_chat_model, post=True),
                  methods=["POST"]),
            Route(p + "/traces", self.page(self.traces), methods=["GET"]),
            Route(p + "/traces/{trace_id}", self.page(self.trace), methods=["GET"]),
            Route(p + "/playground", self.page(self.playground), methods=["GET"]),
            Route(p + "/playground", self.page(self.run_playground, post=True),
                  methods=["POST"]),
            Route(p + "/static/{name}", self.static, methods=["GET"]),
            *(IdpSignIn(self, self.oidc).routes() if self.oidc is not None else []),
        ]


def _tags_page(source: str, schema: str) -> str:
    """The Tags page of ``source`` (and ``schema``), relative to the console."""
    return f"tags?source={quote(source)}" + (f"&schema={quote(schema)}" if schema else "")


def console_routes(tools: DocgraphTools, auth: ConsoleAuth) -> tuple[Console, list[BaseRoute]]:
    """The console over ``tools`` with sign-in by ``auth``, and its routes."""
    console = Console(tools, auth)
    return console, console.routes()


__all__ = ["PREFIX", "Console", "console_routes", "template_environment"]
