"""Crawl a document folder through fsspec: list files with change tokens, read bodies."""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import fsspec

from docgraph.errors import SourceError
from docgraph.sources.urn import urn_scheme


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


def _change_token(info: dict[str, Any]) -> str:
    size = info.get("size")
    for key in ("ETag", "etag", "e_tag"):
        if info.get(key):
            return f"etag:{str(info[key]).strip(chr(34))}:{size}"
    for key in ("mtime", "LastModified", "last_modified", "modify", "modified", "created"):
        if info.get(key) is not None:
            return f"mtime:{info[key]}:{size}"
    return f"size:{size}"


class FolderCrawler:
    """Lists and reads the files of one folder URN (any fsspec scheme)."""

    def __init__(self, urn: str, include: list[str], storage_options: dict[str, Any] | None = None):
        self.urn = urn
        self.include = include
        self.scheme = urn_scheme(urn)
        try:
            # The stored URN is percent-encoded; filesystems want the decoded path.
            self.fs, self.root = fsspec.core.url_to_fs(unquote(urn), **(storage_options or {}))
        except Exception as exc:
            raise SourceError(f"cannot open folder {urn}: {exc}") from exc
        self.root = self.root.rstrip("/") or "/"

    def _matches(self, relative_path: str) -> bool:
        name = posixpath.basename(relative_path).lower()
        return any(fnmatch.fnmatch(name, pattern.lower()) for pattern in self.include)

    def list_files(self) -> Iterator[FileEntry]:
        """Every included file below the folder, in path order."""
        try:
            if not self.fs.isdir(self.root):
                raise SourceError(f"folder not found or not a directory: {self.urn}")
            found = self.fs.find(self.root, detail=True)
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(f"cannot list folder {self.urn}: {exc}") from exc
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
                change_token=_change_token(info),
            )

    def read(self, entry: FileEntry) -> bytes:
        """The bytes of one file; raises :class:`SourceError` naming the file."""
        try:
            data: bytes = self.fs.cat_file(entry.full_path)
            return data
        except Exception as exc:
            raise SourceError(f"cannot read {self.urn}/{entry.relative_path}: {exc}") from exc
