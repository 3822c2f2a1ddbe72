"""ensemble._native.load: forced pure, unknown and unloadable modules -> None."""

from __future__ import annotations

import importlib
import sys
import uuid
import warnings

import pytest

import ensemble
from ensemble import _native

ENV = "ENSEMBLE_PURE_PYTHON"


@pytest.fixture
def reload_native(monkeypatch):
    """reload_native(value): reload ensemble._native with ENV set to value (None: unset)."""

    def _reload(value):
        if value is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, value)
        return importlib.reload(_native)

    yield _reload
    monkeypatch.undo()
    importlib.reload(_native)


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
        _native.load(bad)


def test_unknown_name_does_not_warn(reload_native):
    mod = reload_native(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mod.load("absent_" + fresh_name()) is None
