"""No import cycle among a package's modules (parsed with ``ast``; nothing is imported).

What counts as an edge ``a -> b`` (``a`` imports ``b``, both modules of the package):

* every ``import`` / ``from ... import`` statement in ``a``, at module level *or inside a
  function or class body*: an import deferred into a function is still a dependency, and
  deferring it is the usual way a cycle is hidden rather than removed;
* except those under ``if TYPE_CHECKING:`` (``typing.TYPE_CHECKING``): they exist for the type
  checker only and never run.

``from . import x`` names the submodule ``x`` when the package has one, else the package's
``__init__``; ``from .x import y`` names ``x`` (or ``x.y`` when that is a submodule).  An import of
the package itself (``__init__``) is ignored: ``__init__`` re-exports, and every module imports
through it implicitly anyway.

Written for any package; asserted for all three (:data:`CHECKED`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The packages asserted free of import cycles.
CHECKED = ["ensemble", "constellation", "fusee"]


def modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` (dotted name -> file), subpackages included."""
    base = ROOT / package
    out: dict[str, Path] = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree``, at any depth, but not under ``if TYPE_CHECKING:``."""
    out: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:  # the else branch runs
                    walk_stmt(sub)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            walk(child)

    def walk_stmt(stmt: ast.AST) -> None:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.append(stmt)
        walk(stmt)

    walk(tree)
    return out


def edges(package: str) -> dict[str, set[str]]:
    """``module -> the package's modules it imports`` (see the module docstring for what counts)."""
    mods = modules(package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = mod if is_pkg else mod.rpartition(".")[0]  # the package relative imports start from
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base)
                    src = f"{prefix}.{node.module}" if node.module else prefix
                else:
                    src = node.module or ""
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    targets.append(sub if sub in mods else src)
            for t in targets:
                while t and t not in mods:  # import a.b.c of a module a.b: the edge is to a.b
                    t = t.rpartition(".")[0]
                if t and t != mod and t != package:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: one per strongly connected component of more than one module
    (or a module importing itself), as its sorted modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan; the graphs are small, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


@pytest.mark.parametrize("package", CHECKED)
def test_no_import_cycle(package: str) -> None:
    graph = edges(package)
    assert len(graph) > 3, f"{package}: too few modules found ({sorted(graph)})"
    found = cycles(graph)
    shown = [" <-> ".join(c) + "  (" + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) + ")" for c in found]
    assert not found, f"{package} has import cycles:\n" + "\n".join(shown)


def test_the_checker_sees_a_cycle_hidden_in_a_function_but_not_one_under_type_checking(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nfrom .a import x\nif TYPE_CHECKING:\n    from . import d\n")
    (pkg / "d.py").write_text("import p.c\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    graph = edges("p")
    assert graph["p.a"] == {"p.b"} and graph["p.b"] == {"p.a"}
    assert graph["p.c"] == {"p.a"} and graph["p.d"] == {"p.c"}
    assert cycles(graph) == [["p.a", "p.b"]]


def test_fusee_graph_is_what_it_imports() -> None:
    """A sanity check on the parser against fusee itself: known edges are found."""
    graph = edges("fusee")
    assert "fusee.host" in graph["fusee.engine"]
    assert "fusee.run_state" in graph["fusee.shard"]
    assert "fusee.behalf" in graph["fusee.delay"]
    assert "fusee.workflow" in graph["fusee.concurrency"]  # an import inside a function counts too
    assert "fusee.host" not in graph["fusee.run_state"]  # TYPE_CHECKING only
