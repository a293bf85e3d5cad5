"""Change tokens: the cheapest per-scheme signal that a remote file may have changed.

A token is compared with the one stored for the document; equal tokens mean the body is not
fetched at all. Whatever the token says, a fetched body is hashed and only a changed content
hash is re-extracted and re-embedded, so a token may err towards "changed" but never towards
"unchanged". Three rules keep it on that side:

* ``etag`` (S3 and other object stores): the object's entity tag plus its size.
* ``mtime``: modification time plus size. Schemes whose listings carry whole seconds only
  (SFTP v3, FTP ``MLSD``) cannot tell two writes in the same second apart, so a file modified
  within :data:`RACY_WINDOW_SECONDS` of the listing gets an ``unsettled`` token that never
  equals any other: it is re-read (and re-hashed) until its timestamp is old enough to trust.
  This is git's "racy clean" rule; it assumes the server's clock is within that window of ours.
* a listing with neither (``size`` only) cannot notice a same-size edit, so it is always
  ``unsettled``: the body is read on every build and the content hash decides.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal["etag", "mtime", "unsettled"]

#: Schemes whose listings give modification times in whole seconds (or coarser).
COARSE_MTIME_SCHEMES = frozenset({"sftp", "ssh", "ftp"})
#: How recent (seconds before the listing) a coarse timestamp must not be to be trusted.
RACY_WINDOW_SECONDS = 2.0

_ETAG_KEYS = ("ETag", "etag", "e_tag")
_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "modify", "modified", "last_mod")


@dataclass(frozen=True, slots=True)
class ChangeToken:
    """What a listing says about one file, encoded as the string stored per document."""

    kind: ChangeKind
    value: str
    size: int

    def encode(self) -> str:
        """The stored form; equal strings mean "unchanged, do not fetch"."""
        return f"{self.kind}:{self.value}:{self.size}"

    @property
    def trusted(self) -> bool:
        """Whether an equal stored token may skip fetching the body."""
        return self.kind in ("etag", "mtime")


def _epoch(value: Any) -> float | None:
    """Seconds since the epoch for the timestamp shapes fsspec listings use, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) / 1000.0 if value > 1e11 else float(value)  # ms (hdfs) or s
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return float(value.timestamp())
    if isinstance(value, str):
        text = value.strip()
        for fmt in ("%Y%m%d%H%M%S", "%Y%m%d%H%M%S.%f"):  # FTP MLSD 'modify' facts (UTC)
            try:
                return float(calendar.timegm(time.strptime(text, fmt)))
            except ValueError:
                continue
        try:
            return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def change_token(
    info: dict[str, Any], scheme: str = "", listed_at: float | None = None
) -> ChangeToken:
    """The change token of one fsspec ``info`` entry listed at ``listed_at`` (epoch seconds)."""
    size = int(info.get("size") or 0)
    for key in _ETAG_KEYS:
        if info.get(key):
            return ChangeToken("etag", str(info[key]).strip('"'), size)
    for key in _MTIME_KEYS:
        raw = info.get(key)
        if raw is None:
            continue
        if scheme in COARSE_MTIME_SCHEMES:
            seconds = _epoch(raw)
            now = time.time() if listed_at is None else listed_at
            if seconds is None or seconds >= now - RACY_WINDOW_SECONDS:
                return ChangeToken("unsettled", f"{raw}:{uuid.uuid4().hex}", size)
        return ChangeToken("mtime", str(raw), size)
    return ChangeToken("unsettled", uuid.uuid4().hex, size)
