"""Sign-in attempts limited per client address, with strangers unable to spend anyone
else's allowance; the buckets are shared by every server of the database.

**Per address.** Every ``POST /console/login`` first takes a token from its client
address's bucket (:data:`CLIENT_BURST` at once, then :data:`CLIENT_PER_MINUTE` a minute);
when it is empty the attempt gets a 429 page with ``Retry-After`` and the presented bearer
token is not even looked at. An IPv6 address counts as its /64 network (one host usually
holds a whole /64), an IPv4-mapped IPv6 address as the IPv4 address.

**Failing addresses share one more bucket.** An address *is failing* when its previous
attempt did not end in a sign-in, was less than :data:`FAILURE_MEMORY_S` ago, and it has not
signed in within :data:`SUCCESS_MEMORY_S`. Only a failing address's attempt also takes a
token from the bucket all failing addresses share (:data:`FAILING_BURST` at once, then
:data:`FAILING_PER_MINUTE` a minute). So a flood, from any number of addresses, drains only
that shared bucket: an address that has not been failing (the admin's first attempt of the
day, from wherever) or that signed in within the last day (the admin's usual address, even
after a typo) is held to its own bucket only, and gets in. An attacker holding ``N``
addresses gets, in total, at most ``FAILING_PER_MINUTE`` guesses a minute (after a burst of
``FAILING_BURST``) plus one guess per address each time that address has stayed quiet for
``FAILURE_MEMORY_S`` (its first attempt after a pause is not yet "failing"): about
``120 + N / 15`` a minute. A guess is a bearer token of 32 random bytes, so the limit is
about cost (no attempt is free, a flood cannot crowd the stores), not about the odds of a
guess. An attacker at the admin's own address (behind the same NAT) shares the admin's
bucket, as before. An attempt refused by the shared bucket has already spent a token of its
address's bucket (a failing address pays for trying).

**Shared by the fleet.** The buckets are rows in the index's database
(:class:`~docgraph.store.signin.SignInLimitStore`): every ``docgraph serve`` on one
PostgreSQL database, or on one SQLite file, takes from the same rows, so a limit holds
across the fleet, not once per process. An attempt costs one statement (an upsert that
refills, takes and answers atomically), a failing address's two, a successful sign-in one
more (it records the success); once a minute each process deletes the rows that tell
nothing any more (full, idle for ``FAILURE_MEMORY_S``, no success within
``SUCCESS_MEMORY_S``). Times are the servers' wall clocks (keep them in step, as the
sessions already need).

**Audit.** The first refusal of each run of refusals of a bucket (one address's, or the
shared one) is audited; the rest of the run is not, so a flood cannot flood the audit log.

**Which address.** The one uvicorn reports: the TCP peer, unless ``[serve]
trusted_proxies`` lists the peer, whose ``X-Forwarded-For`` then names the client
(:mod:`docgraph.serve.proxies`). With no proxy listed nothing forwarded is believed, not
even from 127.0.0.1, so a local process cannot rotate addresses by header.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from docgraph.store.signin import BucketTake, SignInLimitStore

#: Attempts one address may make at once, and how many per minute after that.
CLIENT_BURST = 10
CLIENT_PER_MINUTE = 10
#: Attempts all failing addresses together may make at once, and per minute after that.
FAILING_BURST = 60
FAILING_PER_MINUTE = 120
#: How long an attempt that did not sign in makes its address a failing one.
FAILURE_MEMORY_S = 15 * 60
#: How long a successful sign-in keeps its address out of the failing addresses' bucket.
SUCCESS_MEMORY_S = 24 * 3600
#: Seconds between two deletions of rows that tell nothing any more (per process).
PRUNE_EVERY_S = 60
#: The key of the bucket failing addresses share (no address key starts with '*').
FAILING_KEY = "*failing"
#: Longest part of a non-IP client name kept in its key.
MAX_OTHER_CHARS = 100


def address_key(address: str) -> str:
    """The bucket key of a client address: an IPv4 address as itself, an IPv6 address as
    its /64 network (an IPv4-mapped one as the IPv4 address), anything else (a Unix socket
    peer, ``unknown``) as ``other:<name>``.

    >>> address_key("2001:db8::1"), address_key("::ffff:10.0.0.1"), address_key("unknown")
    ('2001:db8::/64', '10.0.0.1', 'other:unknown')
    """
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return "other:" + address[:MAX_OTHER_CHARS]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass(frozen=True)
class Refusal:
    """An attempt refused: which bucket (``client``: the address's own; ``failing``: the
    one failing addresses share), for how long in whole seconds, and whether it is the first
    of its run (audit it)."""

    scope: str
    retry_after: int
    first: bool


def _refusal(scope: str, take: BucketTake) -> Refusal | None:
    if take.wait <= 0:
        return None
    return Refusal(scope, max(1, math.ceil(take.wait)), take.previous_wait <= 0)


class SignInLimiter:
    """The sign-in buckets of the console (see the module docstring), kept in ``store``."""

    def __init__(self, store: SignInLimitStore,
                 client_burst: float = CLIENT_BURST,
                 client_per_minute: float = CLIENT_PER_MINUTE,
                 failing_burst: float = FAILING_BURST,
                 failing_per_minute: float = FAILING_PER_MINUTE,
                 clock: Callable[[], float] = time.time) -> None:
        if min(client_burst, failing_burst) < 1 or min(client_per_minute,
                                                       failing_per_minute) <= 0:
            raise ValueError(f"a sign-in bucket needs a burst of at least 1 and a positive "
                             f"rate (got client {client_burst} at {client_per_minute}/min, "
                             f"failing {failing_burst} at {failing_per_minute}/min)")
        self.store = store
        self.client_burst = client_burst
        self.client_rate = client_per_minute / 60
        self.failing_burst = failing_burst
        self.failing_rate = failing_per_minute / 60
        self.clock = clock
        self._pruned = clock()
        self._pruning = threading.Lock()

    @staticmethod
    def failing(take: BucketTake, now: float) -> bool:
        """Whether the address of ``take`` is failing (see the module docstring)."""
        if take.succeeded_at is not None and take.succeeded_at > now - SUCCESS_MEMORY_S:
            return False
        return take.previous_at is not None and take.previous_at > now - FAILURE_MEMORY_S \
            and (take.succeeded_at is None or take.succeeded_at < take.previous_at)

    def attempt(self, address: str) -> Refusal | None:
        """Count one sign-in attempt from ``address``: None when it may go ahead, else why
        not. Blocking (a database round trip): call it from a worker thread."""
        now = self.clock()
        own = self.store.take(address_key(address), now, self.client_burst, self.client_rate)
        refused = _refusal("client", own)
        if refused is None and self.failing(own, now):
            refused = _refusal("failing", self.store.take(FAILING_KEY, now, self.failing_burst,
                                                          self.failing_rate))
        self._prune(now)
        return refused

    def succeeded(self, address: str) -> None:
        """Record that ``address`` signed in (it is not failing for a day). Blocking."""
        self.store.succeeded(address_key(address), self.clock())

    def _prune(self, now: float) -> None:
        """Delete the rows that tell nothing any more, at most every PRUNE_EVERY_S."""
        if now - self._pruned < PRUNE_EVERY_S or not self._pruning.acquire(blocking=False):
            return
        try:
            self._pruned = now
            self.store.prune(now - FAILURE_MEMORY_S, now, now - SUCCESS_MEMORY_S)
        finally:
            self._pruning.release()
