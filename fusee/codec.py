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
and every other object.

:func:`decode` raises ``ValueError`` on bytes that are not one JSON value
in UTF-8, on ``NaN``/``Infinity`` literals, on duplicate keys, and on a
malformed ``$dc``/``$dict`` object or fields that do not fit a registered
class.  :func:`to_tree` / :func:`from_tree` are the same two conversions
without the bytes, for the record encoding (:mod:`fusee.records`).
"""

from __future__ import annotations

import dataclasses
import json
import math
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
]

DC: Final = "$dc"
"""The key naming a registered dataclass in its encoded object."""
FIELDS: Final = "fields"
"""The key holding a dataclass's fields in its encoded object."""
DICT: Final = "$dict"
"""The key wrapping a user dict that has one of the reserved keys."""

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
    """``value`` as a plain JSON tree (what :func:`encode` writes), or raise ``NotSerializable``."""
    return _tree(value, root, set())


def _tree(value: Any, path: str, active: set[int]) -> Any:
    t = type(value)
    if value is None or t is bool or t is int:
        return value
    if t is str:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        return _raise(value, f"a float {value!r}: NaN and infinities are not JSON", path)
    if t is list or t is tuple:
        ident = id(value)
        if ident in active:
            return _raise(value, "a cycle (a container holding itself)", path)
        active.add(ident)
        out = [_tree(x, f"{path}[{i}]", active) for i, x in enumerate(value)]
        active.discard(ident)
        return out
    if t is dict:
        ident = id(value)
        if ident in active:
            return _raise(value, "a cycle (a container holding itself)", path)
        active.add(ident)
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                _raise(k, f"a key {k!r} of type {type(k).__qualname__}: keys must be str", path)
            out[k] = _tree(v, f"{path}[{k!r}]", active)
        active.discard(ident)
        if DC in out or DICT in out:
            return {DICT: out}
        return out
    if t is Unknown:
        return {DC: value.name, FIELDS: {k: _tree(v, f"{path}.{k}", active) for k, v in value.fields.items()}}
    name = _by_class.get(t)
    if name is not None:
        ident = id(value)
        if ident in active:
            return _raise(value, "a cycle (a container holding itself)", path)
        active.add(ident)
        fields = {
            f.name: _tree(getattr(value, f.name), f"{path}.{f.name}", active)
            for f in dataclasses.fields(value)
            if f.init
        }
        active.discard(ident)
        return {DC: name, FIELDS: fields}
    return _raise(value, _what(value), path)


def _raise(value: Any, why: str, path: str) -> Any:
    raise NotSerializable(value, why, path)


def dumps_tree(tree: Any, root: str = "value") -> bytes:
    """A plain JSON tree (from :func:`to_tree`) as compact UTF-8 JSON bytes (``root`` names it in errors)."""
    text = json.dumps(tree, ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        path = _bad_text(tree, root) or root
        raise NotSerializable(tree, "a str that is not valid Unicode (a lone surrogate)", path) from None


def _bad_text(tree: Any, path: str) -> str:
    """The path to the first str (value or key) in ``tree`` that UTF-8 refuses (slow path)."""

    def bad(s: str) -> bool:
        try:
            s.encode("utf-8")
            return False
        except UnicodeEncodeError:
            return True

    if type(tree) is str:
        return path if bad(tree) else ""
    if type(tree) is list:
        for i, x in enumerate(tree):
            found = _bad_text(x, f"{path}[{i}]")
            if found:
                return found
    if type(tree) is dict:
        for k, v in tree.items():
            if bad(k):
                return path
            found = _bad_text(v, f"{path}[{k!r}]")
            if found:
                return found
    return ""


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
    if not _plain(value, _FAST_DEPTH):
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


def loads_tree(data: bytes | bytearray | memoryview) -> Any:
    """UTF-8 JSON bytes as a plain JSON tree; ``ValueError`` unless exactly one strict JSON value."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode takes bytes, not {type(data).__qualname__}")
    text = bytes(data).decode("utf-8")
    try:
        return _decoder.decode(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def from_tree(tree: Any) -> Any:
    """A plain JSON tree (as read) back to the value: ``$dc`` objects become dataclasses, ``$dict`` unwraps."""
    t = type(tree)
    if t is list:
        return [from_tree(x) for x in tree]
    if t is not dict:
        return tree
    if DICT in tree:
        inner = tree[DICT]
        if len(tree) != 1 or type(inner) is not dict:
            raise ValueError(f"a malformed {DICT} object: {_short(tree)}")
        return {k: from_tree(v) for k, v in inner.items()}
    if DC in tree:
        name, fields = tree.get(DC), tree.get(FIELDS)
        if len(tree) != 2 or type(name) is not str or type(fields) is not dict:
            raise ValueError(f"a malformed {DC} object: {_short(tree)}")
        cls = _by_name.get(name)
        if cls is None:
            return Unknown(name, {k: from_tree(v) for k, v in fields.items()})
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        extra = [k for k in fields if k not in known]
        if extra:
            raise ValueError(f"dataclass {name!r} has no init field(s) {', '.join(map(repr, extra))}")
        kwargs = {k: from_tree(v) for k, v in fields.items()}
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise ValueError(f"dataclass {name!r} cannot be built from its fields: {e}") from None
    return {k: from_tree(v) for k, v in tree.items()}


def decode(data: bytes | bytearray | memoryview) -> Any:
    """The value :func:`encode` wrote as ``data``; ``ValueError`` on malformed bytes."""
    return from_tree(loads_tree(data))


def _short(tree: Any) -> str:
    text = repr(tree)
    return text if len(text) <= 80 else text[:77] + "..."
