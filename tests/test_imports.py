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


# -- the decision modules import nothing effectful ---------------------------------------------------

#: Each package's pure decision modules: no processes, no I/O, no clock, no threads.
DECISIONS: dict[str, set[str]] = {
    "ensemble": {m for m in modules("ensemble") if m.startswith("ensemble.decide")},
    "constellation": {
        "constellation.core",
        "constellation.dispatch",
        "constellation.runtime",
        "constellation._source_core",
    },
    "fusee": {"fusee.replay", "fusee.parking", "fusee.segment", "fusee.records", "fusee.timeline",
              "fusee.http_api", "fusee.metrics_text", "fusee.object_core"},
}

#: Modules a decision module may import besides decision modules: plain values, errors and pure
#: encodings.  (``fusee.crc32c`` is a pure function; its loader picks the C or Python version.)
VALUES: set[str] = {
    "ensemble._terms",
    "ensemble._exceptions",
    "fusee.codec",
    "fusee.errors",
    "fusee.durations",
    "fusee.crc32c",
}

#: The standard-library modules a decision may use: data structures and arithmetic, nothing that
#: reads a clock, starts a thread or touches a file, a socket or the process.
PURE_STDLIB: set[str] = {
    "__future__", "typing", "collections", "dataclasses", "itertools", "functools", "heapq",
    "bisect", "math", "operator", "re", "enum", "abc", "numbers", "struct", "json", "reprlib",
    "types", "datetime", "hmac", "hashlib", "base64", "binascii", "urllib",
}


def _outside_imports(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports absolutely (not relative imports)."""
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif node.level == 0 and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("package", CHECKED)
def test_decision_modules_import_nothing_effectful(package: str) -> None:
    """A decision module imports, from its package, only decisions and values (so, every decision module being checked, also transitively);
    from outside, only pure parts of the standard library and ensemble's decisions."""
    decisions = DECISIONS[package]
    assert len(decisions) >= 4, decisions
    graph, mods = edges(package), modules(package)
    allowed_inside = decisions | VALUES | {package}
    for mod in sorted(decisions):
        assert mod in mods, f"{mod} is named as a decision module but does not exist"
        inside = graph[mod] - allowed_inside
        assert not inside, f"{mod} imports effectful modules of its package: {sorted(inside)}"
        outside = {
            m for m in _outside_imports(mods[mod]) if m.split(".")[0] != package
        }
        bad = {
            m for m in outside
            if m.split(".")[0] not in PURE_STDLIB and not m.startswith("ensemble.decide")
        }
        assert not bad, f"{mod} imports effectful modules: {sorted(bad)}"


def test_the_purity_check_refuses_an_effectful_import(tmp_path, monkeypatch) -> None:
    """The check above can fail: a decision module importing time, or a relative effectful module."""
    pkg = tmp_path / "q"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "pure.py").write_text("import math\nfrom . import shell\n")
    (pkg / "shell.py").write_text("import time\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(DECISIONS, "q", {"q.pure", "q.shell", "q.a", "q.b"})
    (pkg / "a.py").write_text("")
    (pkg / "b.py").write_text("")
    with pytest.raises(AssertionError, match="effectful modules: \\['time'\\]"):
        test_decision_modules_import_nothing_effectful("q")
    monkeypatch.setitem(DECISIONS, "q", {"q.pure", "q.a", "q.b", "q.c"})
    (pkg / "c.py").write_text("")
    with pytest.raises(AssertionError, match="effectful modules of its package: \\['q.shell'\\]"):
        test_decision_modules_import_nothing_effectful("q")
