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
may call :func:`get_env` or start another application.  Every decision
(the spec check, refusals, the dependency order, what an exit means, what to
stop and in which order, the env) is a pure function of
:mod:`ensemble.decide.application`, re-exported here; the runtime below only carries
out its answers.

Where this differs from OTP: :func:`load` of a loaded application replaces
its spec (OTP answers ``{error, {already_loaded, App}}``), keeping the
values set with :func:`set_env`; :func:`stop` of an application that is not
running answers None (OTP's ``{error, {not_started, App}}``); an application
whose tree exited is no longer started (OTP keeps a temporary one in its
started list until it is stopped); nothing stops the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from . import _process as P
from .decide import application as _decide
from . import gen_server
from . import logger as _logger
from ._exceptions import CallError, Exit, StartError
from ._links import exit as _exit_signal
from ._links import monitor
from ._names import send
from ._spawn import spawn
from .decide.application import (
    RECORD,
    STOP_OTHERS,
    TYPES,
    ApplicationError,
    check_spec,
    dependencies,
    env_after_load,
    last_first,
    on_tree_exit,
    start_order,
    start_refusal,
    stop_others,
)
from .decide.receive import NOMATCH

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
    "get_supervisor",
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

MASTER: Final = _decide.MASTER
"""Tag of the messages between the controller and the masters (not a public protocol)."""


def _fail(reason: Any) -> ApplicationError:
    err = ApplicationError(reason)
    if isinstance(reason, BaseException):
        err.__cause__ = reason
    return err


# --------------------------------------------------------------------------
# The API: each function calls the controller
# --------------------------------------------------------------------------


def interpret_start(ret: Any) -> tuple | None:
    """``(top, state)`` for what ``start`` answered: a pid, or ``(pid, state)``; None for anything else.

    :func:`ensemble.decide.application.interpret_start` with this runtime's ``Pid``.
    """
    return _decide.interpret_start(ret, P.Pid)


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
    checked = _decide.check_spec(spec)
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
    refusal = _decide.restart_type_refusal(type)
    if refusal is not None:
        raise ApplicationError(refusal)
    return _answer(_call(("start", name, type)))


def ensure_all_started(name: str, type: str = "temporary") -> list:  # noqa: A002
    """Start ``name`` and, first, every dependency that does not run; answers the names started, in order.

    The order is :func:`start_order`'s; each gets ``type``.  If a start
    fails, the applications this call started are stopped, the last first,
    and its :class:`ApplicationError` is raised again.  ``[]`` when ``name``
    runs already.
    """
    refusal = _decide.restart_type_refusal(type)
    if refusal is not None:
        raise ApplicationError(refusal)
    loaded, running = _call("graph")
    done: list = []
    for app in _decide.start_order(name, loaded, running):
        try:
            start(app, type)
        except ApplicationError as err:
            if _decide.already_started_meanwhile(err.reason, app):
                continue
            for started_app in _decide.last_first(done):
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


def get_supervisor(name: str) -> P.Pid | None:
    """The top process of running application ``name`` (what its ``start`` answered), or None.

    None for an application that is not running, or that runs without
    processes (a library application).  OTP's ``application:get_supervisor/1``.
    """
    return _call(("get_supervisor", name))


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

    __slots__ = ("loaded", "env", "kept", "starting", "running", "masters", "exits", "tops")

    def __init__(self) -> None:
        self.loaded: dict[str, dict] = {}  # name -> checked spec, in load order
        self.env: dict[str, dict] = {}  # name -> current env (also for an app not loaded)
        self.kept: dict[str, dict] = {}  # name -> values set with set_env: they outlive a reload
        self.starting: dict[str, _Starting] = {}
        self.running: dict[str, _Running] = {}  # in start order
        self.masters: dict[P.Pid, str] = {}  # Invariant: a master is here until its end is handled
        self.exits: list = []
        self.tops: dict[P.Pid, P.Pid] = {}  # master -> the top process its start answered


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
            case ("get_supervisor", name):
                r = b.running.get(name)
                return ("reply", None if r is None else b.tops.get(r.master), b)
            case ("load", spec):
                name = spec["name"]
                b.loaded.pop(name, None)
                b.loaded[name] = spec
                b.env[name] = _decide.env_after_load(spec["env"], b.kept.get(name, {}))
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
                value = _decide.key_value(spec, b.env.get(app, {}), key)
                return ("reply", value, b)
            case "loaded":
                return ("reply", list(b.loaded), b)
            case "graph":
                return ("reply", (dict(b.loaded), set(b.running)), b)
            case "exits":
                return ("reply", list(b.exits), b)
        return ("reply", ("error", ("bad_call", request)), b)

    def handle_info(self, msg: Any, b: _Books) -> Any:
        got = _decide.controller_event(msg, b.masters)
        if got is None:
            return ("noreply", b)
        if got[0] == "told":
            _, master, event, value = got
            name = b.masters.get(master)
            if name is not None:
                if event == "top":
                    b.tops[master] = value
                elif event == "started":
                    _started(b, name, master, value)
                elif event == "stopped":
                    _stopped(b, name, master, value)
                elif event == "exited":
                    _exited(b, name, master, value)
        else:
            _, master, reason = got  # a master that died before telling how things went
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
    reason = _decide.start_refusal(name, b.loaded, running, starting)
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
    runs, answer = _decide.answer_of(outcome)
    if runs:
        b.running[name] = _Running(master, st.type, st.included)
    else:
        del b.masters[master]
        b.tops.pop(master, None)
    for waiter in st.waiters:
        gen_server.reply(waiter, answer)


def _stopped(b: _Books, name: str, master: P.Pid, outcome: Any) -> None:
    del b.masters[master]
    b.tops.pop(master, None)
    r = b.running.pop(name)
    _, answer = _decide.answer_of(outcome)
    for waiter in r.stoppers or ():
        gen_server.reply(waiter, answer)


def _exited(b: _Books, name: str, master: P.Pid, reason: Any) -> None:
    """The tree of ``name`` exited on its own (or its master died): record it, and do what its type says."""
    del b.masters[master]
    b.tops.pop(master, None)
    r = b.running.pop(name)
    b.exits.append((name, reason))
    for waiter in r.stoppers or ():  # a stop that crossed the exit: it is not running any more
        gen_server.reply(waiter, ("ok", "ok"))
    _logger.report("application_exited", level="info", application=name, exited=reason, type=r.type)
    if _decide.on_tree_exit(r.type, reason) == STOP_OTHERS:
        others = _decide.stop_others(list(b.running), name)
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
        got = _decide.interpret_start(ret, P.Pid)
        if got is None:
            tell("started", ("error", ("bad_return", ret)))
            raise Exit("shutdown")
        top, state = got
    mref = monitor(top) if top is not None else None
    if top is not None:
        tell("top", top)  # before "started": the controller knows the top once the start has answered
    for phase, args in spec["start_phases"]:
        try:
            answer = spec["start_phase"](phase, "normal", args)
        except Exit as e:
            answer = e.reason
        except Exception as e:  # noqa: BLE001 - a phase that raises did not answer "ok"
            answer = e
        if not _decide.phase_ok(answer):
            _stop_tree(top, mref)
            tell("started", ("error", ("bad_start_phase", phase, answer)))
            raise Exit("shutdown")
    tell("started", "ok")
    while True:
        m = P.receive()
        event = _decide.master_event(m, mref, controller)
        if event == _decide.TREE_EXITED:  # the tree exited on its own
            tell("exited", _exit_reason_of(top, m[4]))
            raise Exit("shutdown")
        if event == _decide.STOP:
            tell("stopped", _stop_app(spec, top, mref, state))
            raise Exit("shutdown")
        if event == _decide.CONTROLLER_GONE:  # no callbacks: the controller is gone
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
