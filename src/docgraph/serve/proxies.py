"""Which peers of ``docgraph serve`` are believed when they forward a client's address.

uvicorn, left to its defaults, believes ``X-Forwarded-For`` and ``X-Forwarded-Proto`` from
127.0.0.1 (or whatever ``FORWARDED_ALLOW_IPS`` in the environment says): any local process
could then claim any client address, and so rotate addresses past the console's sign-in
limit per address. :func:`uvicorn_forwarding` turns ``[serve] trusted_proxies`` into
uvicorn's options instead: none configured, no forwarded header is read at all; else only a
connection from a listed proxy has them read, and the client is the nearest address in
``X-Forwarded-For`` that is not a trusted proxy (uvicorn's ``ProxyHeadersMiddleware`` walks
the chain from the right), so a client cannot name itself by prepending addresses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def uvicorn_forwarding(trusted_proxies: Sequence[str]) -> dict[str, Any]:
    """uvicorn's ``proxy_headers`` and ``forwarded_allow_ips`` for ``trusted_proxies``
    (addresses or CIDR networks, as :class:`~docgraph.config.ServeSettings` checked them):
    always an explicit list, so the environment's ``FORWARDED_ALLOW_IPS`` is never read."""
    proxies = [str(p) for p in trusted_proxies]
    return {"proxy_headers": bool(proxies), "forwarded_allow_ips": proxies}
