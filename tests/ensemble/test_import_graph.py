"""The runtime's import graph: _passivate uses _process, never the other way round."""

from __future__ import annotations

import ast
import pathlib

import ensemble
from ensemble import _passivate, _process

ROOT = pathlib.Path(ensemble.__file__).resolve().parent


def _relative_imports(name: str) -> set:
    """Every module ``ensemble/<name>.py`` imports relatively, at module level or inside a function."""
    tree = ast.parse((ROOT / f"{name}.py").read_text())
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level > 0:
            if n.module:
                out.add(n.module.split(".")[0])
            else:
                out |= {a.name for a in n.names}
    return out


def test_process_does_not_import_passivate_and_passivate_imports_process():
    """No circle: _process knows the image store only through the IMAGES slot _passivate fills."""
    assert "_passivate" not in _relative_imports("_process")
    assert "_process" in _relative_imports("_passivate")


def test_passivate_installs_itself_as_the_image_store():
    """Once ensemble is imported, _process writes, restores and drops images through _passivate."""
    assert _process.IMAGES is _passivate
    for fn in ["write_image", "drop_file", "restore", "discard"]:
        assert callable(getattr(_process.IMAGES, fn))
