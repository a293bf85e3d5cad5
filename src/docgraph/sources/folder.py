"""Crawl a document folder through fsspec: list files with change tokens, read bodies."""

from __future__ import annotations

import fnmatch
import logging
import posixpath
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import fsspec
from fsspec.implementations.local import LocalFileSystem

from docgraph.errors import SourceError, SourceFileVanished
from docgraph.model import urn_scheme
from docgraph.sources.access_rules import SIDECAR_NAME
from docgraph.sources.changes import change_token
from docgraph.sources.local import SYMLINK_REASON, file_type, read_regular, walk
from docgraph.sources.urn import escape_name

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

    ``relative_path`` is the path as stored and shown (see
    :func:`~docgraph.sources.urn.escape_name`); ``listed_path`` is set only when the
    filesystem spells it otherwise (a name that is not UTF-8, with surrogate escapes): it is
    what is opened and what the document id is built from. ``change_token`` is the cheapest
    signal of change the scheme offers (ETag, or size + modification time); the content
    hash stays the final word.
    """

    relative_path: str
    full_path: str
    size: int
    change_token: str
    listed_path: str = ""
    #: (mode, uid, gid) as listed, where the listing gives them (local folders): what
    #: :mod:`docgraph.sources.posix_access` decides readers by.
    owner: tuple[int, int, int] | None = None

    @property
    def name_path(self) -> str:
        """The relative path exactly as the filesystem lists it."""
        return self.listed_path or self.relative_path


@dataclass(frozen=True, slots=True)
class SkippedEntry:
    """An entry of the folder that is not indexed, and why (a symlink, a FIFO, a folder
    that cannot be read)."""

    relative_path: str
    reason: str


def _change_token(info: dict[str, Any], scheme: str = "", listed_at: float | None = None) -> str:
    return change_token(info, scheme, listed_at).encode()


class FolderCrawler:
    """Lists and reads the files of one folder URN (any fsspec scheme).

    ``storage_options`` carry credentials and timeouts (see :mod:`docgraph.sources.credentials`).
    For connection-holding schemes (SFTP, FTP) each crawler opens its own connection
    (fsspec's instance cache is bypassed, so a connection that died in one build is never
    reused by the next) and :meth:`close` ends it; other schemes reuse fsspec's cached
    filesystem but drop its listing cache before every listing, so a changed remote file is
    always seen. Local folders are walked by :mod:`docgraph.sources.local` (no symlink is
    followed). ``bodies_fetched`` counts the file bodies read.
    """

    def __init__(self, urn: str, include: list[str], storage_options: dict[str, Any] | None = None):
        self.urn = urn
        self.include = include
        self.scheme = urn_scheme(urn)
        self.bodies_fetched = 0
        self.skipped: list[SkippedEntry] = []
        self.unlisted: list[str] = []
        self.not_included: Counter[str] = Counter()
        #: The permission sidecars (:mod:`docgraph.sources.access_rules`) of the last
        #: listing, complete once it is exhausted; read with :meth:`read` like a file.
        self.sidecars: list[FileEntry] = []
        self._failures_in_a_row = 0
        self._last_failure = ""
        self._owned = self.scheme in CONNECTION_SCHEMES
        options = dict(storage_options or {})
        if self._owned:
            options["skip_instance_cache"] = True
        channel_timeout = options.pop("channel_timeout", options.get("timeout"))
        retries = options.pop("retries", None) if self.scheme == "s3" else None
        try:
            # The stored URN is percent-encoded; filesystems want the decoded path (bytes
            # that are not UTF-8 come back as surrogate escapes, as os.fsdecode gives them).
            self.fs, self.root = fsspec.core.url_to_fs(
                unquote(urn, errors="surrogateescape"), **options)
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

    @property
    def _local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def list_files(self) -> Iterator[FileEntry]:
        """Every included regular file below the folder, in path order.

        Entries that are not indexed for a reason an admin should see (symlinks, FIFOs and
        other non-regular files, unreadable subfolders) are collected in
        :attr:`skipped` meanwhile; :attr:`unlisted` names the subfolders whose contents are
        unknown to this listing; :attr:`not_included` counts the files (hidden ones aside)
        that match no ``include`` pattern, by type (``*.rst``, ``no extension``, see
        :func:`~docgraph.sources.local.file_type`). All are complete once the iterator is
        exhausted.
        """
        listed_at = time.time()
        self.skipped = []
        self.unlisted = []
        self.sidecars = []
        self.not_included = Counter()
        try:
            if not self._owned and not self._local:
                self.fs.invalidate_cache()
            if not self.fs.isdir(self.root):
                raise SourceError(f"folder not found or not a directory: {self.urn}")
            listed = self._list_local() if self._local else self._list_remote()
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(f"cannot list folder {self.urn}: {_describe(exc)}") from exc
        yield from self._identified(listed, listed_at)
        self.skipped.sort(key=lambda skipped: skipped.relative_path)

    def _list_local(self) -> list[tuple[str, str, dict[str, Any]]]:
        listing = walk(self.root, self._matches)
        self.not_included = listing.not_wanted
        self.sidecars = [self._entry(relative, posixpath.join(self.root, relative),
                                     {"size": info.st_size, "mtime": info.st_mtime}, time.time())
                         for relative, info in listing.sidecars]
        for relative, reason in listing.skipped:
            self.skipped.append(SkippedEntry(escape_name(relative), reason))
        for relative, reason in listing.unlisted:
            self.skipped.append(SkippedEntry(escape_name(relative), reason))
            self.unlisted.append(escape_name(relative))
        return [(relative, posixpath.join(self.root, relative),
                 {"size": info.st_size, "mtime": info.st_mtime,
                  "owner": (info.st_mode, info.st_uid, info.st_gid)})
                for relative, info in listing.files]

    def _list_remote(self) -> list[tuple[str, str, dict[str, Any]]]:
        found = self.fs.find(self.root, detail=True)
        prefix = self.root.rstrip("/") + "/"
        listed = []
        for full_path in sorted(found):
            info = found[full_path]
            relative = full_path[len(prefix):] if full_path.startswith(prefix) else full_path
            if any(part.startswith(".") for part in relative.split("/")[:-1]):
                continue  # hidden folders (.git) and what they hold
            if posixpath.basename(relative) == SIDECAR_NAME:
                self.sidecars.append(self._entry(relative, full_path, info, time.time()))
                continue
            if posixpath.basename(relative).startswith("."):
                continue  # hidden files (.DS_Store, the index itself)
            kind = info.get("type")
            if not self._matches(relative):
                if kind in (None, "file") and not info.get("islink"):
                    self.not_included[file_type(posixpath.basename(relative))] += 1
                continue
            if info.get("islink"):
                self.skipped.append(SkippedEntry(escape_name(relative), SYMLINK_REASON))
            elif kind not in (None, "file"):
                self.skipped.append(SkippedEntry(
                    escape_name(relative), f"skipped: {kind} (not a regular file)"))
            else:
                listed.append((relative, full_path, info))
        return listed

    def _identified(
        self, listed: list[tuple[str, str, dict[str, Any]]], listed_at: float
    ) -> Iterator[FileEntry]:
        """The listed files as entries, each under a distinct stored path. An undecodable
        name whose escaped form is the name of another file is left out with a warning."""
        plain = {relative for relative, _, _ in listed if escape_name(relative) == relative}
        for relative, full_path, info in listed:
            shown = escape_name(relative)
            if shown != relative and shown in plain:
                log.warning("not indexed: %s/%s: its name is not UTF-8 and its escaped form "
                            "%r is the name of another file", self.urn, shown, shown)
                continue
            yield self._entry(relative, full_path, info, listed_at)

    def _entry(self, relative: str, full_path: str, info: dict[str, Any], listed_at: float
               ) -> FileEntry:
        shown = escape_name(relative)
        return FileEntry(
            relative_path=shown,
            full_path=full_path,
            size=int(info.get("size") or 0),
            change_token=_change_token(info, self.scheme, listed_at),
            listed_path="" if shown == relative else relative,
            owner=info.get("owner"),
        )

    def remote_owners(self, entries: list[FileEntry]) -> dict[str, tuple[int, int, int]]:
        """(mode, uid, gid) of listed SFTP files, by relative path: one attribute listing
        per folder holding them (fsspec's listing drops the mode). Other remote schemes
        keep no POSIX owner: empty. Raises :class:`SourceError` naming the folder."""
        ftp = getattr(self.fs, "ftp", None)
        if self._local or self.scheme not in ("sftp", "ssh") or ftp is None:
            return {}
        wanted: dict[str, dict[str, FileEntry]] = {}
        for entry in entries:
            folder, _, name = entry.full_path.rpartition("/")
            wanted.setdefault(folder, {})[name] = entry
        owners: dict[str, tuple[int, int, int]] = {}
        for folder, names in wanted.items():
            try:
                found = ftp.listdir_attr(folder)
            except Exception as exc:
                raise SourceError(f"cannot read the permissions of {self.urn} folder "
                                  f"{folder}: {_describe(exc)}") from exc
            for attributes in found:
                listed = names.get(attributes.filename)
                if listed is not None and attributes.st_mode is not None:
                    owners[listed.relative_path] = (int(attributes.st_mode),
                                                    int(attributes.st_uid or 0),
                                                    int(attributes.st_gid or 0))
        return owners

    def read(self, entry: FileEntry, max_bytes: int | None = None) -> bytes:
        """The bytes of one file; raises :class:`SourceError` naming the file, or
        :class:`SourceFileVanished` when it is gone since the listing.

        Local files are read without following symlinks (at most ``max_bytes`` + 1 bytes
        are read to notice one that grew past the limit) and their errors never count
        toward the breaker: it is meant for remote servers that stop answering.
        """
        if self._local:
            self.bodies_fetched += 1
            try:
                return read_regular(self.root, entry.name_path, max_bytes)
            except SourceFileVanished as exc:
                raise SourceFileVanished(
                    f"{self.urn}/{entry.relative_path}: vanished during the crawl") from exc
            except SourceError:
                raise
            except OSError as exc:
                raise SourceError(
                    f"cannot read {self.urn}/{entry.relative_path}: {_describe(exc)}") from exc
        if self._failures_in_a_row >= MAX_CONSECUTIVE_FETCH_FAILURES:
            raise SourceError(
                f"cannot read {self.urn}/{entry.relative_path}: not tried, the server stopped "
                f"answering ({self._failures_in_a_row} fetches failed in a row; last: "
                f"{self._last_failure})"
            )
        self.bodies_fetched += 1
        try:
            data: bytes = self.fs.cat_file(entry.full_path)
        except FileNotFoundError as exc:  # the server answered: the file is gone
            self._failures_in_a_row = 0
            raise SourceFileVanished(
                f"{self.urn}/{entry.relative_path}: vanished during the crawl") from exc
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
