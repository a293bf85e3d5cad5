"""What a person changes in the console is audited (``console:<action>`` records of the
signed-in admin, beside the records the governed service writes itself), and the long
changes run as one :class:`BackgroundJob` at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from docgraph.errors import DocgraphError
from docgraph.governance import Caller
from docgraph.governance.audit import AuditRecord
from docgraph.serve.console.ports import ConsoleGovernance


def audit_change(governance: ConsoleGovernance, admin: Caller, action: str, outcome: str,
                 detail: str) -> None:
    """Write one console change to the audit log (``console:<action>``)."""
    governance.audit.write(AuditRecord(user_id=admin.user_id, operation=f"console:{action}",
                                       outcome=outcome, role=admin.active_role,
                                       reason=detail))


@contextmanager
def change_audited(governance: ConsoleGovernance, admin: Caller, action: str,
                   detail: str | None) -> Iterator[None]:
    """Audit a refused change as ``console:<action>``, outcome ``error``, reason
    ``<detail>: <error>`` (the error alone when ``detail`` is None), and re-raise it."""
    try:
        yield
    except DocgraphError as exc:
        audit_change(governance, admin, action, "error",
                     str(exc) if detail is None else f"{detail}: {exc}")
        raise


@dataclass(kw_only=True)
class BackgroundJob:
    """One background thread at a time, with what the console shows about it: when it
    started and finished, its message and its error. Subclasses supply the work."""

    started_at: float | None = None
    finished_at: float | None = None
    message: str = ""
    error: str = ""
    _thread: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def running(self) -> bool:
        """Whether the job's thread runs now."""
        return self._thread is not None and self._thread.is_alive()

    def _launch(self, name: str, target: Callable[[], None],
                reset: Callable[[], None] | None = None) -> bool:
        """Start ``target`` in a daemon thread unless one runs (then False); ``reset``
        clears the subclass's state first, under the same lock."""
        with self._lock:
            if self.running:
                return False
            self.started_at, self.finished_at = time.time(), None
            self.message, self.error = "", ""
            if reset is not None:
                reset()
            self._thread = threading.Thread(target=self._finishing(target), name=name,
                                            daemon=True)
            self._thread.start()
        return True

    def _finishing(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            finally:
                self.finished_at = time.time()
        return run

    def wait(self, timeout: float) -> bool:
        """Wait for the job to end (tests); True when none runs."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running
