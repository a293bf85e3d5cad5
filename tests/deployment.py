"""Real ``docgraph`` processes on one index for multi-process tests: a settings file, the
commands run from it, and ``docgraph serve`` processes started on free ports.

:class:`Deployment` writes ``docgraph.toml`` (the store section it is given, the hashing
embedder, the YAML policy, no legacy tokens file, plus any extra TOML), runs one-shot
commands (``run``: the test fails with the command's stderr on a non-zero exit), starts
background ones (``start``) and servers (``serve``: returns once ``/healthz`` answers), and
ends every process it started in :meth:`stop`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_store(url: str) -> str:
    """The ``[store]`` section of an index in the PostgreSQL database at ``url``."""
    return f'[store]\nbackend = "postgres"\nurl = "{url}"\n'


def embedded_store(path: Path) -> str:
    """The ``[store]`` section of an embedded index in the SQLite file ``path``."""
    return f'[store]\nbackend = "embedded"\npath = "{path}"\n'


class Deployment:
    """A settings file for one index and the processes started from it."""

    def __init__(self, root: Path, store: str, policy: str, extra: str = "") -> None:
        self.root = root
        (root / "policy.yaml").write_text(policy, encoding="utf-8")
        self.config = root / "docgraph.toml"
        self.config.write_text(
            store + '[embed]\nmodel = "hashing"\n'
            f'[governance]\npolicy_file = "{root / "policy.yaml"}"\n'
            f'[serve]\ntokens_file = "{root / "no-legacy-tokens.toml"}"\n' + extra,
            encoding="utf-8")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")}
        self.env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env["DOCGRAPH_CONFIG"] = str(self.config)
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "docgraph.serve.cli", "--config", str(self.config), *args]

    def run(self, *args: str) -> str:
        """Run one docgraph command to completion; returns its stdout (fails the test with
        its stderr on a non-zero exit)."""
        done = self.attempt(*args)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        return done.stdout

    def attempt(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one docgraph command to completion, whatever its exit code."""
        return subprocess.run(self.command(*args), capture_output=True, text=True,
                              env=self.env, cwd=self.root, timeout=300, check=False)

    def serve_process(self) -> tuple[subprocess.Popen[bytes], str]:
        """Start ``docgraph serve`` on a free port; returns the process and its base URL
        once it answers."""
        port = free_port()
        log = self.root / f"serve-{port}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(self.command("serve", "--port", str(port)),
                                       env=self.env, cwd=self.root, stdout=out,
                                       stderr=subprocess.STDOUT)
        self.processes.append((process, log))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise AssertionError(f"docgraph serve exited {process.returncode}: "
                                     f"{log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    return process, url
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"docgraph serve did not start: {log.read_text()[-3000:]}")
            time.sleep(0.2)

    def serve(self) -> str:
        """Start ``docgraph serve`` on a free port; returns its base URL once it answers."""
        return self.serve_process()[1]

    def log_of(self, process: subprocess.Popen[bytes]) -> str:
        """What a process started here wrote so far."""
        for started, log in self.processes:
            if started is process:
                return log.read_text(errors="replace")
        raise KeyError(process.pid)

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        """Start a docgraph command in the background (killed at the end if still running)."""
        log = self.root / f"run-{len(self.processes)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(self.command(*args), env=self.env, cwd=self.root,
                                       stdout=out, stderr=subprocess.STDOUT)
        self.processes.append((process, log))
        return process

    def stop(self) -> None:
        """End every process this deployment started."""
        for process, _ in self.processes:
            if process.poll() is None:
                process.terminate()
        for process, _ in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)
