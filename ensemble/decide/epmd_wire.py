"""The wire of epmd, Erlang's port mapper: pure encoders and decoders, no I/O.

Following the ERTS User's Guide, "Distribution Protocol", section "EPMD Protocol" (and
``erts/epmd/src/epmd_srv.c``).  Every request is a 2-byte big-endian length, then the request:

* ``ALIVE2_REQ`` (120) registers a name: port, node type, protocol, highest and lowest
  distribution version, name, extra.  The answer is ``ALIVE2_X_RESP`` (118, 32-bit creation)
  when the highest version is 6 or more, else ``ALIVE2_RESP`` (121, 16-bit creation); result 0
  is success.  The registering connection stays open for as long as the registration lives.
* ``PORT_PLEASE2_REQ`` (122) looks a name up: ``PORT2_RESP`` (119) with result 0 and the node's
  entry, or a result other than 0 alone when the name is not registered.
* ``NAMES_REQ`` (110): epmd's own port (4 bytes) then one text line ``name N at port P\\n`` per
  registered name.

Responses carry no length prefix: epmd closes the connection after ``PORT2_RESP`` and the
names, and answers ``ALIVE2`` with a fixed size per tag (:func:`alive2_response_size`).

Every decoder answers a value or raises :class:`EpmdProtocolError`, never anything else;
encoders refuse what the wire cannot carry with :class:`InvalidName` or :class:`ValueError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, Union

__all__ = [
    "ALIVE2_REQ",
    "ALIVE2_RESP",
    "ALIVE2_X_RESP",
    "PORT2_REQ",
    "PORT2_RESP",
    "NAMES_REQ",
    "NORMAL_NODE",
    "HIDDEN_NODE",
    "TCP_IPV4",
    "MAX_NAME_BYTES",
    "MAX_EXTRA_BYTES",
    "MAX_REQUEST_LENGTH",
    "EpmdError",
    "EpmdProtocolError",
    "InvalidName",
    "NodeEntry",
    "Alive2Req",
    "Port2Req",
    "NamesReq",
    "Request",
    "Alive2Resp",
    "Port2Resp",
    "NamesResp",
    "check_name",
    "encode_request",
    "request_length",
    "decode_request",
    "encode_alive2_response",
    "alive2_response_size",
    "decode_alive2_response",
    "encode_port2_response",
    "decode_port2_response",
    "encode_names_response",
    "decode_names_response",
]

ALIVE2_REQ: Final = 120
ALIVE2_RESP: Final = 121
ALIVE2_X_RESP: Final = 118
PORT2_REQ: Final = 122
PORT2_RESP: Final = 119
NAMES_REQ: Final = 110

#: Node types: a normal Erlang node (``'M'``) and a hidden node or C node (``'H'``).
NORMAL_NODE: Final = 77
HIDDEN_NODE: Final = 72
#: The only protocol epmd knows: TCP/IPv4.
TCP_IPV4: Final = 0

#: A node name is 1 to 255 bytes of UTF-8.
MAX_NAME_BYTES: Final = 255
#: epmd keeps at most this many bytes of a node's extra field (its ``MAXSYMLEN``).
MAX_EXTRA_BYTES: Final = 1020
#: The longest request this module encodes or decodes (after the 2-byte length).
MAX_REQUEST_LENGTH: Final = 13 + MAX_NAME_BYTES + MAX_EXTRA_BYTES

_U16: Final = 0xFFFF
_U32: Final = 0xFFFFFFFF


class EpmdError(Exception):
    """Base of every epmd error: of the wire here, of the network in :mod:`ensemble.dist.epmd`."""


class EpmdProtocolError(EpmdError):
    """Bytes that are not a well-formed epmd message (malformed, truncated or too long)."""


class InvalidName(EpmdError, ValueError):
    """A node name the wire cannot carry: empty, over 255 bytes of UTF-8, not UTF-8, or holding
    a NUL or a newline."""


@dataclass(frozen=True)
class NodeEntry:
    """What a node registers and a lookup answers: its distribution port, node type, protocol,
    highest and lowest distribution versions, name and extra bytes."""

    name: str
    port: int
    node_type: int = NORMAL_NODE
    protocol: int = TCP_IPV4
    highest_version: int = 6
    lowest_version: int = 5
    extra: bytes = b""

    def __post_init__(self) -> None:
        check_name(self.name)
        _check_range("port", self.port, _U16)
        _check_range("node_type", self.node_type, 0xFF)
        _check_range("protocol", self.protocol, 0xFF)
        _check_range("highest_version", self.highest_version, _U16)
        _check_range("lowest_version", self.lowest_version, _U16)
        if not isinstance(self.extra, bytes) or len(self.extra) > MAX_EXTRA_BYTES:
            raise ValueError(f"extra must be bytes of at most {MAX_EXTRA_BYTES} bytes, got {self.extra!r:.80}")


@dataclass(frozen=True)
class Alive2Req:
    """ALIVE2_REQ: register ``entry`` for as long as the connection stays open."""

    entry: NodeEntry


@dataclass(frozen=True)
class Port2Req:
    """PORT_PLEASE2_REQ: the entry of the node registered as ``name``."""

    name: str

    def __post_init__(self) -> None:
        check_name(self.name)


@dataclass(frozen=True)
class NamesReq:
    """NAMES_REQ: every registered name with its port."""


Request = Union[Alive2Req, Port2Req, NamesReq]


@dataclass(frozen=True)
class Alive2Resp:
    """The answer to ALIVE2_REQ: ``result`` 0 is success; ``creation`` identifies this incarnation
    of the name; ``extended`` says the 32-bit form (ALIVE2_X_RESP) rather than 16-bit (ALIVE2_RESP)."""

    result: int
    creation: int
    extended: bool = True

    def __post_init__(self) -> None:
        _check_range("result", self.result, 0xFF)
        _check_range("creation", self.creation, _U32 if self.extended else _U16)


@dataclass(frozen=True)
class Port2Resp:
    """The answer to PORT_PLEASE2_REQ: ``entry`` when ``result`` is 0, else ``None``."""

    result: int
    entry: NodeEntry | None = None

    def __post_init__(self) -> None:
        _check_range("result", self.result, 0xFF)
        if (self.result == 0) != (self.entry is not None):
            raise ValueError("a PORT2_RESP has an entry exactly when its result is 0")


@dataclass(frozen=True)
class NamesResp:
    """The answer to NAMES_REQ: epmd's port and the registered ``(name, port)`` pairs, in its order."""

    epmd_port: int
    names: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        _check_range("epmd_port", self.epmd_port, _U32)
        for name, port in self.names:
            check_name(name)
            _check_range("port", port, _U32)


# -- validation ------------------------------------------------------------------------------------


def _check_range(what: str, value: object, top: int) -> None:
    if type(value) is not int or not 0 <= value <= top:
        raise ValueError(f"{what} must be an int in 0..{top}, got {value!r}")


def check_name(name: object) -> bytes:
    """The UTF-8 bytes of node name ``name``; :class:`InvalidName` when the wire cannot carry it."""
    if not isinstance(name, str):
        raise InvalidName(f"a node name is a str, got {type(name).__name__}: {name!r:.80}")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidName(f"node name {name!r:.80} is not encodable as UTF-8") from None
    if not raw:
        raise InvalidName("a node name cannot be empty")
    if len(raw) > MAX_NAME_BYTES:
        raise InvalidName(f"node name {name!r:.40}... is {len(raw)} bytes of UTF-8, over {MAX_NAME_BYTES}")
    if "\0" in name or "\n" in name:
        raise InvalidName(f"node name {name!r:.80} holds a NUL or a newline")
    return raw


def _name_from(raw: bytes) -> str:
    """A decoded name, or :class:`EpmdProtocolError`."""
    try:
        name = raw.decode("utf-8")
        check_name(name)
    except (UnicodeDecodeError, InvalidName) as exc:
        raise EpmdProtocolError(f"invalid node name {raw!r:.80}: {exc}") from None
    return name


# -- requests --------------------------------------------------------------------------------------


def _entry_bytes(e: NodeEntry) -> bytes:
    """port, type, protocol, versions, name and extra, as ALIVE2_REQ and PORT2_RESP lay them out."""
    raw = check_name(e.name)
    return (
        struct.pack(">HBBHHH", e.port, e.node_type, e.protocol, e.highest_version, e.lowest_version, len(raw))
        + raw
        + struct.pack(">H", len(e.extra))
        + e.extra
    )


def _entry_from(data: bytes, what: str) -> NodeEntry:
    """The entry laid out in all of ``data`` (see :func:`_entry_bytes`)."""
    if len(data) < 12:
        raise EpmdProtocolError(f"{what} truncated: {len(data)} bytes of node entry, at least 12 needed")
    port, node_type, protocol, high, low, nlen = struct.unpack_from(">HBBHHH", data)
    if len(data) < 10 + nlen + 2:
        raise EpmdProtocolError(f"{what} truncated: name of {nlen} bytes does not fit in {len(data)}")
    name = _name_from(data[10 : 10 + nlen])
    (elen,) = struct.unpack_from(">H", data, 10 + nlen)
    end = 12 + nlen + elen
    if len(data) != end:
        raise EpmdProtocolError(f"{what}: {len(data)} bytes where name and extra make {end}")
    if elen > MAX_EXTRA_BYTES:
        raise EpmdProtocolError(f"{what}: extra of {elen} bytes, over {MAX_EXTRA_BYTES}")
    return NodeEntry(name, port, node_type, protocol, high, low, bytes(data[12 + nlen : end]))


def encode_request(req: Request) -> bytes:
    """The bytes of request ``req``, its 2-byte length included."""
    if isinstance(req, Alive2Req):
        body = bytes([ALIVE2_REQ]) + _entry_bytes(req.entry)
    elif isinstance(req, Port2Req):
        body = bytes([PORT2_REQ]) + check_name(req.name)
    elif isinstance(req, NamesReq):
        body = bytes([NAMES_REQ])
    else:
        raise TypeError(f"not an epmd request: {req!r}")
    return struct.pack(">H", len(body)) + body


def request_length(header: bytes) -> int:
    """The length of the request announced by its 2-byte ``header``; :class:`EpmdProtocolError`
    when that is not 2 bytes or announces an empty request or one over :data:`MAX_REQUEST_LENGTH`."""
    if len(header) != 2:
        raise EpmdProtocolError(f"a request length is 2 bytes, got {len(header)}")
    (n,) = struct.unpack(">H", header)
    if not 1 <= n <= MAX_REQUEST_LENGTH:
        raise EpmdProtocolError(f"request length {n} outside 1..{MAX_REQUEST_LENGTH}")
    return n


def decode_request(body: bytes) -> Request:
    """The request in ``body`` (what follows the 2-byte length)."""
    if not body:
        raise EpmdProtocolError("empty request")
    if len(body) > MAX_REQUEST_LENGTH:
        raise EpmdProtocolError(f"request of {len(body)} bytes, over {MAX_REQUEST_LENGTH}")
    tag, rest = body[0], bytes(body[1:])
    if tag == ALIVE2_REQ:
        return Alive2Req(_entry_from(rest, "ALIVE2_REQ"))
    if tag == PORT2_REQ:
        if rest.endswith(b"\0"):  # as epmd does: old clients NUL-terminate the name
            rest = rest[:-1]
        return Port2Req(_name_from(rest))
    if tag == NAMES_REQ:
        return NamesReq()  # trailing bytes ignored, as epmd does
    raise EpmdProtocolError(f"unknown request tag {tag}")


# -- responses -------------------------------------------------------------------------------------


def encode_alive2_response(resp: Alive2Resp) -> bytes:
    """The bytes of ``resp``: ALIVE2_X_RESP (6 bytes) when extended, else ALIVE2_RESP (4 bytes)."""
    if resp.extended:
        return struct.pack(">BBI", ALIVE2_X_RESP, resp.result, resp.creation)
    return struct.pack(">BBH", ALIVE2_RESP, resp.result, resp.creation)


def alive2_response_size(tag: int) -> int:
    """The whole size of an ALIVE2 response whose first byte is ``tag`` (a reader's guide)."""
    if tag == ALIVE2_X_RESP:
        return 6
    if tag == ALIVE2_RESP:
        return 4
    raise EpmdProtocolError(f"expected ALIVE2_X_RESP (118) or ALIVE2_RESP (121), got tag {tag}")


def decode_alive2_response(data: bytes) -> Alive2Resp:
    """The ALIVE2 response that is all of ``data``."""
    if not data:
        raise EpmdProtocolError("empty ALIVE2 response")
    size = alive2_response_size(data[0])
    if len(data) != size:
        raise EpmdProtocolError(f"ALIVE2 response of {len(data)} bytes, tag {data[0]} makes {size}")
    if data[0] == ALIVE2_X_RESP:
        _, result, creation = struct.unpack(">BBI", data)
        return Alive2Resp(result, creation, True)
    _, result, creation = struct.unpack(">BBH", data)
    return Alive2Resp(result, creation, False)


def encode_port2_response(resp: Port2Resp) -> bytes:
    """The bytes of ``resp``: tag and result, then the entry on success."""
    head = bytes([PORT2_RESP, resp.result])
    return head + _entry_bytes(resp.entry) if resp.entry is not None else head


def decode_port2_response(data: bytes) -> Port2Resp:
    """The PORT2_RESP that is all of ``data`` (epmd closes the connection after it)."""
    if len(data) < 2:
        raise EpmdProtocolError(f"PORT2_RESP truncated: {len(data)} bytes")
    if data[0] != PORT2_RESP:
        raise EpmdProtocolError(f"expected PORT2_RESP (119), got tag {data[0]}")
    result = data[1]
    if result != 0:
        if len(data) != 2:
            raise EpmdProtocolError(f"PORT2_RESP with result {result} and {len(data) - 2} trailing bytes")
        return Port2Resp(result)
    return Port2Resp(0, _entry_from(bytes(data[2:]), "PORT2_RESP"))


def encode_names_response(resp: NamesResp) -> bytes:
    """The bytes of ``resp``: epmd's port, then a line ``name N at port P\\n`` per name."""
    lines = b"".join(b"name " + check_name(n) + b" at port %d\n" % p for n, p in resp.names)
    return struct.pack(">I", resp.epmd_port) + lines


_AT_PORT: Final = b" at port "


def decode_names_response(data: bytes) -> NamesResp:
    """The NAMES response that is all of ``data`` (epmd closes the connection after it)."""
    if len(data) < 4:
        raise EpmdProtocolError(f"NAMES response truncated: {len(data)} bytes, at least 4 needed")
    (epmd_port,) = struct.unpack_from(">I", data)
    text = bytes(data[4:])
    if text and not text.endswith(b"\n"):
        raise EpmdProtocolError(f"NAMES response ends in an unfinished line: {text[-80:]!r}")
    names: list[tuple[str, int]] = []
    for line in text.split(b"\n")[:-1]:
        head, sep, digits = line.rpartition(_AT_PORT)
        if not sep or not head.startswith(b"name ") or not digits.isdigit() or len(digits) > 10:
            raise EpmdProtocolError(f"not a line 'name N at port P': {line[:80]!r}")
        port = int(digits)
        if port > _U32:
            raise EpmdProtocolError(f"port {port} out of range in {line[:80]!r}")
        names.append((_name_from(head[5:]), port))
    return NamesResp(epmd_port, tuple(names))
