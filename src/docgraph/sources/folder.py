"""Crawl a document folder through fsspec: list files with change tokens, read bodies."""

from __future__ import annotations

import fnmatch
import logging
import posixpath
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import fsspec
from fsspec.implementations.local import LocalFileSystem

from docgraph.errors import SourceError
from docgraph.sources.changes import change_token
from docgraph.sources.urn import urn_scheme

log = logging.getLogger(__name__)

#: Schemes whose filesystems hold a connection: each crawler opens its own (never a cached
#: instance whose connection may have died) and closes it.
CONNECTION_SCHEMES = frozenset({"sftp", "ssh", "ftp"})
#: After this many fetch failures in a row the server is taken to be down: the remaining
#: bodies of this crawl fail at once instead of each waiting out timeouts and retries.
MAX_CONSECUTIVE_FETCH_FAILURES = 3


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file found under a folder.

    ``change_token`` is the cheapest signal of change the scheme offers (ETag, or
    size + modification time); the content hash stays the final word.
    """

    relative_path: str
    full_path: str
    size: int
    change_token: str


def _change_token(info: dict[str, Any], scheme: str = "", listed_at: float | None = None) -> str:
    return change_token(info, scheme, listed_at).encode()


class FolderCrawler:
    """Lists and reads the files of one folder URN (any fsspec scheme).

    ``storage_options`` carry credentials and timeouts (see :mod:`docgraph.sources.credentials`).
    For connection-holding schemes (SFTP, FTP) each crawler opens its own connection
    (fsspec's instance cache is bypassed, so a connection that died in one build is never
    reused by the next) and :meth:`close` ends it; other schemes reuse fsspec's cached
    filesystem but drop its listing cache before every listing, so a changed remote file is
    always seen. ``bodies_fetched`` counts the file bodies read.
    """

    def __init__(self, urn: str, include: list[str], storage_options: dict[str, Any] | None = None):
        self.urn = urn
        self.include = include
        self.scheme = urn_scheme(urn)
        self.bodies_fetched = 0
        self._failures_in_a_row = 0
        self._last_failure = ""
        self._owned = self.scheme in CONNECTION_SCHEMES
        options = dict(storage_options or {})
        if self._owned:
            options["skip_instance_cache"] = True
        channel_timeout = options.pop("channel_timeout", options.get("timeout"))
        retries = options.pop("retries", None) if self.scheme == "s3" else None
        try:
            # The stored URN is percent-encoded; filesystems want the decoded path.
            self.fs, self.root = fsspec.core.url_to_fs(unquote(urn), **options)
        except Exception as exc:
            raise SourceError(f"cannot open folder {urn}: {_describe(exc)}") from exc
        self.root = self.root.rstrip("/") or "/"
        if retries is not None:
            self.fs.retries = int(retries)  # s3fs: attempts per request (default 5)
        if self.scheme in ("sftp", "ssh") and channel_timeout:
            # Reads on a server that stops answering fail after the timeout, never hang.
            channel = getattr(getattr(self.fs, "ftp", None), "get_channel", lambda: None)()
            if channel is not None:
                channel.settimeout(float(channel_timeout))

    def close(self) -> None:
        """End the connection this crawler opened (best effort; only connection-holding
        schemes have one of their own)."""
        if not self._owned:
            return
        for attribute in ("ftp", "client"):
            handle = getattr(self.fs, attribute, None)
            closer = getattr(handle, "close", None)
            if callable(closer):
                try:
                    closer()
                except Exception as exc:  # already dead: nothing left to close
                    log.debug("closing %s of %s: %s", attribute, self.urn, exc)

    def __enter__(self) -> FolderCrawler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _matches(self, relative_path: str) -> bool:
        name = posixpath.basename(relative_path).lower()
        return any(fnmatch.fnmatch(name, pattern.lower()) for pattern in self.include)

    def list_files(self) -> Iterator[FileEntry]:
        """Every included file below the folder, in path order."""
        listed_at = time.time()
        try:
            if not self._owned and self.scheme != "file":
                self.fs.invalidate_cache()
            if not self.fs.isdir(self.root):
                raise SourceError(f"folder not found or not a directory: {self.urn}")
            found = self.fs.find(self.root, detail=True)
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(f"cannot list folder {self.urn}: {_describe(exc)}") from exc
        prefix = self.root.rstrip("/") + "/"
        for full_path in sorted(found):
            info = found[full_path]
            if info.get("type") not in (None, "file"):
                continue
            relative = full_path[len(prefix):] if full_path.startswith(prefix) else full_path
            if any(part.startswith(".") for part in relative.split("/")):
                continue  # hidden files and folders (.git, .DS_Store, the index itself)
            if not self._matches(relative):
                continue
            yield FileEntry(
                relative_path=relative,
                full_path=full_path,
                size=int(info.get("size") or 0),
                change_token=_change_token(info, self.scheme, listed_at),
            )

    def read(self, entry: FileEntry) -> bytes:
        """The bytes of one file; raises :class:`SourceError` naming the file."""
        if self._failures_in_a_row >= MAX_CONSECUTIVE_FETCH_FAILURES:
            raise SourceError(
                f"cannot read {self.urn}/{entry.relative_path}: not tried, the server stopped "
                f"answering ({self._failures_in_a_row} fetches failed in a row; last: "
                f"{self._last_failure})"
            )
        self.bodies_fetched += 1
        try:
            data: bytes
            if isinstance(self.fs, LocalFileSystem):  # half the cost of fsspec's file object
                with open(entry.full_path, "rb") as handle:
                    data = handle.read()
            else:
                data = self.fs.cat_file(entry.full_path)
        except Exception as exc:
            self._failures_in_a_row += 1
            self._last_failure = _describe(exc)
            raise SourceError(
                f"cannot read {self.urn}/{entry.relative_path}: {_describe(exc)}"
            ) from exc
        self._failures_in_a_row = 0
        return data


def _describe(exc: BaseException) -> str:
    """``Type: message`` (some network errors have an empty message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
