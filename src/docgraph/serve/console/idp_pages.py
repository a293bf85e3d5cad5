"""The console's sign-in through the identity provider: ``GET /console/oidc/start`` sends the
browser to the provider, ``GET /console/oidc/callback`` takes its answer back
(:mod:`docgraph.serve.idp.console_signin` checks it) and opens a console session for a member
of ``[auth] admin_group`` (:class:`~docgraph.serve.console.sessions.IdpAdmins`); anyone else
gets a 403 page and no session. Both outcomes are audited; callbacks count against the
sign-in limit like token sign-ins.

Cookies: the pending sign-in (state, nonce, PKCE verifier) lives in an ``HttpOnly`` cookie
for ``/console/oidc`` with ``SameSite=Lax``, the one setting under which the browser sends it
with the provider's cross-site redirect back; every callback spends it. The session cookie
stays ``SameSite=Strict``, and since a browser does not send a Strict cookie on a navigation
that began on another site (the provider's redirect, and any redirect after it), the
callback answers with a page of the console that moves on to the Status page itself (a
``refresh`` meta element: no script), a same-site navigation that carries the new cookie.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from docgraph.governance.audit import AuditRecord
from docgraph.serve.console import views
from docgraph.serve.console.plumbing import (
    ANONYMOUS,
    PREFIX,
    SECURITY_HEADERS,
    ConsoleBase,
    _at_chunk,
    safe_next,
)
from docgraph.serve.console.sessions import SESSION_COOKIE
from docgraph.serve.idp.console_signin import (
    PENDING_SECONDS,
    OidcConsoleClient,
    PendingSignIn,
    SignInRefused,
)

START_PATH = PREFIX + "/oidc/start"
CALLBACK_PATH = PREFIX + "/oidc/callback"
#: The cookie of a sign-in begun at the identity provider (see the module docstring).
PENDING_COOKIE = "docgraph_console_oidc"
PENDING_PATH = PREFIX + "/oidc"


class IdpSignIn:
    """The two routes of the sign-in through ``client``'s issuer, for ``console``."""

    def __init__(self, console: ConsoleBase, client: OidcConsoleClient) -> None:
        self.console = console
        self.client = client

    def redirect_uri(self, request: Request) -> str:
        """The callback URL registered at the provider: under ``[serve] public_url`` when
        set, else this request's own base URL (its Host checked by the server's
        Host/Origin policy)."""
        public = self.console.tools.graph.settings.serve.public_url
        base = public.strip().rstrip("/") if public else str(request.base_url).rstrip("/")
        return base + CALLBACK_PATH

    async def start(self, request: Request) -> Response:
        """Begin a sign-in: a fresh pending cookie and a redirect to the provider."""
        pending = PendingSignIn.new(safe_next(request.query_params.get("next")))
        try:
            url = await self.client.authorization_url(pending, self.redirect_uri(request))
        except SignInRefused as exc:
            return self.console.render(request, "error.html", status=502, title="Unavailable",
                                       label="Identity provider unavailable", message=str(exc))
        response = RedirectResponse(url, 303, headers=SECURITY_HEADERS)
        response.set_cookie(PENDING_COOKIE, pending.encode(), max_age=PENDING_SECONDS,
                            path=PENDING_PATH, httponly=True, samesite="lax",
                            secure=request.url.scheme == "https")
        return response

    async def callback(self, request: Request) -> Response:
        """The provider's answer: check it, then a session for an admin, a 403 page for
        anyone else. The pending cookie is spent whatever the outcome."""
        response = await self._callback(request)
        response.delete_cookie(PENDING_COOKIE, path=PENDING_PATH)
        return response

    async def _callback(self, request: Request) -> Response:
        console = self.console
        address = request.client.host if request.client else "unknown"
        refusal = await console.blocking(console.limiter.attempt, address)
        if refusal is not None:
            return await console.too_many(request, address, refusal)
        pending = PendingSignIn.decode(request.cookies.get(PENDING_COOKIE))
        if pending is None:
            return await self._refused(request, 400, ANONYMOUS, "no sign-in was begun in this "
                                       "browser, or it took too long or was already used: "
                                       "sign in again")
        try:
            who = await self.client.finish(pending, request.query_params,
                                           self.redirect_uri(request))
        except SignInRefused as exc:
            return await self._refused(request, 403, ANONYMOUS, str(exc))
        session = await console.blocking(console.auth.sign_in_idp, who.user, who.groups)
        if session is None:
            group = console.auth.idp.admin_group if console.auth.idp else "(none)"
            return await self._refused(request, 403, who.user, f"{who.user} is not a console "
                                       f"admin: the console needs membership of group "
                                       f"{group!r} at {who.issuer}")
        await console.blocking(console.limiter.succeeded, address)
        await console.blocking(views.audit_change, console.governance, session.caller, "login",
                               "ok", f"signed in to the console through {who.issuer} "
                                     f"(subject {who.subject})")
        # the cookie came back from the browser: its target is checked again, never trusted
        following = safe_next(pending.next)
        target = f"{PREFIX}/status" if following is None else _at_chunk(following)
        done = console.render(request, "signed_in.html", title="Signed in", target=target)
        done.set_cookie(SESSION_COOKIE, session.id, path=PREFIX, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
        return done

    async def _refused(self, request: Request, status: int, user: str,
                       reason: str) -> Response:
        """An audited refusal page (no session)."""
        await self.console.blocking(self.console.governance.audit.write, AuditRecord(
            user_id=user, operation="console:login", outcome="denied",
            reason=f"identity provider sign-in: {reason}"))
        return self.console.refuse(request, status, f"not signed in: {reason}")

    def routes(self) -> list[BaseRoute]:
        """The start and callback routes."""
        return [Route(START_PATH, self.start, methods=["GET"]),
                Route(CALLBACK_PATH, self.callback, methods=["GET"])]
