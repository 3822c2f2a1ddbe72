"""What a step body gets (:class:`StepContext`), and whether a body takes it (:func:`_takes_step_context`).

Shared by workflow code (:mod:`fusee.ctx`), object handlers (:mod:`fusee.objects`), the test kit and
tracing; depends on nothing of fusee.
"""

from __future__ import annotations

import inspect
from types import FunctionType as _FunctionType
from typing import Any, Callable

__all__ = ["StepContext"]


class StepContext:
    """What a step body ``fn(s)`` gets: ``s.key`` (the idempotency key, stable across retries and
    crashes: ``"<workflow id>/<run>/<seq>"``), ``s.name`` and ``s.attempt`` (1-based)."""

    __slots__ = ("key", "name", "attempt")

    def __init__(self, key: str, name: str, attempt: int) -> None:
        self.key = key
        self.name = name
        self.attempt = attempt

    def __repr__(self) -> str:
        return f"StepContext(key={self.key!r}, name={self.name!r}, attempt={self.attempt})"


_arity_cache: dict[Any, bool] = {}


def _takes_step_context(fn: Callable[..., Any]) -> bool:
    """Whether step body ``fn`` takes the :class:`StepContext` (one required positional parameter, or
    ``*args``); cached by code object."""
    if type(fn) is _FunctionType:  # the common case: a plain function or lambda, cached by its code
        hit = _arity_cache.get(fn.__code__)
        if hit is not None:
            return hit
    code = getattr(fn, "__code__", None)
    if code is not None and not inspect.ismethod(fn):
        hit = _arity_cache.get(code)
        if hit is None:
            hit = _arity_cache[code] = _signature_takes_one(fn)
        return hit
    return _signature_takes_one(fn)


def _signature_takes_one(fn: Callable[..., Any]) -> bool:
    """:func:`_takes_step_context` from ``fn``'s signature (False where it has none)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) >= 1 or any(p.kind is p.VAR_POSITIONAL for p in params)
