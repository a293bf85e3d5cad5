"""The fleet-policy port: the access policy every server of one database serves, and which
servers are serving, kept in that database.

Servers sharing a database share tokens, sessions and settings; without this their policy
files could still differ and give one token different rights on different servers. The
policy itself (its canonical form, fingerprint, when it was published) and what counts as a
running server are :mod:`docgraph.governance.fleet_policy`'s; this port only stores opaque
text values, each written atomically: the published policy, and one row per server saying
it still serves (refreshed every few seconds while it runs).
"""

from __future__ import annotations

from typing import Protocol


class PolicyStore(Protocol):
    """The one published policy of a database and the servers serving it, as text."""

    def published(self) -> str | None:
        """The published policy, or None."""
        ...

    def publish(self, value: str) -> None:
        """Publish ``value``, replacing what was published."""
        ...

    def beat(self, server: str, value: str) -> None:
        """Record (or refresh) server ``server``'s row: it serves, as ``value`` says."""
        ...

    def servers(self) -> dict[str, str]:
        """Every server's row (server id -> its value), live or not."""
        ...

    def leave(self, server: str) -> None:
        """Delete server ``server``'s row (it stopped, or stopped long ago)."""
        ...
