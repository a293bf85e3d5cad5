"""Who may read each document of one folder build, and the permission changes it stores.

A document's permission set (:data:`~docgraph.model.Access`) comes from the most specific
source that speaks of it: its own front matter (``access:``, kept by
:func:`~docgraph.ingest.front_matter.split_front_matter`), else the folder's sidecars
(:mod:`docgraph.sources.access_rules`), else the permissions table's rows for it
(:mod:`docgraph.sources.permission_table`), else, for a mail of a folder listed in ``[sources]
mail_participants``, its senders and recipients, else, for a local folder listed in
``[sources] posix_permissions``, the file's owner, group, mode and ACL
(:mod:`docgraph.sources.posix_access`), or, for an S3 folder listed in ``[sources]
s3_permissions``, the object's readers tag or metadata (:mod:`docgraph.sources.s3_access`),
else none (everyone the namespace is granted to).

A build decides it for every listed file, changed or not: a file whose content did not change
but whose permission did (a sidecar edited) gets its new set stored without being read or
re-embedded (:meth:`StoreCatalog.set_document_access`), so a revocation takes effect at the
next refresh. A document whose permission source cannot be read is not indexed, and one
indexed before is withheld from everyone (its set becomes empty) until the source can be
read again: it fails closed and is reported with the reason, never shown to more people
than it may be.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum
from typing import Any

from docgraph.config import SourcesSettings
from docgraph.errors import SourceError
from docgraph.ingest.declared_access import declared_access, declares_access
from docgraph.ingest.formats.mail import PARTICIPANTS_KEY
from docgraph.ingest.front_matter import ACCESS_ERROR_KEY, ACCESS_KEY, front_matter_access
from docgraph.model import USER_PREFIX, Access, DocumentRecord, urn_scheme
from docgraph.sources.access_rules import (
    MAX_SIDECAR_BYTES,
    AccessRules,
    AccessUnreadable,
    Sidecar,
    parse_sidecar,
)
from docgraph.sources.folder import FileEntry, FolderCrawler
from docgraph.sources.permission_table import PermissionTableUnreadable, TableReaders
from docgraph.sources.posix_access import PermissionsUnreadable, PosixReaders
from docgraph.sources.s3_access import S3Readers
from docgraph.sources.urn import document_id, normalize_urn

#: The permission set of a document withheld because its permission source cannot be read.
NOBODY: frozenset[str] = frozenset()


class FailureSet(Enum):
    """A failed file's permission set when its caller names none: the folder's."""

    FOLDER = "folder"


class BuildAccess:
    """The permission decisions of one folder build (see the module docstring)."""

    def __init__(self, rules: AccessRules, posix: PosixReaders | None = None,
                 mail: dict[str, str] | None = None,
                 s3: tuple[S3Readers, Any] | None = None,
                 table: tuple[str, TableReaders | str] | None = None) -> None:
        self.rules = rules
        self.posix = posix
        #: (mode, uid, gid) of remote files by path, where the listing did not carry them.
        self.owners: dict[str, tuple[int, int, int]] = {}
        #: (the folder's URN, its rows of the permissions table, or why they cannot be
        #: read) where a permissions table is configured.
        self.table = table
        #: For a bucket folder whose objects' tags name their readers: the reader and the
        #: crawler's file system.
        self.s3 = s3
        #: For a folder whose mails only their participants may read: principal_map
        #: (None: the folder's mails follow its other rules).
        self.mail = mail
        #: Documents (row id -> set) whose stored set this build changes without a write.
        self.changes: dict[int, Access] = {}
        #: The folder's listing by relative path (what :meth:`of_failure` decides by).
        self.listed: dict[str, FileEntry] = {}

    @classmethod
    def of_folder(cls, crawler: FolderCrawler, posix: PosixReaders | None = None,
                  mail: dict[str, str] | None = None, s3: S3Readers | None = None,
                  table: tuple[str, TableReaders | str] | None = None) -> BuildAccess:
        """Read and parse every sidecar the crawler's listing met (after ``list_files``);
        one that cannot be read counts as broken (its files fail closed). ``posix``: the
        folder's files' owners, groups, modes and ACLs say who may read them where no
        sidecar rule does."""
        sidecars: list[Sidecar] = []
        for entry in crawler.sidecars:
            folder = entry.relative_path.rpartition("/")[0]
            try:
                data = crawler.read(entry, MAX_SIDECAR_BYTES)
            except SourceError as exc:
                sidecars.append(Sidecar(folder, error=f"cannot be read ({exc})"))
                continue
            if len(data) > MAX_SIDECAR_BYTES:
                sidecars.append(Sidecar(folder, error=f"over {MAX_SIDECAR_BYTES} bytes"))
                continue
            sidecars.append(parse_sidecar(folder, data))
        return cls(AccessRules(sidecars), posix, mail,
                   None if s3 is None else (s3, crawler.fs), table)

    def of_file(self, entry: FileEntry, metadata: Mapping[str, str] | None = None
                ) -> Access:
        """The set the folder gives a listed file, in the module docstring's order after
        the front matter: a sidecar rule's, the permissions table's, a mail's participants'
        (with ``metadata``, what its extraction found), the object's tag or the file's
        POSIX readers, else None. Raises :class:`AccessUnreadable`."""
        path = entry.relative_path
        ruled = self.rules.access_for(path)
        if ruled is not None:
            return ruled
        exported = self._exported(entry)
        if exported is not None:
            return exported
        if self.mail is not None and metadata and PARTICIPANTS_KEY in metadata:
            return frozenset(self.mail.get(USER_PREFIX + a, USER_PREFIX + a)
                             for a in json.loads(metadata[PARTICIPANTS_KEY]))
        try:
            if self.s3 is not None:
                readers, fs = self.s3
                return readers.readers(fs, entry.full_path)
            owner = entry.owner or self.owners.get(entry.relative_path)
            if self.posix is not None and owner is not None:
                return self.posix.readers(entry.full_path, *owner)
        except PermissionsUnreadable as exc:
            raise AccessUnreadable(f"{path}: {exc}") from exc
        return None

    def _exported(self, entry: FileEntry) -> Access:
        """The readers the permissions table names for the file (None: it names none);
        raises :class:`AccessUnreadable` when the table or its row cannot be read."""
        if self.table is None:
            return None
        urn, rows = self.table
        if isinstance(rows, str):
            raise AccessUnreadable(f"{entry.relative_path}: {rows}")
        doc_id = document_id(urn, entry.name_path)
        if doc_id in rows.errors:
            raise AccessUnreadable(f"{entry.relative_path}: {rows.errors[doc_id]}")
        return rows.readers.get(doc_id)

    def unreadable(self, entry: FileEntry, existing: DocumentRecord | None) -> str | None:
        """Why the folder cannot say who may read ``entry`` (None: it can); then an
        indexed version is withheld from everyone (fails closed)."""
        try:
            self.of_file(entry)
        except AccessUnreadable as exc:
            self.withhold(existing)
            return str(exc)
        return None

    def of_document(self, entry: FileEntry, metadata: dict[str, str] | None) -> Access:
        """The set of a prepared document: its front matter's, else the folder's. Raises
        :class:`AccessUnreadable` (its front matter names something other than
        principals, or a permission source above it cannot be read)."""
        folder_access = self.of_file(entry, metadata)
        if metadata and ACCESS_ERROR_KEY in metadata:
            raise AccessUnreadable(f"{entry.relative_path}: {metadata[ACCESS_ERROR_KEY]}")
        if metadata and ACCESS_KEY in metadata:
            return front_matter_access(metadata)
        return folder_access

    def of_failure(self, path: str, indexed: DocumentRecord | None = None,
                   data: bytes | None = None) -> Access:
        """Who may be told that ``path`` failed to index, and why (a restricted file's
        name and the extractor's message count as its text): its indexed version's own set
        where its front matter gave one; else, for a file that can name its own readers
        (Markdown, HTML), the set its bytes ``data`` name
        (:func:`~docgraph.ingest.declared_access.declared_access`), and the index's owner
        only (:data:`NOBODY`) where it was never indexed and not read (too large,
        unreadable: what it says of its readers is unknown); else the set the folder gives
        it (:meth:`of_file`); the index's owner only where that cannot be read or known: a
        broken sidecar or permission source, a file not listed whose POSIX, tag or table
        readers are not known, a mail whose readers are its participants (not
        extracted)."""
        if indexed is not None and ACCESS_KEY in indexed.metadata:
            return indexed.access
        if declares_access(path):
            if data is not None:
                own = declared_access(path, data)
                if own is not None:
                    return own
            elif indexed is None:
                return NOBODY
        entry = self.listed.get(path)
        try:
            if entry is not None:
                found = self.of_file(entry)
            else:
                found = self.rules.access_for(path)
                per_file = (self.posix, self.s3, self.table)  # readers known by listing
                if found is None and any(s is not None for s in per_file):
                    return NOBODY
        except AccessUnreadable:
            return NOBODY
        return NOBODY if found is None and self.mail is not None else found

    def unchanged(self, document: DocumentRecord, entry: FileEntry) -> None:
        """A file not read again: store its new set if the folder changed it (a sidecar
        edited, a chmod; a set its own front matter gives is the file's, unchanged with
        it; a mail's participants are those its extraction stored)."""
        if ACCESS_KEY in document.metadata:
            return
        try:
            wanted = self.of_file(entry, document.metadata)
        except AccessUnreadable:
            wanted = NOBODY  # the caller reports it; the old set must not stand
        if wanted != document.access:
            self.changes[document.id] = wanted

    def withhold(self, document: DocumentRecord | None) -> None:
        """A document whose permission source cannot be read: an indexed one is hidden from
        everyone until it can be read again."""
        if document is not None and document.access != NOBODY:
            self.changes[document.id] = NOBODY


def listed(urn: str, folders: list[str]) -> bool:
    """Whether a folder is among ``folders`` (URNs or paths, ``*`` for every one)."""
    return "*" in folders or any(normalize_urn(f) == urn for f in folders if f != "*")


def folder_access(crawler: FolderCrawler, urn: str, settings: SourcesSettings | None,
                  entries: list[FileEntry]) -> BuildAccess:
    """The permission decisions of one folder's build: its sidecars, and the permission
    sources ``[sources]`` gives the folder (the permissions table; POSIX permissions for
    local and SFTP folders; object tags for S3 folders; mail participants)."""
    if settings is None:
        access = BuildAccess.of_folder(crawler)
        access.listed = {e.relative_path: e for e in entries}
        return access
    scheme = urn_scheme(urn)
    posix = PosixReaders(settings.principal_map, local=scheme == "file") if scheme in (
        "file", "sftp") and listed(urn, settings.posix_permissions) else None
    mail = dict(settings.principal_map) if listed(urn, settings.mail_participants) else None
    s3 = S3Readers(settings.s3_readers_key) if scheme == "s3" and listed(
        urn, settings.s3_permissions) else None
    table: tuple[str, TableReaders | str] | None = None
    if settings.permissions_table is not None:
        try:
            table = (urn, TableReaders.read(settings.permissions_table, urn))
        except PermissionTableUnreadable as exc:
            table = (urn, str(exc))  # every file of the folder fails closed
    access = BuildAccess.of_folder(crawler, posix, mail, s3, table)
    access.listed = {e.relative_path: e for e in entries}
    if posix is not None and scheme == "sftp":
        access.owners = crawler.remote_owners(entries)
    return access
