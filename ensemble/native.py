"""ensemble.native: the loader of the C hot paths built from the top-level native/ folder.

The C modules declared in native/modules.py are compiled with cffi at install
time into compiled modules named ``ensemble._native_<name>`` (files of the
build, not Python code of ensemble).  Any library (fusee, an application)
gets one through this public loader, by its short name, and keeps a
pure-Python fallback, chosen at import time::

    from ensemble import native
    impl = native.load("x") or _pure_x

``load(name)`` returns the compiled cffi module (use its ``lib`` and
``ffi``), or None, and the caller falls back:

* when the environment variable ``ENSEMBLE_PURE_PYTHON`` is set to a
  non-empty value other than "0" (read once, at import of this module:
  ``FORCED_PURE``), silently;
* when it was not built and nothing expected it (not declared in
  native/modules.py, or no build report), silently;
* when the build report says its build failed at install time (no C compiler,
  a compile error), with a :class:`NativeFallbackWarning` (once per module and
  process).  A compiled file found anyway (a stale one from an earlier build)
  is NOT loaded: the report of the last build wins;
* when the report says it was built but its file is gone, or it is present
  but cannot be loaded (stale build, foreign ABI, missing ``_cffi_backend``),
  with a :class:`NativeFallbackWarning`.

The build report is ``_native_build.json`` (:data:`REPORT_NAME`), written by
every build (native/native_build.py) next to the compiled modules: in
site-packages after ``pip install .``, in the source tree after
``pip install -e .``.  A report made for another interpreter (its
``ext_suffix`` differs) is ignored.

:func:`status` answers, for every native module known (from the build report
and the compiled files present), whether it runs native and, if not, why;
:func:`status_lines` is its text, as printed by ``python -m ensemble
--version``.

The test suite runs both: once normally and once with
``ENSEMBLE_PURE_PYTHON=1`` (.ci/run does this whenever a native module is
declared), so both implementations stay correct.  How to add a module:
docs/native.md.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "FORCED_PURE",
    "NativeFallbackWarning",
    "NativeStatus",
    "REPORT_NAME",
    "load",
    "status",
    "status_lines",
]

ENV_VAR = "ENSEMBLE_PURE_PYTHON"

#: The build report's file name (the same as native_build.REPORT_NAME).
REPORT_NAME = "_native_build.json"

FORCED_PURE: bool = os.environ.get(ENV_VAR, "") not in ("", "0")

_PREFIX = "_native_"
_WARNED: set[str] = set()


class NativeFallbackWarning(RuntimeWarning):
    """A native module was expected (or found) but the pure-Python fallback runs."""


@dataclass(frozen=True)
class NativeStatus:
    """One native module: does it run native, and if not, why (when known).

    name      short name, e.g. ``"crc32c"``
    qualname  import name, e.g. ``"ensemble._native_crc32c"``
    native    True if :func:`load` returns the compiled module
    reason    why not, or None when native
    used_by   the hot path it serves (``native_module(used_by=...)``), or ""
    """

    name: str
    qualname: str
    native: bool
    reason: str | None
    used_by: str = ""


def _package_dirs() -> list[Path]:
    pkg = sys.modules.get(__package__ or "")
    paths = getattr(pkg, "__path__", None) or [os.path.dirname(__file__)]
    return [Path(p) for p in paths]


def _reports() -> list[tuple[Path, dict[str, Any]]]:
    """(directory, modules) of each build report of this interpreter, in package-path order."""
    found = []
    for d in _package_dirs():
        f = d / REPORT_NAME
        try:
            data = json.loads(f.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            warnings.warn(f"unreadable native build report {f}: {e}", NativeFallbackWarning, stacklevel=3)
            continue
        if not isinstance(data, dict) or not isinstance(data.get("modules"), dict):
            continue
        if data.get("ext_suffix") != importlib.machinery.EXTENSION_SUFFIXES[0]:
            continue  # made by another interpreter: says nothing about this one
        found.append((d, data["modules"]))
    return found


def _entry(qualname: str) -> dict[str, Any] | None:
    for _, modules in _reports():
        e = modules.get(qualname)
        if isinstance(e, dict):
            return e
    return None


def _resolve(name: str) -> tuple[ModuleType | None, str | None, bool]:
    """(module or None, why not, whether that deserves a warning); FORCED_PURE ignored."""
    qualname = f"{__package__}.{_PREFIX}{name}"
    entry = _entry(qualname)
    if entry is not None and not entry.get("built"):
        why = entry.get("error") or "unknown error"
        return None, f"its C build failed when ensemble was installed ({why})", True
    try:
        return importlib.import_module(qualname), None, False
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == qualname:
            if entry is not None:
                return None, f"built at install as {entry.get('file')}, but that file is gone", True
            return None, "not built (no build report says it should be)", False
        # built but unloadable (stale build, foreign ABI, missing _cffi_backend)
        return None, f"present but cannot be loaded ({e})", True


def load(name: str) -> ModuleType | None:
    """The compiled module ``ensemble._native_<name>``, or None (use the fallback).

    Raises ValueError for a name that is not an identifier.  Warns
    (:class:`NativeFallbackWarning`, once per module) when the module was
    expected, by the build report or by its presence, and cannot be used.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"native module name must be an identifier: {name!r}")
    if FORCED_PURE:
        return None
    mod, why, warn = _resolve(name)
    qualname = f"{__package__}.{_PREFIX}{name}"
    if warn and qualname not in _WARNED:
        _WARNED.add(qualname)
        warnings.warn(
            f"{qualname}: {why}; using the pure-Python fallback (slower). "
            f"Reinstall ensemble with a working C compiler (`pip install -e .` in a "
            f"checkout), or set {ENV_VAR}=1 to choose pure Python.",
            NativeFallbackWarning,
            stacklevel=2,
        )
    return mod


def _known() -> dict[str, str]:
    """name -> used_by of every native module in a build report or present as a file."""
    known: dict[str, str] = {}
    for _, modules in _reports():
        for qualname, e in modules.items():
            name = qualname.rpartition(".")[2]
            if isinstance(e, dict) and name.startswith(_PREFIX):
                known.setdefault(name[len(_PREFIX):], str(e.get("used_by") or ""))
    for d in _package_dirs():
        if not d.is_dir():
            continue
        for f in d.iterdir():
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                stem = f.name[: -len(suffix)]
                if f.name.endswith(suffix) and stem.startswith(_PREFIX) and stem.isidentifier():
                    known.setdefault(stem[len(_PREFIX):], "")
                    break
    return known


def status() -> list[NativeStatus]:
    """Every native module known here, sorted by name, and whether it runs native.

    Known means listed in a build report of this interpreter or present as a
    compiled file in the package.  Does not warn; ``reason`` says why a module
    falls back.  Under ``ENSEMBLE_PURE_PYTHON`` every module is reported as
    falling back for that reason.
    """
    out = []
    for name, used_by in sorted(_known().items()):
        qualname = f"{__package__}.{_PREFIX}{name}"
        if FORCED_PURE:
            out.append(NativeStatus(name, qualname, False, f"{ENV_VAR} is set", used_by))
            continue
        mod, why, _ = _resolve(name)
        out.append(NativeStatus(name, qualname, mod is not None, why, used_by))
    return out


def status_lines() -> list[str]:
    """:func:`status` as text, one line per module after a heading line."""
    modules = status()
    if not modules:
        return ["native hot paths: none (no native module built or reported)"]
    lines = ["native hot paths:"]
    for s in modules:
        used = f", used by {s.used_by}" if s.used_by else ""
        if s.native:
            lines.append(f"  {s.name}: native ({s.qualname}{used})")
        else:
            lines.append(f"  {s.name}: pure-Python fallback ({s.qualname}{used}): {s.reason}")
    return lines
