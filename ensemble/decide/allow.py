"""What another node may run here: ``spawn_on`` and ``rpc`` name a function as ``"module:function"``,
and a node runs it only if its ``allow`` policy lets it in.

A policy is ``()`` (the default: nothing), an iterable of entries -- ``"module"`` lets in every
function that module defines itself (not of its submodules, nor one it imported), ``"module:function"``
that one function -- or a predicate called with the function's name.  A name's path never goes through
another module (``ensemble.dist.functions.resolve``).  Pure: no import happens here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from .._exceptions import Badarg

__all__ = ["parse", "allowed", "by_module_only", "check_policy", "BadFunctionName"]


class BadFunctionName(Badarg, ValueError):
    """Not a ``"module:function"`` name (dotted module, dotted attribute path, identifiers only);
    a :class:`~ensemble.Badarg` wherever a function name is taken (``spawn_on``, rpc)."""


def parse(name: Any) -> tuple[str, str]:
    """``"pkg.mod:fn"`` -> ``("pkg.mod", "fn")``; raises :class:`BadFunctionName` for anything else."""
    if type(name) is not str or name.count(":") != 1:
        raise BadFunctionName(f"a function is named 'module:function', not {name!r}")
    module, function = name.split(":")
    parts = module.split(".") + function.split(".")
    if not all(p.isidentifier() for p in parts):
        raise BadFunctionName(f"a function is named 'module:function', not {name!r}")
    if any(p.startswith("__") for p in function.split(".")):
        raise BadFunctionName(f"dunder attributes cannot be run remotely: {name!r}")
    return module, function


def check_policy(policy: Any) -> Callable[[str], bool] | frozenset[str]:
    """A node's ``allow`` in a checked form: a predicate as it is, else a frozenset of entries
    (each a module or a ``module:function`` name); raises ``TypeError``/``BadFunctionName``."""
    if callable(policy):
        return policy
    if isinstance(policy, (str, bytes)) or not isinstance(policy, Iterable):
        raise TypeError(f"allow must be an iterable of names or a predicate, not {policy!r}")
    entries = frozenset(policy)
    for entry in entries:
        if type(entry) is not str:
            raise TypeError(f"allow entries are str, not {entry!r}")
        if ":" in entry:
            parse(entry)
        elif not all(p.isidentifier() for p in entry.split(".")):
            raise BadFunctionName(f"not a module name: {entry!r}")
    return entries


def by_module_only(policy: Callable[[str], bool] | frozenset[str], name: str) -> bool:
    """Whether a checked ``policy`` lets ``name`` in only through an entry naming its whole module
    (then only the functions that module defines itself may run, not ones it imported)."""
    return not callable(policy) and name not in policy


def allowed(policy: Callable[[str], bool] | frozenset[str], name: str) -> bool:
    """Whether a checked ``policy`` lets the function ``name`` (``"module:function"``) run.

    A predicate's answer counts only when it is exactly True; a predicate that raises says no.
    """
    try:
        module, _function = parse(name)
    except BadFunctionName:
        return False
    if callable(policy):
        try:
            return policy(name) is True
        except Exception:  # noqa: BLE001 - a failing predicate lets nothing in
            return False
    return name in policy or module in policy
