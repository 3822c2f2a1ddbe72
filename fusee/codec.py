"""fusee's payload codec: JSON values and registered dataclasses to UTF-8 JSON bytes and back.

Payloads (workflow inputs and results, step results, signal values, recorded
values) are JSON values: ``None``, ``bool``, ``int``, finite ``float``,
``str``, ``list`` and ``dict`` with ``str`` keys.  :func:`encode` writes them
as compact JSON (``separators=(",", ":")``, keys in the dict's own order,
not sorted; non-ASCII written as UTF-8, not escaped); the same value always
gives the same bytes.  :func:`decode` reads them back, so
``decode(encode(v)) == v``.  Nothing is ever pickled or evaluated.

Also accepted, with what comes back:

* a ``tuple`` encodes as a JSON array and comes back as a ``list``;
* an instance of a dataclass registered with :func:`register` encodes as
  ``{"$dc": "<registered name>", "fields": {<init fields in declaration
  order>}}`` and comes back as an instance (built by calling the class with
  the fields as keyword arguments, so a field added later with a default
  takes its default).  Dataclasses nest in any payload and in each other.
  A name nobody registered (in this process) decodes as :class:`Unknown`,
  which encodes back to the same bytes;
* a ``dict`` that has the key ``"$dc"`` or ``"$dict"`` is escaped as
  ``{"$dict": {...}}`` so it is never taken for a dataclass.

Refused, with :class:`fusee.errors.NotSerializable` naming the path to the
bad part (``root`` then ``['key']``, ``[index]`` or ``.field``, e.g.
``input['items'][2]``): NaN and infinities, ``bytes``, sets, a key that is
no exact ``str``, subclasses of the JSON types (``bool`` aside; enum
members, ``str`` or ``int`` subclasses: convert them first), unregistered
dataclasses, cycles, strings that are not valid Unicode (lone surrogates),
a value nested deeper than :data:`MAX_DEPTH` (256) containers (the path to
the first container past it), and every other object.

:func:`decode` raises ``ValueError`` on bytes that are not one JSON value
in UTF-8, on ``NaN``/``Infinity`` literals, on duplicate keys, and on a
malformed ``$dc``/``$dict`` object or fields that do not fit a registered
class, and on a value nested deeper than :data:`MAX_DEPTH`.  Neither
direction ever raises ``RecursionError``: values are walked with a stack of
their own (or a quick recursive walk that gives way to one), so a value at
the limit is written and read from any depth of call stack.

:func:`to_tree` / :func:`from_tree` are the same two conversions without
the bytes, for the record encoding (:mod:`fusee.records`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import reprlib
from typing import Any, Callable, Final, TypeVar, overload

from .errors import NotSerializable

__all__ = [
    "encode",
    "decode",
    "to_tree",
    "from_tree",
    "dumps_tree",
    "loads_tree",
    "register",
    "unregister",
    "registered",
    "Unknown",
    "DC",
    "FIELDS",
    "DICT",
    "MAX_DEPTH",
    "MAX_JSON_DEPTH",
]

DC: Final = "$dc"
"""The key naming a registered dataclass in its encoded object."""
FIELDS: Final = "fields"
"""The key holding a dataclass's fields in its encoded object."""
DICT: Final = "$dict"
"""The key wrapping a user dict that has one of the reserved keys."""
MAX_DEPTH: Final = 256
"""The deepest a payload may nest: containers (list, tuple, dict, dataclass) inside one another,
the outermost counting 1.  Encoding refuses deeper with ``NotSerializable`` (the path to the
first container too deep); decoding refuses it with ``ValueError``."""

T = TypeVar("T", bound=type)

_by_name: dict[str, type] = {}
_by_class: dict[type, str] = {}


# -- registry ------------------------------------------------------------------------


@overload
def register(cls: T, *, name: str | None = None) -> T: ...
@overload
def register(cls: None = None, *, name: str | None = None) -> Callable[[T], T]: ...
def register(cls: Any = None, *, name: str | None = None) -> Any:
    """Register dataclass ``cls`` under ``name`` (default ``module.qualname``); returns ``cls``.

    Works as ``register(cls)``, ``@register`` and ``@register(name="Order")``.
    Registering the same class under the same name again is harmless; another
    class under a taken name, or a taken class under another name, raises
    ``ValueError``; a class that is no dataclass raises ``TypeError``.
    """
    if cls is None:
        return lambda c: register(c, name=name)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"only dataclasses can be registered, not {cls!r}")
    key = f"{cls.__module__}.{cls.__qualname__}" if name is None else name
    if type(key) is not str or not key:
        raise TypeError(f"a registered name is a non-empty str, not {key!r}")
    held = _by_name.get(key)
    if held is not None and held is not cls:
        raise ValueError(f"the name {key!r} is already registered for {held!r}")
    old = _by_class.get(cls)
    if old is not None and old != key:
        raise ValueError(f"{cls!r} is already registered as {old!r}")
    _by_name[key] = cls
    _by_class[cls] = key
    return cls


def unregister(cls: type) -> None:
    """Forget ``cls`` (if registered): its instances are refused again and its name decodes as :class:`Unknown`."""
    key = _by_class.pop(cls, None)
    if key is not None:
        del _by_name[key]


def registered() -> dict[str, type]:
    """A copy of the registry: each registered name to its class."""
    return dict(_by_name)


@dataclasses.dataclass(frozen=True, slots=True)
class Unknown:
    """A dataclass payload whose name is not registered here: its name and its field trees, kept as read."""

    name: str
    fields: dict


# -- value -> tree -------------------------------------------------------------------


def _refuse(value: Any, why: str, path: str) -> NotSerializable:
    return NotSerializable(value, why, path)


def _what(value: Any) -> str:
    t = type(value)
    if t is set:
        return "a set"
    if t is frozenset:
        return "a frozenset"
    if t in (bytes, bytearray, memoryview):
        return f"{t.__name__} (encode binary data as text first)"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"an unregistered dataclass {t.__qualname__} (register it with fusee.codec.register)"
    for base in (bool, int, float, str, list, tuple, dict):
        if isinstance(value, base):
            return f"a {t.__qualname__} (a subclass of {base.__name__}: convert it to a plain {base.__name__})"
    return f"a {t.__module__}.{t.__qualname__}"


def to_tree(value: Any, root: str = "value") -> Any:
    """``value`` as a plain JSON tree (what :func:`encode` writes), or raise ``NotSerializable``.

    Walks ``value`` with a stack of its own, not Python's: any depth of call
    stack is room enough, and a container more than :data:`MAX_DEPTH` deep is
    refused with its path.
    """
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        return _raise(value, f"a float {value!r}: NaN and infinities are not JSON", root)
    active: set[int] = set()
    stack = [_enter(value, root, active, 0)]  # a scalar returned above; anything else is a frame or raised
    while True:
        # a frame: [kind, out, items, path, ident, the item's key/index/field, (dataclass name)]
        frame = stack[-1]
        kind, out = frame[0], frame[1]
        for at, x in frame[2]:
            if kind is _DICT and type(at) is not str:
                _raise(at, f"a key {at!r} of type {type(at).__qualname__}: keys must be str", frame[3])
            tx = type(x)
            if x is None or tx is bool or tx is int or tx is str:
                pass
            elif tx is float:
                if not math.isfinite(x):
                    frame[5] = at
                    _raise(x, f"a float {x!r}: NaN and infinities are not JSON", _child(frame))
            else:
                frame[5] = at
                stack.append(_enter(x, _child(frame), active, len(stack)))
                break
            if kind is _LIST:
                out.append(x)
            else:
                out[at] = x
        else:  # every item done: close the frame and hand its tree to its parent
            stack.pop()
            active.discard(frame[4])
            tree = _close(frame)
            if not stack:
                return tree
            parent = stack[-1]
            if parent[0] is _LIST:
                parent[1].append(tree)
            else:
                parent[1][parent[5]] = tree


_LIST: Final = "list"
_DICT: Final = "dict"
_FIELDS: Final = "fields"


def _child(frame: list[Any]) -> str:
    """The path of the item ``frame`` is at: ``path[i]``, ``path['key']`` or ``path.field``."""
    kind, path, at = frame[0], frame[3], frame[5]
    if kind is _LIST:
        return f"{path}[{at}]"
    if kind is _DICT:
        return f"{path}[{at!r}]"
    return f"{path}.{at}"


def _enter(value: Any, path: str, active: set[int], depth: int) -> list[Any]:
    """The walk's frame for container ``value`` at ``path``, ``depth`` containers down; else raise."""
    t = type(value)
    if t is list or t is tuple or t is dict or t is Unknown or t in _by_class:
        ident = id(value)
        if ident in active:
            return _raise(value, "a cycle (a container holding itself)", path)
        if depth >= MAX_DEPTH:
            return _raise(value, f"nested deeper than {MAX_DEPTH} containers (fusee.codec.MAX_DEPTH)", path)
        if t is list or t is tuple:
            frame = [_LIST, [], enumerate(value), path, ident, None]
        elif t is dict:
            frame = [_DICT, {}, iter(value.items()), path, ident, None]
        elif t is Unknown:
            name, fields = value.name, value.fields
            if type(name) is not str:
                return _raise(name, f"an Unknown's name {_short(name)} is no str", path)
            if type(fields) is not dict:
                return _raise(fields, f"an Unknown's fields are a {type(fields).__qualname__}, not a dict", path)
            for k in fields:
                if type(k) is not str:
                    return _raise(k, f"a field name {k!r} of type {type(k).__qualname__}: names must be str", path)
            frame = [_FIELDS, {}, iter(fields.items()), path, ident, None, name]
        else:
            names = [f.name for f in dataclasses.fields(value) if f.init]
            frame = [_FIELDS, {}, ((n, getattr(value, n)) for n in names), path, ident, None, _by_class[t]]
        active.add(ident)
        return frame
    return _raise(value, _what(value), path)


def _close(frame: list[Any]) -> Any:
    """The tree of a frame whose items are all done."""
    kind, out = frame[0], frame[1]
    if kind is _LIST:
        return out
    if kind is _DICT:
        return {DICT: out} if DC in out or DICT in out else out
    return {DC: frame[6], FIELDS: out}


def _raise(value: Any, why: str, path: str) -> Any:
    raise NotSerializable(value, why, path)


def dumps_tree(tree: Any, root: str = "value") -> bytes:
    """A plain JSON tree (from :func:`to_tree`) as compact UTF-8 JSON bytes (``root`` names it in errors)."""
    try:
        text = json.dumps(tree, ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False)
    except RecursionError:  # json's C encoder recurses: too little stack left here for this tree
        text = _dumps_iter(tree)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        path = _bad_text(tree, root) or root
        raise NotSerializable(tree, "a str that is not valid Unicode (a lone surrogate)", path) from None


def _dumps_iter(tree: Any) -> str:
    """The text ``json.dumps`` gives for a plain JSON tree (str keys), written with a stack of its own."""
    parts: list[str] = []
    add = parts.append
    stack: list[tuple[Any, bool]] = [(tree, False)]  # (what to write, whether a "," goes first)
    while stack:
        x, comma = stack.pop()
        if comma:
            add(",")
        t = type(x)
        if t is _Text:  # a closing bracket or a key prefix, written as is
            add(x)
        elif t is str:
            add(_encode_str(x))
        elif x is None:
            add("null")
        elif x is True:
            add("true")
        elif x is False:
            add("false")
        elif t is int:
            add(int.__repr__(x))
        elif t is float:
            if not _isfinite(x):
                raise ValueError(f"Out of range float values are not JSON compliant: {x!r}")
            add(float.__repr__(x))
        elif t is list:
            add("[")
            stack.append((_Text("]"), False))
            stack.extend((v, i > 0) for i, v in reversed(list(enumerate(x))))
        elif t is dict:
            add("{")
            stack.append((_Text("}"), False))
            for i, (k, v) in reversed(list(enumerate(x.items()))):
                if type(k) is not str:
                    raise TypeError(f"keys must be str, not {type(k).__qualname__}")
                stack.append((v, False))
                stack.append((_Text(_encode_str(k) + ":"), i > 0))
        else:
            raise TypeError(f"Object of type {t.__name__} is not JSON serializable")
    return "".join(parts)


class _Text(str):
    """Text :func:`_dumps_iter` writes as is (a bracket, or a key and its colon)."""

    __slots__ = ()


def _bad_text(tree: Any, path: str) -> str:
    """The path to the first str (value or key) in ``tree`` that UTF-8 refuses (slow path), or ``""``."""

    def bad(s: str) -> bool:
        try:
            s.encode("utf-8")
            return False
        except UnicodeEncodeError:
            return True

    stack: list[tuple[Any, str]] = [(tree, path)]
    while stack:
        x, where = stack.pop()
        if type(x) is str:
            if bad(x):
                return where
        elif type(x) is list:
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(x))))
        elif type(x) is dict:
            later: list[tuple[Any, str]] = []
            for k, v in x.items():
                if bad(k):  # the key comes before its value and the items after it
                    later.append((_BAD_KEY, where))
                    break
                later.append((v, f"{where}[{k!r}]"))
            stack.extend(reversed(later))
        elif x is _BAD_KEY:
            return where
    return ""


_BAD_KEY: Final = object()


def encode(value: Any, *, root: str = "value") -> bytes:
    """``value`` as compact UTF-8 JSON bytes; ``NotSerializable`` (path starting at ``root``) if refused."""
    text = _fast_text(value)
    if text is not None:
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: the full walk names it
    return dumps_tree(to_tree(value, root), root)


# -- the fast path -------------------------------------------------------------------
#
# Most payloads are plain JSON values already (no tuple, dataclass, reserved
# key, NaN, cycle...): for them ``to_tree`` would only copy.  ``_plain`` checks
# that cheaply and ``_fast_text`` then writes them with a reused encoder,
# giving the very text ``dumps_tree(to_tree(v))`` gives.  Anything else (or
# anything deeper than ``_FAST_DEPTH``, which is where a cycle would end up)
# answers ``None`` and takes the full, path-reporting walk.

_FAST_DEPTH: Final = 32

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False)
_encode_text = _encoder.encode
_isfinite = math.isfinite


def _plain(value: Any, depth: int) -> bool:
    """Whether ``value`` is a plain JSON value that ``to_tree`` would hand back unchanged."""
    t = type(value)
    if value is None or t is str or t is int or t is bool:
        return True
    if t is float:
        return _isfinite(value)
    if depth <= 0:
        return False
    if t is list:
        depth -= 1
        for x in value:
            tx = type(x)
            if tx is str or tx is int or x is None or tx is bool:
                continue
            if not _plain(x, depth):
                return False
        return True
    if t is dict:
        if DC in value or DICT in value:
            return False
        depth -= 1
        for k, x in value.items():
            if type(k) is not str:
                return False
            tx = type(x)
            if tx is str or tx is int or x is None or tx is bool:
                continue
            if not _plain(x, depth):
                return False
        return True
    return False


def _fast_text(value: Any) -> str | None:
    """The JSON text of ``value`` if it is a plain JSON value (a str may still hold a lone surrogate), else ``None``."""
    t = type(value)
    if t is str:
        return _encode_str(value)
    if value is None:
        return "null"
    if t is int:
        try:
            return int.__repr__(value)
        except ValueError:  # too many digits for str(): let the full path raise it
            return None
    if t is bool:
        return "true" if value else "false"
    if t is float:
        return float.__repr__(value) if _isfinite(value) else None
    try:
        if not _plain(value, _FAST_DEPTH):
            return None
    except RecursionError:  # too little stack left for the quick check: the full walk needs none
        return None
    try:
        return _encode_text(value)
    except (ValueError, RecursionError):
        return None


_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]


# -- tree -> value -------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k!r}")
            seen.add(k)
    return out


_decoder = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constant)

MAX_JSON_DEPTH: Final = 2 * MAX_DEPTH + 1
"""The deepest JSON nesting :func:`loads_tree` reads: a record (one object) holding a payload
:data:`MAX_DEPTH` containers deep, each of them a dataclass (two objects: ``$dc`` and its fields)."""


def loads_tree(data: bytes | bytearray | memoryview) -> Any:
    """UTF-8 JSON bytes as a plain JSON tree; ``ValueError`` unless exactly one strict JSON value
    nested at most :data:`MAX_JSON_DEPTH` deep.  Never ``RecursionError``, however deep the input or
    the call stack (see :func:`_read_tree`)."""
    tree = _read_tree(data)
    if type(tree) is list or type(tree) is dict:
        text = bytes(data)
        if text.count(b"[") + text.count(b"{") > MAX_JSON_DEPTH and _json_depth(tree) > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}")
    return tree


def _read_tree(data: bytes | bytearray | memoryview) -> Any:
    """:func:`loads_tree` without its depth check (for a reader that checks depth itself, as
    :func:`from_tree` does): json's C decoder, which recurses, and where it runs out of stack a reader
    with a stack of its own (the same grammar), which refuses nesting deeper than :data:`MAX_JSON_DEPTH`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode takes bytes, not {type(data).__qualname__}")
    text = bytes(data).decode("utf-8")
    try:
        return _decoder.decode(text)
    except RecursionError:
        return _loads_iter(text)


def _json_depth(tree: Any) -> int:
    """How many arrays and objects deep ``tree`` nests (0 for a scalar)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        x, d = stack.pop()
        if type(x) is list:
            items: Any = x
        elif type(x) is dict:
            items = x.values()
        else:
            continue
        if d > deepest:
            deepest = d
        stack.extend((v, d + 1) for v in items if type(v) is list or type(v) is dict)
    return deepest


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]


def _loads_iter(text: str) -> Any:
    """One strict JSON value (as ``_decoder.decode`` reads it: the same hooks), read with a stack of
    its own; ``ValueError`` for anything else or for nesting deeper than :data:`MAX_JSON_DEPTH`."""
    ws = _WS.match
    n = len(text)
    # open containers: [items, key] (an object's items are (key, value) pairs; key None for an array)
    stack: list[list[Any]] = []
    at = ws(text, 0).end()
    while True:
        # a value starts at ``at``
        c = text[at : at + 1]
        if c == '"':
            value, at = _scanstring(text, at + 1, True)
        elif c == "[" or c == "{":
            if len(stack) >= MAX_JSON_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}")
            at = ws(text, at + 1).end()
            close = "]" if c == "[" else "}"
            if text[at : at + 1] == close:
                at += 1
                value = [] if c == "[" else _pairs([])
            else:
                frame: list[Any] = [[], None]
                if c == "{":
                    frame[1], at = _key(text, at)
                stack.append(frame)
                continue
        elif c == "n" and text.startswith("null", at):
            value, at = None, at + 4
        elif c == "t" and text.startswith("true", at):
            value, at = True, at + 4
        elif c == "f" and text.startswith("false", at):
            value, at = False, at + 5
        elif c == "N" and text.startswith("NaN", at):
            value, at = _no_constant("NaN"), at + 3
        elif c == "I" and text.startswith("Infinity", at):
            value, at = _no_constant("Infinity"), at + 8
        elif c == "-" and text.startswith("-Infinity", at):
            value, at = _no_constant("-Infinity"), at + 9
        else:
            m = _NUMBER.match(text, at)
            if m is None:
                raise ValueError(f"Expecting value at {at}")
            whole, frac, exp = m.groups()
            value = float(whole + (frac or "") + (exp or "")) if frac or exp else int(whole)
            at = m.end()
        # ``value`` is complete: hand it to the open container, closing those it completes
        while True:
            if not stack:
                at = ws(text, at).end()
                if at != n:
                    raise ValueError(f"Extra data at {at}")
                return value
            frame = stack[-1]
            obj = frame[1] is not None
            frame[0].append((frame[1], value) if obj else value)
            at = ws(text, at).end()
            c = text[at : at + 1]
            if c == ",":
                at = ws(text, at + 1).end()
                if obj:
                    frame[1], at = _key(text, at)
                break
            if c != ("}" if obj else "]"):
                raise ValueError(f"Expecting ',' delimiter at {at}")
            at += 1
            stack.pop()
            value = _pairs(frame[0]) if obj else frame[0]


def _key(text: str, at: int) -> tuple[str, int]:
    """An object's key at ``at`` (whitespace skipped before it) and the ``:`` after it; the value's start."""
    if text[at : at + 1] != '"':
        raise ValueError(f"Expecting property name enclosed in double quotes at {at}")
    key, end = _scanstring(text, at + 1, True)
    end = _WS.match(text, end).end()
    if text[end : end + 1] != ":":
        raise ValueError(f"Expecting ':' delimiter at {end}")
    return key, _WS.match(text, end + 1).end()


def from_tree(tree: Any) -> Any:
    """A plain JSON tree (as read) back to the value: ``$dc`` objects become dataclasses, ``$dict`` unwraps.

    ``ValueError`` for a malformed ``$dc``/``$dict`` object, fields that do not
    fit the registered class, or a value nested deeper than :data:`MAX_DEPTH`
    (counted as :func:`to_tree` counts: a ``$dc`` or ``$dict`` object and what
    it wraps are one container).  ``tree`` is left as it was.  Never
    ``RecursionError``: the quick recursive walk gives way, when the stack runs
    out, to one with a stack of its own (:func:`_from_tree_iter`, the same result).
    """
    t = type(tree)
    if t is not list and t is not dict:
        return tree
    try:
        return _from_tree_rec(tree, MAX_DEPTH)
    except RecursionError:
        return _from_tree_iter(tree)


def _from_tree_rec(tree: Any, room: int) -> Any:
    """:func:`from_tree` by recursion; ``room``: how many more containers may nest here."""
    t = type(tree)
    if t is list:
        if room <= 0:
            raise ValueError(_TOO_DEEP)
        room -= 1
        return [x if type(x) is not list and type(x) is not dict else _from_tree_rec(x, room) for x in tree]
    if t is not dict:
        return tree
    if room <= 0:
        raise ValueError(_TOO_DEEP)
    room -= 1
    if DICT in tree or DC in tree:
        items, build = _special(tree)
    else:
        items, build = tree, None
    out = {
        k: x if type(x) is not list and type(x) is not dict else _from_tree_rec(x, room) for k, x in items.items()
    }
    return out if build is None else build(out)


_TOO_DEEP: Final = f"a value nested deeper than {MAX_DEPTH} containers (fusee.codec.MAX_DEPTH)"


def _special(tree: dict) -> tuple[dict, Any]:
    """A ``$dict`` or ``$dc`` object's items and how to build the value from them (None: they are it)."""
    if DICT in tree:
        inner = tree[DICT]
        if len(tree) != 1 or type(inner) is not dict:
            raise ValueError(f"a malformed {DICT} object: {_short(tree)}")
        return inner, None
    name, fields = tree.get(DC), tree.get(FIELDS)
    if len(tree) != 2 or type(name) is not str or type(fields) is not dict:
        raise ValueError(f"a malformed {DC} object: {_short(tree)}")
    cls = _by_name.get(name)
    if cls is None:
        return fields, lambda kw: Unknown(name, kw)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    extra = [k for k in fields if k not in known]
    if extra:
        raise ValueError(f"dataclass {name!r} has no init field(s) {', '.join(map(repr, extra))}")
    return fields, lambda kw: _build(cls, name, kw)


def _from_tree_iter(tree: Any) -> Any:
    """:func:`from_tree` with a stack of its own: the same value, or the same error, at any stack depth."""
    t = type(tree)
    if t is not list and t is not dict:
        return tree
    stack = [_open(tree, 0)]
    while True:
        # a frame: [items: (index or key, tree) pairs, out, the item's key, build (None: out as is)]
        frame = stack[-1]
        out = frame[1]
        into_list = type(out) is list
        for at, x in frame[0]:
            tx = type(x)
            if tx is list or tx is dict:
                frame[2] = at
                stack.append(_open(x, len(stack)))
                break
            if into_list:
                out.append(x)
            else:
                out[at] = x
        else:  # every item done: build the value and hand it to the parent
            stack.pop()
            value = out if frame[3] is None else frame[3](out)
            if not stack:
                return value
            parent = stack[-1]
            if type(parent[1]) is list:
                parent[1].append(value)
            else:
                parent[1][parent[2]] = value


def _open(tree: Any, depth: int) -> list[Any]:
    """The walk's frame for the list or dict ``tree`` below ``depth`` containers; ValueError if malformed."""
    if depth >= MAX_DEPTH:
        raise ValueError(_TOO_DEEP)
    if type(tree) is list:
        return [enumerate(tree), [], None, None]
    if DICT in tree or DC in tree:
        items, build = _special(tree)
    else:
        items, build = tree, None
    return [iter(items.items()), {}, None, build]


def _build(cls: type, name: str, kwargs: dict[str, Any]) -> Any:
    """An instance of registered dataclass ``cls`` from its decoded fields; ValueError if they do not fit."""
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"dataclass {name!r} cannot be built from its fields: {e}") from None


def decode(data: bytes | bytearray | memoryview) -> Any:
    """The value :func:`encode` wrote as ``data``; ``ValueError`` on malformed bytes."""
    return from_tree(_read_tree(data))


_shown = reprlib.Repr()
_shown.maxlevel = 3
_shown.maxstring = 40
_shown.maxother = 40


def _short(tree: Any) -> str:
    """A short repr of ``tree`` for a message (bounded in depth and length, whatever ``tree`` is)."""
    text = _shown.repr(tree)
    return text if len(text) <= 80 else text[:77] + "..."
