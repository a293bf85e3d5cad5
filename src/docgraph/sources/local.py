"""Local folders, walked and read without ever following a symlink.

A symlink may point anywhere (out of the folder, at itself), a FIFO blocks whoever opens
it, and a socket or device is no document: only regular files are listed and read. The
others are reported with the reason they were skipped, so an admin can see why a file is
missing. Each folder is opened relative to its parent with ``O_NOFOLLOW``, at listing and
again at reading, so a name swapped for a symlink in between is refused too, and paths
longer than ``PATH_MAX`` still work. Names that are not UTF-8 come back with surrogate
escapes (:func:`os.fsdecode`), which every :mod:`os` function accepts.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from docgraph.errors import FileSkipped, SourceFileVanished
from docgraph.sources.access_rules import SIDECAR_NAME

#: Folders nested deeper than this are not descended (each level holds one open
#: descriptor while its subfolders are walked); they are reported instead.
MAX_FOLDER_DEPTH = 100

SYMLINK_REASON = "skipped: symlink (not followed)"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO put in a file's place after the listing must not block the open.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISDIR, "folder"),
)


def file_type(name: str) -> str:
    """How a file left out by ``loader.include`` is counted: ``*.rst`` by its (lower-case)
    extension, or ``no extension``."""
    extension = posixpath.splitext(name.lower())[1]
    return f"*{extension}" if extension else "no extension"


def skip_reason(mode: int) -> str:
    """Why an entry of this ``st_mode`` is not indexed, as recorded for it."""
    if stat.S_ISLNK(mode):
        return SYMLINK_REASON
    kind = next((name for test, name in _KINDS if test(mode)), "special file")
    return f"skipped: {kind} (not a regular file)"


@dataclass
class LocalListing:
    """One walk of a folder: regular files with their ``lstat``, entries skipped with their
    reason, subfolders that could not be walked (what was indexed below them stays), and
    the regular files whose names were not wanted, counted by :func:`file_type`."""

    files: list[tuple[str, os.stat_result]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    unlisted: list[tuple[str, str]] = field(default_factory=list)
    not_wanted: Counter[str] = field(default_factory=Counter)
    #: The permission sidecars (hidden files named :data:`SIDECAR_NAME`) met on the way.
    sidecars: list[tuple[str, os.stat_result]] = field(default_factory=list)


def walk(root: str, wanted: Callable[[str], bool]) -> LocalListing:
    """Every regular file below ``root`` whose name is ``wanted``, in path order.

    Hidden names (a leading dot: ``.git``, the index itself) are neither listed nor
    reported nor counted, except permission sidecars (:attr:`LocalListing.sidecars`).
    Non-regular entries are reported when a regular file of that name would have been
    indexed, and symlinks to folders always (a folder would have been walked).
    Raises :class:`OSError` when ``root`` itself cannot be opened.
    """
    listing = LocalListing()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _walk(fd, "", 0, wanted, listing)
    finally:
        os.close(fd)
    listing.files.sort(key=lambda item: item[0])
    listing.skipped.sort()
    listing.unlisted.sort()
    return listing


def _walk(dir_fd: int, prefix: str, depth: int, wanted: Callable[[str], bool],
          listing: LocalListing) -> None:
    with os.scandir(dir_fd) as found:
        entries = list(found)
    for entry in entries:
        name = entry.name
        if name.startswith("."):
            if name == SIDECAR_NAME:
                _note_sidecar(entry, prefix + name, listing)
            continue
        relative = prefix + name
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed since the folder was read: not part of this listing
        except OSError as exc:
            listing.skipped.append((relative, f"skipped: cannot stat ({_describe(exc)})"))
            continue
        mode = info.st_mode
        if stat.S_ISREG(mode):
            if wanted(name):
                listing.files.append((relative, info))
            else:
                listing.not_wanted[file_type(name)] += 1
        elif stat.S_ISDIR(mode):
            _walk_child(dir_fd, name, relative, depth, wanted, listing)
        elif wanted(name) or (stat.S_ISLNK(mode) and _is_folder(name, dir_fd)):
            listing.skipped.append((relative, skip_reason(mode)))


def _note_sidecar(entry: os.DirEntry[str], relative: str, listing: LocalListing) -> None:
    """Keep a permission sidecar met while walking (a regular file only, like a
    document)."""
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        info = None
    if info is not None and stat.S_ISREG(info.st_mode):
        listing.sidecars.append((relative, info))
    else:  # a link or a folder of that name: the rules it would hold cannot be read
        listing.sidecars.append((relative, os.stat_result((0,) * 10)))


def _walk_child(dir_fd: int, name: str, relative: str, depth: int,
                wanted: Callable[[str], bool], listing: LocalListing) -> None:
    if depth + 1 > MAX_FOLDER_DEPTH:
        listing.unlisted.append(
            (relative, f"skipped: folder nested more than {MAX_FOLDER_DEPTH} levels deep"))
        return
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        reason = SYMLINK_REASON if exc.errno == errno.ELOOP else \
            f"skipped: folder cannot be read ({_describe(exc)})"
        listing.unlisted.append((relative, reason))
        return
    try:
        _walk(child, relative + "/", depth + 1, wanted, listing)
    except OSError as exc:
        listing.unlisted.append((relative, f"skipped: folder cannot be read ({_describe(exc)})"))
    finally:
        os.close(child)


def _is_folder(name: str, dir_fd: int) -> bool:
    """Whether the symlink ``name`` points at a folder (its target's type only; a loop or a
    dangling link is no folder)."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def read_regular(root: str, relative: str, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``relative`` below ``root``, no symlink followed.

    Raises :class:`SourceFileVanished` when it (or a folder on its path) is gone, and
    :class:`FileSkipped` with the reason when it is no longer a regular file or holds more
    than ``max_bytes``.
    """
    parts = relative.split("/")
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
            file_fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise SourceFileVanished(f"{relative}: vanished during the crawl") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileSkipped(SYMLINK_REASON) from exc
        if exc.errno == errno.ENXIO:
            raise FileSkipped("skipped: socket (not a regular file)") from exc
        raise
    try:
        mode = os.fstat(file_fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileSkipped(skip_reason(mode))
        with os.fdopen(file_fd, "rb", closefd=False) as handle:
            data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    finally:
        os.close(file_fd)
    if max_bytes is not None and len(data) > max_bytes:
        raise FileSkipped(f"too large: file grew past {max_bytes} bytes "
                          "(loader.max_file_bytes) after it was listed")
    return data


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
