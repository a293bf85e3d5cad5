"""A file of named numpy arrays plus a JSON header, written crash-safely and memory-mapped
when read: the persisted copy of the embedded chunk index's in-memory arrays (see
:mod:`docgraph.store.sqlite.index`), so opening a large index maps them instead of
re-reading and re-encoding every chunk row of the catalog.

Layout: ``MAGIC``, the header's length (8 bytes, little endian), the header (UTF-8 JSON:
the caller's ``meta`` and, per array, its dtype, shape, offset and the rows of room it has),
the arrays (each at a 64-byte aligned offset, followed by its room: a hole in the file, which
takes no disk space and reads as zeros), then ``TRAILER`` and the CRC-32 of the header. An
array is mapped with its room, so rows appended after opening are written into the private
(copy-on-write) mapping in place: only the pages they touch take memory, and nothing is
copied until the room is used up. A reader accepts the
file only if both magics are in place, the CRC matches and the size is exactly what the header
describes, so a truncated or partially written file (or any other file) is rejected, never
half-used. Writes go to a temporary file in the same folder, are fsynced, then renamed over
the old file (and the folder fsynced): a crash leaves the old file or the new one.

The arrays' contents are not checksummed (that would mean reading every byte at open, which
mapping avoids); the caller validates their structure cheaply (:mod:`docgraph.store.rows`).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"DGIDX\x00\x01\n"
TRAILER = b"DGIDXEND"
ALIGN = 64


class SidecarError(Exception):
    """The file is missing, truncated, corrupt or not a sidecar."""


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def write_arrays(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray],
                 room: dict[str, int] | None = None) -> int:
    """Write ``arrays`` with ``meta`` (JSON-serialisable) to ``path`` crash-safely, each
    array followed by room for ``room[name]`` rows in all (at least its own; none when not
    given); returns the file's apparent size in bytes (the room is a hole, not written)."""
    layout: dict[str, dict[str, Any]] = {}
    offset = 0
    for name, array in arrays.items():
        rows = max(len(array), (room or {}).get(name, 0)) if array.ndim else 0
        layout[name] = {"dtype": array.dtype.str, "shape": list(array.shape),
                        "rows": rows, "offset": offset}
        row_bytes = array.dtype.itemsize * int(np.prod(array.shape[1:])) if array.ndim else 0
        offset = _aligned(offset + max(array.nbytes, rows * row_bytes))
    _remove_abandoned(path)
    header = json.dumps({"meta": meta, "arrays": layout, "data_bytes": offset}).encode()
    start = _aligned(len(MAGIC) + 8 + len(header))
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary new file (mkstemp makes it 0600)
        with os.fdopen(fd, "wb") as out:
            out.write(MAGIC + struct.pack("<Q", len(header)) + header)
            for name, array in arrays.items():  # padding and room are left as holes
                out.seek(start + layout[name]["offset"])
                if array.nbytes:
                    out.write(np.ascontiguousarray(array).data)
            out.seek(start + offset)
            out.write(TRAILER + struct.pack("<I", zlib.crc32(header)))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return start + offset + len(TRAILER) + 4


def read_arrays(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(meta, arrays memory-mapped copy-on-write) of a file written by :func:`write_arrays`;
    each array has the rows of room it was written with (zeros past its own rows).

    Raises :class:`SidecarError` when the file is absent or is not a complete sidecar."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(len(MAGIC) + 8)
            if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
                raise SidecarError(f"{path}: not a chunk index sidecar")
            (length,) = struct.unpack("<Q", head[len(MAGIC):])
            if length > size:
                raise SidecarError(f"{path}: truncated header")
            header_bytes = f.read(length)
            f.seek(max(0, size - len(TRAILER) - 4))
            tail = f.read(len(TRAILER) + 4)
    except OSError as exc:
        raise SidecarError(f"{path}: {exc}") from exc
    if (len(tail) != len(TRAILER) + 4 or tail[: len(TRAILER)] != TRAILER
            or struct.unpack("<I", tail[len(TRAILER):])[0] != zlib.crc32(header_bytes)):
        raise SidecarError(f"{path}: incomplete or corrupt (trailer)")
    try:
        header = json.loads(header_bytes)
        start = _aligned(len(MAGIC) + 8 + length)
        if size != start + int(header["data_bytes"]) + len(TRAILER) + 4:
            raise SidecarError(f"{path}: size does not match its header")
        arrays: dict[str, np.ndarray] = {}
        for name, spec in header["arrays"].items():
            shape = tuple(int(x) for x in spec["shape"])
            if shape:  # mapped with its room: rows past shape[0] read as zeros
                shape = (max(shape[0], int(spec.get("rows", 0))), *shape[1:])
            dtype = np.dtype(spec["dtype"])
            if int(np.prod(shape)) == 0:
                arrays[name] = np.zeros(shape, dtype=dtype)
            else:
                mapped = np.memmap(path, dtype=dtype, mode="c", shape=shape,
                                   offset=start + int(spec["offset"]))
                _read_ahead(mapped)
                arrays[name] = mapped
        return dict(header["meta"]), arrays
    except (ValueError, KeyError, TypeError) as exc:
        raise SidecarError(f"{path}: corrupt header ({exc})") from exc


# A temporary file older than this was left by a writer that was killed.
ABANDONED_AFTER_S = 3600.0


def _remove_abandoned(path: Path) -> None:
    now = time.time()
    for tmp in path.parent.glob(path.name + ".*.tmp"):
        try:
            if now - tmp.stat().st_mtime > ABANDONED_AFTER_S:
                tmp.unlink()
        except OSError:
            pass


def _umask() -> int:
    """The process's umask, read without setting it (``os.umask`` would change it for every
    thread for a moment); 022 where ``/proc`` does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _read_ahead(mapped: np.memmap) -> None:
    """Ask the kernel to read the mapped file range in the background (``MADV_WILLNEED``),
    so a cold open's first queries find fewer pages on disk; nothing where unsupported."""
    region = getattr(mapped, "_mmap", None)
    advice = getattr(mmap, "MADV_WILLNEED", None)
    if region is not None and advice is not None:
        with contextlib.suppress(OSError, ValueError):
            region.madvise(advice)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
