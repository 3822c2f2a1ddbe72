"""Checkpoint files: a shard's run table at one LSN, so an open replays nothing from the log before it.

A clean :meth:`fusee.Engine.shutdown` writes, per shard, two copies
(``shard-<n>/checkpoint-1.ckpt`` and ``checkpoint-2.ckpt``: one damaged copy
loses nothing) of the same content, then deletes the log segments wholly at or
before the checkpoint's LSN (:meth:`fusee.journal.Journal.delete_before`).
Format (little-endian; nothing is ever unpickled)::

    header  = magic "FUSEECKP" version:u32 shard:u32 lsn:u64 next_run:u64 count:u64 crc:u32
              (crc = CRC32C of the 40 bytes before it)
    frames  = count frames of fusee.segment: len:u32 crc:u32 lsn:u64 batch:u32 body[len]
              (body: a record's canonical encoding, at the LSN it was journaled; batch: the frame's index)
    trailer = "FUSEEEND" crc:u32        (CRC32C of every byte before the trailer)

The frames hold every unfinished run's records and, for each finished run
still retained, its ``Start`` and ``Done``.  :func:`read` checks everything;
:func:`load` takes the valid copy with the highest LSN and raises
:class:`fusee.errors.Corrupt` only when copies exist and none is valid.

Payload offload: :func:`write` given the shard's :class:`fusee.blobs.BlobStore`
writes a body with a payload over its threshold as the journal does (the
payload in a blob, durable before the checkpoint; :mod:`fusee.blob_refs`), and
:func:`load` puts offloaded payloads back (``Corrupt`` naming a blob's file
that is missing or damaged), so a :class:`Checkpoint` in memory always holds
whole bodies.
"""

from __future__ import annotations

import os
import struct
from typing import Any, NamedTuple

from . import blob_refs as _refs
from . import blobs as _blobs
from . import segment as _seg
from .crc32c import crc32c
from .disk import DISK, Disk

__all__ = ["Checkpoint", "encode", "decode", "write", "load", "NAMES"]

MAGIC = b"FUSEECKP"
END = b"FUSEEEND"
VERSION = 1
NAMES = ("checkpoint-1.ckpt", "checkpoint-2.ckpt")
_HEAD = struct.Struct("<8sIIQQQ")
_CRC = struct.Struct("<I")
_FRAME = struct.Struct("<IIQI")


class Checkpoint(NamedTuple):
    """A shard's checkpoint: the ``lsn`` it was taken at, the next run number, the ``(lsn, body)`` records."""

    shard: int
    lsn: int
    next_run: int
    records: list[tuple[int, bytes]]


def encode(cp: Checkpoint) -> bytes:
    """The file bytes of ``cp`` (pure)."""
    head = _HEAD.pack(MAGIC, VERSION, cp.shard, cp.lsn, cp.next_run, len(cp.records))
    out = bytearray(head)
    out += _CRC.pack(crc32c(head))
    for i, (lsn, body) in enumerate(cp.records):
        out += _seg.encode_frame(lsn, i & 0xFFFFFFFF, body)
    out += END
    out += _CRC.pack(crc32c(bytes(out[: len(out) - len(END)])))
    return bytes(out)


def decode(data: bytes) -> Checkpoint:
    """The checkpoint in ``data``; ``ValueError`` saying what is wrong for any damage (pure)."""
    n = len(data)
    if n < _HEAD.size + _CRC.size + len(END) + _CRC.size:
        raise ValueError(f"a checkpoint of {n} bytes is too short")
    magic, version, shard, lsn, next_run, count = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"bad checkpoint magic {magic!r}")
    if _CRC.unpack_from(data, _HEAD.size)[0] != crc32c(data[: _HEAD.size]):
        raise ValueError("checkpoint header checksum mismatch")
    if version != VERSION:
        raise ValueError(f"unsupported checkpoint version {version}")
    tail = n - len(END) - _CRC.size
    if data[tail : tail + len(END)] != END or _CRC.unpack_from(data, tail + len(END))[0] != crc32c(data[:tail]):
        raise ValueError("checkpoint checksum mismatch (damaged or incomplete)")
    off = _HEAD.size + _CRC.size
    records: list[tuple[int, bytes]] = []
    prev = 0
    for i in range(count):
        if off + _FRAME.size > tail:
            raise ValueError(f"checkpoint ends before its record {i} of {count}")
        ln, crc, rlsn, batch = _FRAME.unpack_from(data, off)
        end = off + _FRAME.size + ln
        body = data[off + _FRAME.size : end]
        if end > tail or crc != crc32c(body, crc32c(data[off + 8 : off + _FRAME.size])):
            raise ValueError(f"checkpoint record {i} is damaged")
        if batch != i & 0xFFFFFFFF or rlsn <= prev or rlsn > lsn:
            raise ValueError(f"checkpoint record {i} is out of order (lsn {rlsn})")
        records.append((rlsn, bytes(body)))
        prev = rlsn
        off = end
    if off != tail:
        raise ValueError("checkpoint has bytes after its last record")
    return Checkpoint(shard, lsn, next_run, records)




def write(directory: str, cp: Checkpoint, disk: Disk = DISK, blobs: "_blobs.BlobStore | None" = None) -> None:
    """Write both copies of ``cp`` into ``directory``, each atomically (temp file, fsync, rename, fsync dir).

    With ``blobs`` (the shard's blob area), each payload over its threshold is offloaded first, its blob
    durable before either copy is written, and ``blobs.checkpointed`` notes the blobs the checkpoint
    refers to (what :meth:`fusee.blobs.BlobStore.collect` keeps).  An ``OSError`` leaves no ``.tmp``
    file; each copy is then the old one or the new one, whole."""
    if blobs is not None:
        records: list[tuple[int, bytes]] = []
        found: list[tuple[str, bytes]] = []
        names: set[str] = set()
        for lsn, body in cp.records:
            new, got = blobs.split(body)
            records.append((lsn, new))
            found += got
            if new is not body:
                names.update(_refs.refs(new))
        blobs.put(found)
        cp = cp._replace(records=records)
        blobs.checkpointed = None  # until the copies are written
    data = encode(cp)
    for name in NAMES:
        disk.write_atomically(os.path.join(directory, name), data)
    if blobs is not None:
        blobs.checkpointed = (cp.lsn, names)


def resolved(cp: Checkpoint, load: Any, directory: str) -> Checkpoint:
    """``cp`` with each offloaded payload put back (``load(name, size)``: a blob's checked content);
    :class:`fusee.errors.Corrupt` naming the blob's file (or the checkpoint, for a malformed reference)."""
    from .errors import Corrupt

    out = cp.records
    for i, (lsn, body) in enumerate(cp.records):
        if b'"$blobs":' not in body:
            continue
        try:
            full = _refs.join(body, load)
        except ValueError as exc:
            raise Corrupt(os.path.join(directory, NAMES[0]), 0, f"checkpoint record {lsn}: {exc}") from None
        if full is not body:
            if out is cp.records:
                out = list(cp.records)
            out[i] = (lsn, full)
    return cp if out is cp.records else cp._replace(records=out)


def load(directory: str, shard: int) -> Checkpoint | None:
    """The newest valid checkpoint copy in ``directory`` (None if there is none at all).

    A damaged copy falls back to the other; if copies exist but none is valid,
    :class:`fusee.errors.Corrupt` names the first and what is wrong with it.
    """
    from .errors import Corrupt

    found: list[Checkpoint] = []
    bad: list[tuple[str, str]] = []
    for name in NAMES:
        p = os.path.join(directory, name)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        try:
            cp = decode(data)
            if cp.shard != shard:
                raise ValueError(f"checkpoint belongs to shard {cp.shard}")
        except ValueError as exc:
            bad.append((p, str(exc)))
            continue
        found.append(cp)
    if found:
        best = max(found, key=lambda c: c.lsn)
        return resolved(best, _blobs.reader(os.path.dirname(os.path.abspath(directory)), shard), directory)
    if bad:
        raise Corrupt(bad[0][0], 0, "every checkpoint copy is damaged: " + "; ".join(w for _, w in bad))
    return None
