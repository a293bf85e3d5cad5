"""The console's request plumbing, shared by every page: the security headers every
response carries, the templates, the session and CSRF checks around a page
(:meth:`ConsoleBase.page`), forms, error pages, redirects after a change, sign-in and
sign-out (rate-limited, audited), the static files, and where a sign-in may return to
(:func:`safe_next`). The pages themselves are in :mod:`.routes`."""

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

from docgraph.errors import DocgraphError
from docgraph.governance.audit import AuditRecord
from docgraph.serve.console import views
from docgraph.serve.console.ratelimit import Refusal, SignInLimiter
from docgraph.serve.console.sessions import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    ConsoleAuth,
    ConsoleSession,
)
from docgraph.serve.idp.console_signin import OidcConsoleClient
from docgraph.serve.outage import RETRY_HEADERS, UNAVAILABLE_MESSAGE
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


class ConsoleBase:
    """The console of one ``docgraph serve`` process, without its pages: the plumbing and
    sign-in every page relies on (:class:`~docgraph.serve.console.routes.Console` adds the
    pages and their routes)."""
    def __init__(self, tools: DocgraphTools, auth: ConsoleAuth,
                 limiter: SignInLimiter | None = None,
                 oidc: OidcConsoleClient | None = None) -> None:
        self.tools = tools
        self.governance = tools.governance
        #: The same service for the reads behind page views: they write no audit records.
        self.reader = views.page_reader(tools.governance)
        self.auth = auth
        #: Sign-in buckets in the index's database, shared by every server of it.
        self.limiter = limiter or SignInLimiter(tools.graph.signin_limit_store)
        self.refresh_job = views.RefreshJob(tools.graph)
        self.model_change = views.ModelChange(tools.graph)
        self.templates = template_environment()
        #: Sign-in through the identity provider: ``oidc``, else one made from ``[auth]``
        #: when ``auth`` admits its members (None: bearer tokens only).
        settings = tools.graph.settings.auth
        if oidc is None and auth.idp is not None and settings.console_sign_in:
            oidc = OidcConsoleClient(settings)
        self.oidc = oidc if auth.idp is not None else None

    # -- plumbing -----------------------------------------------------------------------

    def render(self, request: Request, name: str, status: int = 200,
               session: ConsoleSession | None = None, **context: Any) -> HTMLResponse:
        """A page from template ``name`` with the security headers."""
        html = self.templates.get_template(name).render(
            prefix=PREFIX, version=__version__, session=session,
            admin=session.caller if session else None,
            csrf=session.csrf if session else "",
            flash=session.take_flash() if session else [],
            path=request.url.path,
            idp_issuer=self.oidc.issuer if self.oidc is not None else None, **context)
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

    def unavailable(self, request: Request) -> HTMLResponse:
        """The 503 page while the index store cannot be reached (the server's outage guard
        renders it for any console request that failed on the store, signed in or not)."""
        response = self.render(request, "error.html", status=503, title="Unavailable",
                               label="Unavailable", message=UNAVAILABLE_MESSAGE)
        response.headers.update(RETRY_HEADERS)
        return response

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
                if not session.check_csrf(form_field(form, "csrf")):
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
        refusal = await self.blocking(self.limiter.attempt, address)
        if refusal is not None:
            return await self.too_many(request, address, refusal)
        if not self.same_origin(request):
            return self.refuse(request, 403, "cross-site request refused")
        form = await self.form(request)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        presented = form_field(form, "csrf") if form is not None else ""
        if form is None or not expected or not secrets.compare_digest(
                presented.encode(), expected.encode()):
            return self.refuse(request, 403, "the sign-in form's CSRF token is missing or "
                                             "wrong: reload the sign-in page")
        caller, session = await self.blocking(self.auth.sign_in, form_field(form, "token"))
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
                                   next=safe_next(form_field(form, "next")))
            self._cookie(response, request, LOGIN_COOKIE, token, path=f"{PREFIX}/login")
            return response
        await self.blocking(self.limiter.succeeded, address)
        await self.blocking(views.audit_change, self.governance, session.caller, "login", "ok",
                            "signed in to the console")
        back = safe_next(form_field(form, "next"))
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
            message = ("too many failed sign-in attempts from many addresses right now, "
                       f"yours ({address}) among them: try again in {refusal.retry_after} s "
                       "(an address that has not been failing is not held back)")
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

    async def static(self, request: Request) -> Response:
        """The stylesheet and the script."""
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response("not found", status_code=404, media_type="text/plain")
        return FileResponse(STATIC_DIR / name, media_type=STATIC_FILES[name],
                            headers={"Cache-Control": "no-cache",
                                     "X-Content-Type-Options": "nosniff"})


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


def form_field(form: FormData | None, name: str) -> str:
    """A text field of a form ('' when absent or a file)."""
    if form is None:
        return ""
    value = form.get(name)
    return value if isinstance(value, str) else ""
