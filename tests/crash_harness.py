"""Kill ``docgraph index`` with SIGKILL at chosen points and check what must hold after.

Shared by ``tests/ingest/test_crash_consistency.py`` and ``bench/crash.py``.

:class:`Launcher` runs the docgraph command line (``docgraph index``) with a trap armed at a
:class:`KillPoint` (phase, nth, delay), in a child forked from ``python
tests/crash_harness.py`` (which imported docgraph once). The trap counts events per phase:

- ``list``: a file listed;
- ``prepare``: a file handed to a worker process or prepared inline;
- ``embed``: an embedding batch;
- ``write``: a document's statements inside the open batch transaction, a deletion, a new
  change token;
- ``graph``: a namespace's graph build starting, its reports embedded, a report written
  inside the graph transaction.

At the ``nth`` event of its phase the process writes the pids of its child processes to a
file and sends itself SIGKILL: at once, or ``delay`` seconds later from a timer thread, so
the kill lands somewhere in the work that follows. Without a kill point the trap only
counts (:meth:`Trap.installed`), which is how a test learns how many events of each phase
a build has.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from docgraph.embedding.embedders import HashingEmbedder
from docgraph.graph.build import GraphBuilder
from docgraph.ingest.pipeline import IngestPipeline
from docgraph.ingest.workers import PreparePool
from docgraph.sources.folder import FolderCrawler
from docgraph.store.sql.catalog import SqlCatalogRecords
from docgraph.store.sql.documents import SqlCatalogDocuments
from docgraph.store.sqlite.graph import SQLiteGraphBackend

HARNESS = Path(__file__).resolve()
REPO = HARNESS.parents[1]
PHASES = ("list", "prepare", "embed", "write", "graph")


@dataclass(frozen=True)
class KillPoint:
    """Where to kill: the ``nth`` (1-based) event of ``phase``, ``delay`` seconds after it,
    in a build preparing documents in ``workers`` processes (1: inline)."""

    phase: str
    nth: int
    delay: float = 0.0
    workers: int = 2


# -- the trap (inside the process that gets killed) -------------------------------------


class Trap:
    """Counts build events per phase; kills this process at ``kill`` if given."""

    def __init__(self, kill: KillPoint | None = None, children_file: Path | None = None) -> None:
        self.kill = kill
        self.children_file = children_file
        self.counts: Counter[str] = Counter()
        self.in_graph = False

    def event(self, phase: str) -> None:
        if phase == "embed" and self.in_graph:
            phase = "graph"  # community reports are embedded by the graph build
        self.counts[phase] += 1
        kill = self.kill
        if kill is None or kill.phase != phase or self.counts[phase] != kill.nth:
            return
        if kill.delay > 0:
            threading.Timer(kill.delay, self._die).start()
        else:
            self._die()

    def _die(self) -> None:
        if self.children_file is not None:
            children = [(pid, start_time(pid), worker_starting(pid))
                        for pid in child_pids(os.getpid())]
            self.children_file.write_text(json.dumps(children), encoding="utf-8")
        os.kill(os.getpid(), signal.SIGKILL)

    @contextmanager
    def installed(self) -> Iterator[Trap]:
        """Patch the build's steps to report events while the block runs."""
        trap = self

        def list_files(orig: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
                for entry in orig(self, *args, **kwargs):
                    trap.event("list")
                    yield entry
            return wrapper

        def submit(orig: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
                trap.event("prepare")
                yield from orig(self, *args, **kwargs)
            return wrapper

        def before(phase: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    trap.event(phase)
                    return orig(*args, **kwargs)
                return wrapper
            return wrap

        def after(phase: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    result = orig(*args, **kwargs)
                    trap.event(phase)
                    return result
                return wrapper
            return wrap

        def graph_build(orig: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                trap.in_graph = True
                try:
                    trap.event("graph")
                    return orig(*args, **kwargs)
                finally:
                    trap.in_graph = False
            return wrapper

        patches: list[tuple[Any, str, Callable[..., Any]]] = [
            (FolderCrawler, "list_files", list_files),
            (PreparePool, "submit", submit),
            (IngestPipeline, "_prepare_inline", before("prepare")),
            (HashingEmbedder, "embed_documents", before("embed")),
            (SqlCatalogDocuments, "_write_one", after("write")),
            (SqlCatalogDocuments, "delete_document", after("write")),
            (SqlCatalogRecords, "touch_document", after("write")),
            (GraphBuilder, "build", graph_build),
            (SQLiteGraphBackend, "_insert_report", after("graph")),
        ]
        saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
        for owner, name, wrap in patches:
            original = owner.__dict__[name]
            if isinstance(original, staticmethod):
                setattr(owner, name, staticmethod(wrap(original.__func__)))
            else:
                setattr(owner, name, wrap(original))
        try:
            yield self
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)


# -- processes ---------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # fields from the state (3rd) on


def child_pids(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (read from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == parent:
                out.append(int(entry.name))
    return sorted(out)


def start_time(pid: int) -> int:
    """The process's start time in clock ticks (tells a reused pid apart), 0 if gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else 0


def worker_starting(pid: int) -> bool:
    """True for a spawned worker whose start-up is not done yet (its initializer points its
    stdout at the null device)."""
    try:
        if b"spawn_main" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False
        return os.readlink(f"/proc/{pid}/fd/1") != os.devnull
    except OSError:
        return False


def alive(pid: int, started: int) -> bool:
    """True while that process (not a zombie, not a later one with its pid) still runs."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X") and int(fields[19]) == started


def wait_gone(processes: list[tuple[int, int]], timeout: float) -> tuple[float, list[int]]:
    """Seconds until every (pid, start time) has exited, and the pids still alive after
    ``timeout``."""
    t0 = time.monotonic()
    while True:
        left = [pid for pid, started in processes if alive(pid, started)]
        elapsed = time.monotonic() - t0
        if not left or elapsed > timeout:
            return elapsed, left
        time.sleep(0.01)


def kill_leftovers(pids: list[int]) -> None:
    """SIGKILL processes this harness started that outlived their parent (cleanup)."""
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# -- running the killed command ------------------------------------------------------------


@dataclass
class KilledRun:
    """What one trapped ``docgraph index`` run did."""

    point: KillPoint
    returncode: int
    children: list[tuple[int, int]]  # (pid, start time) when it died
    starting_workers: int  # of those, workers still starting up
    seconds: float

    @property
    def landed(self) -> bool:
        """The kill happened (the build did not finish first)."""
        return self.returncode == -signal.SIGKILL


class Launcher:
    """Starts trapped ``docgraph index`` runs by forking a process that imported docgraph
    once (each run then skips the interpreter start and ~2 s of imports). Use as a context
    manager; leaving it ends that process."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
        self._proc = subprocess.Popen([sys.executable, str(HARNESS)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=env, text=True, bufsize=1)

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the forking process."""
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _reply(self, timeout: float) -> dict[str, Any]:
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            raise TimeoutError("the forking process did not answer")
        return dict(json.loads(line))

    def run_killed(self, point: KillPoint, config: Path, index: Path, folder: Path,
                   namespace: str, work: Path, timeout: float = 120.0) -> KilledRun:
        """Run ``docgraph --index INDEX index FOLDER`` under the trap until it kills itself
        (or finishes); its output goes to ``work/killed-run.log``."""
        children_file = work / "children.json"
        children_file.unlink(missing_ok=True)
        log = work / "killed-run.log"
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"--- {point}\n")
        request = {
            "argv": ["--config", str(config), "--index", str(index), "index", str(folder),
                     "--namespace", namespace],
            "env": {"DOCGRAPH_LOADER__WORKERS": str(point.workers)},
            "kill": asdict(point), "children": str(children_file), "log": str(log),
        }
        t0 = time.monotonic()
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        pid = int(self._reply(10)["pid"])
        try:
            returncode = int(self._reply(timeout)["returncode"])
        except TimeoutError:
            kill_leftovers([pid])
            raise
        found = json.loads(children_file.read_text()) if children_file.exists() else []
        return KilledRun(point, returncode, [(int(p), int(s)) for p, s, _ in found],
                         sum(bool(starting) for _, _, starting in found),
                         time.monotonic() - t0)


def _forked_run(request: dict[str, Any]) -> int:
    """In the forked child: the docgraph command line with the trap armed; its exit code."""
    from docgraph.serve.cli import main as cli_main

    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.argv = ["docgraph", *request["argv"]]
    code = 1
    with Trap(KillPoint(**request["kill"]), Path(request["children"])).installed():
        try:
            cli_main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for thread in threading.enumerate():  # a delayed kill still pending
                if thread is not threading.current_thread() and not thread.daemon:
                    thread.join()
    return code


def main() -> None:
    """Fork one trapped docgraph run per request line (JSON) on stdin; answer with the
    child's pid, then its exit code (negative: the signal that ended it)."""
    import docgraph.serve.cli  # noqa: F401  (imported once, before forking)

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _forked_run(request)
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
