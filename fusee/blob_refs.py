"""Payload offload, the pure part: which payloads go to blobs, how a record refers to them, which are live.

A record body (:func:`fusee.records.encode_record`) whose payload field (any
field :data:`fusee.records.PAYLOADS` lists for its kind: inputs, results,
signal values, errors, and any kind added later with a payload field) encodes
to more than the threshold is *split* (:func:`split`): that field's value is
written as ``null`` and a last key ``"$blobs"`` maps each offloaded field to
``[<name>, <size>]``, where the blob's content is the field's canonical JSON
text, ``<name>`` its SHA-256 in lowercase hex (content-addressed: the same
content is one blob) and ``<size>`` its length in bytes::

    {"t":"step","run":7,"seq":2,...,"payload":null,"$blobs":{"payload":["9f86d0...",1048576]}}

The marker is a key at the record's top level, where no record kind has it, so
it is never confused with a user's value (a user dict with a ``"$blobs"`` key
sits inside a payload field), and a reader that does not resolve it refuses
the body (an unexpected field: ``ValueError``) rather than reading ``null``.
:func:`join` puts the contents back, giving the body :func:`split` was given.

Everything here is pure: no files (:mod:`fusee.blobs` is the shell).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Final, Iterable, Mapping

from . import codec
from . import records as _records

__all__ = [
    "MARKER",
    "DEFAULT_OFFLOAD_BYTES",
    "check_threshold",
    "should_offload",
    "blob_name",
    "is_blob_name",
    "split",
    "refs",
    "join",
    "live",
    "garbage",
]

MARKER: Final = "$blobs"
"""The top-level key of a record body that names its offloaded payload fields."""
_NEEDLE: Final = b',"$blobs":{'  # how the marker reads in a body (always after the record's fields)

DEFAULT_OFFLOAD_BYTES: Final = 256 * 1024
"""``Engine.open(payload_offload_bytes=)``'s default: payloads over 256 KiB go to blobs."""

_NAME = re.compile(r"[0-9a-f]{64}")


def check_threshold(threshold: Any) -> int | None:
    """``threshold`` if it is None (no offload) or an int >= 0 (bytes); else ``ValueError``."""
    if threshold is None or (type(threshold) is int and threshold >= 0):
        return threshold
    raise ValueError(f"payload_offload_bytes is None or an int >= 0 (bytes), not {threshold!r}")


def should_offload(size: int, threshold: int | None) -> bool:
    """Whether a payload whose encoding is ``size`` bytes goes to a blob: over ``threshold`` (None: never)."""
    return threshold is not None and size > threshold


def blob_name(content: bytes) -> str:
    """The name of the blob holding ``content``: its SHA-256, 64 lowercase hex digits."""
    return hashlib.sha256(content).hexdigest()


def is_blob_name(name: str) -> bool:
    """Whether ``name`` is a blob's name (64 lowercase hex digits): not a temp file, nothing else."""
    return type(name) is str and _NAME.fullmatch(name) is not None


def split(body: bytes, threshold: int | None) -> tuple[bytes, list[tuple[str, bytes]]]:
    """``(the body to journal, [(blob name, blob content), ...])`` for record body ``body``: each payload
    field whose encoding is over ``threshold`` bytes is offloaded (see the module doc); the blobs in field
    order, a content offloaded twice listed once.  No field over it (or ``threshold`` None): ``(body, [])``,
    the same object.  A body that is not a record of a known kind is returned as is (its reader refuses it)."""
    if threshold is None or len(body) <= threshold:
        return body, []
    try:
        tree = codec.loads_tree(body)
    except ValueError:
        return body, []
    if type(tree) is not dict or MARKER in tree:
        return body, []
    fields = _records.PAYLOADS.get(tree.get("t")) if type(tree.get("t")) is str else None
    if not fields:
        return body, []
    marker: dict[str, list[Any]] = {}
    blobs: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for f in fields:
        if f not in tree:
            continue
        content = codec.dumps_tree(tree[f], f)
        if not should_offload(len(content), threshold):
            continue
        name = blob_name(content)
        marker[f] = [name, len(content)]
        tree[f] = None
        if name not in seen:
            seen.add(name)
            blobs.append((name, content))
    if not marker:
        return body, []
    tree[MARKER] = marker
    return codec.dumps_tree(tree, "record"), blobs


def _marker(body: bytes) -> tuple[dict[str, Any], dict[str, tuple[str, int]]] | None:
    """``(the body's tree, {field: (name, size)})`` if ``body`` refers to blobs, else None; ``ValueError``
    for a malformed marker."""
    if _NEEDLE not in body:
        return None
    tree = codec.loads_tree(body)
    if type(tree) is not dict or MARKER not in tree:
        return None  # the bytes were inside a payload (a user's dict with that key)
    raw = tree.pop(MARKER)
    if type(raw) is not dict or not raw:
        raise ValueError(f"a malformed {MARKER} marker: {raw!r}"[:200])
    out: dict[str, tuple[str, int]] = {}
    for f, ref in raw.items():
        if (
            f not in tree
            or tree[f] is not None
            or type(ref) is not list
            or len(ref) != 2
            or not is_blob_name(ref[0])
            or type(ref[1]) is not int
            or ref[1] < 0
        ):
            raise ValueError(f"a malformed {MARKER} reference for {f!r}: {ref!r}"[:200])
        out[f] = (ref[0], ref[1])
    return tree, out


def refs(body: bytes) -> list[str]:
    """The names of the blobs record body ``body`` refers to (none for most bodies: a quick byte search
    first); ``ValueError`` for a malformed marker."""
    found = _marker(body)
    return [] if found is None else sorted({name for name, _ in found[1].values()})


def join(body: bytes, load: Callable[[str, int], bytes]) -> bytes:
    """Record body ``body`` with its offloaded payloads put back (``body`` itself if it has none):
    ``load(name, size)`` gives a blob's content (checked by the caller; what it raises propagates).
    ``join(split(b, t)[0], lambda n, _: dict(split(b, t)[1])[n]) == b`` for a canonical body ``b``.
    ``ValueError`` for a malformed marker or a blob that is not one JSON value."""
    found = _marker(body)
    if found is None:
        return body
    tree, marker = found
    for f, (name, size) in marker.items():
        tree[f] = codec.loads_tree(load(name, size))
    return codec.dumps_tree(tree, "record")


def live(checkpoint: Iterable[str], logged: Mapping[str, int], after: int) -> set[str]:
    """The blobs a shard still needs once it has a checkpoint at LSN ``after``: those its ``checkpoint``
    refers to, and those a log record after it refers to (``logged``: each name to the last LSN that
    refers to it).  Log records at or before ``after`` are never read again (the checkpoint holds them)."""
    out = set(checkpoint)
    out.update(name for name, lsn in logged.items() if lsn > after)
    return out


def garbage(files: Iterable[str], keep: set[str]) -> list[str]:
    """The files of a blob directory to delete: every blob not in ``keep`` (an orphan of a crash or a failed
    write, or one whose runs are gone) and everything that is not a blob (a temp file a crash left)."""
    return sorted(f for f in files if f not in keep)
