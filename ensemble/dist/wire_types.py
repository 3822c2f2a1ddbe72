"""Values that cross the wire by name: registered types and constants, and functions.

The codec (:mod:`ensemble.dist.codec`) carries plain data.  A program lets more cross, as
Erlang lets records and funs cross, by naming it:

* ``register(cls)``: instances of ``cls`` travel as its name and fields (a dataclass's fields
  by default; ``to_fields``/``from_fields`` for other classes) and arrive as ``cls`` again, on
  every node where the same registration ran (importing the module that registers is enough).
  A name no registration knows arrives as a :class:`~ensemble.dist.codec.WireNamed` (its wire
  name and fields), and so does one whose ``from_fields`` refuses the fields: the message is
  still delivered, and sent on it travels as it came.
* ``register_constant(obj, name)``: a sentinel travels as its name and arrives as the very
  object registered under that name there (identity comparisons keep working).
* A module-level function travels as ``"module:qualname"`` and arrives as that function when
  the receiving node lets it in (the node's ``allow``, or the node is the sender's carrier
  node), else as a :class:`WireFunction` that raises :class:`~ensemble.Badarg` when called.
  A ``functools.partial`` of such a function travels with its arguments.

Nothing is imported or constructed from a name that was not registered first: decoding calls
only the ``from_fields`` a program registered, and resolves functions under its ``allow``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Callable

from .._exceptions import Badarg
from .._threads import allocate_lock
from .codec import WireNamed
from .functions import NotImportable, importable_name

__all__ = ["register", "register_constant", "WireNamed", "WireFunction", "named_out", "named_in"]

_lock = allocate_lock()
#: type -> (name, to_fields)
_OUT: dict[type, tuple[str, Callable[[Any], tuple]]] = {}
#: name -> from_fields
_IN: dict[str, Callable[..., Any]] = {}
#: id(constant) -> (name, the constant itself, kept alive)
_CONST_OUT: dict[int, tuple[str, Any]] = {}
_CONST_IN: dict[str, Any] = {}
#: function -> its "module:qualname" (functions found importable once are not checked again)
_FUNCTION_NAMES: dict[Any, str] = {}

_TYPE, _CONSTANT, _FUNCTION = "T:", "C:", "F:"
_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType)


#: A registered value whose name this node does not know (or whose fields its registration
#: refused) arrives as the codec's WireNamed: the wire name and the fields it came with (sent on,
#: it travels as it came).
WireStruct = WireNamed


class WireFunction:
    """A function another node sent by name that this node does not let in; calling it raises
    :class:`~ensemble.Badarg`."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise Badarg(f"the function {self.name!r} is not allowed on this node")

    def __eq__(self, other: Any) -> bool:
        return type(other) is WireFunction and other.name == self.name

    def __hash__(self) -> int:
        return hash(("WireFunction", self.name))

    def __repr__(self) -> str:
        return f"WireFunction({self.name!r})"


def register(cls: type, name: str | None = None, *, to_fields: Callable[[Any], tuple] | None = None,
             from_fields: Callable[..., Any] | None = None) -> type:
    """Let instances of ``cls`` (exactly that type) cross the wire as ``name`` (default
    ``"module:qualname"``) and their fields; answers ``cls``, so it works as a decorator.

    ``to_fields(obj)`` gives the fields (default: a dataclass's fields, in order) and
    ``from_fields(*fields)`` builds the value again (default: ``cls(*fields)``).  Registering
    the same class under the same name again is a no-op; a name or class already registered
    otherwise raises :class:`~ensemble.Badarg`.
    """
    if not isinstance(cls, type):
        raise Badarg(f"register takes a class, not {cls!r}")
    if name is None:
        name = f"{cls.__module__}:{cls.__qualname__}"
    if type(name) is not str or not name:
        raise Badarg(f"a wire name is a non-empty str, not {name!r}")
    if to_fields is None:
        if not dataclasses.is_dataclass(cls):
            raise Badarg(f"{cls.__qualname__} is not a dataclass: give to_fields and from_fields")
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)

        def to_fields(obj: Any, names: tuple = names) -> tuple:
            return tuple(getattr(obj, n) for n in names)

    build = from_fields if from_fields is not None else cls
    with _lock:
        old = _OUT.get(cls)
        if old is not None:
            if old[0] == name:
                return cls
            raise Badarg(f"{cls.__qualname__} is registered as {old[0]!r} already")
        if name in _IN:
            raise Badarg(f"the wire name {name!r} is taken")
        _OUT[cls] = (name, to_fields)
        _IN[name] = build
    return cls


def register_constant(obj: Any, name: str) -> Any:
    """Let the sentinel ``obj`` cross the wire as ``name``, arriving as the object registered
    under ``name`` on the receiving node; answers ``obj``."""
    if type(name) is not str or not name:
        raise Badarg(f"a wire name is a non-empty str, not {name!r}")
    with _lock:
        old = _CONST_IN.get(name)
        if old is not None and old is not obj:
            raise Badarg(f"the wire name {name!r} is taken")
        _CONST_OUT[id(obj)] = (name, obj)
        _CONST_IN[name] = obj
    return obj


def _function_name(fn: Any) -> str | None:
    """``"module:qualname"`` when that name leads back to ``fn`` here, else None."""
    name = _FUNCTION_NAMES.get(fn)
    if name is not None:
        return name
    try:
        name = importable_name(fn)
    except NotImportable:
        return None
    _FUNCTION_NAMES[fn] = name
    return name


def named_out(o: Any) -> tuple[str, tuple] | None:
    """``(wire name, fields)`` for a value that crosses by name, None for any other."""
    t = type(o)
    found = _OUT.get(t)
    if found is not None:
        return _TYPE + found[0], tuple(found[1](o))
    const = _CONST_OUT.get(id(o))
    if const is not None and const[1] is o:
        return _CONSTANT + const[0], ()
    if t is functools.partial:
        return _TYPE + "functools:partial", (o.func, o.args, o.keywords)
    if t is WireNamed:
        return o.name, o.fields
    if t is WireFunction:
        return _FUNCTION + o.name, ()
    if t in _FUNCTION_TYPES:
        name = _function_name(o)
        if name is not None:
            return _FUNCTION + name, ()
    return None


def named_in(name: str, fields: tuple, resolve_function: Callable[[str], Any]) -> Any:
    """The value a wire name and its fields stand for on this node; ``resolve_function(name)``
    answers the function ``"module:qualname"`` names when this node lets it in, else None."""
    kind, rest = name[:2], name[2:]
    if kind == _TYPE:
        if rest == "functools:partial" and len(fields) == 3:
            fn, args, kwargs = fields
            if callable(fn) and type(args) is tuple and type(kwargs) is dict and all(
                type(k) is str for k in kwargs
            ):
                return functools.partial(fn, *args, **kwargs)
            return WireNamed(name, fields)
        build = _IN.get(rest)
        if build is not None:
            try:
                return build(*fields)
            except Exception:  # noqa: BLE001 - a peer's fields the registration refuses
                return WireNamed(name, fields)
        return WireNamed(name, fields)
    if kind == _CONSTANT and not fields:
        obj = _CONST_IN.get(rest, _CONST_IN)
        return obj if obj is not _CONST_IN else WireNamed(name, ())
    if kind == _FUNCTION and not fields:
        fn = resolve_function(rest)
        return fn if fn is not None else WireFunction(rest)
    return WireStruct(name, fields)
