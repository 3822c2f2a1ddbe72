"""What the application controller decides: spec checks, start order, refusals, what an exit means.

Pure decisions, no processes and no I/O: :mod:`ensemble.application` (the
controller, its masters and the client API) asks these functions and carries
out the answer.  The rules are OTP's (``application`` and
``application_controller``): a spec is checked once, at load
(:func:`check_spec`); a start is refused for the reasons of
:func:`start_refusal`; :func:`ensure_all_started <ensemble.application.ensure_all_started>`
starts in :func:`start_order`; what a tree exiting on its own does to the
other applications is :func:`on_tree_exit` and :func:`stop_others`; the env
after a (re)load is :func:`env_after_load`.  :class:`ApplicationError` lives
here because :func:`check_spec` and :func:`start_order` raise it;
:mod:`ensemble.application` exports it as its own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from .._exceptions import EnsembleError
from .signal import is_shutdown

__all__ = [
    "ApplicationError",
    "TYPES",
    "RECORD",
    "STOP_OTHERS",
    "restart_type_refusal",
    "check_spec",
    "dependencies",
    "start_refusal",
    "start_order",
    "already_started_meanwhile",
    "interpret_start",
    "phase_ok",
    "answer_of",
    "key_value",
    "MASTER",
    "TREE_EXITED",
    "STOP",
    "CONTROLLER_GONE",
    "master_event",
    "controller_event",
    "on_tree_exit",
    "stop_others",
    "last_first",
    "env_after_load",
]


class ApplicationError(EnsembleError):
    """An application operation failed; ``reason`` is OTP's (what it answers as ``{error, Reason}``).

    Raised by :func:`check_spec` and :mod:`ensemble.application`'s ``load``
    (``("invalid_spec", key, value)``), ``unload`` (``("not_loaded", name)``,
    ``("running", name)``), ``start`` and ``ensure_all_started`` (see that
    module's docstring), or with the
    exception a ``start`` raised as its reason (and cause).
    """

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason

    def __repr__(self) -> str:
        return f"ApplicationError({self.reason!r})"


TYPES: Final = ("permanent", "transient", "temporary")
"""The restart types ``ensemble.application.start`` takes."""

RECORD: Final = "record"
""":func:`on_tree_exit`: only record the exit."""
STOP_OTHERS: Final = "stop_others"
""":func:`on_tree_exit`: stop every other running application."""

_SPEC_DEFAULTS: Final = {
    "description": "",
    "vsn": "",
    "start": None,
    "stop": None,
    "prep_stop": None,
    "applications": (),
    "optional_applications": (),
    "included_applications": (),
    "env": None,  # a fresh {} each time
    "start_phases": (),
    "start_phase": None,
}


def _invalid(key: Any, value: Any) -> ApplicationError:
    return ApplicationError(("invalid_spec", key, value))


def check_spec(spec: Any) -> dict:
    """The spec with every key, checked; raises :class:`ApplicationError` with ``("invalid_spec", key, value)``.

    ``name`` must be a non-empty str; ``start``, ``stop``, ``prep_stop`` and
    ``start_phase`` callables or None; the three application lists lists or
    tuples of str (answered as tuples); ``env`` a dict (copied);
    ``start_phases`` ``(phase, args)`` pairs, which need a ``start_phase``.
    Any other key is refused, ``"type"`` too: the restart type is given to
    :func:`ensemble.application.start`.  A spec that is not a dict gives ``("invalid_spec", None, spec)``.
    """
    if not isinstance(spec, Mapping):
        raise _invalid(None, spec)
    for key, value in spec.items():
        if key != "name" and key not in _SPEC_DEFAULTS:
            raise _invalid(key, value)
    if "name" not in spec:
        raise _invalid("name", None)
    name = spec["name"]
    if type(name) is not str or not name:
        raise _invalid("name", name)
    out: dict = {"name": name}
    for key, default in _SPEC_DEFAULTS.items():
        value = spec.get(key, default)
        if key in ("start", "stop", "prep_stop", "start_phase"):
            if value is not None and not callable(value):
                raise _invalid(key, value)
        elif key in ("applications", "optional_applications", "included_applications"):
            if not isinstance(value, (list, tuple)) or any(type(n) is not str for n in value):
                raise _invalid(key, value)
            value = tuple(value)
        elif key == "env":
            if value is None:
                value = {}
            elif not isinstance(value, Mapping):
                raise _invalid(key, value)
            value = dict(value)
        elif key == "start_phases":
            if not isinstance(value, (list, tuple)) or any(
                not isinstance(p, (list, tuple)) or len(p) != 2 for p in value
            ):
                raise _invalid(key, value)
            value = tuple(tuple(p) for p in value)
        elif type(value) is not str:  # description, vsn
            raise _invalid(key, value)
        out[key] = value
    if out["start_phases"] and out["start_phase"] is None:
        raise _invalid("start_phase", None)
    return out


def dependencies(spec: Mapping) -> tuple:
    """The names ``spec`` needs running: its ``applications``, then the optional ones not among them."""
    deps = tuple(spec["applications"])
    return deps + tuple(n for n in spec["optional_applications"] if n not in deps)


def start_refusal(
    name: str,
    loaded: Mapping[str, Mapping],
    running: Mapping[str, Sequence[str]],
    starting: Mapping[str, Sequence[str]] | None = None,
) -> Any:
    """Why ``name`` may not start now, or None (OTP's check_start_cond, plus included applications).

    ``loaded`` maps names to checked specs; ``running`` and ``starting`` map
    the applications that run (in start order) and those being started to
    their included applications.  In order: ``("not_loaded", name)``;
    ``("already_started", name)``; ``("included", name, includer)`` while an
    application including ``name`` runs or starts; for each included
    application, ``("not_loaded", inc)`` or ``("included", inc, name)`` when
    it runs on its own; ``("not_started", dep)`` for the first dependency not
    running (an optional one that is not loaded is skipped).
    """
    if starting is None:
        starting = {}
    spec = loaded.get(name)
    if spec is None:
        return ("not_loaded", name)
    if name in running:
        return ("already_started", name)
    for active in (running, starting):
        for other, included in active.items():
            if name in included:
                return ("included", name, other)
    for inc in spec["included_applications"]:
        if inc not in loaded:
            return ("not_loaded", inc)
        if inc in running or inc in starting:
            return ("included", inc, name)
    optional = spec["optional_applications"]
    for dep in dependencies(spec):
        if dep in optional and dep not in loaded:
            continue
        if dep not in running:
            return ("not_started", dep)
    return None


def start_order(name: str, loaded: Mapping[str, Mapping], running: Collection[str]) -> list:
    """The applications :func:`ensemble.application.ensure_all_started` starts for ``name``, in order: dependencies depth-first.

    Each application comes after its dependencies, taken in the order its
    spec lists them; one that runs is not entered (it is ``[]`` for a
    running ``name``); an optional dependency that is not loaded is skipped.
    Raises :class:`ApplicationError` with ``("not_loaded", dep)`` or
    ``("circular_dependencies", app)``, ``app`` being the first application
    met again on the path that leads to it.
    """
    if name in running:
        return []
    if name not in loaded:
        raise ApplicationError(("not_loaded", name))
    order: list = []
    done: set = set()
    on_path = {name}
    stack = [(name, iter(dependencies(loaded[name])))]
    while stack:
        app, deps = stack[-1]
        for dep in deps:
            if dep in running or dep in done:
                continue
            if dep not in loaded:
                if dep in loaded[app]["optional_applications"]:
                    continue
                raise ApplicationError(("not_loaded", dep))
            if dep in on_path:
                raise ApplicationError(("circular_dependencies", dep))
            on_path.add(dep)
            stack.append((dep, iter(dependencies(loaded[dep]))))
            break
        else:
            stack.pop()
            on_path.discard(app)
            done.add(app)
            order.append(app)
    return order


def interpret_start(ret: Any, pid_type: type) -> tuple | None:
    """``(top, state)`` for what ``start`` answered: a pid, or ``(pid, state)``; None for anything else.

    A pid is an instance of exactly ``pid_type`` (the runtime's ``Pid``,
    passed in so that this module needs no process machinery); nothing of
    ``ret`` is compared, so any value is read without raising.
    """
    if type(ret) is pid_type:
        return (ret, None)
    if type(ret) is tuple and len(ret) == 2 and type(ret[0]) is pid_type:
        return ret
    return None


def on_tree_exit(type_: str, reason: Any) -> str:
    """What a tree exiting on its own with ``reason`` means: :data:`RECORD` or :data:`STOP_OTHERS`.

    A permanent application stops the others whatever the reason; a
    transient one when the reason is not orderly (``"normal"``,
    ``"shutdown"``, ``("shutdown", term)``); a temporary one never.
    """
    if type_ == "permanent":
        return STOP_OTHERS
    if type_ == "transient" and not is_shutdown(reason):
        return STOP_OTHERS
    return RECORD


def last_first(names: Sequence[str]) -> list:
    """``names`` (in start order) in the order to stop them: the last started first."""
    return list(reversed(names))


def stop_others(running: Sequence[str], exited: str) -> list:
    """What a :data:`STOP_OTHERS` exit of ``exited`` stops: every other running application, last started first."""
    return last_first([n for n in running if n != exited])


def env_after_load(spec_env: Mapping, kept: Mapping) -> dict:
    """An application's env once a spec is loaded: the spec's values, under those set with :func:`ensemble.application.set_env`."""
    return {**spec_env, **kept}


def restart_type_refusal(type_: Any) -> tuple | None:
    """``("invalid_restart_type", type_)`` unless ``type_`` is one of :data:`TYPES`; else None."""
    if type_ not in TYPES:
        return ("invalid_restart_type", type_)
    return None


def already_started_meanwhile(reason: Any, app: str) -> bool:
    """Whether a failed start of ``app`` within ensure_all_started is skipped: someone else started it meanwhile.

    True exactly when ``reason == ("already_started", app)``.
    """
    return reason == ("already_started", app)


def phase_ok(answer: Any) -> bool:
    """Whether a start phase's ``answer`` lets the start go on: only the exact str ``"ok"`` does (never calls ``==`` of another type)."""
    return type(answer) is str and answer == "ok"


def answer_of(outcome: Any) -> tuple:
    """``(succeeded, reply)`` for a master's ``outcome`` of a start or a stop.

    ``"ok"`` is ``(True, ("ok", "ok"))``: the application runs (or stopped
    cleanly) and the waiting callers get ``("ok", "ok")``; anything else (an
    ``("error", reason)``) is ``(False, outcome)``, answered as it is.
    """
    if outcome == "ok":
        return (True, ("ok", "ok"))
    return (False, outcome)


def key_value(spec: Mapping, env: Mapping, key: Any) -> Any:
    """What ``get_key(app, key)`` answers for a loaded ``spec`` whose current env is ``env``.

    ``"env"`` answers a copy of ``env``; any other key its value in the spec,
    None when the spec has no such key.
    """
    return dict(env) if key == "env" else spec.get(key)


MASTER: Final = "$application_master"
"""Tag of the messages between the controller and the masters (not a public protocol)."""

TREE_EXITED: Final = "tree_exited"
""":func:`master_event`: the top process went; the master tells the controller and ends."""
STOP: Final = "stop"
""":func:`master_event`: the controller asks for a stop; the master stops the application and ends."""
CONTROLLER_GONE: Final = "controller_gone"
""":func:`master_event`: the controller exited; the master stops the tree, without callbacks, and ends."""


def master_event(msg: Any, mref: Any, controller: Any) -> str | None:
    """What ``msg`` means to the master of a running application: :data:`TREE_EXITED`, :data:`STOP`, :data:`CONTROLLER_GONE`, or None.

    ``mref`` is the master's monitor of the top process (None for a library
    application: then nothing is a tree exit), ``controller`` the controller's
    pid.  A tree exit is a 5-tuple whose second element is ``mref``; a stop
    ``(MASTER, "stop")``; the controller gone ``("EXIT", controller, reason)``;
    anything else (a non-tuple too) is None, ignored.  ``mref`` and
    ``controller`` are compared by identity, the tags with ``==`` (a hostile
    value where a tag belongs raises what its ``==`` raises; the runtime
    never sends one).
    """
    if type(msg) is not tuple:
        return None
    if len(msg) == 5 and msg[1] is mref and mref is not None:
        return TREE_EXITED
    if len(msg) == 2 and msg[0] == MASTER and msg[1] == "stop":
        return STOP
    if len(msg) == 3 and msg[0] == "EXIT" and msg[1] is controller:
        return CONTROLLER_GONE
    return None


def controller_event(msg: Any, masters: Any) -> tuple | None:
    """What ``msg`` means to the controller: a master's report, a master's death, or None (ignored).

    ``(MASTER, master, event, value)`` is ``("told", master, event, value)``;
    ``("EXIT", pid, reason)`` for a ``pid`` in ``masters`` (the masters whose
    end is not handled yet) is ``("died", pid, reason)``; anything else is
    None.  Values are passed on as they are.  The tags are compared with
    ``==`` and an EXIT's ``pid`` is looked up in ``masters``, as the
    controller always did: a hostile tag or an unhashable ``pid`` raises (the
    runtime never sends one).
    """
    if type(msg) is tuple and len(msg) == 4 and msg[0] == MASTER:
        return ("told", msg[1], msg[2], msg[3])
    if type(msg) is tuple and len(msg) == 3 and msg[0] == "EXIT" and msg[1] in masters:
        return ("died", msg[1], msg[2])
    return None
