"""Folder URN normalization: one folder, one spelling, so it never registers twice.

Document identity is derived from the folder URN plus the relative path, so an
unnormalized duplicate spelling of a folder would index everything a second time.
"""

from __future__ import annotations

import posixpath
import unicodedata
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from docgraph.errors import SourceError

SUPPORTED_SCHEMES = ("file", "s3", "sftp", "ftp", "hdfs")
DEFAULT_PORTS = {"sftp": 22, "ftp": 21, "hdfs": 8020}
# RFC 3986 path characters that never need escaping; everything else is percent-encoded.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


def name_bytes(name: str) -> bytes:
    """The bytes of a file name as the filesystem holds them.

    Names that are not valid UTF-8 are listed with surrogate escapes (:func:`os.fsdecode`);
    they turn back into their raw bytes here instead of failing to encode.
    """
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no escape produced
        return name.encode("utf-8", "surrogatepass")


def escape_name(name: str) -> str:
    """The relative path as stored and shown: ``name`` itself when it is valid Unicode.

    A name holding bytes that are not UTF-8 cannot be stored as text; its undecodable bytes
    and its ``%`` signs are percent-encoded (``bad\\xffname.md`` becomes ``bad%FFname.md``),
    so :func:`urllib.parse.unquote_to_bytes` gives the raw name back.
    """
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    # Decoding the raw bytes again leaves each undecodable byte as one U+DC80..U+DCFF.
    text = name_bytes(name).decode("utf-8", "surrogateescape")
    return "".join(
        f"%{ord(c) - 0xDC00:02X}" if "\udc80" <= c <= "\udcff" else "%25" if c == "%" else c
        for c in text
    )


def _quote_path(path: str) -> str:
    """Percent-encode an already *decoded* path canonically (NFC, upper-case hex digits).

    Must not be given a percent-encoded path: decoding twice would make ``a%2520b`` (a name
    containing ``%20``) and ``a b`` the same folder. Bytes that are not UTF-8 (surrogate
    escapes, see :func:`name_bytes`) are encoded as themselves, so the result decodes back
    to the raw name.
    """
    return quote(name_bytes(unicodedata.normalize("NFC", path)), safe=_PATH_SAFE)


def _strip_trailing_slash(path: str) -> str:
    return path.rstrip("/") or "/"


def normalize_urn(urn_or_path: str | Path) -> str:
    """Return the canonical URN for a folder given as a URN or a local path.

    Local paths and ``file:`` URNs become ``file:///absolute/resolved/path``. For every
    scheme: scheme and host are lower-cased, credentials and default ports are dropped,
    ``.``/``..`` segments are resolved, percent-encoding is made canonical and the trailing
    slash is removed. Raises :class:`SourceError` naming the input for an unsupported scheme
    or a URN with no path/host where one is required.
    """
    raw = str(urn_or_path).strip()
    if not raw:
        raise SourceError("empty folder URN")
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    # 'C:\\x' style drive letters parse as a one-letter scheme; treat as local paths.
    if scheme == "" or len(scheme) == 1:
        return _file_urn(Path(raw))
    if scheme not in SUPPORTED_SCHEMES:
        raise SourceError(
            f"unsupported folder URN scheme {scheme!r} in {raw!r}; "
            f"supported: {', '.join(SUPPORTED_SCHEMES)}"
        )
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise SourceError(f"file URN must not name a remote host: {raw!r}")
        return _file_urn(Path(unquote(parts.path)))
    host = (parts.hostname or "").lower()
    if not host:
        raise SourceError(f"{scheme} URN needs a host (or bucket): {raw!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise SourceError(f"invalid port in URN {raw!r}") from exc
    netloc = f"[{host}]" if ":" in host else host  # IPv6 literals keep their brackets
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        netloc = f"{netloc}:{port}"
    path = posixpath.normpath("/" + unquote(parts.path).lstrip("/")) if parts.path else "/"
    path = _strip_trailing_slash(_quote_path(path))
    if path == "/":
        path = ""
    return urlunsplit((scheme, netloc, path, "", ""))


def _file_urn(path: Path) -> str:
    resolved = path.expanduser().resolve()
    return "file://" + _strip_trailing_slash(_quote_path(resolved.as_posix()))


def document_id(folder_urn: str, relative_path: str) -> str:
    """The stable identity of a document: normalized folder URN + canonical relative path.

    ``relative_path`` is a real (decoded) file path as the crawler lists it, not a URL path;
    a name that is not UTF-8 (surrogate escapes) gets its raw bytes percent-encoded, so the
    id is stable and :func:`urllib.parse.unquote_to_bytes` of its path gives the name back.
    """
    rel = posixpath.normpath(relative_path.replace("\\", "/")).lstrip("/")
    if rel in ("", ".", "..") or rel.startswith("../"):
        raise SourceError(f"invalid relative path {relative_path!r} under {folder_urn}")
    return f"{folder_urn}/{_quote_path(rel)}"
