"""How often ``docgraph serve`` may ask the identity provider about opaque tokens (RFC 7662).

Any request can carry an opaque token, authenticated or not, so without a bound every one
would be an authenticated POST to the provider: a flood of made-up tokens would become a
flood at the provider, which may then throttle or lock docgraph's client and refuse the
real users' tokens. So each answer is kept (by the token's sha256, never the token): an
active one until the token expires or :data:`ACTIVE_S` passes (a token revoked at the
provider stops working within that), a refusal for :data:`REFUSED_S`; and new questions go
through a token bucket (:data:`PER_SECOND`, :data:`BURST`) and at most :data:`CONCURRENT`
at once. A question over the limit is refused at once, saying so.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from docgraph.serve.idp.claims import TokenRefused

__all__ = ["IntrospectionCache", "IntrospectionUnavailable"]

#: Seconds an active answer is kept at most (a revocation at the provider counts after it).
ACTIVE_S = 300.0
#: Seconds a refusal is kept (the same made-up token asks nothing again meanwhile).
REFUSED_S = 60.0
#: Answers kept, the oldest dropped first.
MAX_ENTRIES = 10_000
#: New questions per second to the provider, on average, and in a burst.
PER_SECOND = 10.0
BURST = 20.0
#: Questions in flight at once.
CONCURRENT = 4


class IntrospectionUnavailable(TokenRefused):
    """The provider could not be asked (not an answer about the token: never kept)."""


def _key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class IntrospectionCache:
    """The provider's answers about opaque tokens, and the limit on new questions (see the
    module docstring). Used from the server's event loop."""

    def __init__(self, *, per_second: float = PER_SECOND, burst: float = BURST,
                 concurrent: int = CONCURRENT) -> None:
        self.per_second = per_second
        self.burst = burst
        self._tokens = burst
        self._refilled = time.monotonic()
        self._answers: OrderedDict[str, tuple[float, dict[str, Any] | str]] = OrderedDict()
        self._in_flight: anyio.Semaphore | None = None
        self._concurrent = concurrent
        #: Questions actually sent to the provider (the tests watch it).
        self.asked = 0

    def _take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.per_second)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def claims(self, token: str,
                     ask: Callable[[str], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """The checked claims of ``token``: a kept answer, else ``ask(token)`` (which raises
        :class:`TokenRefused` for a token it refuses) within the limit; a kept or new
        refusal raises :class:`TokenRefused` with its message."""
        key, now = _key(token), time.monotonic()
        kept = self._answers.get(key)
        if kept is not None and kept[0] > now:
            self._answers.move_to_end(key)
            if isinstance(kept[1], str):
                raise TokenRefused(kept[1])
            return kept[1]
        if not self._take():
            raise TokenRefused("too many unknown tokens to check at the identity provider "
                               "right now; try again shortly")
        if self._in_flight is None:
            self._in_flight = anyio.Semaphore(self._concurrent)
        async with self._in_flight:
            self.asked += 1
            try:
                claims = await ask(token)
            except IntrospectionUnavailable:
                raise
            except TokenRefused as exc:
                self._keep(key, time.monotonic() + REFUSED_S, str(exc))
                raise
        exp = claims.get("exp")
        until = time.monotonic() + ACTIVE_S
        if isinstance(exp, int | float):
            until = min(until, time.monotonic() + max(0.0, float(exp) - time.time()))
        self._keep(key, until, claims)
        return claims

    def _keep(self, key: str, until: float, answer: dict[str, Any] | str) -> None:
        self._answers[key] = (until, answer)
        self._answers.move_to_end(key)
        while len(self._answers) > MAX_ENTRIES:
            self._answers.popitem(last=False)
