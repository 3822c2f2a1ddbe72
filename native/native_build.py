"""Build plumbing for ensemble's optional C hot paths (cffi, API mode).

This file is NOT part of the installed distribution.  It is imported by the
in-tree PEP 517 backend (``native/ensemble_build_backend.py``, found through
``backend-path = ["native"]`` in pyproject.toml) and by the tests.

One declaration per C module, in ``native/modules.py``::

    native_module("mailbox", cdef="int mbx_push(void *q, void *item);")

declares the extension ``ensemble._native_mailbox``, built from
``native/mailbox.c`` (``#include``-d into cffi's generated wrapper, so it may
use ``static`` functions, and its own headers next to it in native/).  At
install time it is compiled into the ``ensemble`` package (in the source tree
for ``pip install -e .``).  ``ensemble.native.load("mailbox")`` returns the
compiled module, or None, and the caller falls back to pure Python.

Compilation is optional: with no working C compiler the install still
succeeds and every caller runs its pure-Python fallback.  Set
``ENSEMBLE_REQUIRE_NATIVE=1`` at install time to make a compile failure fatal
instead.  A failure is never silent, although pip hides a backend's output:

* every build writes a build report, ``<package>/_native_build.json``
  (:data:`REPORT_NAME`), next to the compiled modules (into the wheel, or
  into the source tree for ``pip install -e .``): per module, built or not
  and why.  ``ensemble.native`` reads it: ``load()`` warns once
  (``NativeFallbackWarning``) when a declared module failed to build, and
  ``python -m ensemble --version`` lists it;
* the build prints a warning on stderr (seen with ``pip install -v``) and,
  best effort, on the controlling terminal (``/dev/tty``), which pip does
  not capture.

A stale artifact never stands in for a failed build: before compiling, the
build deletes every compiled ``_native_*`` module of the packages it builds
for, in the build directory (a leftover ``build/``) and, for in-place builds,
next to the sources; and it always recompiles (``force``), so an old ``.so``
that looks up to date is not reused.

Nothing here imports cffi or setuptools at import time, so
``declared_modules()`` works with any python3.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

NATIVE_DIR = Path(__file__).resolve().parent
MODULES_FILE = NATIVE_DIR / "modules.py"
REQUIRE_ENV = "ENSEMBLE_REQUIRE_NATIVE"
#: The build report's file name, in each package that has native modules.
#: ensemble/native.py reads it (and has its own copy of this name).
REPORT_NAME = "_native_build.json"
REPORT_FORMAT = 1


@dataclass(frozen=True)
class NativeModule:
    """One declared C module.  Make it with :func:`native_module`."""

    name: str
    cdef: str
    source: Path
    package: str = "ensemble"
    ext_kwargs: Mapping[str, Any] = field(default_factory=dict)
    used_by: str = ""

    @property
    def qualname(self) -> str:
        """Import name of the compiled module, e.g. ``ensemble._native_mailbox``."""
        return f"{self.package}._native_{self.name}"

    def ffibuilder(self):
        """The cffi FFI for this module (cdef + set_source)."""
        from cffi import FFI

        ffi = FFI()
        ffi.cdef(self.cdef)
        # The C file is #include-d, not compiled separately: its static
        # functions are visible to the wrapper, and compiler errors point at
        # the real file and line.
        ffi.set_source(self.qualname, f'#include "{self.source.name}"\n')
        return ffi

    def emit_c(self, build_temp: str | os.PathLike) -> Path:
        """Write cffi's generated wrapper C file into build_temp; return it."""
        out = Path(build_temp) / f"{self.qualname}.c"
        out.parent.mkdir(parents=True, exist_ok=True)
        self.ffibuilder().emit_c_code(str(out))  # rewrites only if changed
        return out


def native_module(
    name: str,
    cdef: str,
    source: str | os.PathLike | None = None,
    *,
    package: str = "ensemble",
    used_by: str = "",
    **ext_kwargs: Any,
) -> NativeModule:
    """Declare a C module: THE one call to add a hot path (in native/modules.py).

    name        short name; the module is ``<package>._native_<name>``
    cdef        the C declarations exposed to Python (cffi cdef syntax)
    source      the C file, relative to native/ (default ``<name>.c``);
                absolute paths are accepted (the tests use a tmp dir)
    package     the Python package the .so lands in (default ``ensemble``)
    used_by     the hot path it speeds up, e.g. ``"fusee.crc32c"``: shown by
                ``python -m ensemble --version`` (from the build report)
    ext_kwargs  passed to setuptools.Extension (libraries,
                extra_compile_args, define_macros, ...)
    """
    if not name.isidentifier():
        raise ValueError(f"native module name must be an identifier: {name!r}")
    if not isinstance(cdef, str) or not cdef.strip():
        raise ValueError(f"native module {name!r}: cdef must be a non-empty string")
    path = Path(source if source is not None else f"{name}.c")
    if not path.is_absolute():
        path = NATIVE_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"native module {name!r}: C source {path} not found")
    return NativeModule(name, cdef, path.resolve(), package, dict(ext_kwargs), str(used_by))


def declared_modules(modules_file: str | os.PathLike = MODULES_FILE) -> list[NativeModule]:
    """The MODULES list of native/modules.py (validated: unique names)."""
    if str(NATIVE_DIR) not in sys.path:
        sys.path.insert(0, str(NATIVE_DIR))  # so modules.py can import us
    spec = importlib.util.spec_from_file_location("_ensemble_native_modules", modules_file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    modules = list(mod.MODULES)
    seen: set[str] = set()
    for m in modules:
        if not hasattr(m, "qualname") or not hasattr(m, "emit_c"):
            raise TypeError(f"{modules_file}: MODULES entries must come from native_module(): {m!r}")
        if m.qualname in seen:
            raise ValueError(f"{modules_file}: native module {m.qualname} declared twice")
        seen.add(m.qualname)
    return modules


def _rel(path: Path) -> str:
    """Path relative to the cwd (the project root during a build) if inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def require_native() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def extensions(modules: Iterable[NativeModule], *, optional: bool = True) -> list:
    """setuptools Extensions for the modules; their C wrapper is generated at build time."""
    from setuptools import Extension

    exts = []
    for m in modules:
        kw = dict(m.ext_kwargs)
        kw["include_dirs"] = [str(m.source.parent), *kw.get("include_dirs", ())]
        kw["depends"] = [_rel(m.source), *kw.get("depends", ())]
        ext = Extension(m.qualname, sources=[], optional=optional, **kw)
        ext._ensemble_native = m  # picked up by BuildExt.run
        exts.append(ext)
    return exts


def compiled_artifacts(directory: str | os.PathLike) -> list[Path]:
    """The compiled ``_native_*`` modules in directory that this interpreter could import.

    That is, files named ``_native_<identifier><suffix>`` for a suffix of
    ``importlib.machinery.EXTENSION_SUFFIXES`` (``.cpython-311-x86_64-linux-gnu.so``,
    ``.abi3.so``, ``.so`` on CPython 3.11/Linux).  These are what a build
    deletes before compiling, so that none can outlive a failed build.
    """
    d = Path(directory)
    if not d.is_dir():
        return []
    found = []
    for f in sorted(d.iterdir()):
        if not f.name.startswith("_native_"):
            continue
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if f.name.endswith(suffix) and f.name[: -len(suffix)].isidentifier():
                found.append(f)
                break
    return found


def _one_line(e: BaseException, head: int = 150, tail: int = 100) -> str:
    """The exception on one line; a long one (a compiler command line) keeps its
    head (which command) and its tail (how it ended)."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= head + tail + 5 else f"{text[:head]} ... {text[-tail:]}"


def tell_terminal(text: str) -> bool:
    """Write text to the controlling terminal (``/dev/tty``); False if there is none.

    pip captures a build backend's stdout and stderr and shows them only if
    the build fails (or with ``-v``), but the backend still has pip's
    controlling terminal: this is how a successful install that fell back to
    pure Python is seen anyway.  Without a terminal (CI, a detached session)
    nothing is written; the runtime warning and the build report remain.
    """
    try:
        fd = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _build_ext_class():
    from setuptools.command.build_ext import build_ext

    class BuildExt(build_ext):
        """build_ext for declared native modules: cffi wrapper, no stale .so, a report.

        Before compiling: writes cffi's wrapper C for each declared module,
        deletes every compiled ``_native_*`` module of their packages from the
        output directories (build_lib, and the source package for in-place /
        editable builds) and sets ``force``, so nothing old can stand in for
        a module that fails now.  Compile errors of optional extensions are
        turned into warnings by setuptools itself (the .so is then absent).
        After: writes the build report (:data:`REPORT_NAME`) into each output
        package directory, and, if a module was not built, a warning on
        stderr and (``tell_terminal``) on the controlling terminal.
        """

        #: False in build_into() (tests): no writing to the developer's terminal.
        tell_terminal = True

        def run(self):
            self._ensemble_errors: dict[str, str] = {}
            natives = [
                (ext, ext._ensemble_native)
                for ext in self.extensions
                if getattr(ext, "_ensemble_native", None) is not None
            ]
            for ext, m in natives:
                ext.sources = [str(m.emit_c(self.build_temp))]
            if natives:
                self.force = True  # an old .so that merely looks up to date is not reused
                for d in self._package_dirs({m.package for _, m in natives}):
                    for stale in compiled_artifacts(d):
                        stale.unlink()
            super().run()
            if natives:
                self._report([m for _, m in natives])

        def build_extension(self, ext):
            try:
                super().build_extension(ext)
            except Exception as e:
                if getattr(ext, "_ensemble_native", None) is not None:
                    self._ensemble_errors[ext.name] = _one_line(e)
                raise

        def _package_dirs(self, packages) -> list[Path]:
            """Where the packages' compiled modules land: build_lib, and in place."""
            dirs = []
            for pkg in sorted(packages):
                dirs.append(Path(self.build_lib, *pkg.split(".")))
                if self.inplace:
                    build_py = self.get_finalized_command("build_py")
                    dirs.append(Path(build_py.get_package_dir(pkg)))
            return dirs

        def _report(self, modules: list[NativeModule]) -> None:
            failed = []
            for pkg in sorted({m.package for m in modules}):
                mine = [m for m in modules if m.package == pkg]
                for d in self._package_dirs([pkg]):
                    d.mkdir(parents=True, exist_ok=True)
                    entries = {}
                    for m in mine:
                        so = d / Path(self.get_ext_filename(m.qualname)).name
                        built = so.is_file()
                        error = None if built else self._ensemble_errors.get(
                            m.qualname, "not built (see the build output)")
                        entries[m.qualname] = {
                            "name": m.name,
                            "used_by": m.used_by,
                            "built": built,
                            "file": so.name if built else None,
                            "error": error,
                        }
                        if not built and (m, error) not in failed:
                            failed.append((m, error))
                    report = {
                        "format": REPORT_FORMAT,
                        "ext_suffix": importlib.machinery.EXTENSION_SUFFIXES[0],
                        "modules": entries,
                    }
                    (d / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
            if failed:
                text = failure_message(failed)
                sys.stderr.write(text)
                sys.stderr.flush()
                if self.tell_terminal and not _isatty(sys.stderr):
                    tell_terminal(text)

    return BuildExt


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def failure_message(failed: Iterable[tuple[NativeModule, str]]) -> str:
    """The warning a build prints when declared modules were not built."""
    lines = ["", "WARNING: ensemble: a C hot path was not built; it will run in pure Python (slower)."]
    for m, error in failed:
        used = f" (used by {m.used_by})" if m.used_by else ""
        lines.append(f"WARNING: ensemble:   {m.qualname}{used}: {error}")
    lines.append(
        "WARNING: ensemble: the install goes on. Check with `python -m ensemble --version`; "
        f"{REQUIRE_ENV}=1 makes this an error."
    )
    return "\n".join(lines) + "\n"


def _sdist_class():
    from setuptools.command.sdist import sdist

    class Sdist(sdist):
        """sdist that also ships native/ (the build backend and the C sources)."""

        def make_release_tree(self, base_dir, files):
            extra = [
                _rel(p)
                for p in sorted(NATIVE_DIR.iterdir())
                if p.is_file() and p.suffix in (".py", ".c", ".h", ".md")
            ]
            files = list(files)
            files += [f for f in extra if f not in files]
            super().make_release_tree(base_dir, files)

    return Sdist


def setup_kwargs(modules: Iterable[NativeModule] | None = None) -> dict[str, Any]:
    """Keyword arguments for setuptools.setup() (metadata comes from setup.cfg)."""
    if modules is None:
        modules = declared_modules()
    return {
        "ext_modules": extensions(modules, optional=not require_native()),
        "cmdclass": {"build_ext": _build_ext_class(), "sdist": _sdist_class()},
    }


def build_into(
    modules: Iterable[NativeModule],
    build_lib: str | os.PathLike,
    build_temp: str | os.PathLike | None = None,
    *,
    required: bool = True,
) -> list[Path]:
    """Compile modules into build_lib/<package>/ with the same build_ext as the
    backend, outside of any install.  Returns the built .so paths.  With
    required=False a compile failure only warns (as in a real install).  As in
    an install, stale compiled ``_native_*`` modules in build_lib/<package>/
    are deleted first and the build report is written there; the controlling
    terminal is left alone."""
    from setuptools import Distribution

    modules = list(modules)
    build_lib = Path(build_lib)
    build_temp = Path(build_temp) if build_temp is not None else build_lib / "_temp"
    dist = Distribution(
        {
            "name": "ensemble-native-build",
            "ext_modules": extensions(modules, optional=not required),
            "cmdclass": {"build_ext": _build_ext_class()},
        }
    )
    cmd = dist.get_command_obj("build_ext")
    cmd.tell_terminal = False
    cmd.build_lib = str(build_lib)
    cmd.build_temp = str(build_temp)
    cmd.inplace = False
    cmd.ensure_finalized()
    cmd.run()
    return [build_lib / cmd.get_ext_filename(m.qualname) for m in modules
            if (build_lib / cmd.get_ext_filename(m.qualname)).exists()]


def c_compiler_problem() -> str | None:
    """None if a C compiler can build against the Python headers, else why not.

    Independent of the plumbing above (calls the compiler directly), so the
    tests can tell "no toolchain" (skip) from "plumbing broken" (fail).
    """
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        return f"no C compiler ({cc[0] if cc else 'CC unset'!r} not found)"
    include = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.c")
        src.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
        try:
            r = subprocess.run(
                [*cc, "-c", str(src), "-I", include, "-o", str(Path(tmp, "probe.o"))],
                capture_output=True, text=True, timeout=120,
            )
        except OSError as e:
            return f"C compiler {cc[0]!r} cannot run: {e}"
    if r.returncode != 0:
        return f"C compiler {cc[0]!r} cannot build against Python.h: {r.stderr.strip()[-300:]}"
    return None
