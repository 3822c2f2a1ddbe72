"""ensemble.native, the public loader of the C modules built from native/: load (forced pure, unknown,
unloadable, failed-build modules -> None), status()."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import sys
import uuid
import warnings
from pathlib import Path

import pytest

import ensemble
from ensemble import native

ENV = "ENSEMBLE_PURE_PYTHON"


@pytest.fixture
def reload_native(monkeypatch):
    """reload_native(value): reload ensemble.native with ENV set to value (None: unset)."""

    def _reload(value):
        if value is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, value)
        return importlib.reload(native)

    yield _reload
    monkeypatch.undo()
    importlib.reload(native)


@pytest.fixture
def extra_dir(tmp_path, monkeypatch):
    """A directory appended to ensemble.__path__, for fake ensemble._native_* modules."""
    d = tmp_path / "ensemble"
    d.mkdir()
    monkeypatch.setattr(ensemble, "__path__", [*ensemble.__path__, str(d)])
    yield d
    for key in [k for k, m in sys.modules.items() if str(tmp_path) in str(getattr(m, "__file__", ""))]:
        del sys.modules[key]


def fresh_name() -> str:
    return "t" + uuid.uuid4().hex[:12]


def test_the_loader_is_public_and_the_former_name_is_the_same_module():
    import ensemble._native as former

    assert "native" in ensemble.__all__ and ensemble.native is native
    assert former is native and ensemble._native is native
    for f in (native.load, native.status, native.status_lines):
        assert (f.__doc__ or "").strip(), f


def test_fusee_loads_its_native_module_through_the_public_loader():
    import fusee.crc32c as c

    assert c.native is native
    assert (c.IMPLEMENTATION == "native") == (native.load("crc32c") is not None)


@pytest.mark.parametrize("value", ["1", "yes", "true", "anything"])
def test_env_var_sets_forced_pure(reload_native, value):
    assert reload_native(value).FORCED_PURE is True


@pytest.mark.parametrize("value", [None, "", "0"])
def test_env_var_unset_empty_or_zero_is_not_forced(reload_native, value):
    assert reload_native(value).FORCED_PURE is False


def test_forced_pure_returns_none_even_if_module_exists(reload_native, extra_dir):
    name = fresh_name()
    (extra_dir / f"_native_{name}.py").write_text("lib = ffi = object()\n")
    assert reload_native(None).load(name) is not None
    assert reload_native("1").load(name) is None


def test_unknown_name_returns_none(reload_native):
    mod = reload_native(None)
    assert mod.load("no_such_native_module_" + fresh_name()) is None


def test_found_module_is_returned(reload_native, extra_dir):
    name = fresh_name()
    (extra_dir / f"_native_{name}.py").write_text("lib = 'LIB'\nffi = 'FFI'\n")
    mod = reload_native(None).load(name)
    assert mod is not None and mod.__name__ == f"ensemble._native_{name}"
    assert (mod.lib, mod.ffi) == ("LIB", "FFI")


@pytest.mark.parametrize(
    "body",
    ["raise ImportError('undefined symbol: foo')\n", "import no_such_dependency_xyz\n"],
)
def test_unloadable_module_warns_and_returns_none(reload_native, extra_dir, body):
    name = fresh_name()
    (extra_dir / f"_native_{name}.py").write_text(body)
    mod = reload_native(None)
    with pytest.warns(RuntimeWarning, match="pure-Python fallback"):
        assert mod.load(name) is None


@pytest.mark.parametrize("bad", ["", "a.b", "../x", "x-y"])
def test_invalid_name_is_an_error(bad):
    with pytest.raises(ValueError):
        native.load(bad)


def test_unknown_name_does_not_warn(reload_native):
    mod = reload_native(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mod.load("absent_" + fresh_name()) is None


# --------------------------------------------------------------------------
# The build report (_native_build.json) and status()
# --------------------------------------------------------------------------


def write_report(directory, modules, ext_suffix=None):
    """A build report in directory: modules maps short name -> (built, error)."""
    report = {
        "format": 1,
        "ext_suffix": ext_suffix or importlib.machinery.EXTENSION_SUFFIXES[0],
        "modules": {
            f"ensemble._native_{name}": {
                "name": name, "used_by": f"user.of.{name}", "built": built,
                "file": f"_native_{name}.so" if built else None, "error": error,
            }
            for name, (built, error) in modules.items()
        },
    }
    (directory / native.REPORT_NAME).write_text(json.dumps(report))


def test_report_name_is_the_builds():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
    try:
        import native_build
    finally:
        sys.path.pop(0)
    assert native.REPORT_NAME == native_build.REPORT_NAME


def test_failed_build_in_the_report_wins_over_a_stale_module(reload_native, extra_dir):
    """A module the last build failed to build is not loaded, even if an old one is there; it warns."""
    name = fresh_name()
    (extra_dir / f"_native_{name}.py").write_text("lib = ffi = 'OLD'\n")  # left by an earlier build
    write_report(extra_dir, {name: (False, "CompileError: command '/bin/false' failed")})
    mod = reload_native(None)
    with pytest.warns(mod.NativeFallbackWarning, match=r"(?s)build failed.*/bin/false.*pure-Python fallback"):
        assert mod.load(name) is None
    assert f"ensemble._native_{name}" not in sys.modules


def test_fallback_warning_is_given_once_per_module(reload_native, extra_dir):
    name = fresh_name()
    write_report(extra_dir, {name: (False, "no compiler")})
    mod = reload_native(None)
    with pytest.warns(mod.NativeFallbackWarning):
        assert mod.load(name) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mod.load(name) is None


def test_reported_built_but_missing_file_warns(reload_native, extra_dir):
    name = fresh_name()
    write_report(extra_dir, {name: (True, None)})
    mod = reload_native(None)
    with pytest.warns(mod.NativeFallbackWarning, match="gone"):
        assert mod.load(name) is None


def test_forced_pure_does_not_warn_about_a_failed_build(reload_native, extra_dir):
    name = fresh_name()
    write_report(extra_dir, {name: (False, "no compiler")})
    mod = reload_native("1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mod.load(name) is None


def test_report_of_another_interpreter_is_ignored(reload_native, extra_dir):
    name = fresh_name()
    (extra_dir / f"_native_{name}.py").write_text("lib = ffi = 'X'\n")
    write_report(extra_dir, {name: (False, "no compiler")}, ext_suffix=".cpython-299-elsewhere.so")
    assert reload_native(None).load(name) is not None


def test_status_says_which_modules_are_native_and_why_not(reload_native, extra_dir):
    ok, failed, gone = fresh_name(), fresh_name(), fresh_name()
    (extra_dir / f"_native_{ok}.py").write_text("lib = ffi = 'X'\n")
    write_report(extra_dir, {ok: (True, None), failed: (False, "CompileError: boom"), gone: (True, None)})
    mod = reload_native(None)
    by_name = {s.name: s for s in mod.status()}
    assert by_name[ok] == mod.NativeStatus(ok, f"ensemble._native_{ok}", True, None, f"user.of.{ok}")
    assert by_name[failed].native is False and "CompileError: boom" in by_name[failed].reason
    assert by_name[gone].native is False and "gone" in by_name[gone].reason
    lines = mod.status_lines()
    assert lines[0] == "native hot paths:"
    assert f"  {ok}: native (ensemble._native_{ok}, used by user.of.{ok})" in lines
    assert any(line.startswith(f"  {failed}: pure-Python fallback") and "boom" in line for line in lines)

    forced = reload_native("1")
    assert all(not s.native and "ENSEMBLE_PURE_PYTHON" in s.reason for s in forced.status())
    assert {ok, failed, gone} <= {s.name for s in forced.status()}


def test_status_finds_compiled_files_without_a_report(reload_native, extra_dir):
    name = fresh_name()
    (extra_dir / f"_native_{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"not an ELF")
    mod = reload_native(None)
    (entry,) = [s for s in mod.status() if s.name == name]
    assert entry.native is False and "cannot be loaded" in entry.reason
