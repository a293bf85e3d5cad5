"""The console's routes under ``/console``: sign-in, Status, Sources, Traces, Playground,
and a document page (``/console/documents/<id>?chunk=N``, where results link).

Pages are server-rendered Jinja2 templates (autoescaped) with one stylesheet and one small
script, both served from this package (``/console/static/``): no build step, no CDN, so the
console works offline. Every response carries a Content-Security-Policy that allows only
the console's own files (no inline script), ``X-Frame-Options: DENY`` and ``no-store``.

Sign-in attempts are rate-limited per client address and in all (:mod:`.ratelimit`: a 429
page with ``Retry-After``). Every page but the sign-in form needs a live session
(:mod:`.sessions`); every POST also
needs the session's CSRF token in its ``csrf`` field and, when the browser sends an
``Origin``, one whose host is the request's own ``Host`` (on top of the server-wide
Host/Origin policy of :mod:`docgraph.serve.guards`, which runs before these routes).
Blocking work (store reads, source changes, queries) runs in worker threads; "refresh now"
starts a background build and returns at once.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, urlsplit

import anyio.to_thread
import jinja2
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from docgraph.errors import DocgraphError, NotFound
from docgraph.governance.audit import AuditRecord
from docgraph.serve.console import views
from docgraph.serve.console.ratelimit import Refusal, SignInLimiter
from docgraph.serve.console.sessions import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    ConsoleAuth,
    ConsoleSession,
)
from docgraph.serve.tools import DocgraphTools
from docgraph.version import __version__

log = logging.getLogger(__name__)

PREFIX = "/console"
_HERE = Path(__file__).parent
STATIC_DIR = _HERE / "static"
#: The console's own files; nothing else is served from the static folder.
STATIC_FILES = {"console.css": "text/css", "console.js": "text/javascript",
                "favicon.svg": "image/svg+xml"}
MAX_FORM_BYTES = 16 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; script-src 'self'; "
                               "img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: under it Chromium sends "Origin: null" with a form POST, which the
    # Host/Origin policy (rightly) refuses.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
#: The user id of audit records about an attempt whose token was not looked at.
ANONYMOUS = "(anonymous)"
T = TypeVar("T")
Handler = Callable[[Request, ConsoleSession], Awaitable[Response]]


def _when(value: float | None) -> str:
    """A Unix time as ``YYYY-MM-DD HH:MM:SS UTC``."""
    if value is None:
        return "never"
    import datetime

    return datetime.datetime.fromtimestamp(value, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float | None) -> str:
    """Seconds as ``3 h 12 min``, ``4 min 5 s`` or ``12 s``."""
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"


def template_environment() -> jinja2.Environment:
    """The console's templates (HTML autoescaped)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_HERE / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    env.filters["duration"] = _duration
    env.filters["lane"] = views.lane_label
    return env


class Console:
    """The console of one ``docgraph serve`` process."""

    def __init__(self, tools: DocgraphTools, auth: ConsoleAuth,
                 limiter: SignInLimiter | None = None) -> None:
        self.tools = tools
        self.governance = tools.governance
        #: The same service for the reads behind page views: they write no audit records.
        self.reader = views.page_reader(tools.governance)
        self.auth = auth
        self.limiter = limiter or SignInLimiter()
        self.refresh_job = views.RefreshJob(tools.graph)
        self.model_change = views.ModelChange(tools.graph)
        self.templates = template_environment()

    # -- plumbing -----------------------------------------------------------------------

    def render(self, request: Request, name: str, status: int = 200,
               session: ConsoleSession | None = None, **context: Any) -> HTMLResponse:
        """A page from template ``name`` with the security headers."""
        html = self.templates.get_template(name).render(
            prefix=PREFIX, version=__version__, session=session,
            admin=session.caller if session else None,
            csrf=session.csrf if session else "",
            flash=session.take_flash() if session else [],
            path=request.url.path, **context)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work in a worker thread."""
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    @staticmethod
    def _secure(request: Request) -> bool:
        return request.url.scheme == "https"

    @staticmethod
    def same_origin(request: Request) -> bool:
        """Whether a POST comes from a page of this server: its ``Origin`` (when sent) names
        the request's own host, and the browser does not call it cross-site."""
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return False
        origin = request.headers.get("origin")
        if origin is None:
            return True
        if origin == "null":
            return False
        return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()

    async def form(self, request: Request) -> FormData | None:
        """The form of a POST (None when it is too large)."""
        length = request.headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > MAX_FORM_BYTES:
            return None  # browsers always send the length of a form
        return await request.form(max_files=0, max_fields=50)

    def refuse(self, request: Request, status: int, message: str,
               session: ConsoleSession | None = None) -> HTMLResponse:
        """An error page."""
        return self.render(request, "error.html", status=status, session=session,
                           title="Refused", message=message)

    def page(self, handler: Handler,
             post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """Wrap a handler: a live admin session (else sign-in), and for a POST the same-origin
        check and the session's CSRF token."""

        async def endpoint(request: Request) -> Response:
            session = await self.blocking(self.auth.current,
                                          request.cookies.get(SESSION_COOKIE))
            if post and not self.same_origin(request):
                return self.refuse(request, 403, "cross-site request refused: the console "
                                                 "takes forms only from its own pages")
            if session is None:
                if post:
                    return self.refuse(request, 403, "your console session has ended or was "
                                                     "never started: sign in again")
                return RedirectResponse(_sign_in_url(request), 303, headers=SECURITY_HEADERS)
            if post:
                form = await self.form(request)
                if form is None:
                    return self.refuse(request, 413, "form too large (or sent without its "
                                                     "length)", session)
                if not session.check_csrf(_field(form, "csrf")):
                    return self.refuse(request, 403, "the form's CSRF token is missing or "
                                                     "wrong: reload the page and try again",
                                       session)
                request.state.form = form
            response = await handler(request, session)
            if session.flash_changed:  # shown or added: the next page may be another process's
                await self.blocking(self.auth.sessions.save_flash, session)
            return response

        return endpoint

    def back(self, session: ConsoleSession, where: str, kind: str,
             message: str) -> RedirectResponse:
        """Redirect after a POST, with a message for the next page."""
        session.flash.append((kind, message))
        return RedirectResponse(f"{PREFIX}/{where}", 303, headers=SECURITY_HEADERS)

    async def act(self, session: ConsoleSession, where: str, verb: str,
                  change: Callable[..., str], *args: Any) -> RedirectResponse:
        """Run a change view (``change(governance, admin, *args)`` -> its message) in a
        worker thread and go back to ``where`` with that message, or with
        ``not <verb>: <error>`` when it refuses."""
        try:
            message = await self.blocking(change, self.governance, session.caller, *args)
        except DocgraphError as exc:
            return self.back(session, where, "error", f"not {verb}: {exc}")
        return self.back(session, where, "ok", message)

    # -- sign-in ------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        """The sign-in form (a fresh CSRF token in a cookie and the form)."""
        token = secrets.token_urlsafe(24)
        response = self.render(request, "login.html", title="Sign in", login_csrf=token, error="",
                               next=safe_next(request.query_params.get("next")))
        self._cookie(response, request, LOGIN_COOKIE, token, path=f"{PREFIX}/login")
        return response

    async def login(self, request: Request) -> Response:
        """Check the sign-in form: the attempt rate, same origin, CSRF, a bearer token of a
        console admin."""
        address = request.client.host if request.client else "unknown"
        refusal = self.limiter.attempt(address)
        if refusal is not None:
            return await self.too_many(request, address, refusal)
        if not self.same_origin(request):
            return self.refuse(request, 403, "cross-site request refused")
        form = await self.form(request)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        presented = _field(form, "csrf") if form is not None else ""
        if form is None or not expected or not secrets.compare_digest(
                presented.encode(), expected.encode()):
            return self.refuse(request, 403, "the sign-in form's CSRF token is missing or "
                                             "wrong: reload the sign-in page")
        caller, session = await self.blocking(self.auth.sign_in, _field(form, "token"))
        if caller is None or session is None:
            if caller is not None:
                await self.blocking(views.audit_change, self.governance, caller, "login",
                                    "denied", "not a console admin")
            message = ("that is not a valid token" if caller is None else
                       f"{caller.user_id} is not a console admin: the console needs a token "
                       f"of a user holding role {self.auth.admin_role!r} on every domain "
                       "('*') in the policy")
            token = secrets.token_urlsafe(24)
            response = self.render(request, "login.html", status=401 if caller is None else 403,
                                   title="Sign in", login_csrf=token, error=message,
                                   next=safe_next(_field(form, "next")))
            self._cookie(response, request, LOGIN_COOKIE, token, path=f"{PREFIX}/login")
            return response
        await self.blocking(views.audit_change, self.governance, session.caller, "login", "ok",
                            "signed in to the console")
        back = safe_next(_field(form, "next"))
        done = RedirectResponse(f"{PREFIX}/status" if back is None else _at_chunk(back), 303,
                                headers=SECURITY_HEADERS)
        self._cookie(done, request, SESSION_COOKIE, session.id, path=PREFIX)
        done.delete_cookie(LOGIN_COOKIE, path=f"{PREFIX}/login")
        return done

    async def too_many(self, request: Request, address: str, refusal: Refusal) -> Response:
        """The 429 page of a rate-limited sign-in (the first of a run audited)."""
        if refusal.scope == "client":
            message = (f"too many sign-in attempts from your address ({address}): try again "
                       f"in {refusal.retry_after} s")
        else:
            message = ("too many sign-in attempts on this server right now: try again in "
                       f"{refusal.retry_after} s")
        if refusal.first:
            await self.blocking(self.governance.audit.write, AuditRecord(
                user_id=ANONYMOUS, operation="console:login", outcome="denied",
                reason=f"rate limited ({refusal.scope}) from {address}"))
        response = self.refuse(request, 429, message)
        response.headers["Retry-After"] = str(refusal.retry_after)
        return response

    async def logout(self, request: Request, session: ConsoleSession) -> Response:
        """End the session."""
        await self.blocking(self.auth.sessions.close, session.id)
        await self.blocking(views.audit_change, self.governance, session.caller, "logout", "ok",
                            "signed out of the console")
        response = RedirectResponse(f"{PREFIX}/login", 303, headers=SECURITY_HEADERS)
        response.delete_cookie(SESSION_COOKIE, path=PREFIX)
        return response

    def _cookie(self, response: Response, request: Request, name: str, value: str,
                path: str) -> None:
        response.set_cookie(name, value, path=path, httponly=True, samesite="strict",
                            secure=self._secure(request))

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

    async def static(self, request: Request) -> Response:
        """The stylesheet and the script."""
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response("not found", status_code=404, media_type="text/plain")
        return FileResponse(STATIC_DIR / name, media_type=STATIC_FILES[name],
                            headers={"Cache-Control": "no-cache",
                                     "X-Content-Type-Options": "nosniff"})

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
        ]


#: The pages a sign-in returns to (where search and fetch results link); nothing else, so
#: the sign-in form cannot be made to redirect anywhere else.
RETURN_PAGES = PREFIX + "/documents/"
MAX_NEXT_CHARS = 2048


def safe_next(target: str | None) -> str | None:
    """``target`` when it is a console document page of this server (a path under
    :data:`RETURN_PAGES`, with its query, no scheme, host, ``..``, backslash or control
    character), else None."""
    if not target or len(target) > MAX_NEXT_CHARS or not target.startswith(RETURN_PAGES):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or parts.fragment or "\\" in target or ".." in target \
            or "%2e" in target.lower() or any(ord(ch) < 0x20 or ord(ch) == 0x7F
                                              for ch in target):
        return None  # "%2e%2e" is a ".." segment to a browser
    return target


def _at_chunk(target: str) -> str:
    """``target`` with the anchor of the chunk its ``chunk`` parameter names (the fragment
    of the link first followed does not survive the sign-in form's POST)."""
    chunk = parse_qs(urlsplit(target).query).get("chunk", [""])[0]
    return f"{target}#chunk-{chunk}" if chunk.isdigit() else target


def _sign_in_url(request: Request) -> str:
    """The sign-in page, returning to the requested page when it is a document page."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(request.url.path)
    query = request.url.query
    target = safe_next(path + (f"?{query}" if query else ""))
    return f"{PREFIX}/login" if target is None else f"{PREFIX}/login?next={quote(target, safe='')}"


def _tags_page(source: str, schema: str) -> str:
    """The Tags page of ``source`` (and ``schema``), relative to the console."""
    return f"tags?source={quote(source)}" + (f"&schema={quote(schema)}" if schema else "")


def _field(form: FormData | None, name: str) -> str:
    """A text field of a form ('' when absent or a file)."""
    if form is None:
        return ""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def console_routes(tools: DocgraphTools, auth: ConsoleAuth) -> tuple[Console, list[BaseRoute]]:
    """The console over ``tools`` with sign-in by ``auth``, and its routes."""
    console = Console(tools, auth)
    return console, console.routes()


__all__ = ["PREFIX", "Console", "console_routes", "template_environment"]
