"""Functions named ``"module:function"`` across OS processes: find one by its name, and the
name of one (checked to lead back to it)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ..decide import allow as _allow
from ..decide import carrier_nodes as _carrier_nodes
from ..decide.carrier_nodes import NotImportable

__all__ = ["resolve", "importable_name", "NotImportable"]


def resolve(fname: str, own_only: bool = False) -> Any:
    """The callable ``"module:function"`` names (importing the module), or None.

    The path after the colon never goes through another module (``"m:os.system"``, where ``m``
    imported ``os``, names nothing); with ``own_only`` the callable must also be one the module
    defines itself (its ``__module__``), not one it imported (``from os import system``).
    """
    module, function = _allow.parse(fname)
    try:
        obj: Any = importlib.import_module(module)
        for part in function.split("."):
            obj = getattr(obj, part)
            if isinstance(obj, ModuleType):
                return None
    except Exception:  # noqa: BLE001 - any failure to find it: "undefined"
        return None
    if own_only and getattr(obj, "__module__", None) != module:
        return None
    return obj if callable(obj) else None


def importable_name(fn: Any) -> str:
    """``"module:qualname"`` of ``fn``, checked to lead back to ``fn`` itself in this process;
    raises :class:`NotImportable` (a :class:`~ensemble.Badarg`) otherwise."""
    name = _carrier_nodes.function_name(getattr(fn, "__module__", None), getattr(fn, "__qualname__", None))
    if resolve(name) is not fn:
        raise NotImportable(f"{fn!r} is not found again as {name!r}: use a module-level function")
    return name
