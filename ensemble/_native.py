"""Loader for ensemble's optional C hot paths (cffi modules).

Every native module has a pure-Python fallback, chosen at import time by the
caller::

    from ensemble import _native
    impl = _native.load("x") or _pure_x

``load(name)`` returns the compiled cffi module ``ensemble._native_<name>``
(use its ``lib`` and ``ffi``), or None when it was not built (no C compiler at
install time, or not declared in native/modules.py) or when the environment
variable ``ENSEMBLE_PURE_PYTHON`` is set to a non-empty value other than "0"
(read once, at import of this module: ``FORCED_PURE``).

The test suite runs both: once normally and once with
``ENSEMBLE_PURE_PYTHON=1`` (.ci/run does this whenever a native module is
declared), so both implementations stay correct.  How to add a module:
docs/native.md.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

__all__ = ["FORCED_PURE", "load"]

ENV_VAR = "ENSEMBLE_PURE_PYTHON"

FORCED_PURE: bool = os.environ.get(ENV_VAR, "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The compiled module ``ensemble._native_<name>``, or None (use the fallback)."""
    if not name.isidentifier():
        raise ValueError(f"native module name must be an identifier: {name!r}")
    if FORCED_PURE:
        return None
    qualname = f"{__package__}._native_{name}"
    try:
        return importlib.import_module(qualname)
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == qualname:
            return None  # not built: the caller's pure-Python fallback runs
        # built but unloadable (stale build, foreign ABI, missing _cffi_backend)
        warnings.warn(
            f"{qualname} is present but cannot be loaded ({e}); using the "
            f"pure-Python fallback. Rebuild with `pip install -e .`.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
