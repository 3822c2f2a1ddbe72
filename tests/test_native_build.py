"""The native build plumbing (native/native_build.py) really compiles modules.

A throwaway C module is declared with the very native_module() used in
native/modules.py, compiled with the backend's build_ext into a tmp dir,
loaded through ensemble.native.load and called.  Only a missing C toolchain
is a reason to skip.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import uuid
from pathlib import Path

import pytest

import ensemble
from ensemble import native

NATIVE_DIR = Path(__file__).resolve().parents[1] / "native"
if str(NATIVE_DIR) not in sys.path:
    sys.path.insert(0, str(NATIVE_DIR))

import native_build  # noqa: E402

PROBE_C = """\
static int probe_add(int a, int b) { return a + b; }
static long probe_sum(const long *xs, size_t n) {
    long s = 0; for (size_t i = 0; i < n; i++) s += xs[i]; return s; }
"""
PROBE_CDEF = """
int probe_add(int a, int b);
long probe_sum(const long *xs, size_t n);
"""


@pytest.fixture(scope="module")
def compiler_problem():
    return native_build.c_compiler_problem()


@pytest.fixture
def probe(tmp_path):
    src = tmp_path / "probe.c"
    src.write_text(PROBE_C)
    name = "probe_" + uuid.uuid4().hex[:12]
    return native_build.native_module(name, cdef=PROBE_CDEF, source=src)


@pytest.fixture
def on_ensemble_path(tmp_path, monkeypatch):
    """Make tmp_path/lib/ensemble part of the ensemble package; reload native."""
    lib = tmp_path / "lib"
    monkeypatch.setattr(ensemble, "__path__", [*ensemble.__path__, str(lib / "ensemble")])
    yield lib
    for key in [k for k, m in sys.modules.items() if str(tmp_path) in str(getattr(m, "__file__", ""))]:
        del sys.modules[key]
    monkeypatch.undo()
    importlib.reload(native)


def test_declaration_names_the_module(probe):
    assert probe.qualname == f"ensemble._native_{probe.name}"
    assert probe.source.is_file()


def test_declaration_is_validated(tmp_path):
    src = tmp_path / "x.c"
    src.write_text("int x;\n")
    with pytest.raises(ValueError):
        native_build.native_module("not-an-identifier", cdef="int f(void);", source=src)
    with pytest.raises(ValueError):
        native_build.native_module("x", cdef="  ", source=src)
    with pytest.raises(FileNotFoundError):
        native_build.native_module("x", cdef="int f(void);", source=tmp_path / "missing.c")


def test_compile_import_call(probe, tmp_path, on_ensemble_path, monkeypatch, compiler_problem):
    if compiler_problem:
        pytest.skip(compiler_problem)
    built = native_build.build_into([probe], on_ensemble_path, tmp_path / "temp")
    assert len(built) == 1, built
    assert built[0].parent == on_ensemble_path / "ensemble"
    assert built[0].name.startswith(f"_native_{probe.name}.")

    monkeypatch.delenv("ENSEMBLE_PURE_PYTHON", raising=False)
    loader = importlib.reload(native)
    mod = loader.load(probe.name)
    assert mod is not None, "built module not found by ensemble.native.load"
    assert mod.__name__ == probe.qualname
    assert mod.lib.probe_add(2, 3) == 5
    xs = mod.ffi.new("long[]", [1, 2, 3, 40])
    assert mod.lib.probe_sum(xs, 4) == 46

    monkeypatch.setenv("ENSEMBLE_PURE_PYTHON", "1")
    assert importlib.reload(native).load(probe.name) is None


def test_missing_compiler_warns_instead_of_failing(probe, tmp_path, monkeypatch):
    # What an install does without a C compiler: the module is simply absent.
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert native_build.build_into([probe], tmp_path / "lib", tmp_path / "temp", required=False) == []
    assert not list((tmp_path / "lib").rglob("*.so"))
    # ... unless the module is required (ENSEMBLE_REQUIRE_NATIVE=1).
    with pytest.raises(Exception, match="(?i)compil|command|exit|no-such-cc"):
        native_build.build_into([probe], tmp_path / "lib2", tmp_path / "temp2", required=True)


def test_bad_cdef_fails_loudly(tmp_path):
    # A declaration bug is not a missing compiler: it must break the build.
    import cffi

    src = tmp_path / "bad.c"
    src.write_text("int bad(void) { return 0; }\n")
    decl = native_build.native_module("bad_" + uuid.uuid4().hex[:8], cdef="int bad(;", source=src)
    with pytest.raises(cffi.CDefError):
        native_build.build_into([decl], tmp_path / "lib", tmp_path / "temp", required=False)


def test_backend_exposes_pep517_and_pep660_hooks():
    import ensemble_build_backend as backend

    for hook in (
        "build_wheel", "build_sdist", "build_editable",
        "get_requires_for_build_wheel", "get_requires_for_build_editable",
        "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable",
    ):
        assert callable(getattr(backend, hook)), hook


def test_declared_modules_are_well_formed():
    modules = native_build.declared_modules()
    assert isinstance(modules, list)
    for m in modules:
        assert m.source.is_file() and NATIVE_DIR in m.source.parents, m
    kwargs = native_build.setup_kwargs(modules)
    assert [e.name for e in kwargs["ext_modules"]] == [m.qualname for m in modules]


def test_declared_modules_are_built(compiler_problem):
    """Every module in native/modules.py is compiled into the source tree.

    Vacuous while the list is empty.  Fails when a module is declared, a C
    compiler exists, and yet it was not built: re-run `pip install -e .`
    (a plain `pip install .` builds into site-packages, not the source tree).
    """
    modules = native_build.declared_modules()
    if modules and compiler_problem:
        pytest.skip(compiler_problem)
    for m in modules:
        spec = importlib.util.find_spec(m.qualname)
        assert spec is not None, f"{m.qualname} is declared but not built: run `pip install -e .`"
        mod = importlib.import_module(m.qualname)
        assert hasattr(mod, "lib") and hasattr(mod, "ffi")


def _report(directory: Path) -> dict:
    return json.loads((directory / native_build.REPORT_NAME).read_text())


def test_failed_build_deletes_stale_modules_and_reports_why(probe, tmp_path, monkeypatch, capfd):
    """A leftover build dir never stands in for a failed build.

    Old compiled modules in build_lib/ensemble/ (this one, and one no longer
    declared), newer than the sources so that they look up to date, are
    deleted; the build report says the module failed and why; stderr says so.
    """
    pkg = tmp_path / "lib" / "ensemble"
    pkg.mkdir(parents=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    stale = [pkg / f"_native_{probe.name}{suffix}", pkg / f"_native_{probe.name}.abi3.so",
             pkg / f"_native_gone{suffix}"]
    for f in stale:
        f.write_bytes(b"an old build")
        os.utime(f, (2**31, 2**31))  # far in the future: "up to date"
    keep = pkg / "other.so"
    keep.write_bytes(b"not ours")
    monkeypatch.setenv("CC", "/bin/false")
    assert native_build.build_into([probe], tmp_path / "lib", tmp_path / "temp", required=False) == []
    assert [f for f in stale if f.exists()] == []
    assert keep.exists()
    entry = _report(pkg)["modules"][probe.qualname]
    assert entry["built"] is False and entry["file"] is None
    assert "/bin/false" in entry["error"]
    err = capfd.readouterr().err
    assert f"WARNING: ensemble:   {probe.qualname}" in err and "pure Python" in err


def test_successful_build_is_reported(probe, tmp_path, compiler_problem):
    if compiler_problem:
        pytest.skip(compiler_problem)
    pkg = tmp_path / "lib" / "ensemble"
    (built,) = native_build.build_into([probe], tmp_path / "lib", tmp_path / "temp")
    report = _report(pkg)
    assert report["ext_suffix"] == importlib.machinery.EXTENSION_SUFFIXES[0]
    assert report["modules"][probe.qualname] == {
        "name": probe.name, "used_by": "", "built": True, "file": built.name, "error": None,
    }


def test_declared_modules_say_what_they_speed_up():
    for m in native_build.declared_modules():
        assert m.used_by, f"{m.qualname}: give native_module(..., used_by=...)"
