"""Admin settings shared by every process of one index (several servers on one database).

``docgraph admin set`` (and the admin tab) writes a change to ``docgraph.toml`` and, for the
sections that apply at run time (:data:`SHARED_SECTIONS`: loader, index, refresh, llm), to the
index's database (:class:`~docgraph.store.base.SettingsStore`). Every process applies the
stored values over its file settings when it opens the index, and re-checks at most every
:data:`SYNC_INTERVAL_S` seconds (one index lookup of the newest revision) at the entry of a
governed request, a query of the Python API or a refresh round (the composition root's
``sync_settings``; the engines below read the settings as synced, never through a syncing
getter) and when the owner reads ``DocGraph.settings``, so a change made by one server
applies in the others within that time, without a restart. An environment variable
(``DOCGRAPH_<SECTION>__<KEY>``) still wins over both. ``store`` is not shared (it says where
the database is), and the embedding model is recorded in the catalog itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from docgraph.config import (
    IndexSettings,
    LlmSettings,
    LoaderSettings,
    RefreshSettings,
    Settings,
)
from docgraph.store.base import SettingsStore

log = logging.getLogger(__name__)

SHARED_SECTIONS: dict[str, type[BaseModel]] = {
    "loader": LoaderSettings,
    "index": IndexSettings,
    "refresh": RefreshSettings,
    "llm": LlmSettings,
}
#: Longest time a change made by another process takes to apply here.
SYNC_INTERVAL_S = 2.0


def env_overridden(section: str, key: str) -> bool:
    """Whether ``DOCGRAPH_<SECTION>__<KEY>`` is set (it wins over file and database)."""
    return f"DOCGRAPH_{section.upper()}__{key.upper()}" in os.environ


class SharedSettings:
    """Keeps one process's :class:`Settings` in step with the settings stored in the index."""

    def __init__(self, store: SettingsStore, settings: Settings,
                 interval_s: float = SYNC_INTERVAL_S) -> None:
        self.store = store
        self.settings = settings
        self.interval_s = interval_s
        self._revision = -1
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def sync(self, *, force: bool = False) -> bool:
        """Apply stored changes if the revision moved (checked at most every
        ``interval_s`` unless ``force``). Returns whether settings changed. A database that
        cannot be read leaves the settings as they are (logged)."""
        now = time.monotonic()
        if not force and now - self._checked < self.interval_s:
            return False
        with self._lock:
            if not force and now - self._checked < self.interval_s:
                return False
            self._checked = now
            try:
                revision = self.store.revision()
                if revision == self._revision:
                    return False
                overrides = self.store.overrides()
            except Exception as exc:  # a store or driver error (sqlite3 / psycopg)
                log.warning("cannot read the shared admin settings: %s", exc)
                return False
            self._revision = revision
            return self._apply(overrides)

    def record(self, changed: Mapping[str, Mapping[str, Any]]) -> None:
        """Store the shared sections of an admin change (the others are file-only)."""
        shared = {s: dict(v) for s, v in changed.items() if s in SHARED_SECTIONS and v}
        if shared:
            self.store.record(shared, time.time())
            self.sync(force=True)

    def _apply(self, overrides: Mapping[str, Mapping[str, Any]]) -> bool:
        changed = False
        for section, model in SHARED_SECTIONS.items():
            values = {k: v for k, v in overrides.get(section, {}).items()
                      if not env_overridden(section, k)}
            if not values:
                continue
            current = getattr(self.settings, section)
            try:
                updated = model.model_validate({**current.model_dump(), **values})
            except ValidationError as exc:
                log.warning("ignoring stored admin settings of [%s] (%s): %s", section,
                            ", ".join(sorted(values)), exc)
                continue
            if updated.model_dump() != current.model_dump():
                setattr(self.settings, section, updated)
                changed = True
        return changed
