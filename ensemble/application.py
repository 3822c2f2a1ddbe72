"""application: components loaded, started and stopped as units, with dependencies and env (OTP's application).

An application is a spec, a dict; :func:`load` checks it and keeps it::

    application.load({
        "name": "shop",
        "start": lambda: supervisor.start_link(flags, children),   # the top process's pid, or (pid, state)
        "stop": lambda state: None,                                 # after the tree is gone
        "applications": ["db"],                                     # must run before shop starts
        "env": {"port": 8080},
    })
    application.ensure_all_started("shop")     # ["db", "shop"]: what it started, dependencies first
    application.get_env("shop", "port")        # 8080
    application.stop("shop")                   # "ok"

Spec keys (only ``name`` is required; :func:`check_spec` fills the rest):

* ``name``: a str;
* ``start``: ``start()`` answers the top process's pid (normally a
  supervisor started with ``start_link``, so that it is linked to the
  application's master), or ``(pid, state)``; with no ``start`` the
  application is a library: it runs without processes;
* ``stop``: ``stop(state)``, called once the tree is gone;
* ``prep_stop``: ``prep_stop(state)`` answers the state ``stop`` gets, called
  while the tree is still up;
* ``applications``: names that must be running before this one starts;
* ``optional_applications``: names that must be running if they are loaded
  (OTP lists them in ``applications`` too; a name in either list is a
  dependency, and one in this list that is not loaded is skipped);
* ``included_applications``: loaded applications whose trees this one's
  ``start`` builds into its own; they are not started on their own meanwhile;
* ``env``: a dict, the application's configuration;
* ``start_phases``: ``[(phase, args), ...]``, and ``start_phase(phase,
  start_type, args)``, which must answer ``"ok"`` for each, in order, after
  ``start`` (``start_type`` is OTP's ``"normal"``);
* ``description``, ``vsn``: str, read with :func:`get_key`.

The restart type is given to :func:`start`, not kept in the spec: a
``"temporary"`` application whose tree exits on its own is only recorded
(:func:`exits`); a ``"permanent"`` one, or a ``"transient"`` one that exits
with a reason that is not orderly, stops every other running application,
the last started first (where OTP would stop the node).

Failures raise :class:`ApplicationError` with OTP's reason as a tuple:
``("not_loaded", name)``, ``("already_started", name)``, ``("not_started",
dep)``, ``("included", name, includer)``, ``("bad_return", r)``,
``("bad_start_phase", phase, r)``, ``("circular_dependencies", name)``,
``("running", name)``, ``("invalid_restart_type", t)``, ``("invalid_spec",
key, value)``, or what ``start`` raised.

How it is built: an application controller (a gen_server registered as
``"application_controller"``, trapping exits, started on first use and again
after it died) holds every piece of state: the loaded specs, the env, what
runs, what exited.  It never runs an application's code: for each start it
spawns a master, linked to it, that calls ``start`` (so the top process is
the master's child), runs the start phases, watches the top process, and on
request runs ``prep_stop``, stops the tree and runs ``stop``.  The master
tells the controller what happened with ``(MASTER, master, event, value)``
messages; the controller answers the waiting callers then.  So a ``start``
may call :func:`get_env` or start another application.  What an exit means,
what to stop and in which order, and the dependency order are the pure
functions under "Decisions".

Where this differs from OTP: :func:`load` of a loaded application replaces
its spec (OTP answers ``{error, {already_loaded, App}}``), keeping the
values set with :func:`set_env`; :func:`stop` of an application that is not
running answers None (OTP's ``{error, {not_started, App}}``); an application
whose tree exited is no longer started (OTP keeps a temporary one in its
started list until it is stopped); nothing stops the node.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from . import _process as P
from . import gen_server
from . import logger as _logger
from ._exceptions import CallError, EnsembleError, Exit, StartError
from ._links import exit as _exit_signal
from ._links import monitor
from ._names import send
from ._spawn import spawn
from .select import NOMATCH
from .signal import is_shutdown

__all__ = [
    "ApplicationError",
    "load",
    "unload",
    "start",
    "ensure_all_started",
    "stop",
    "get_env",
    "get_all_env",
    "set_env",
    "unset_env",
    "get_key",
    "loaded_applications",
    "which_applications",
    "started",
    "exits",
    "TYPES",
    "RECORD",
    "STOP_OTHERS",
    "check_spec",
    "dependencies",
    "start_refusal",
    "start_order",
    "interpret_start",
    "on_tree_exit",
    "stop_others",
    "last_first",
    "env_after_load",
]

CONTROLLER: Final = "application_controller"
"""The controller's registered name."""

MASTER: Final = "$application_master"
"""Tag of the messages between the controller and the masters (not a public protocol)."""


class ApplicationError(EnsembleError):
    """An application operation failed; ``reason`` is OTP's (what it answers as ``{error, Reason}``).

    Raised by :func:`load` (``("invalid_spec", key, value)``), :func:`unload`
    (``("not_loaded", name)``, ``("running", name)``), :func:`start` and
    :func:`ensure_all_started` (see the module docstring), or with the
    exception a ``start`` raised as its reason (and cause).
    """

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason

    def __repr__(self) -> str:
        return f"ApplicationError({self.reason!r})"


def _fail(reason: Any) -> ApplicationError:
    err = ApplicationError(reason)
    if isinstance(reason, BaseException):
        err.__cause__ = reason
    return err


# --------------------------------------------------------------------------
# Decisions (pure)
# --------------------------------------------------------------------------

TYPES: Final = ("permanent", "transient", "temporary")
"""The restart types :func:`start` takes."""

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
    :func:`start`.  A spec that is not a dict gives ``("invalid_spec", None, spec)``.
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
    """The applications :func:`ensure_all_started` starts for ``name``, in order: dependencies depth-first.

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


def interpret_start(ret: Any) -> tuple | None:
    """``(top, state)`` for what ``start`` answered: a pid, or ``(pid, state)``; None for anything else."""
    if type(ret) is P.Pid:
        return (ret, None)
    if type(ret) is tuple and len(ret) == 2 and type(ret[0]) is P.Pid:
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
    """An application's env once a spec is loaded: the spec's values, under those set with :func:`set_env`."""
    return {**spec_env, **kept}


# --------------------------------------------------------------------------
# The API: each function calls the controller
# --------------------------------------------------------------------------


def _controller() -> P.Pid:
    """The controller's pid, started if nobody holds its name."""
    pid = P.NAMES.get(CONTROLLER)
    if pid is not None:
        return pid
    try:
        return gen_server.start(_Controller(), name=CONTROLLER, trap_exit=True)
    except StartError as err:  # another process started it first
        reason = err.reason
        if type(reason) is tuple and len(reason) == 2 and reason[0] == "already_started":
            return reason[1]
        raise


def _call(request: Any) -> Any:
    """Ask the controller; answers what it replied.  A controller that is gone is started again."""
    try:
        return gen_server.call(_controller(), request, timeout=None)
    except CallError as err:
        if not (type(err.reason) is str and err.reason == "noproc"):
            raise
    return gen_server.call(_controller(), request, timeout=None)


def _answer(reply: Any) -> Any:
    """The value of an ``("ok", value)`` reply; raises ApplicationError for ``("error", reason)``."""
    if reply[0] == "ok":
        return reply[1]
    raise _fail(reply[1])


def load(spec: Mapping) -> str:
    """Load an application from its spec (checked by :func:`check_spec`); answers its name.

    Loading a loaded application replaces its spec: its env becomes the new
    spec's, except the values set with :func:`set_env`, which are kept.
    """
    checked = check_spec(spec)
    return _answer(_call(("load", checked)))


def unload(name: str) -> str:
    """Forget a loaded application and its env; answers ``"ok"``.

    Raises :class:`ApplicationError` with ``("not_loaded", name)`` or
    ``("running", name)`` while it runs or starts.
    """
    return _answer(_call(("unload", name)))


def start(name: str, type: str = "temporary") -> str:  # noqa: A002 - OTP's argument name
    """Start a loaded application whose dependencies run; answers ``"ok"`` once it runs.

    The master calls the spec's ``start``, then each start phase in order.
    Raises :class:`ApplicationError` with the reasons of :func:`start_refusal`,
    ``("bad_return", r)`` when ``start`` answered no pid, ``("bad_start_phase",
    phase, r)`` (the tree is stopped first), ``("invalid_restart_type", t)``,
    or the exception ``start`` raised (an ``exit(r)``'s ``r``).  A start of an
    application that is being started waits for that start and answers as it.
    """
    if type not in TYPES:
        raise ApplicationError(("invalid_restart_type", type))
    return _answer(_call(("start", name, type)))


def ensure_all_started(name: str, type: str = "temporary") -> list:  # noqa: A002
    """Start ``name`` and, first, every dependency that does not run; answers the names started, in order.

    The order is :func:`start_order`'s; each gets ``type``.  If a start
    fails, the applications this call started are stopped, the last first,
    and its :class:`ApplicationError` is raised again.  ``[]`` when ``name``
    runs already.
    """
    if type not in TYPES:
        raise ApplicationError(("invalid_restart_type", type))
    loaded, running = _call("graph")
    done: list = []
    for app in start_order(name, loaded, running):
        try:
            start(app, type)
        except ApplicationError as err:
            if err.reason == ("already_started", app):  # started meanwhile by someone else
                continue
            for started_app in last_first(done):
                try:
                    stop(started_app)
                except Exception as stop_err:  # noqa: BLE001 - the start's failure is what is raised
                    _stop_failed(started_app, stop_err)
            raise
        done.append(app)
    return done


def stop(name: str) -> str | None:
    """Stop a running application; answers ``"ok"``, or None when it does not run.

    ``prep_stop(state)`` runs while the tree is up, then the top process is
    sent the exit signal ``"shutdown"`` (as OTP's application master does),
    then ``stop(new_state)``.  If ``prep_stop`` raises, the tree still stops,
    ``stop`` gets the state ``start`` gave, and the exception is raised here
    once all is done; so is one ``stop`` raised.  The others keep running.
    """
    reply = _call(("stop", name))
    if reply[0] == "ok":
        return reply[1]
    raised = reply[1]
    if isinstance(raised, Exception):
        raise raised
    raise _fail(raised)


def get_env(app: str, key: Any, default: Any = None) -> Any:
    """The value of ``key`` in ``app``'s env, or ``default``."""
    return _call(("get_env", app, key, default))


def get_all_env(app: str) -> dict:
    """A copy of ``app``'s env (``{}`` for an application with none)."""
    return _call(("get_all_env", app))


def set_env(app: str, key: Any, value: Any) -> str:
    """Set ``key`` in ``app``'s env; answers ``"ok"``.  The value outlives a reload, not an unload."""
    return _call(("set_env", app, key, value))


def unset_env(app: str, key: Any) -> str:
    """Remove ``key`` from ``app``'s env; answers ``"ok"``."""
    return _call(("unset_env", app, key))


def get_key(app: str, key: str) -> Any:
    """The value of ``key`` in ``app``'s loaded spec (its current env for ``"env"``); None when there is none."""
    return _call(("get_key", app, key))


def loaded_applications() -> list:
    """The names of the loaded applications, in the order they were first loaded."""
    return _call("loaded")


def which_applications() -> list:
    """The names of the running applications, in start order."""
    return _call("which")


def started(name: str) -> bool:
    """True while ``name`` runs (started, not yet stopped, its tree up)."""
    return _call(("started", name))


def exits() -> list:
    """``[(name, reason), ...]``: the applications whose tree exited on its own, oldest first."""
    return _call("exits")


def _stop_failed(name: str, err: BaseException) -> None:
    _logger.report("application_stop_failed", application=name, reason=getattr(err, "reason", err))


# --------------------------------------------------------------------------
# The controller: a gen_server holding every piece of state
# --------------------------------------------------------------------------


class _Starting:
    """An application being started: its master, type, included applications, and the callers waiting."""

    __slots__ = ("master", "type", "included", "waiters")

    def __init__(self, master: P.Pid, type_: str, included: tuple, waiter: Any) -> None:
        self.master = master
        self.type = type_
        self.included = included
        self.waiters = [waiter]


class _Running:
    """A running application: its master, type, included applications; the callers of stop, if stopping."""

    __slots__ = ("master", "type", "included", "stoppers")

    def __init__(self, master: P.Pid, type_: str, included: tuple) -> None:
        self.master = master
        self.type = type_
        self.included = included
        self.stoppers: list | None = None  # Invariant: None until a stop was sent to the master


class _Books:
    """The controller's state."""

    __slots__ = ("loaded", "env", "kept", "starting", "running", "masters", "exits")

    def __init__(self) -> None:
        self.loaded: dict[str, dict] = {}  # name -> checked spec, in load order
        self.env: dict[str, dict] = {}  # name -> current env (also for an app not loaded)
        self.kept: dict[str, dict] = {}  # name -> values set with set_env: they outlive a reload
        self.starting: dict[str, _Starting] = {}
        self.running: dict[str, _Running] = {}  # in start order
        self.masters: dict[P.Pid, str] = {}  # Invariant: a master is here until its end is handled
        self.exits: list = []


class _Controller(gen_server.GenServer):
    """The application controller's callbacks; its state is :class:`_Books`."""

    def init(self) -> Any:
        return ("ok", _Books())

    def handle_call(self, request: Any, from_: Any, b: _Books) -> Any:
        match request:
            case ("get_env", app, key, default):
                return ("reply", b.env.get(app, {}).get(key, default), b)
            case ("start", name, type_):
                return _start(b, name, type_, from_)
            case ("stop", name):
                return _stop(b, name, from_)
            case "which":
                return ("reply", list(b.running), b)
            case ("started", name):
                return ("reply", name in b.running, b)
            case ("load", spec):
                name = spec["name"]
                b.loaded.pop(name, None)
                b.loaded[name] = spec
                b.env[name] = env_after_load(spec["env"], b.kept.get(name, {}))
                return ("reply", ("ok", name), b)
            case ("unload", name):
                if name not in b.loaded:
                    return ("reply", ("error", ("not_loaded", name)), b)
                if name in b.running or name in b.starting:
                    return ("reply", ("error", ("running", name)), b)
                del b.loaded[name]
                b.env.pop(name, None)
                b.kept.pop(name, None)
                return ("reply", ("ok", "ok"), b)
            case ("get_all_env", app):
                return ("reply", dict(b.env.get(app, {})), b)
            case ("set_env", app, key, value):
                b.env.setdefault(app, {})[key] = value
                b.kept.setdefault(app, {})[key] = value
                return ("reply", "ok", b)
            case ("unset_env", app, key):
                b.env.get(app, {}).pop(key, None)
                b.kept.get(app, {}).pop(key, None)
                return ("reply", "ok", b)
            case ("get_key", app, key):
                spec = b.loaded.get(app)
                if spec is None:
                    return ("reply", None, b)
                value = dict(b.env.get(app, {})) if key == "env" else spec.get(key)
                return ("reply", value, b)
            case "loaded":
                return ("reply", list(b.loaded), b)
            case "graph":
                return ("reply", (dict(b.loaded), set(b.running)), b)
            case "exits":
                return ("reply", list(b.exits), b)
        return ("reply", ("error", ("bad_call", request)), b)

    def handle_info(self, msg: Any, b: _Books) -> Any:
        if type(msg) is tuple and len(msg) == 4 and msg[0] == MASTER:
            _, master, event, value = msg
            name = b.masters.get(master)
            if name is not None:
                if event == "started":
                    _started(b, name, master, value)
                elif event == "stopped":
                    _stopped(b, name, master, value)
                elif event == "exited":
                    _exited(b, name, master, value)
        elif type(msg) is tuple and len(msg) == 3 and msg[0] == "EXIT" and msg[1] in b.masters:
            master, reason = msg[1], msg[2]  # a master that died before telling how things went
            name = b.masters[master]
            st = b.starting.get(name)
            if st is not None and st.master is master:
                _started(b, name, master, ("error", reason))
            else:
                _exited(b, name, master, reason)
        return ("noreply", b)


def _start(b: _Books, name: str, type_: str, from_: Any) -> Any:
    st = b.starting.get(name)
    if st is not None:  # one start at a time: this caller gets that start's answer
        st.waiters.append(from_)
        return ("noreply", b)
    running = {n: r.included for n, r in b.running.items()}
    starting = {n: s.included for n, s in b.starting.items()}
    reason = start_refusal(name, b.loaded, running, starting)
    if reason is not None:
        return ("reply", ("error", reason), b)
    spec = b.loaded[name]
    master = spawn(_master, P.me(), name, spec, link=True, trap_exit=True)
    b.masters[master] = name
    b.starting[name] = _Starting(master, type_, spec["included_applications"], from_)
    return ("noreply", b)


def _stop(b: _Books, name: str, from_: Any) -> Any:
    r = b.running.get(name)
    if r is None:
        return ("reply", ("ok", None), b)
    if r.stoppers is None:
        r.stoppers = [from_]
        send(r.master, (MASTER, "stop"))
    else:
        r.stoppers.append(from_)
    return ("noreply", b)


def _started(b: _Books, name: str, master: P.Pid, outcome: Any) -> None:
    st = b.starting.pop(name)
    if outcome == "ok":
        b.running[name] = _Running(master, st.type, st.included)
        answer: Any = ("ok", "ok")
    else:
        del b.masters[master]
        answer = outcome
    for waiter in st.waiters:
        gen_server.reply(waiter, answer)


def _stopped(b: _Books, name: str, master: P.Pid, outcome: Any) -> None:
    del b.masters[master]
    r = b.running.pop(name)
    for waiter in r.stoppers or ():
        gen_server.reply(waiter, ("ok", "ok") if outcome == "ok" else outcome)


def _exited(b: _Books, name: str, master: P.Pid, reason: Any) -> None:
    """The tree of ``name`` exited on its own (or its master died): record it, and do what its type says."""
    del b.masters[master]
    r = b.running.pop(name)
    b.exits.append((name, reason))
    for waiter in r.stoppers or ():  # a stop that crossed the exit: it is not running any more
        gen_server.reply(waiter, ("ok", "ok"))
    _logger.report("application_exited", level="info", application=name, exited=reason, type=r.type)
    if on_tree_exit(r.type, reason) == STOP_OTHERS:
        others = stop_others(list(b.running), name)
        if others:
            spawn(_stop_all, others)


def _stop_all(names: list) -> None:
    """Stop each application in turn; a failure is reported and the others still stop."""
    for name in names:
        try:
            stop(name)
        except Exception as err:  # noqa: BLE001 - reported, and the stop-all goes on
            _stop_failed(name, err)


# --------------------------------------------------------------------------
# The master: one process per running application, the parent of its tree
# --------------------------------------------------------------------------


def _master(controller: P.Pid, name: str, spec: dict) -> None:
    """Start the application, watch its top process, stop it on request; tell the controller each step.

    Ends with ``"shutdown"``, so whatever ``start`` linked to it goes too.
    """
    me = P.me()

    def tell(event: str, value: Any) -> None:
        send(controller, (MASTER, me, event, value))

    top, state = None, None
    if spec["start"] is not None:
        try:
            ret = spec["start"]()
        except Exit as e:
            tell("started", ("error", e.reason))
            raise Exit("shutdown") from None
        except Exception as e:  # a crash in start fails the start with the exception
            tell("started", ("error", e))
            raise Exit("shutdown") from None
        got = interpret_start(ret)
        if got is None:
            tell("started", ("error", ("bad_return", ret)))
            raise Exit("shutdown")
        top, state = got
    mref = monitor(top) if top is not None else None
    for phase, args in spec["start_phases"]:
        try:
            answer = spec["start_phase"](phase, "normal", args)
        except Exit as e:
            answer = e.reason
        except Exception as e:  # noqa: BLE001 - a phase that raises did not answer "ok"
            answer = e
        if not (type(answer) is str and answer == "ok"):
            _stop_tree(top, mref)
            tell("started", ("error", ("bad_start_phase", phase, answer)))
            raise Exit("shutdown")
    tell("started", "ok")
    while True:
        m = P.receive()
        if type(m) is not tuple:
            continue
        if len(m) == 5 and m[1] is mref and mref is not None:  # the tree exited on its own
            tell("exited", _exit_reason_of(top, m[4]))
            raise Exit("shutdown")
        if len(m) == 2 and m[0] == MASTER and m[1] == "stop":
            tell("stopped", _stop_app(spec, top, mref, state))
            raise Exit("shutdown")
        if len(m) == 3 and m[0] == "EXIT" and m[1] is controller:  # no callbacks: the controller is gone
            _stop_tree(top, mref)
            raise Exit("shutdown")


def _exit_reason_of(top: P.Pid, reason: Any) -> Any:
    """A DOWN's reason; for a top that died before the monitor, the reason its link brought, if any."""
    if type(reason) is str and reason == "noproc":
        got = P.receive(
            lambda m: m if type(m) is tuple and len(m) == 3 and m[0] == "EXIT" and m[1] is top else NOMATCH,
            timeout=0,
        )
        if type(got) is tuple:
            return got[2]
    return reason


def _stop_tree(top: Any, mref: Any) -> None:
    """Send the top process the exit signal ``"shutdown"`` and wait until it is gone.

    As OTP's application master does: a supervisor (whose parent the master is)
    terminates its tree, any other process dies of the signal.
    """
    if top is None:
        return
    _exit_signal(top, "shutdown")
    P.receive(lambda m: m if type(m) is tuple and len(m) == 5 and m[1] is mref else NOMATCH)


_NOTHING: Final = object()


def _stop_app(spec: dict, top: Any, mref: Any, state: Any) -> Any:
    """prep_stop, the tree, stop: ``"ok"``, or ``("error", what the first failing callback raised)``."""
    failure: Any = _NOTHING
    new_state = state
    if spec["prep_stop"] is not None:
        try:
            new_state = spec["prep_stop"](state)
        except Exit as e:
            failure = e.reason
        except Exception as e:  # noqa: BLE001 - raised again by stop()
            failure = e
    _stop_tree(top, mref)
    if spec["stop"] is not None:
        try:
            spec["stop"](new_state)
        except Exit as e:
            failure = e.reason if failure is _NOTHING else failure
        except Exception as e:  # noqa: BLE001 - raised again by stop()
            failure = e if failure is _NOTHING else failure
    return "ok" if failure is _NOTHING else ("error", failure)
