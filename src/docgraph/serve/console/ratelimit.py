"""Sign-in attempts limited per client address and in all: two layers of token buckets.

Every ``POST /console/login`` takes one token from its client address's bucket and one from
the global bucket before the presented bearer token is even looked at; when either is
empty the attempt gets a 429 page with ``Retry-After`` and the token is not checked, so
guessing tokens is slow from one address, and slow in all from many addresses (the global
bucket also keeps a flood of attempts from crowding out the stores). The first refusal of
each run of refusals (per address, and of the global bucket) is audited; the rest of the
run is not, so a flood cannot flood the audit log too.

The buckets are in this process's memory: with several servers behind a load balancer each
has its own, so the global allowance is per process (a client is still held to its rate on
each of them). The client address is the one uvicorn reports: behind a proxy, run
``docgraph serve`` with the proxy's address trusted for ``X-Forwarded-For``, or every client
shares the proxy's bucket (the limit then still holds, only more tightly).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

#: Attempts one address may make at once, and how many per minute after that.
CLIENT_BURST = 10
CLIENT_PER_MINUTE = 10
#: Attempts all addresses together may make at once, and per minute after that.
GLOBAL_BURST = 60
GLOBAL_PER_MINUTE = 120
#: Addresses remembered at most (the least recently seen are forgotten first).
MAX_CLIENTS = 10_000


@dataclass
class TokenBucket:
    """Holds up to ``capacity`` tokens, refilled at ``per_second``; an attempt takes one."""

    capacity: float
    per_second: float
    tokens: float
    updated: float
    refusing: bool = False  # the last attempt was refused (a run of refusals is going on)

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.per_second)
        self.updated = now

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0 when one is)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.per_second

    def take(self, now: float) -> None:
        """Take one token (check :meth:`wait` first)."""
        self._refill(now)
        self.tokens -= 1


@dataclass(frozen=True)
class Refusal:
    """An attempt refused: which bucket (``client`` or ``global``), for how long in whole
    seconds, and whether it is the first of its run (audit it)."""

    scope: str
    retry_after: int
    first: bool


class SignInLimiter:
    """The sign-in buckets of one process (see the module docstring)."""

    def __init__(self, client_burst: float = CLIENT_BURST,
                 client_per_minute: float = CLIENT_PER_MINUTE,
                 global_burst: float = GLOBAL_BURST,
                 global_per_minute: float = GLOBAL_PER_MINUTE,
                 max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if min(client_burst, global_burst) < 1 or min(client_per_minute,
                                                      global_per_minute) <= 0:
            raise ValueError("a sign-in bucket needs a burst of at least 1 and a positive rate")
        self.client_burst = client_burst
        self.client_rate = client_per_minute / 60
        self.max_clients = max_clients
        self.clock = clock
        self._global = TokenBucket(global_burst, global_per_minute / 60, global_burst, clock())
        self._clients: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def _client(self, address: str, now: float) -> TokenBucket:
        bucket = self._clients.get(address)
        if bucket is None:
            bucket = TokenBucket(self.client_burst, self.client_rate, self.client_burst, now)
            self._clients[address] = bucket
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(address)
        return bucket

    def attempt(self, address: str) -> Refusal | None:
        """Count one sign-in attempt from ``address``: None when it may go ahead, else why
        not. A refused attempt takes no token (waiting is what refills the bucket)."""
        with self._lock:
            now = self.clock()
            client = self._client(address, now)
            for scope, bucket in (("client", client), ("global", self._global)):
                wait = bucket.wait(now)
                if wait > 0:
                    first = not bucket.refusing
                    bucket.refusing = True
                    return Refusal(scope, max(1, math.ceil(wait)), first)
            client.take(now)
            self._global.take(now)
            client.refusing = self._global.refusing = False
            return None
