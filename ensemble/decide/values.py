"""Small immutable answers for the decision modules: one base instead of one per module.

A :class:`Value` subclass names its fields in ``_fields``; it gets a plain
generated ``__init__`` over them (it runs on hot paths), equality by type and
fields (identity first, then a guarded ``==``: a field's ``__eq__`` may raise),
a hash that agrees with it also for unhashable fields, a repr, and pickling by
constructor.  Setting or deleting an attribute raises.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Value", "Singleton", "same"]


def same(a: Any, b: Any) -> bool:
    """``a is b`` or ``a == b``, where an ``==`` that raises or answers no truth value means False."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an odd __eq__ means "not the same"
        return False


class Value:
    """Base of the small immutable answers: equal when of one type with equal fields."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        """Give each answer a plain ``__init__`` over its own fields, unless it writes one."""
        super().__init_subclass__(**kw)
        fields = cls.__dict__.get("_fields", ())
        if fields and "__init__" not in cls.__dict__:
            args = ", ".join(fields)
            body = "".join(f"    _set(self, {f!r}, {f})\n" for f in fields)
            ns: dict = {"_set": object.__setattr__}
            exec(f"def __init__(self, {args}):\n{body}", ns)  # noqa: S102 - built from field names only
            cls.__init__ = ns["__init__"]  # type: ignore[misc]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(same(a, b) for a, b in zip(self._values(), other._values()))  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        try:
            return hash((type(self), self._values()))
        except Exception:  # noqa: BLE001 - an unhashable field: equal answers still hash alike
            return hash(type(self))

    def __repr__(self) -> str:
        inner = ", ".join(repr(v) for v in self._values())
        return f"{type(self).__name__}({inner})"

    def __reduce__(self) -> tuple:
        return (type(self), self._values())


class Singleton:
    """Base of an answer with one instance per class (``IGNORE`` and the like), also after pickling."""

    __slots__ = ()

    def __new__(cls) -> "Singleton":
        inst = cls.__dict__.get("_instance")
        if inst is None:
            inst = super().__new__(cls)
            cls._instance = inst  # type: ignore[attr-defined]
        return inst

    def __reduce__(self) -> tuple:
        return (type(self), ())
