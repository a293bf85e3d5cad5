"""Who may read an S3 object, from a tag or a user-metadata entry naming its readers.

For a bucket folder listed in ``[sources] s3_permissions``, each object's tag ``<key>``
(``[sources] s3_readers_key``, default ``docgraph-readers``), else its user metadata entry
of that name (``x-amz-meta-docgraph-readers``), lists who may read it: principals
``user:<id>`` and ``group:<name>`` separated by commas or spaces (tag values may not hold
commas), e.g. ``group:finance user:alice``. An object with neither keeps the namespace's rule;
an empty value lets nobody read it; a value naming anything but principals, or an object
whose tags or metadata cannot be read, fails closed. Tags and metadata are read for every
object at every build (an object's ETag does not change when its tags do), so a revocation
takes effect at the next refresh without the object being read again.
"""

from __future__ import annotations

import re
from typing import Any

from docgraph.model import Access, parse_principals
from docgraph.sources.posix_access import PermissionsUnreadable

#: The tag (and user metadata entry) naming an object's readers, unless configured.
DEFAULT_READERS_KEY = "docgraph-readers"
_SEPARATORS = re.compile(r"[,\s]+")


def parse_readers(value: str) -> frozenset[str]:
    """The principals of a tag or metadata value (``group:a, user:b`` or ``group:a user:b``);
    raises :class:`ValueError` naming a value that is not one."""
    return parse_principals([p for p in _SEPARATORS.split(value.strip()) if p])


class S3Readers:
    """Readers of S3 objects by a tag or user-metadata entry (see the module docstring)."""

    def __init__(self, key: str = DEFAULT_READERS_KEY) -> None:
        self.key = key

    def readers(self, fs: Any, path: str) -> Access:
        """Who may read the object at ``path`` (``bucket/key``) of the s3fs file system
        ``fs``; raises :class:`PermissionsUnreadable`."""
        try:
            tags = fs.get_tags(path)
            value = tags.get(self.key)
            if value is None:
                value = fs.metadata(path).get(self.key)
        except Exception as exc:  # the server's error, whatever the client raises
            raise PermissionsUnreadable(
                f"cannot read the tags or metadata of s3://{path}: {exc}") from exc
        if value is None:
            return None
        try:
            return parse_readers(str(value))
        except ValueError as exc:
            raise PermissionsUnreadable(f"s3://{path}: {self.key}: {exc}") from exc
