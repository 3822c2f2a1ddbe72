"""What process_info shows of a process's stack: which frame is its current function.

Asked by ``ensemble._info``.  A parked process's innermost frames are the
runtime's own (``ensemble._process``, gevent, greenlet); what a person wants
to see is the innermost frame of the code the process runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["is_runtime_module", "current_function"]

#: Top-level packages whose frames are plumbing, never a process's current function.
_PLUMBING = frozenset({"gevent", "greenlet", "threading"})


def is_runtime_module(module: Any) -> bool:
    """True for a module whose frames are the runtime's plumbing: ensemble's private modules, gevent, greenlet."""
    if type(module) is not str:
        return False
    parts = module.split(".")
    if parts[0] in _PLUMBING:
        return True
    return parts[0] == "ensemble" and any(p.startswith("_") for p in parts[1:])


def current_function(frames: Sequence[Any]) -> tuple | None:
    """The frame to show as current, ``(module, qualname, line)``, from ``frames`` innermost first.

    Each frame is ``(module, qualname, line)``; the innermost one outside the
    runtime's plumbing (:func:`is_runtime_module`) is the answer, else the
    innermost of all, else None (no frames).  Malformed entries are skipped.
    """
    well_formed = [f for f in frames if type(f) is tuple and len(f) == 3]
    for f in well_formed:
        if not is_runtime_module(f[0]):
            return f
    return well_formed[0] if well_formed else None
