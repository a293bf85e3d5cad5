"""An issuer's metadata (RFC 8414, falling back to OpenID Connect discovery) and its signing
keys (the JWKS), cached.

The keys are read once and kept ``cache_s`` seconds; a token naming a key id the cache does
not hold makes one refetch at once (so a key the issuer just rotated in is followed without
waiting for the cache to age), rate-limited to one every ``refetch_s`` seconds, so a stream
of tokens with made-up key ids cannot turn the server into a client hammering the issuer.
A refetch replaces the whole set: a key the issuer rotated out is refused from then on.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import jwt

from docgraph.errors import DocgraphError

__all__ = ["DiscoveryError", "JwksCache", "fetch_metadata", "metadata_urls"]

log = logging.getLogger(__name__)

#: Seconds one metadata or JWKS request may take.
FETCH_TIMEOUT_S = 10.0
#: Least seconds between two refetches caused by an unknown key id.
REFETCH_S = 10.0


class DiscoveryError(DocgraphError):
    """The issuer's metadata or keys cannot be read or are not what the issuer published;
    the message names the URL."""


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata is looked for, in order: RFC 8414's
    ``/.well-known/oauth-authorization-server`` inserted before the issuer's path, then
    OpenID Connect's ``/.well-known/openid-configuration`` appended to it (Entra ID, Okta,
    Keycloak), then inserted (RFC 8414's form of the OIDC name).

    >>> metadata_urls("https://idp.example/realms/acme")[:2]
    ['https://idp.example/.well-known/oauth-authorization-server/realms/acme', \
'https://idp.example/realms/acme/.well-known/openid-configuration']
    """
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(new_path: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, new_path, "", ""))

    urls = [at("/.well-known/oauth-authorization-server" + path),
            at(path + "/.well-known/openid-configuration"),
            at("/.well-known/openid-configuration" + path)]
    return list(dict.fromkeys(urls))


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    response = await client.get(url, headers={"Accept": "application/json"})
    response.raise_for_status()
    return response.json()


async def fetch_metadata(issuer: str) -> dict[str, Any]:
    """The issuer's authorization-server metadata, from the first of :func:`metadata_urls`
    that answers; its ``issuer`` must be exactly ``issuer`` (RFC 8414 §3.3: metadata served
    for another issuer is refused) and it must name a ``jwks_uri``."""
    problems: list[str] = []
    async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False) as client:
        for url in metadata_urls(issuer):
            try:
                data = await _get_json(client, url)
            except (httpx.HTTPError, ValueError) as exc:
                problems.append(f"{url}: {exc}")
                continue
            if not isinstance(data, dict):
                problems.append(f"{url}: not a JSON object")
                continue
            if data.get("issuer") != issuer:
                raise DiscoveryError(f"{url} names issuer {data.get('issuer')!r}, not the "
                                     f"configured auth.issuer {issuer!r}")
            if not isinstance(data.get("jwks_uri"), str):
                raise DiscoveryError(f"{url}: the metadata names no jwks_uri")
            return data
    raise DiscoveryError(f"no metadata for issuer {issuer!r}: " + "; ".join(problems))


class JwksCache:
    """The issuer's signing keys by key id, read from its metadata's ``jwks_uri``.

    Used from the server's event loop: reads happen under one lock, so a burst of requests
    after the cache aged makes one fetch, not one per request.
    """

    def __init__(self, issuer: str, *, cache_s: float = 300.0,
                 refetch_s: float = REFETCH_S) -> None:
        self.issuer = issuer
        self.cache_s = cache_s
        self.refetch_s = refetch_s
        self.metadata: dict[str, Any] | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock: anyio.Lock | None = None
        #: How many times the keys were read (the bench and the tests watch it).
        self.fetches = 0

    def _stale(self, now: float) -> bool:
        return self._fetched_at is None or now - self._fetched_at >= self.cache_s

    async def key(self, kid: str | None) -> jwt.PyJWK | None:
        """The key ``kid`` names (None: the set's only key), reading the set when the cache
        is stale or, rate-limited, when it does not hold ``kid``; None when the issuer
        publishes no such key."""
        now = time.monotonic()
        found = self._pick(kid)
        if found is not None and not self._stale(now):
            return found  # the warm path: no lock, no await
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            now = time.monotonic()
            found = self._pick(kid)
            missing_may_refetch = found is None and (
                self._fetched_at is None or now - self._fetched_at >= self.refetch_s)
            if self._stale(now) or missing_may_refetch:
                await self.refresh()
                found = self._pick(kid)
        return found

    def _pick(self, kid: str | None) -> jwt.PyJWK | None:
        keys = self._keys
        if kid is None:
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    async def refresh(self) -> None:
        """Read the metadata (first time) and the key set now, replacing the cached set.

        A failure raises :class:`DiscoveryError` and still counts as a read for the rate
        limits: while the issuer cannot be reached, the keys already held keep serving
        (until the next ``cache_s``) and a missing key is asked for at most every
        ``refetch_s``, so an outage of the issuer is not answered with a storm of
        requests, each waiting out the timeout."""
        try:
            if self.metadata is None:
                self.metadata = await fetch_metadata(self.issuer)
            url = str(self.metadata["jwks_uri"])
            try:
                async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S) as client:
                    data = await _get_json(client, url)
                keys = jwt.PyJWKSet.from_dict(data).keys
            except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
                raise DiscoveryError(f"the signing keys at {url} cannot be read: {exc}") \
                    from exc
        finally:
            self._fetched_at = time.monotonic()
            self.fetches += 1
        signing = [k for k in keys if k.public_key_use in (None, "sig")]
        by_kid = {str(k.key_id): k for k in signing if k.key_id is not None}
        # one key without a kid: tokens without a kid use it (a lone key needs no name)
        self._keys = by_kid or ({"": signing[0]} if len(signing) == 1 else {})
        log.info("read %d signing key(s) of %s", len(self._keys), self.issuer)
