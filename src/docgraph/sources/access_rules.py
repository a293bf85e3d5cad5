"""Who may read the files of a folder, from ``.docgraph-access.yaml`` sidecars beside them.

A sidecar applies to the folder it is in and everything below it::

    # .docgraph-access.yaml
    access: [group:finance]              # this folder and below
    files:                               # relative to this folder; first match wins
      salaries.xlsx: [user:hr-lead]
      "drafts/*": [group:editors, user:alice]

Principals are written ``user:<id>`` and ``group:<name>`` (as everywhere); an empty list lets
nobody read. The most specific rule wins: a ``files`` entry naming the file exactly (the
nearest sidecar first), then a ``files`` glob matching it (``*`` also crosses folders;
nearest sidecar first, in the order written), then the ``access`` of the nearest sidecar
that has one. A file no rule covers keeps the source's rule: everyone the namespace is
granted to. A sidecar that cannot be read or parsed, or names anything but principals, makes
every file at or below its folder unreadable (:class:`AccessUnreadable`): a permission
source that cannot be read fails closed.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from docgraph.errors import DocgraphError
from docgraph.model import Access, parse_principals

#: The sidecar's file name (a hidden file: never indexed as a document).
SIDECAR_NAME = ".docgraph-access.yaml"
#: Largest sidecar read (a rules file, not a document).
MAX_SIDECAR_BYTES = 1024 * 1024
_KEYS = frozenset({"access", "files"})


class AccessUnreadable(DocgraphError):
    """A document's permission source cannot be read; the message names it and says why."""


@dataclass(frozen=True)
class Sidecar:
    """One folder's rules (``folder`` relative to the source, ``""`` its root): its
    ``access`` (None: it sets none), its ``files`` rules in order, or ``error``."""

    folder: str
    access: Access = None
    files: tuple[tuple[str, frozenset[str]], ...] = ()
    error: str | None = None

    @property
    def where(self) -> str:
        """The sidecar's path within the source, for messages."""
        return posixpath.join(self.folder, SIDECAR_NAME) if self.folder else SIDECAR_NAME


def parse_sidecar(folder: str, data: bytes) -> Sidecar:
    """The rules of one sidecar's bytes (an unreadable one comes back with ``error``)."""
    import yaml

    try:
        parsed = yaml.safe_load(data.decode("utf-8")) if data.strip() else {}
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        return Sidecar(folder, error=f"unreadable YAML ({' '.join(str(exc).split())[:200]})")
    if not isinstance(parsed, dict):
        return Sidecar(folder, error="expected a mapping with access and/or files")
    unknown = sorted(str(k) for k in parsed if k not in _KEYS)
    if unknown:
        return Sidecar(folder, error=f"unknown keys {unknown} (expected access, files)")
    try:
        access = None if parsed.get("access") is None else parse_principals(parsed["access"])
        files_raw = parsed.get("files") or {}
        if not isinstance(files_raw, dict):
            raise ValueError("files: expected a mapping of file names or globs to principals")
        files = tuple((str(pattern), parse_principals(principals))
                      for pattern, principals in files_raw.items())
    except ValueError as exc:
        return Sidecar(folder, error=str(exc))
    return Sidecar(folder, access, files)


class AccessRules:
    """Every sidecar of one folder listing, resolving each file's permission set."""

    def __init__(self, sidecars: Iterable[Sidecar]) -> None:
        self._by_folder = {s.folder: s for s in sidecars}

    def __bool__(self) -> bool:
        return bool(self._by_folder)

    def access_for(self, path: str) -> Access:
        """The permission set of the file at ``path`` (relative to the source): see the
        module docstring. Raises :class:`AccessUnreadable` under a broken sidecar."""
        if not self._by_folder:
            return None
        parts = path.split("/")[:-1]
        folders = ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]  # nearest first
        found = [s for f in folders if (s := self._by_folder.get(f)) is not None]
        for sidecar in found:
            if sidecar.error is not None:
                raise AccessUnreadable(f"{sidecar.where}: {sidecar.error}")
        for exact in (True, False):
            for sidecar in found:
                inner = path[len(sidecar.folder) + 1:] if sidecar.folder else path
                for pattern, principals in sidecar.files:
                    if (pattern == inner) if exact else fnmatch.fnmatchcase(inner, pattern):
                        return principals
        for sidecar in found:
            if sidecar.access is not None:
                return sidecar.access
        return None
