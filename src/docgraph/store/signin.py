"""The sign-in-limit port: the console's sign-in token buckets, kept in the index's database.

Every ``docgraph serve`` process on one database (several on one PostgreSQL, several on one
SQLite file) takes from the same rows, so a limit per client address holds across the
fleet, not once per process. The policy (which buckets, their sizes, who counts as failing)
is :mod:`docgraph.serve.console.ratelimit`'s; this port only refills and takes atomically.

One row per bucket: its key (a client address, or the console's shared bucket), its size
and refill rate, the tokens left when it was last attempted, when that was and when the
attempt before it was, the wait the last attempt was told and the one before it, and when
the key last signed in successfully.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BucketTake:
    """What one attempt on a bucket found: ``wait`` seconds until a token is there (0: one
    was, and it is taken), ``previous_wait`` what the attempt before was told (0 also when
    there was none: a refusal after a 0 starts a run of refusals), ``previous_at`` when that
    earlier attempt was (None for a new bucket) and ``succeeded_at`` when the key last
    signed in (None: never, or forgotten)."""

    wait: float
    previous_wait: float
    previous_at: float | None
    succeeded_at: float | None


class SignInLimitStore(Protocol):
    """Sign-in token buckets shared by every process of the database."""

    def take(self, key: str, now: float, burst: float, per_second: float) -> BucketTake:
        """Refill ``key``'s bucket (``burst`` tokens at most, ``per_second`` a second since
        its last attempt) and take one token when there is one, in one atomic statement; a
        new key starts full. A refused attempt takes nothing but is remembered as the last
        attempt (its time and wait)."""
        ...

    def succeeded(self, key: str, now: float) -> None:
        """Record a successful sign-in from ``key`` at ``now`` (a no-op for an unknown
        key)."""
        ...

    def prune(self, idle_before: float, now: float, succeeded_before: float) -> int:
        """Delete the buckets that no longer tell anything: last attempted before
        ``idle_before``, full again at ``now``, and without a success since
        ``succeeded_before``; returns how many."""
        ...
