"""``GET /readyz``: whether this server can answer requests now, for a load balancer.

``/healthz`` is liveness (the process runs); ``/readyz`` is readiness. It checks, without a
token and without showing any data beyond each component's state:

- **store**: one cheap read of the index database (the token store's change counter, the
  read every request makes first). Unreachable: **503**, ``"failing": ["store"]``: no
  request could be served (not even its token checked), so traffic should go elsewhere.
- **leader**: who refreshes the index (``this process``, ``another process`` or ``none``)
  and whether this process runs the refresh loop. Unreadable: 503 naming ``leader``.
- **row_databases**: the SQL databases row documents are re-checked in (the row
  authorizer's, when one is configured): ``SELECT 1`` on each. One down leaves the server
  **degraded** but ready (200, ``"status": "degraded"``, the database named): searches still
  answer, and row documents of that source fail closed (they are left out). Taking every
  server out of rotation because one shared row database is down would turn a partial
  outage into a full one.

A result is kept :data:`READINESS_TTL_SECONDS`, and concurrent probes share one check, so a
load balancer probing many times a second costs at most one round of queries a second.
State changes are logged once (the store's through :class:`~docgraph.serve.outage.StoreOutage`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.to_thread

from docgraph.serve.outage import StoreOutage
from docgraph.store.outages import store_unavailable

log = logging.getLogger(__name__)

#: How long one readiness result is reused.
READINESS_TTL_SECONDS = 1.0
#: Seconds a row database gets to accept a connection before it counts as unavailable.
ROW_DATABASE_CONNECT_TIMEOUT_S = 2


class LeaderView(Protocol):
    """What readiness reads of the index's leadership (:class:`~docgraph.lifecycle.
    leadership.Leadership`)."""

    @property
    def leading(self) -> bool:
        """Whether this process leads the refresh."""
        ...

    def leader(self) -> str | None:
        """Which process leads the refresh, or None."""
        ...


@dataclass(frozen=True)
class ReadinessReport:
    """One readiness result: ``ready`` decides 200 or 503; ``body`` is the JSON answer."""

    ready: bool
    body: dict[str, Any]


@dataclass
class Readiness:
    """The readiness check of one server (see the module docstring).

    ``store_probe`` is a cheap read of the index database; ``row_databases`` maps each row
    database's name to its connectable URL; ``refresher_running`` says whether this
    process runs the refresh loop."""

    store_probe: Callable[[], object]
    leadership: LeaderView
    outage: StoreOutage
    row_databases: Mapping[str, str] = field(default_factory=dict)
    refresher_running: Callable[[], bool] = lambda: False
    ttl_s: float = READINESS_TTL_SECONDS
    _cached: tuple[float, bool, ReadinessReport] | None = field(default=None, init=False)
    _lock: anyio.Lock = field(default_factory=anyio.Lock, init=False)
    _engines: dict[str, Any] = field(default_factory=dict, init=False)
    _states: dict[str, str] = field(default_factory=dict, init=False)

    async def report(self) -> ReadinessReport:
        """The current result: a cached one younger than ``ttl_s``, else a fresh check (in a
        worker thread; concurrent callers wait for the same one). A cached result is not
        reused once requests found the store gone or back since it was made."""
        async with self._lock:
            cached = self._cached
            if (cached is not None and time.monotonic() - cached[0] < self.ttl_s
                    and cached[1] == self.outage.down):
                return cached[2]
            report = await anyio.to_thread.run_sync(self.check)
            self._cached = (time.monotonic(), self.outage.down, report)
            return report

    def check(self) -> ReadinessReport:
        """Check every component now (blocking)."""
        store = self._store()
        leader = self._leader()
        rows = self._row_databases()
        failing = [name for name, part in (("store", store), ("leader", leader))
                   if part["status"] != "ok"]
        degraded = [f"row_databases.{name}" for name, state in rows["databases"].items()
                    if state != "ok"]
        status = "not ready" if failing else "degraded" if degraded else "ready"
        body = {"status": status, "failing": failing + degraded,
                "components": {"store": store, "leader": leader, "row_databases": rows}}
        return ReadinessReport(not failing, body)

    def _store(self) -> dict[str, Any]:
        try:
            self.store_probe()
        except Exception as exc:
            outage = store_unavailable(exc)
            if outage is not None:
                self.outage.failed(outage)
                return {"status": "unavailable"}
            self._changed("store", "error", f"the index store check failed: {exc}")
            return {"status": "error"}
        self.outage.recovered()
        self._changed("store", "ok", "")
        return {"status": "ok"}

    def _leader(self) -> dict[str, Any]:
        try:
            leading = self.leadership.leading
            holder = None if leading else self.leadership.leader()
        except Exception as exc:
            state = "unavailable" if store_unavailable(exc) is not None else "error"
            self._changed("leader", state, f"the refresh leader cannot be read: {exc}")
            return {"status": state}
        self._changed("leader", "ok", "the refresh leader can be read again")
        who = "this process" if leading else "none" if holder is None else "another process"
        return {"status": "ok", "leader": who, "refresher_running": self.refresher_running()}

    def _row_databases(self) -> dict[str, Any]:
        states = {name: self._ping(name, url) for name, url in sorted(self.row_databases.items())}
        if not states:
            status = "none configured"
        else:
            status = "ok" if all(s == "ok" for s in states.values()) else "degraded"
        return {"status": status, "databases": states}

    def _ping(self, name: str, url: str) -> str:
        """``SELECT 1`` on row database ``name``: ``ok`` or ``unavailable``."""
        import sqlalchemy as sa

        try:
            engine = self._engines.get(name)
            if engine is None:
                parsed = sa.engine.make_url(url)
                options: dict[str, Any] = {}
                if parsed.get_backend_name() == "postgresql":
                    options["connect_args"] = {"connect_timeout": ROW_DATABASE_CONNECT_TIMEOUT_S}
                engine = sa.create_engine(parsed, pool_pre_ping=True, **options)
                self._engines[name] = engine
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as exc:
            self._changed(f"row database {name}", "unavailable",
                          f"row database {name!r} is unavailable: {exc}; its row documents "
                          "are left out of answers until it is back")
            return "unavailable"
        self._changed(f"row database {name}", "ok", f"row database {name!r} is available")
        return "ok"

    def _changed(self, component: str, state: str, message: str) -> None:
        """Log a component's state once when it changes (not on every probe)."""
        before = self._states.get(component)
        self._states[component] = state
        if before == state or (before is None and state == "ok"):
            return
        if state == "ok":
            log.info("%s", message)
        else:
            log.warning("%s", message)

    def close(self) -> None:
        """Release the row databases' connections."""
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()
