"""What crosses the wire between nodes: msgpack, tags for what msgpack lacks; never pickle.

:func:`encode` turns a value into bytes and :func:`decode` turns bytes back into a value.  Both
are pure (no I/O, no node state): the runtime passes converters for its pids, references and
aliases.  Every value built only from the types below arrives as an equal value of the same
type (tuples stay tuples, sets stay sets, an ``ExtType`` stays an ``ExtType``); anything else
raises :class:`NotWireData` at the sender, naming the type and where it sits in the value.
Decoding any bytes whatsoever answers a value or raises :class:`Undecodable`.

Wire format
-----------

Plain msgpack for what msgpack has:

=====================  =============================================================
Python                 msgpack
=====================  =============================================================
``None``, ``bool``     nil, true/false
``int``                int, when it fits in [-2**63, 2**64 - 1] (else a big-int tag)
``float``              float 64 (NaN, infinities and -0.0 bit for bit)
``str``                str, UTF-8 (lone surrogates pass, as UTF-8 ``surrogatepass``)
``bytes``              bin (``bytearray`` and ``memoryview`` go as bin: arrive as ``bytes``)
``list``               array
``dict``               map; keys of any wire type (tuples, ints, pids...)
``msgpack.ExtType``    ext with its own code, 0..127: arrives as that ``ExtType``
``msgpack.Timestamp``  ext -1 (msgpack's timestamp): arrives as that ``Timestamp``
=====================  =============================================================

Everything else travels under one ext code of ours, ``-128`` (:data:`TAG_CODE`), whose payload
starts with a byte naming the kind.  Containers are *tagged arrays*: an array whose first
element is the tag, that ext with the kind alone as payload (3 bytes: ``d4 80 KK``).  Pids,
references, aliases and big ints are one ext each, their fields in the payload:

====  ==========  ===============================================  ==========================
KK    kind        on the wire                                      arrives as
====  ==========  ===============================================  ==========================
1     tuple       ``[tag, *items]``                                ``tuple``
2     set         ``[tag, *items]``                                ``set``
3     frozenset   ``[tag, *items]``                                ``frozenset``
4     exception   ``[tag, type_name, message, *args]``             :class:`RemoteError`
5     big int     ext ``KK`` + two's complement, little-endian     ``int``
6     pid         ext ``KK`` + id (u64 LE) + creation (u32 LE)     ``pid_in(node, id,
                  + node (UTF-8)                                   creation)`` or
                                                                   :class:`WirePid`
7     reference   as a pid                                         ``ref_in(...)`` or
                                                                   :class:`WireRef`
8     alias       as a pid                                         ``alias_in(...)`` or
                                                                   :class:`WireAlias`
9     named       ``[tag, name, *fields]``                         ``named_in(name, fields)``
                                                                   or :class:`WireNamed`
====  ==========  ===============================================  ==========================

A *named* value is one the runtime lets cross by name (:mod:`ensemble.dist.wire_types`:
registered classes and constants, functions): ``named_out`` answers its name and fields at
the sender, ``named_in`` builds it again at the receiver.

Why no escaping is needed: msgpack reserves the negative ext codes for itself, and
``msgpack.ExtType`` refuses any code outside 0..127, so no user value can be (or contain) a
tag: a user's ``ExtType`` and ``Timestamp`` travel natively, unchanged, at no cost (a frame
walk to escape them would cost every message).  Only a forgery that bypasses ``ExtType``'s
constructor (``tuple.__new__(ExtType, (-128, ...))``) could pose as a tag, and the receiver
checks every tag as it checks any peer's bytes: a malformed one is :class:`Undecodable`.

Limits
------

* Depth: no part of a value may sit inside more than :data:`MAX_DEPTH` (1024) containers of
  the wire format: lists, dicts and tagged arrays (a tuple, set, frozenset or exception, whose
  tag sits one level down like its items: an empty tuple counts one level more than an empty
  list).  msgpack enforces this very bound on both sides, in C, with no recursion in Python:
  its packer's recursion limit (so a deeper value raises :class:`TooDeep` at :func:`encode`,
  a recursive container too: it is infinitely deep) and its unpacker's stack (so a deeper
  frame is :class:`Undecodable`).  Both are 1024 from msgpack 1.2 on; msgpack's packer
  stopped at 511 before, and :data:`MAX_DEPTH` is measured at import, so with an older
  msgpack encode stops at 511 while decode still reads up to 1024.  The Python walk that
  locates an encoding error (run only once encoding has failed) is iterative.
* Size: :func:`decode` bounds every length a frame announces by the frame's own length, so a
  small input never allocates much.  A frame's size is the framing's business
  (:mod:`ensemble.decide.framing`); a very large map of colliding int keys is slow to build
  (Python's int hashes are not randomized), so keep ``max_frame`` sensible.
"""

from __future__ import annotations

from struct import Struct
from typing import Any, Callable, NamedTuple, NoReturn

from msgpack import ExtType, Packer, Timestamp, unpackb

from .._terms import Alias, Ref

__all__ = [
    "MAX_DEPTH",
    "TAG_CODE",
    "CodecError",
    "NotWireData",
    "TooDeep",
    "Undecodable",
    "RemoteError",
    "WirePid",
    "WireRef",
    "WireAlias",
    "WireNamed",
    "encode",
    "decode",
    "Encoder",
    "Decoder",
    "decoder",
    "pid_ext",
]



def _msgpack_depth() -> int:
    """The deepest nesting this msgpack both packs and unpacks, at most 1024 (its unpack stack).

    1024 with msgpack >= 1.2; its packer stopped at 511 before.
    """

    def fits(n: int) -> bool:
        v: Any = 0
        for _ in range(n):
            v = [v]
        try:
            unpackb(Packer().pack(v))
        except ValueError:
            return False
        return True

    if fits(1024):
        return 1024
    lo, hi = 0, 1023
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


#: The deepest nesting of containers a value may have on the wire (see the module docstring).
MAX_DEPTH = _msgpack_depth()
#: The msgpack ext code of every tag (a negative code: reserved, no ``ExtType`` can have it).
TAG_CODE = -128

#: What a converter answers for a pid, reference or alias: ``(node, id, creation)``.
WireId = tuple[str, int, int]
OutConverter = Callable[[Any], "WireId | None"]
InConverter = Callable[[str, int, int], Any]
#: What crosses by name: ``named_out(value)`` answers ``(name, fields)`` or None;
#: ``named_in(name, fields)`` answers the value.
NamedOut = Callable[[Any], "tuple[str, tuple] | None"]
NamedIn = Callable[[str, tuple], Any]


# ---------------------------------------------------------------------------------- errors


class CodecError(Exception):
    """Base of every error this codec raises."""


class NotWireData(CodecError, TypeError):
    """A value the wire cannot carry, raised by :func:`encode`.

    ``path`` says where it sits, as Python-like access from ``value`` (the whole value):
    ``value[2]['key']`` (list and tuple items, dict values by key), ``value.keys()[i]`` (the
    i-th key of a dict), ``value.values()[i]`` (a value whose key is not a plain str, int,
    bytes, bool or None), ``value{#i}`` (the i-th member of a set in iteration order),
    ``value.args[i]`` (an exception's argument).  ``type_name`` names the offending type.
    """

    def __init__(self, message: str, path: str = "value", type_name: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.type_name = type_name


class TooDeep(NotWireData):
    """A value nested deeper than :data:`MAX_DEPTH`, or a container that contains itself."""


class Undecodable(CodecError, ValueError):
    """Bytes that are not a frame of this codec (or a converter refused), from :func:`decode`."""


class RemoteError(Exception):
    """An exception raised on another node, as it arrives: its type's name, message and args.

    ``type_name`` is the qualified name (``"ValueError"``, ``"mypkg.mod.Error"``), ``message``
    is ``str()`` of the original, ``args`` its arguments (each one that was not wire data
    travels as its ``repr``).  Encoding a ``RemoteError`` sends its own name and message, so
    forwarding one keeps the original's.
    """

    def __init__(self, type_name: str, message: str, args: tuple[Any, ...] = ()) -> None:
        super().__init__(*args)
        self.type_name = type_name
        self.message = message

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name

    def __repr__(self) -> str:
        return f"RemoteError({self.type_name!r}, {self.message!r}, {self.args!r})"

    def __reduce__(self) -> tuple[Any, ...]:  # copy.copy(): rebuild with the right signature
        return (RemoteError, (self.type_name, self.message, self.args))


# ----------------------------------------------------------------------- wire identities


def _valid_id(node: Any, id: Any, creation: Any) -> bool:
    """Whether ``(node, id, creation)`` is a str, an int in [0, 2**64) and one in [0, 2**32)."""
    return (
        type(node) is str
        and type(id) is int
        and type(creation) is int
        and 0 <= id < 2**64
        and 0 <= creation < 2**32
    )


class _WireId:
    """A pid, reference or alias as the wire has it; immutable, equal only to its own kind."""

    __slots__ = ("node", "id", "creation")
    node: str
    id: int
    creation: int

    def __init__(self, node: str, id: int, creation: int = 0) -> None:
        if not _valid_id(node, id, creation):
            raise ValueError(
                f"{type(self).__name__} takes node: str, id: int in [0, 2**64),"
                f" creation: int in [0, 2**32), not {_short((node, id, creation))}"
            )
        _set_node(self, node)
        _set_id(self, id)
        _set_creation(self, creation)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: Any) -> bool:
        return (
            type(other) is type(self)
            and self.node == other.node
            and self.id == other.id
            and self.creation == other.creation
        )

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.node, self.id, self.creation))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.node!r}, {self.id}, {self.creation})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.node, self.id, self.creation))


_set_node = _WireId.node.__set__  # type: ignore[attr-defined]
_set_id = _WireId.id.__set__  # type: ignore[attr-defined]
_set_creation = _WireId.creation.__set__  # type: ignore[attr-defined]
_new_object = object.__new__


def _wire(cls: type[_WireId], node: str, id: int, creation: int) -> Any:
    """``cls(node, id, creation)`` without the check, for fields decoding has checked."""
    w = _new_object(cls)
    _set_node(w, node)
    _set_id(w, id)
    _set_creation(w, creation)
    return w


class WirePid(_WireId):
    """A pid decoded without ``pid_in``: ``node``, ``id``, ``creation``."""

    __slots__ = ()


class WireRef(_WireId):
    """A reference decoded without ``ref_in``: ``node``, ``id``, ``creation``."""

    __slots__ = ()


class WireAlias(_WireId):
    """An alias decoded without ``alias_in``: ``node``, ``id``, ``creation``."""

    __slots__ = ()


class WireNamed:
    """A named value decoded without ``named_in`` (or one ``named_in`` does not know): its
    ``name`` and ``fields``."""

    __slots__ = ("name", "fields")

    def __init__(self, name: str, fields: tuple) -> None:
        self.name = name
        self.fields = fields

    def __eq__(self, other: Any) -> bool:
        return type(other) is WireNamed and other.name == self.name and other.fields == self.fields

    def __hash__(self) -> int:
        return hash((self.name, self.fields))

    def __repr__(self) -> str:
        return f"WireNamed({self.name!r}, {self.fields!r})"


# -------------------------------------------------------------------------------- tags

# Kinds 1-4 head a tagged array (their ext payload is the kind alone); kinds 5-8 are whole
# values in one ext: a big int's payload is the kind then the int's bytes, a pid's, a
# reference's or an alias's is _IDENTITY (kind, id, creation) then the node's name in UTF-8.
_TUPLE, _SET, _FROZENSET, _ERROR, _BIGINT, _PID, _REF, _ALIAS, _NAMED = range(1, 10)
_KIND_NAMES = {
    _TUPLE: "tuple",
    _SET: "set",
    _FROZENSET: "frozenset",
    _ERROR: "exception",
    _BIGINT: "big int",
    _PID: "pid",
    _REF: "reference",
    _ALIAS: "alias",
    _NAMED: "named value",
}
_IDENTITY = Struct("<BQI")
_IDENTITY_SIZE = _IDENTITY.size
_WIRE_CLASSES = (WirePid, WireRef, WireAlias)
_WIRE_KINDS = {WirePid: _PID, WireRef: _REF, WireAlias: _ALIAS}

# ExtType's constructor refuses negative codes (which is what keeps user values from ever
# being tags); the packer packs any code, so the codec builds its own without it.
_tuple_new = tuple.__new__
_T_TUPLE, _T_SET, _T_FROZENSET, _T_ERROR, _T_NAMED = (
    _tuple_new(ExtType, (TAG_CODE, bytes([k]))) for k in (_TUPLE, _SET, _FROZENSET, _ERROR, _NAMED)
)


class _Tag:
    """A tag as decoding meets it, until the array it heads is built."""

    __slots__ = ("kind",)

    def __init__(self, kind: int) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<tag {_KIND_NAMES[self.kind]}>"


_TAGS = {bytes([k]): _Tag(k) for k in (_TUPLE, _SET, _FROZENSET, _ERROR, _NAMED)}

# Values msgpack packs itself under strict_types (exact types only).
_NATIVE = frozenset(
    {type(None), bool, float, str, bytes, bytearray, memoryview, ExtType, Timestamp}
)
_PLAIN_KEYS = frozenset({str, int, bytes, bool, type(None)})
_BASE_TYPES = (bool, int, float, str, bytes, list, tuple, dict, set, frozenset)


def _identity_ext(kind: int, node: str, id: int, creation: int) -> ExtType:
    payload = _pack_identity(kind, id, creation) + node.encode("utf-8", "surrogatepass")
    return _tuple_new(ExtType, (TAG_CODE, payload))


def _bigint_ext(n: int) -> ExtType:
    payload = _BIGINT_KIND + n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return _tuple_new(ExtType, (TAG_CODE, payload))


_pack_identity = _IDENTITY.pack
_BIGINT_KIND = bytes([_BIGINT])


# ------------------------------------------------------------------------------ encode


def encode(
    value: Any,
    *,
    pid_out: OutConverter | None = None,
    ref_out: OutConverter | None = None,
    alias_out: OutConverter | None = None,
    named_out: NamedOut | None = None,
) -> bytes:
    """``value`` as bytes for :func:`decode`; raises :class:`NotWireData` if it is not wire data.

    The converters tell the codec about the runtime's own values: each answers
    ``(node, id, creation)`` for a value it recognizes and ``None`` for any other.  The codec
    asks ``pid_out``, then ``ref_out``, then ``alias_out`` about every value of a type it does
    not know (the first answer decides); ``ref_out`` is also asked about every
    :class:`ensemble._terms.Ref` and ``alias_out`` about every ``Alias`` (without an answer
    they go as ``(ref.node, ref's number, 0)``).  Converters must answer ``None``, not raise,
    for values they do not recognize.  ``named_out`` is asked last about a value of a type the
    codec does not know: ``(name, fields)`` sends it by name (its fields encoded as any value).
    Raises :class:`TooDeep` (a ``NotWireData``) for a
    value nested deeper than :data:`MAX_DEPTH` or containing itself, and :class:`CodecError`
    when a converter answers something other than ``(str, int, int)`` in range.
    """
    return Encoder(pid_out=pid_out, ref_out=ref_out, alias_out=alias_out, named_out=named_out).encode(value)


class Encoder:
    """:func:`encode` with its converters fixed once: the packer's hook is built once and one
    msgpack packer is reused, so an encoder is the fast way to encode many values.

    Not for two OS threads at once (give each thread its own); a use inside another on the
    same thread (from a converter, or code the hook's Python lets run) gets a packer of its own.

    ``pack`` is the shared packer's own ``pack``: a caller may call it directly while
    ``busy[0]`` is 0 (no hook of this encoder is running), if it calls :meth:`encode` instead
    when it raises (to get the error explained) and :meth:`renew` after a value of more than
    :data:`KEEP_BUFFER` bytes.

    ``quick`` maps exact types to a function asked first about a value of that type: it
    answers what the packer's hook would (an ``ExtType`` of :func:`pid_ext`, say), or None to
    leave the value to the converters.  Such a function must not encode (it is not counted in
    ``busy``): the runtime's caches of its own pids' exts are what it is for.  Tuples take no
    Python call but the hook's own.
    """

    __slots__ = ("_outs", "_default", "_packer", "pack", "busy")

    def __init__(
        self,
        *,
        pid_out: OutConverter | None = None,
        ref_out: OutConverter | None = None,
        alias_out: OutConverter | None = None,
        named_out: NamedOut | None = None,
        quick: dict[type, Callable[[Any], Any]] | None = None,
    ) -> None:
        self._outs = (pid_out, ref_out, alias_out, named_out)
        self.busy = [0]  # hooks of this encoder running (Python code that could encode again)
        self._default = _make_default(pid_out, ref_out, alias_out, self.busy, named_out, quick)
        self._packer: Packer | None = None
        self.renew()

    def renew(self) -> None:
        """Take a new shared packer (the old one's buffer has grown to a large value's size)."""
        self._packer = self._new_packer()
        self.pack = self._packer.pack

    def _new_packer(self) -> Packer:
        return Packer(default=self._default, strict_types=True, buf_size=512)

    def encode(self, value: Any) -> bytes:
        """``value`` as bytes for :func:`decode`: exactly what :func:`encode` answers with these
        converters (and it raises the same errors)."""
        if self.busy[0]:  # a hook of this encoder runs further up this thread's stack
            return self._encode_anew(value)
        try:
            out = self.pack(value)  # a failed pack leaves the packer empty, reusable
        except Exception:
            return self._encode_anew(value)  # again, to raise the right error
        if len(out) > KEEP_BUFFER:  # the packer's buffer grew to this value's size: let it go
            self.renew()
        return out

    def _encode_anew(self, value: Any) -> bytes:
        """:meth:`encode` with a packer of its own, and every error explained."""
        try:
            try:
                return self._new_packer().pack(value)
            except UnicodeEncodeError:  # a lone surrogate: rare, so the fast path stays strict
                return Packer(
                    default=self._default, strict_types=True, unicode_errors="surrogatepass"
                ).pack(value)
        except (NotWireData, ValueError) as exc:
            problem = _find_problem(value, self._outs, True)
            if problem is not None:
                raise problem from None
            if isinstance(exc, NotWireData):
                raise
            raise NotWireData(f"not wire data: {exc}") from exc


#: An encoder whose packer has grown past this many bytes gets a new one (its buffer is kept).
KEEP_BUFFER = 1 << 20
#: How many pids a decoder's ``keep`` keeps (all are forgotten when it is full).
KEPT = 4096


def _make_default(
    pid_out: OutConverter | None,
    ref_out: OutConverter | None,
    alias_out: OutConverter | None,
    busy: list[int] | None = None,
    named_out: NamedOut | None = None,
    quick: dict[type, Callable[[Any], Any]] | None = None,
) -> Callable[[Any], Any]:
    """The packer's hook for what msgpack does not pack itself, with these converters; with
    ``busy``, ``busy[0]`` counts the calls of it under way (but for a tuple's, and those a
    ``quick`` function answers: see :class:`Encoder`)."""
    outs = (pid_out, ref_out, alias_out, named_out)

    if busy is not None:
        base = _make_default(pid_out, ref_out, alias_out, None, named_out)
        quick_get = (quick or {}).get

        def counted(o: Any) -> Any:
            t = type(o)
            if t is tuple:  # the commonest, and no converter runs for it
                return [_T_TUPLE, *o]
            fast = quick_get(t)
            if fast is not None:
                found = fast(o)
                if found is not None:
                    return found
            busy[0] += 1
            try:
                return base(o)
            finally:
                busy[0] -= 1

        return counted

    def default(o: Any) -> Any:
        t = type(o)
        if t is tuple:
            return [_T_TUPLE, *o]
        if t is Ref or t is Alias:
            kind, out = (_REF, ref_out) if t is Ref else (_ALIAS, alias_out)
            if out is not None:
                found = _ask(out, kind, o)
                if found is not None:
                    return found
            if not _valid_id(o._node, o._n, 0):
                raise NotWireData(_not_wire_data(o), type_name=_type_name(t))
            return _identity_ext(kind, o._node, o._n, 0)
        if t is int:  # beyond 64 bits
            return _bigint_ext(o)
        if t is set:
            return [_T_SET, *o]
        if t is frozenset:
            return [_T_FROZENSET, *o]
        kind = _WIRE_KINDS.get(t)
        if kind is not None:
            return _identity_ext(kind, o.node, o.id, o.creation)
        if isinstance(o, BaseException):
            return _error(o, outs)
        found = (
            _ask(pid_out, _PID, o)
            or _ask(ref_out, _REF, o)
            or _ask(alias_out, _ALIAS, o)
        )
        if found is not None:
            return found
        if named_out is not None:
            named = named_out(o)
            if named is not None:
                return [_T_NAMED, named[0], *named[1]]
        raise NotWireData(_not_wire_data(o), type_name=_type_name(t))

    return default


def pid_ext(node: str, id: int, creation: int) -> ExtType | None:
    """The ext a pid ``(node, id, creation)`` travels as (what the packer's hook answers for a
    pid ``pid_out`` names so), or None when the three are not in range (see :func:`encode`)."""
    if _valid_id(node, id, creation):
        return _identity_ext(_PID, node, id, creation)
    return None


def _ask(out: OutConverter | None, kind: int, o: Any) -> ExtType | None:
    """The ext of ``o`` from ``out``'s answer about it, or None without one."""
    if out is None:
        return None
    answer = out(o)
    if answer is None:
        return None
    try:
        node, id, creation = answer
        if _valid_id(node, id, creation):
            return _identity_ext(kind, node, id, creation)
    except (TypeError, ValueError):
        pass
    name = ("pid_out", "ref_out", "alias_out")[kind - _PID]
    raise CodecError(
        f"{name} answered {_short(answer)} for {_short(o)}, not (node: str,"
        " id: int in [0, 2**64), creation: int in [0, 2**32))"
    )


_plain_default = _make_default(None, None, None)


def _error(exc: BaseException, outs: tuple[OutConverter | None, ...]) -> list[Any]:
    """The tagged array of an exception: its type's name, its message, its args (or reprs)."""
    if type(exc) is RemoteError:  # as it came: forwarding keeps the original's name
        name, message = exc.type_name, exc.message
    else:
        name = _type_name(type(exc))
        try:
            message = str(exc)
        except Exception:
            message = f"<unprintable {name}>"
    return [_T_ERROR, name, message, *_error_args(exc, outs)]


def _error_args(exc: BaseException, outs: tuple[OutConverter | None, ...]) -> list[Any]:
    """An exception's args as they travel: each that is wire data on its own, else its repr.

    "On its own" takes the exceptions inside an arg with their args as they are, so an
    exception among its own args (at any remove) is too deep there: it goes as its repr.  (An
    arg that fits on its own but not at its depth in the value makes the value TooDeep.)
    """
    args = []
    for a in exc.args:
        if type(a) not in _NATIVE and _find_problem(a, outs, False) is not None:
            a = _safe_repr(a)
        args.append(a)
    return args


# ----------------------------------------------------- finding what makes a value fail

# The walk below mirrors what the packer does (same order, same depth accounting) but in
# Python: it runs only once encoding has failed, to say where and why, and on exception args
# to pick which travel (there with the args of exceptions inside them unfiltered).


def _find_problem(
    value: Any, outs: tuple[OutConverter | None, ...], filtered: bool
) -> NotWireData | None:
    """The error encoding ``value`` meets first (with its path), or None if it encodes.

    ``filtered``: an exception's args are taken as they travel (:func:`_error_args`), else
    as they are.
    """
    # A node is (parent node, step from the parent, object, depth); depth counts the wire
    # containers around the object.  A step is (form, index, key), made text only on error.
    stack: list[tuple[Any, Any, Any, int]] = [(None, _NO_STEP, value, 0)]
    while stack:
        node = stack.pop()
        _, _, o, depth = node
        if depth > MAX_DEPTH:
            return _too_deep(node)
        t = type(o)
        if t in _NATIVE or t is int or t in _WIRE_KINDS:
            continue
        children: list[tuple[Any, Any]]
        if t is list:
            children = [(("[{i}]", i, None), x) for i, x in enumerate(o)]
        elif t is tuple:  # tagged arrays: the tag sits one level down, as the items do
            children = [_TAG_CHILD] + [(("[{i}]", i, None), x) for i, x in enumerate(o)]
        elif t is set or t is frozenset:
            children = [_TAG_CHILD] + [(("{{#{i}}}", i, None), x) for i, x in enumerate(o)]
        elif t is dict:
            children = []
            for i, (k, v) in enumerate(o.items()):
                children.append(((".keys()[{i}]", i, None), k))
                form = "[{key!r}]" if type(k) in _PLAIN_KEYS else ".values()[{i}]"
                children.append(((form, i, k), v))
        elif isinstance(o, BaseException):
            args = _error_args(o, outs) if filtered else o.args
            children = [_TAG_CHILD] + [((".args[{i}]", i, None), a) for i, a in enumerate(args)]
        elif _is_identity(o, t, outs):
            continue
        elif outs[3] is not None and (named := outs[3](o)) is not None:
            children = [_TAG_CHILD, _TAG_CHILD] + [(("<field {i}>", i, None), x) for i, x in enumerate(named[1])]
        else:
            return NotWireData(
                f"{_not_wire_data(o)}, at {_show_path(node)}",
                path=_path(node),
                type_name=_type_name(t),
            )
        for step, child in reversed(children):
            stack.append((node, step, child, depth + 1))
    return None


def _is_identity(o: Any, t: type, outs: tuple[OutConverter | None, ...]) -> bool:
    """Whether the packer's hook sends ``o`` (of type ``t``) as a pid, reference or alias."""
    if t is Ref or t is Alias:
        out = outs[1] if t is Ref else outs[2]
        return (out is not None and out(o) is not None) or _valid_id(o._node, o._n, 0)
    return any(out is not None and out(o) is not None for out in outs[:3])


def _too_deep(node: tuple[Any, Any, Any, int]) -> TooDeep:
    """The error for ``node``, found deeper than MAX_DEPTH: a container in itself, or too deep."""
    chain = []
    n = node
    while n is not None:
        chain.append(n)
        n = n[0]
    chain.reverse()  # from the whole value down
    seen: dict[int, tuple[Any, Any, Any, int]] = {}
    for n in chain[:-1]:
        first = seen.setdefault(id(n[2]), n)
        if first is not n:
            return TooDeep(
                f"{_show_path(n)} is {_show_path(first)} again: a container that contains itself"
                " is not wire data",
                path=_path(n),
                type_name=_type_name(type(n[2])),
            )
    outer = chain[-2] if len(chain) > 1 else node
    return TooDeep(
        f"nested deeper than MAX_DEPTH={MAX_DEPTH} containers, at {_show_path(outer)}",
        path=_path(outer),
        type_name=_type_name(type(outer[2])),
    )


_NO_STEP = ("", 0, None)
_TAG_CHILD = (_NO_STEP, None)  # the tag of a tagged array: a scalar one level down


def _path(node: tuple[Any, Any, Any, int]) -> str:
    steps = []
    while node is not None:
        form, i, key = node[1]
        steps.append(form.format(i=i, key=key))
        node = node[0]
    return "value" + "".join(reversed(steps))


def _show_path(node: tuple[Any, Any, Any, int]) -> str:
    path = _path(node)
    return path if len(path) <= 200 else f"{path[:120]}...{path[-60:]}"


# --------------------------------------------------------------------------- decode


def decode(
    data: bytes,
    *,
    pid_in: InConverter | None = None,
    ref_in: InConverter | None = None,
    alias_in: InConverter | None = None,
    named_in: NamedIn | None = None,
) -> Any:
    """The value :func:`encode` made ``data`` from; raises :class:`Undecodable` for any other bytes.

    Each converter builds the in-memory value of a pid, reference or alias from
    ``(node, id, creation)``; without one they arrive as :class:`WirePid`, :class:`WireRef`,
    :class:`WireAlias`; ``named_in(name, fields)`` builds a named value (without it: a
    :class:`WireNamed`).  An exception a converter raises arrives as ``Undecodable`` too (its
    ``__cause__``).  Never raises anything else, whatever ``data`` is.
    """
    return decoder(pid_in=pid_in, ref_in=ref_in, alias_in=alias_in, named_in=named_in).decode(data)


def decoder(
    *,
    pid_in: InConverter | None = None,
    ref_in: InConverter | None = None,
    alias_in: InConverter | None = None,
    named_in: NamedIn | None = None,
    keep: Callable[[Any], bool] | None = None,
) -> "Decoder":
    """:func:`decode` with its converters fixed once (its hooks built once): the fast way to
    decode many frames (``decoder(...).decode``).  Not for two OS threads at once (give each
    thread its own).

    ``keep(value)``, asked about each value ``pid_in`` makes, says whether ``pid_in`` would
    make that very object again from the same bytes (a runtime's interned handles of another
    node's processes): then the same bytes answer it from then on without a converter call
    (up to :data:`KEPT` of them)."""
    ins = (pid_in, ref_in, alias_in)
    open_tags = [0]  # tags met that no array has taken as its head yet, in this decode
    kept: dict[bytes, Any] = {}  # a pid's ext payload -> the value keep() kept for it

    def ext_hook(code: int, payload: bytes) -> Any:
        if code != TAG_CODE:
            if code >= 0:  # the user's own, as ExtType(code, payload) but without its checks
                return _tuple_new(ExtType, (code, payload))
            raise Undecodable(f"unknown reserved ext code {code}")
        if len(payload) == 1:
            tag = _TAGS.get(payload)
            if tag is None:
                raise Undecodable(f"malformed tag {_short(payload)}")
            open_tags[0] += 1
            return tag
        known = kept.get(payload)
        if known is not None:
            return known
        kind = payload[0] if payload else 0
        if _PID <= kind <= _ALIAS and len(payload) >= _IDENTITY_SIZE:
            _, id, creation = _IDENTITY.unpack_from(payload)
            node = payload[_IDENTITY_SIZE:].decode("utf-8", "surrogatepass")
            make = ins[kind - _PID]
            if make is None:
                return _wire(_WIRE_CLASSES[kind - _PID], node, id, creation)
            value = make(node, id, creation)
            if kind == _PID and keep is not None and value is not None and keep(value):
                if len(kept) >= KEPT:
                    kept.clear()
                kept[payload] = value
            return value
        if kind == _BIGINT and len(payload) > 1:
            return int.from_bytes(payload[1:], "little", signed=True)
        raise Undecodable(f"malformed tag {_short(payload)}")

    def list_hook(items: list[Any]) -> Any:
        if not items or type(items[0]) is not _Tag:
            return items
        open_tags[0] -= 1
        kind = items[0].kind
        if kind == _TUPLE:
            return tuple(items[1:])
        if kind == _SET:
            return set(items[1:])
        if kind == _FROZENSET:
            return frozenset(items[1:])
        if kind == _NAMED:
            if len(items) < 2 or type(items[1]) is not str:
                raise Undecodable(f"a named value is [tag, str, *fields], not {_short(items[1:])}")
            if named_in is None:
                return WireNamed(items[1], tuple(items[2:]))
            return named_in(items[1], tuple(items[2:]))
        if len(items) < 3 or type(items[1]) is not str or type(items[2]) is not str:
            raise Undecodable(f"an exception is [tag, str, str, *args], not {_short(items[1:])}")
        return RemoteError(items[1], items[2], tuple(items[3:]))

    def decode_one(data: bytes) -> Any:
        open_tags[0] = 0
        try:
            value = unpackb(
                data,  # unpackb bounds every length a frame announces by len(data)
                ext_hook=ext_hook,
                list_hook=list_hook,
                strict_map_key=False,
                unicode_errors="surrogatepass",
            )
        except Undecodable:
            raise
        except Exception as exc:
            raise Undecodable(f"not a frame of this codec: {type(exc).__name__}: {exc}") from exc
        if open_tags[0]:
            raise Undecodable("a tag that does not head an array")
        return value

    return Decoder(decode_one, ext_hook, list_hook, open_tags)


class Decoder(NamedTuple):
    """What :func:`decoder` answers: ``decode(data)``, and its parts for a caller that runs
    ``msgpack.unpackb(data, ext_hook=ext_hook, list_hook=list_hook, strict_map_key=False,
    unicode_errors="surrogatepass")`` itself (to save a call per frame): its value is
    ``decode(data)``'s when it returns and ``open_tags[0]`` is 0 after it; otherwise call
    ``decode(data)``, which raises the :class:`Undecodable` that says why."""

    decode: Callable[[bytes], Any]
    ext_hook: Callable[[int, bytes], Any]
    list_hook: Callable[[list[Any]], Any]
    open_tags: list[int]


# --------------------------------------------------------------------------- helpers


def _type_name(t: type) -> str:
    """``ValueError`` for builtins, ``package.module.Qual.Name`` for the rest."""
    module = getattr(t, "__module__", None)
    qualname = getattr(t, "__qualname__", None) or getattr(t, "__name__", repr(t))
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def _not_wire_data(o: Any) -> str:
    """Why ``o`` is not wire data, with a hint where one helps."""
    t = type(o)
    name = _type_name(t)
    if callable(o) and hasattr(o, "__qualname__"):
        return (f"{name} {getattr(o, '__qualname__', '?')} is not wire data (a function crosses by"
                " name: a module-level one, or a functools.partial of one)")
    for base in _BASE_TYPES:
        if isinstance(o, base):
            base_name = base.__name__
            return f"{name} is not wire data (a subclass of {base_name}: send {base_name}(x))"
    return f"{name} is not wire data"


def _safe_repr(o: Any) -> str:
    try:
        return repr(o)
    except Exception:
        return f"<unrepresentable {_type_name(type(o))}>"


def _short(o: Any) -> str:
    text = _safe_repr(o)
    return text if len(text) <= 80 else text[:77] + "..."
