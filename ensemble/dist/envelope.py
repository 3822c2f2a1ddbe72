"""What a frame between two connected nodes carries: an envelope, its first byte naming its form.

Pure (no I/O, no node state).  The three forms every message takes have a fixed binary header,
so neither end runs the codec's hooks over them; everything else is an operation tuple in the
codec (:mod:`ensemble.dist.codec`, msgpack, never pickle).  ``body`` is codec bytes throughout.

======  ==============  ====================================================  ===============
byte    form            then                                                  carries
======  ==============  ====================================================  ===============
0       ``OP``          the codec's bytes of a tuple ``(op_name, *args)``      any operation
1       ``SEND``        id (u64 LE), creation (u32 LE), body                  a message to a
                                                                              pid of one run
2       ``SEND_NAMED``  name length (u8, 1..255), the name (UTF-8), body      a message to a
                                                                              registered name
3       ``ALIAS``       the alias's number (u64 LE), creation (u32 LE), body  a message
                                                                              through an alias
======  ==============  ====================================================  ===============

:func:`parse` reads a header and refuses any payload that is not one of these with
:class:`BadEnvelope` (the connection is then dropped); the body is checked by the codec.
"""

from __future__ import annotations

from struct import Struct
from typing import Any

__all__ = ["OP", "SEND", "SEND_NAMED", "ALIAS", "TO_SIZE", "BadEnvelope", "op", "send",
           "send_named", "alias", "named_header", "parse", "pack_to", "unpack_to"]

OP, SEND, SEND_NAMED, ALIAS = 0, 1, 2, 3
_TO = Struct("<BQI")  # form, id, creation
#: Bytes of the header of a ``SEND`` or ``ALIAS``.
TO_SIZE = _TO_SIZE = _TO.size
#: ``unpack_to(payload)``: ``(form, id, creation)`` of a ``SEND`` or ``ALIAS`` header (unchecked).
unpack_to = _TO.unpack_from
_OP_BYTE = bytes([OP])
_NAMED_BYTE = bytes([SEND_NAMED])
#: ``pack_to(form, id, creation)``: the header of a ``SEND`` or ``ALIAS`` (``struct.error``
#: for an id or creation out of range).
pack_to = _pack_to = _TO.pack
_unpack_to = _TO.unpack_from


class BadEnvelope(ValueError):
    """A frame that is not an envelope a node understands (the connection is dropped)."""


def op(body: bytes) -> bytes:
    """The envelope of an operation, ``body`` the codec's bytes of its tuple."""
    return _OP_BYTE + body


def send(id: int, creation: int, body: bytes) -> bytes:
    """The envelope of a message (``body``) to process ``id`` of run ``creation``.

    Raises ``struct.error`` when ``id`` is not in [0, 2**64) or ``creation`` not in [0, 2**32).
    """
    return _pack_to(SEND, id, creation) + body


def alias(n: int, creation: int, body: bytes) -> bytes:
    """The envelope of a message (``body``) through alias number ``n`` of run ``creation``."""
    return _pack_to(ALIAS, n, creation) + body


def named_header(name: str) -> bytes | None:
    """The header of a message to the process registered as ``name``, or None when the name
    does not fit one (empty, lone surrogates, over 255 bytes of UTF-8): then send it as an
    ``OP`` ``("send_named", name, msg)``."""
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    if not 0 < len(raw) <= 255:
        return None
    return _NAMED_BYTE + bytes([len(raw)]) + raw


def send_named(name: str, body: bytes) -> bytes:
    """The envelope of a message (``body``) to the name ``name`` (see :func:`named_header`);
    raises :class:`ValueError` for a name that does not fit one."""
    header = named_header(name)
    if header is None:
        raise ValueError(f"a name of 1 to 255 bytes of UTF-8, not {name[:80]!r}")
    return header + body


def parse(payload: bytes) -> tuple[int, Any, int, int]:
    """``(form, to, creation, body_at)`` of an envelope: ``to`` is the id, alias number or name
    (``creation`` 0 for a name and for an ``OP``), ``payload[body_at:]`` its codec bytes.
    Raises :class:`BadEnvelope` for anything else."""
    if not payload:
        raise BadEnvelope("an empty frame")
    form = payload[0]
    if form == SEND or form == ALIAS:
        if len(payload) < _TO_SIZE:
            raise BadEnvelope(f"a header cut short: {bytes(payload[:16])!r}")
        _, to, creation = _unpack_to(payload)
        return form, to, creation, _TO_SIZE
    if form == SEND_NAMED:
        n = payload[1] if len(payload) > 1 else 0
        end = 2 + n
        if n == 0 or len(payload) < end:
            raise BadEnvelope(f"a name cut short: {bytes(payload[:16])!r}")
        try:
            name = payload[2:end].decode("utf-8")
        except UnicodeDecodeError:
            raise BadEnvelope(f"a name that is not UTF-8: {bytes(payload[2:end])[:40]!r}") from None
        return form, name, 0, end
    if form == OP:
        return form, None, 0, 1
    raise BadEnvelope(f"no envelope starts with byte {form}")
