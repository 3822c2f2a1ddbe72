"""A fusee data directory's own files: the lock, the manifest, and each shard's HEAD.

* ``LOCK``: held with ``fcntl.flock`` (exclusive) for an engine's life, so one
  engine at a time opens a directory.  The OS releases it when the process
  dies, so a killed engine never leaves a stale lock.  It holds the holder's
  pid (information for :class:`fusee.errors.Locked`; the lock is the flock).
* ``MANIFEST``: the layout, written once, atomically, when the directory is
  made: ``{"format":3,"segment_size":N,"shards":N}`` on one line, then
  ``crc32c <8 hex digits>`` of that line.
* ``shard-<n>/HEAD``: the newest segment that may hold records (:class:`Head`),
  rewritten atomically whenever a segment becomes the one written to, before
  any frame goes into it: so a deleted or emptied last segment is seen.

:func:`encode_manifest`, :func:`decode_manifest`, :func:`encode_head` and
:func:`decode_head` are pure; the rest does the I/O.
"""

from __future__ import annotations

import errno
import json
import os
import re
import struct
from typing import NamedTuple

from .crc32c import crc32c
from .disk import Disk
from .errors import Corrupt, Locked, WrongLayout

__all__ = [
    "FORMAT",
    "Manifest",
    "Head",
    "DirLock",
    "lock",
    "encode_manifest",
    "decode_manifest",
    "encode_head",
    "decode_head",
    "open_layout",
    "read_head",
    "write_head",
    "write_manifest",
    "remove_stale_temps",
]

FORMAT = 3  # 2: segments without a size, no manifest, no HEAD (opened and brought to 3)
LOCK_NAME = "LOCK"
MANIFEST_NAME = "MANIFEST"
HEAD_NAME = "HEAD"
_SHARD_DIR = re.compile(r"^shard-(\d+)$")
_HEAD = struct.Struct("<8sQQB")  # magic number base_lsn exists
_HEAD_MAGIC = b"FUSEEHED"
_CRC = struct.Struct("<I")


class Manifest(NamedTuple):
    """A directory's layout: its format version, shard count and segment size."""

    format: int
    shards: int
    segment_size: int


class Head(NamedTuple):
    """Shard HEAD: segment ``number`` begins at ``base_lsn``; ``exists``: it was made (it may hold records).

    ``exists`` is False after a checkpoint deleted every segment: ``number`` is
    then the next segment to make and ``base_lsn`` its first LSN (the
    checkpoint holds every record before it)."""

    number: int
    base_lsn: int
    exists: bool


# ---------------------------------------------------------------------- pure


def encode_manifest(m: Manifest) -> bytes:
    """The manifest file's bytes (pure)."""
    line = json.dumps({"format": m.format, "segment_size": m.segment_size, "shards": m.shards}, separators=(",", ":"))
    body = line.encode()
    return body + b"\n" + f"crc32c {crc32c(body):08x}\n".encode()


def decode_manifest(data: bytes) -> Manifest:
    """The manifest in ``data``; ``ValueError`` saying what is wrong for any damage (pure)."""
    lines = data.split(b"\n")
    if len(lines) != 3 or lines[2] != b"":
        raise ValueError("a manifest is two lines")
    body, check = lines[0], lines[1]
    if check != f"crc32c {crc32c(body):08x}".encode():
        raise ValueError("manifest checksum mismatch")
    try:
        obj = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"manifest is not JSON: {exc}") from None
    if type(obj) is not dict or set(obj) != {"format", "segment_size", "shards"}:
        raise ValueError("manifest fields are format, segment_size, shards")
    for k in obj:
        if type(obj[k]) is not int or obj[k] < 1:
            raise ValueError(f"manifest {k} is not a positive integer")
    return Manifest(obj["format"], obj["shards"], obj["segment_size"])


def encode_head(h: Head) -> bytes:
    """A HEAD file's bytes (pure)."""
    body = _HEAD.pack(_HEAD_MAGIC, h.number, h.base_lsn, 1 if h.exists else 0)
    return body + _CRC.pack(crc32c(body))


def decode_head(data: bytes) -> Head:
    """The HEAD in ``data``; ``ValueError`` for any damage (pure)."""
    if len(data) != _HEAD.size + _CRC.size:
        raise ValueError(f"a HEAD is {_HEAD.size + _CRC.size} bytes, not {len(data)}")
    magic, number, base_lsn, exists = _HEAD.unpack_from(data, 0)
    if magic != _HEAD_MAGIC:
        raise ValueError(f"bad HEAD magic {magic!r}")
    if _CRC.unpack_from(data, _HEAD.size)[0] != crc32c(data[: _HEAD.size]):
        raise ValueError("HEAD checksum mismatch")
    if exists not in (0, 1) or number < 1 or base_lsn < 1:
        raise ValueError("HEAD fields out of range")
    return Head(number, base_lsn, exists == 1)


# ---------------------------------------------------------------------- the lock


class DirLock:
    """An engine's exclusive hold on a data directory (``LOCK``); :meth:`release` gives it up."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        """Give the directory up (idempotent); the OS does it too if the process dies."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # closing the file releases the flock


def lock(path: str) -> DirLock:
    """Take ``path``'s lock (creating the directory if needed); :class:`Locked` naming the holder's pid if
    another engine, in this process or another, holds it.  A refused lock changes nothing on disk."""
    import fcntl

    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(errno.ENOTDIR, "a fusee data directory's path is a file, not a directory", path)
    os.makedirs(path, exist_ok=True)
    p = os.path.join(path, LOCK_NAME)
    fd = os.open(p, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        try:
            held = os.pread(fd, 32, 0)
        finally:
            os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        try:
            pid: int | None = int(held.decode().strip())
        except ValueError:
            pid = None
        raise Locked(path, pid) from None
    try:
        me = f"{os.getpid()}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
    except OSError:
        pass  # the pid is information only: a full disk must not keep the engine from opening
    return DirLock(path, fd)


# ---------------------------------------------------------------------- the layout


def _shard_dirs(path: str) -> list[int]:
    return sorted(int(m.group(1)) for f in os.listdir(path) if (m := _SHARD_DIR.match(f)))


def open_layout(
    path: str, shards: int | None, segment_size: int | None, default_shards: int, default_segment: int
) -> tuple[Manifest, bool]:
    """The directory's layout, checked against the open's ``shards`` and ``segment_size`` (``None``: the
    recorded ones), and whether it must still be written (a new directory, or one of format 2).

    Raises :class:`WrongLayout` for an explicit value that differs from the
    recorded one, :class:`Corrupt` for a damaged or missing manifest.  The
    caller holds the lock.  A new or format-2 directory's manifest is written
    by :func:`write_manifest` once its shards are laid out (so a crash before
    leaves a directory that opens the same way again).
    """
    mp = os.path.join(path, MANIFEST_NAME)
    try:
        with open(mp, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = None
    found = _shard_dirs(path)
    if data is not None:
        try:
            m = decode_manifest(data)
        except ValueError as exc:
            raise Corrupt(mp, 0, f"{exc}: the manifest records the directory's layout; restore it from a backup") from None
        if m.format != FORMAT:
            raise WrongLayout(path, f"format {m.format} is not one this fusee reads ({FORMAT}): open it with the fusee that wrote it")
        if shards is not None and shards != m.shards:
            raise WrongLayout(path, f"it was made with shards={m.shards}, opened with shards={shards}: open it with shards={m.shards} or None")
        if segment_size is not None and segment_size != m.segment_size:
            raise WrongLayout(
                path, f"it was made with segment_size={m.segment_size}, opened with segment_size={segment_size}: pass {m.segment_size} or None"
            )
        stray = [n for n in found if n >= m.shards]
        if stray:
            raise Corrupt(os.path.join(path, f"shard-{stray[0]}"), 0, f"a shard directory beyond the manifest's {m.shards} shards")
        return m, False
    if any(os.path.exists(os.path.join(path, f"shard-{n}", HEAD_NAME)) for n in found):
        raise Corrupt(mp, 0, "the manifest is missing but the shards were written by a fusee that makes one; restore it from a backup")
    if found:  # format 2: shard directories, no manifest
        if found != list(range(len(found))):
            raise Corrupt(path, 0, f"shard directories {found} are not shard-0 .. shard-{len(found) - 1}")
        if shards is not None and shards != len(found):
            raise WrongLayout(path, f"it holds {len(found)} shards, opened with shards={shards}: open it with shards={len(found)} or None")
        n = len(found)
    else:
        n = default_shards if shards is None else shards
    if type(n) is not int or n < 1:
        raise ValueError(f"shards must be a positive int or None, not {shards!r}")
    return Manifest(FORMAT, n, default_segment if segment_size is None else segment_size), True


def write_manifest(path: str, m: Manifest, disk: Disk) -> None:
    """Write ``path``'s manifest atomically (temp file, sync, rename, sync the directory)."""
    disk.write_atomically(os.path.join(path, MANIFEST_NAME), encode_manifest(m))


# ---------------------------------------------------------------------- HEAD


def read_head(shard_dir: str) -> Head | None:
    """Shard directory ``shard_dir``'s HEAD (None if it has none); :class:`Corrupt` if it is damaged."""
    p = os.path.join(shard_dir, HEAD_NAME)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return decode_head(data)
    except ValueError as exc:
        raise Corrupt(p, 0, f"{exc}: HEAD names the shard's newest segment") from None


def write_head(shard_dir: str, h: Head, disk: Disk) -> None:
    """Rewrite ``shard_dir``'s HEAD atomically."""
    disk.write_atomically(os.path.join(shard_dir, HEAD_NAME), encode_head(h))


def remove_stale_temps(path: str, shards: int) -> None:
    """Delete ``.tmp`` files a crash or a failed write left in ``path`` and its shard directories."""
    dirs = [path] + [os.path.join(path, f"shard-{n}") for n in range(shards)]
    for d in dirs:
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for f in names:
            if f.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(d, f))
                except FileNotFoundError:
                    pass
