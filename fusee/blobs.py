"""Payload offload, the files: one shard's blob area, ``<data dir>/blobs/<shard>/<name>``.

:mod:`fusee.blob_refs` decides what goes to a blob and how a record refers to
it; this is where the blobs live.  Each blob is a file named by the SHA-256 of
its content (so the same content is stored once per shard), written to
``<name>.tmp``, ``fsync``ed and renamed, and the directory ``fsync``ed once for
the whole batch, before the journal writes the frames that refer to them
(:mod:`fusee.group_commit`) or a checkpoint that does (:mod:`fusee.store`): a
record on disk never refers to a blob that is not.  Every file operation goes
through the journal's :class:`fusee.disk.Disk`, so a full disk fails the flush
with :class:`fusee.errors.StorageFull` and nothing is recorded.

Reading (:meth:`BlobStore.read`) checks the content against its name and size:
a blob missing or damaged is :class:`fusee.errors.Corrupt` naming the file,
never a wrong value.  :meth:`BlobStore.collect`, after a checkpoint, deletes
every blob no live record refers to (those of runs the checkpoint dropped,
orphans a crash or a failed flush left) and any temp file.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from . import blob_refs as _refs
from .disk import Disk
from .errors import Corrupt

__all__ = ["BlobStore", "blob_dir", "reader"]

DIR = "blobs"


def blob_dir(root: str, shard: int) -> str:
    """The blob directory of shard ``shard`` of the data directory ``root``."""
    return os.path.join(root, DIR, str(shard))


def reader(root: str, shard: int) -> Any:
    """A ``load(name, size)`` for :func:`fusee.blob_refs.join` that only reads (no store, no lock): for
    :mod:`fusee.inspection` and :mod:`fusee.store`'s loading."""
    d = blob_dir(root, shard)
    return lambda name, size: read_checked(os.path.join(d, name), name, size)


def read_checked(path: str, name: str, size: int) -> bytes:
    """The content of blob file ``path``, checked against its ``name`` (SHA-256) and ``size``;
    :class:`Corrupt` naming the file if it is missing, unreadable or damaged."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise Corrupt(path, 0, f"blob {name} ({size} bytes) that a record refers to is missing") from None
    except OSError as exc:
        raise Corrupt(path, 0, f"blob {name} cannot be read: {exc}") from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != name:
        raise Corrupt(path, 0, f"blob {name} is damaged: {len(data)} bytes (want {size}) whose checksum does not match its name")
    return data


class BlobStore:
    """One shard's blob area: writing (before the records that refer to them), reading, collecting.

    ``threshold``: payloads encoded over this many bytes go to blobs (None: none do; blobs already there
    are still read).  ``logged``: each blob a log record refers to, to the last such LSN (recovered at
    open, extended by each flush); ``checkpointed``: the blobs of the checkpoint this process wrote last
    and its LSN.  Touched by the holder of the shard's flush turn, or with the shard stopped."""

    def __init__(self, root: str, shard: int, disk: Disk, threshold: int | None) -> None:
        self.root = root
        self.shard = shard
        self.dir = blob_dir(root, shard)
        self.disk = disk
        self.threshold = threshold
        self.durable: set[str] = set()  # blobs known to be on disk, renamed and their directory synced
        self.logged: dict[str, int] = {}
        self.checkpointed: tuple[int, set[str]] | None = None
        self.written = 0  # blob files written by this process (not deduplicated away)
        self._made = False

    def path(self, name: str) -> str:
        """The file of blob ``name``."""
        return os.path.join(self.dir, name)

    def read(self, name: str, size: int) -> bytes:
        """Blob ``name``'s content, checked (:func:`read_checked`); :class:`Corrupt` naming the file."""
        data = read_checked(self.path(name), name, size)
        self.durable.add(name)
        return data

    def _make_dir(self) -> None:
        """Create ``blobs/<shard>`` (and ``blobs``) durably, once."""
        if self._made:
            return
        top = os.path.dirname(self.dir)
        new_top, new_dir = not os.path.isdir(top), not os.path.isdir(self.dir)
        self.disk.mkdir(self.dir)
        if new_top:
            self.disk.fsync_dir(self.root)
        if new_dir or new_top:
            self.disk.fsync_dir(top)
        self._made = True

    def put(self, blobs: list[tuple[str, bytes]]) -> None:
        """Make each ``(name, content)`` durable (a blob already there is not written again), then sync the
        directory once.  ``OSError`` as the disk raises it (a temp file is removed; a blob renamed before
        the failure stays, an orphan the next :meth:`collect` removes unless a record comes to need it)."""
        todo = [(n, c) for n, c in blobs if n not in self.durable]
        if not todo:
            return
        self._make_dir()
        disk = self.disk
        for name, content in todo:
            final = self.path(name)
            if os.path.exists(final):
                continue  # renamed only once whole and synced: the directory sync below makes it durable
            disk.write_whole(final, content)  # the directory sync below, once, makes them durable
            self.written += 1
        disk.fsync_dir(self.dir)
        self.durable.update(n for n, _ in todo)

    def split(self, body: bytes) -> tuple[bytes, list[tuple[str, bytes]]]:
        """:func:`fusee.blob_refs.split` at this store's threshold."""
        return _refs.split(body, self.threshold)

    def join(self, body: bytes) -> bytes:
        """:func:`fusee.blob_refs.join` reading this store's blobs (:class:`Corrupt` naming a missing or
        damaged blob's file)."""
        return _refs.join(body, self.read)

    def note_logged(self, lsn: int, body: bytes) -> None:
        """Remember the blobs log record ``body`` at ``lsn`` refers to (for :meth:`collect`)."""
        for name in _refs.refs(body):
            if self.logged.get(name, 0) < lsn:
                self.logged[name] = lsn

    def collect(self, after: int) -> int:
        """After this process wrote a checkpoint at LSN ``after`` (``checkpointed``): delete every blob
        neither it nor a log record after it refers to, and every temp file; sync the directory.  Returns
        how many files went (0, touching nothing, if no checkpoint at ``after`` was written here)."""
        if self.checkpointed is None or self.checkpointed[0] != after:
            return 0
        try:
            files = os.listdir(self.dir)
        except FileNotFoundError:
            return 0
        keep = _refs.live(self.checkpointed[1], self.logged, after)
        gone = _refs.garbage(files, keep)
        for f in gone:
            self.disk.unlink(os.path.join(self.dir, f))
            self.durable.discard(f)
        self.logged = {n: lsn for n, lsn in self.logged.items() if lsn > after}
        if gone:
            self.disk.fsync_dir(self.dir)
        return len(gone)
