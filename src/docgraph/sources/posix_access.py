"""Who may read a file by its POSIX owner, group, mode bits and access control list (a
local folder's files; an SFTP folder's by owner, group and mode, the protocol carrying no
ACL, its owners named by number unless ``principal_map`` names them).

For a folder listed in ``[sources] posix_permissions``, a file readable by others
(``o+r``) is readable by everyone the namespace is granted to; otherwise its readers are its
owner (if ``u+r``), its group (if ``g+r``) and, where the file system keeps a POSIX ACL, the
users and groups its named entries let read (each masked by the ACL's mask, as the kernel
masks them). A file nobody of these may read gets an empty set: nobody. Permissions on the
folders above a file are not taken into account: the file's own bits and ACL decide.

Owners and groups become principals through ``[sources] principal_map`` (``uid:1001`` or
``user:jdoe`` -> ``user:john.doe@example.com``, ``gid:2000`` or ``group:staff`` ->
``group:finance``), else by their names on this machine (``user:<name>``,
``group:<name>``), else by number (``user:1001``, ``group:2000``). A folder's default ACL
is the ACL its new files get, so reading each file's own ACL is what inheritance gives.

The ACL is read from the ``system.posix_acl_access`` extended attribute in the kernel's
format (``acl_ea.h``: a version word, then 8-byte entries of tag, permissions and id); a
library such as pylibacl needs libacl's headers to build, which a fresh machine lacks.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from docgraph.errors import DocgraphError
from docgraph.model import GROUP_PREFIX, USER_PREFIX, Access

#: The extended attribute holding a file's access ACL, and its format's version.
ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_HEADER, _ENTRY = struct.Struct("<I"), struct.Struct("<HHI")
# entry tags (acl_ea.h)
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_READ = 0x04


class PermissionsUnreadable(DocgraphError):
    """A file's POSIX permissions could not be read; the message says which and why."""


@dataclass(frozen=True)
class AclEntry:
    """One entry of a POSIX ACL: its tag, permission bits and (for named users and
    groups) the id it names."""

    tag: int
    perm: int
    id: int


def parse_acl(raw: bytes) -> list[AclEntry]:
    """The entries of a ``system.posix_acl_access`` value; raises :class:`ValueError` on
    anything but the kernel's format."""
    if len(raw) < _HEADER.size or (len(raw) - _HEADER.size) % _ENTRY.size:
        raise ValueError(f"an ACL of {len(raw)} bytes is not a whole number of entries")
    (version,) = _HEADER.unpack_from(raw)
    if version != _ACL_VERSION:
        raise ValueError(f"ACL format version {version}, expected {_ACL_VERSION}")
    return [AclEntry(*_ENTRY.unpack_from(raw, offset))
            for offset in range(_HEADER.size, len(raw), _ENTRY.size)]


class PosixReaders:
    """Readers of local files by their owner, group, mode and ACL (see the module
    docstring), principals named through ``principal_map``."""

    def __init__(self, principal_map: Mapping[str, str] | None = None, *,
                 local: bool = True) -> None:
        self.principal_map = dict(principal_map or {})
        #: Whether owners are this machine's (a local folder): their names here then name
        #: them; a remote server's ids mean nothing here and are named by number.
        self.local = local
        self._users: dict[int, str] = {}
        self._groups: dict[int, str] = {}

    def user(self, uid: int) -> str:
        """The principal of a user id."""
        return self._principal(uid, "uid", USER_PREFIX, self._users,
                               lambda n: pwd.getpwuid(n).pw_name)

    def group(self, gid: int) -> str:
        """The principal of a group id."""
        return self._principal(gid, "gid", GROUP_PREFIX, self._groups,
                               lambda n: grp.getgrgid(n).gr_name)

    def _principal(self, number: int, kind: str, prefix: str, known: dict[int, str],
                   name_of: Callable[[int], str]) -> str:
        """``principal_map``'s entry for the id (``uid:<n>``/``gid:<n>``) or for its name
        here, else ``<prefix><name>``, else ``<prefix><number>``; each id looked up once."""
        found = known.get(number)
        if found is None:
            try:
                name: str | None = name_of(number) if self.local else None
            except KeyError:
                name = None
            found = (self.principal_map.get(f"{kind}:{number}")
                     or (name is not None and self.principal_map.get(prefix + name))
                     or prefix + (name if name is not None else str(number)))
            known[number] = found
        return found

    def readers(self, path: str, mode: int, uid: int, gid: int) -> Access:
        """Who may read the file at ``path`` with the given mode, owner and group (as
        listed); raises :class:`PermissionsUnreadable` when its ACL cannot be read."""
        if mode & stat.S_IROTH:
            return None
        acl = self._acl(path) if self.local else []  # SFTP carries no ACLs
        if not acl:
            readers = ({self.user(uid)} if mode & stat.S_IRUSR else set()) | \
                ({self.group(gid)} if mode & stat.S_IRGRP else set())
            return frozenset(readers)
        mask = next((e.perm for e in acl if e.tag == _MASK), 0x07)
        readers = set()
        for entry in acl:
            if entry.tag == _USER_OBJ and entry.perm & _READ:
                readers.add(self.user(uid))
            elif entry.tag == _USER and entry.perm & mask & _READ:
                readers.add(self.user(entry.id))
            elif entry.tag == _GROUP_OBJ and entry.perm & mask & _READ:
                readers.add(self.group(gid))
            elif entry.tag == _GROUP and entry.perm & mask & _READ:
                readers.add(self.group(entry.id))
        return frozenset(readers)

    @staticmethod
    def _acl(path: str) -> list[AclEntry]:
        try:
            raw = os.getxattr(path, ACL_XATTR, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                return []  # no ACL beyond the mode bits, or a file system without ACLs
            raise PermissionsUnreadable(
                f"cannot read the ACL of {path}: {exc.strerror or exc}") from exc
        try:
            return parse_acl(raw)
        except ValueError as exc:
            raise PermissionsUnreadable(f"the ACL of {path} is unreadable: {exc}") from exc
