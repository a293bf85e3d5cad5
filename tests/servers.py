"""Real file servers on 127.0.0.1 for source tests, each serving a local directory.

* :class:`FtpServer` - pyftpdlib in a thread (its own IO loop), user/password login.
* :class:`SftpServer` - an asyncssh SSH server with an SFTP subsystem chrooted to the
  directory, in a thread with its own event loop; password login.
* :class:`S3Server` - moto's S3 in server mode (``ThreadedMotoServer``), with a WSGI
  counter of object GETs.

Every server counts the file bodies it served (``bodies_served``), can be told to go down
after serving ``fail_after`` bodies (the connection is cut and the listener closed, as a
crashed server would), and is stopped by :meth:`stop` (idempotent; also the context exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

USER = "docgraph"
PASSWORD = "s3cret-pw"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def age(path: Path, seconds: float = 120.0) -> None:
    """Set a file's modification time ``seconds`` into the past (a file written earlier)."""
    when = time.time() - seconds
    os.utime(path, (when, when))


class FtpServer:
    """pyftpdlib serving ``root`` to USER/PASSWORD on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        from pyftpdlib.authorizers import DummyAuthorizer
        from pyftpdlib.handlers import FTPHandler
        from pyftpdlib.ioloop import IOLoop
        from pyftpdlib.servers import FTPServer

        self.root = root
        self.bodies_served = 0
        self.fail_after: int | None = None
        self.down = False
        outer = self

        class Handler(FTPHandler):  # type: ignore[misc]
            def ftp_RETR(self, file: str) -> Any:
                if outer.fail_after is not None and outer.bodies_served >= outer.fail_after:
                    outer._go_down()
                    return None
                outer.bodies_served += 1
                return super().ftp_RETR(file)

        authorizer = DummyAuthorizer()
        authorizer.add_user(USER, PASSWORD, str(root), perm="elr")
        Handler.authorizer = authorizer
        Handler.passive_ports = None
        self._loop = IOLoop()
        self.server = FTPServer(("127.0.0.1", 0), Handler, ioloop=self._loop)
        self.port = int(self.server.socket.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ftp-server", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.server.serve_forever(timeout=0.05, blocking=False, handle_exit=False)
        with contextlib.suppress(Exception):
            self.server.close_all()

    def _go_down(self) -> None:
        """Called on the server's own thread: cut every connection, stop listening."""
        self.down = True
        self._stop.set()
        with contextlib.suppress(Exception):
            self.server.close_all()

    @property
    def url(self) -> str:
        return f"ftp://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def __enter__(self) -> FtpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SftpServer:
    """asyncssh SSH + SFTP serving ``root`` (chroot) to USER/PASSWORD on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        import asyncssh

        self.root = root
        self.bodies_served = 0
        self.fail_after: int | None = None
        self.down = False
        self._connections: list[Any] = []
        self._loop = asyncio.new_event_loop()
        self._acceptor: Any = None
        outer = self

        class Server(asyncssh.SSHServer):  # type: ignore[misc]
            def connection_made(self, conn: Any) -> None:
                outer._connections.append(conn)

            def begin_auth(self, username: str) -> bool:
                return True

            def password_auth_supported(self) -> bool:
                return True

            def validate_password(self, username: str, password: str) -> bool:
                return username == USER and password == PASSWORD

        class Sftp(asyncssh.SFTPServer):  # type: ignore[misc]
            def __init__(self, chan: Any) -> None:
                super().__init__(chan, chroot=str(root).encode())

            def open(self, path: bytes, pflags: int, attrs: Any) -> Any:
                if pflags & asyncssh.FXF_READ:
                    if outer.fail_after is not None and outer.bodies_served >= outer.fail_after:
                        outer._go_down()
                        raise asyncssh.SFTPConnectionLost("server went down")
                    outer.bodies_served += 1
                return super().open(path, pflags, attrs)

        key = asyncssh.generate_private_key("ssh-ed25519")

        async def start() -> None:
            self._acceptor = await asyncssh.create_server(
                Server, "127.0.0.1", 0, server_host_keys=[key], sftp_factory=Sftp,
                allow_scp=False,
            )

        self._thread = threading.Thread(target=self._loop.run_forever, name="sftp-server",
                                        daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(start(), self._loop).result(30)
        self.port = int(self._acceptor.sockets[0].getsockname()[1])

    def _go_down(self) -> None:
        """Called on the server's loop: stop listening and drop every connection."""
        self.down = True
        self._acceptor.close()
        for conn in self._connections:
            conn.abort()

    @property
    def url(self) -> str:
        return f"sftp://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if not self._loop.is_running():
            return

        async def shutdown() -> None:
            self._acceptor.close()
            for conn in self._connections:
                conn.abort()
            await asyncio.sleep(0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> SftpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class S3Server:
    """moto's S3 in server mode on 127.0.0.1, counting object GETs."""

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, ThreadedMotoServer, create_backend_app
        from werkzeug.serving import make_server

        self.bodies_served = 0
        self.fail_after: int | None = None
        self.down = False
        outer = self
        port = _free_port()

        class Counting(ThreadedMotoServer):  # type: ignore[misc]
            def _server_entry(self) -> None:
                from moto.server import MotoRequestHandler

                app = DomainDispatcherApplication(create_backend_app)

                def counting(environ: dict[str, Any], start_response: Any) -> Any:
                    path = environ.get("PATH_INFO", "").strip("/")
                    query = environ.get("QUERY_STRING", "")
                    if environ["REQUEST_METHOD"] == "GET" and "/" in path and "list-type" \
                            not in query and "prefix=" not in query:
                        if outer.fail_after is not None \
                                and outer.bodies_served >= outer.fail_after:
                            outer.down = True
                            threading.Thread(target=outer.stop, daemon=True).start()
                            start_response("503 Service Unavailable", [])
                            return [b""]
                        outer.bodies_served += 1
                    return app(environ, start_response)

                self._server = make_server(self._ip_address, self._port, counting, True,
                                           request_handler=MotoRequestHandler)
                self._server_ready_event.set()
                self._server.serve_forever()

        self._server = Counting(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        self.port = port
        self._stopped = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="test", aws_secret_access_key="test")

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            with contextlib.suppress(Exception):
                self._server.stop()
            with contextlib.suppress(Exception):
                self._server._server.server_close()  # refuse connections from now on

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
