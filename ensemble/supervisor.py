"""supervisor: a process that starts, watches and restarts children (OTP's supervisor).

A supervisor is a gen_server trapping exits.  What it does is decided by two
pure modules: :mod:`ensemble.decide.childspec` (which flags and child specs are
valid, with their defaults; how a start's answer reads; which operations are
allowed) and :mod:`ensemble.decide.supervisor` (whether an exit is restarted, the restart
plan of each strategy, restart intensity, auto-shutdown).  Here those answers
are carried out::

    sup = supervisor.start_link(
        {"strategy": "one_for_one", "intensity": 3, "period": 5},
        [{"id": "db", "start": lambda: gen_server.start_link(Db())},
         {"id": "web", "start": (start_web, (8080,)), "shutdown": 2}],
    )

Flags: ``strategy`` (``one_for_one``, ``one_for_all``, ``rest_for_one``,
``simple_one_for_one``), ``intensity`` (default 1), ``period`` (seconds,
default 5), ``auto_shutdown`` (``never``, ``any_significant``,
``all_significant``).  A child spec: ``id``, ``start`` (a callable returning
a pid, or ``(callable, args)``), ``restart`` (``permanent``, ``transient``,
``temporary``), ``shutdown`` (seconds, ``"brutal_kill"``, ``"infinity"``),
``type`` (``worker``, ``supervisor``), ``significant``.  Children start in
order, inside the supervisor (so ``start_link`` links them to it).
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from . import _process as P
from .decide import childspec as cs
from . import gen_server
from . import logger as _logger
from .decide import supervisor as order
from ._exceptions import Exit, StartError
from ._links import demonitor, link, monitor, unlink
from ._links import exit as exit_signal
from ._terms import TIMEOUT
from .decide.receive import NOMATCH
from .decide.signal import is_shutdown

__all__ = [
    "start",
    "start_link",
    "start_child",
    "terminate_child",
    "restart_child",
    "delete_child",
    "which_children",
    "count_children",
    "get_childspec",
    "stop",
]


def _is_pid(x: Any) -> bool:
    return type(x) is P.Pid


# --------------------------------------------------------------------------
# Client API
# --------------------------------------------------------------------------


def start(flags: dict, children: list, *, name: str | None = None, timeout: float | None = None) -> P.Pid:
    """Start a supervisor and its children, in order; returns its pid.

    Raises :class:`ensemble.StartError` with ``("supervisor_data", r)`` for bad
    flags, ``("start_spec", r)`` for a bad child spec (nothing is started), or
    ``("shutdown", ("failed_to_start_child", id, r))`` when a child fails to
    start (the ones already started are stopped first).
    """
    return gen_server.start(_Supervisor(flags, children, name), name=name, timeout=timeout, trap_exit=True)


def start_link(
    flags: dict, children: list, *, name: str | None = None, timeout: float | None = None
) -> P.Pid:
    """:func:`start`, linked to the caller (how supervisors nest)."""
    return gen_server.start_link(
        _Supervisor(flags, children, name), name=name, timeout=timeout, trap_exit=True
    )


def _call(sup: Any, request: Any) -> Any:
    return gen_server.call(sup, request, None)


def start_child(sup: Any, spec_or_args: Any) -> tuple:
    """Add and start a child: ``("ok", pid)``, ``("ok", None)`` if it ignored, or ``("error", r)``.

    Under ``simple_one_for_one`` the argument is a tuple of args appended to the
    template's start args.  ``r`` is ``("already_started", pid)``,
    ``"already_present"``, a child spec error, or the start's failure.
    """
    return _call(sup, ("start_child", spec_or_args))


def terminate_child(sup: Any, id_or_pid: Any) -> Any:
    """Stop a child (by id, or by pid under simple_one_for_one); ``"ok"`` or ``("error", "not_found")``.

    The spec stays (restart_child starts it again) except for a temporary or
    dynamic child.
    """
    return _call(sup, ("terminate_child", id_or_pid))


def restart_child(sup: Any, child_id: Any) -> tuple:
    """Start a stopped child again: ``("ok", pid | None)`` or ``("error", r)``."""
    return _call(sup, ("restart_child", child_id))


def delete_child(sup: Any, child_id: Any) -> Any:
    """Remove a stopped child's spec: ``"ok"`` or ``("error", r)``."""
    return _call(sup, ("delete_child", child_id))


def which_children(sup: Any) -> list:
    """``[(id, pid | "restarting" | None, type, modules), ...]`` in start order."""
    return _call(sup, "which_children")


def count_children(sup: Any) -> dict:
    """``{"specs", "active", "supervisors", "workers"}``."""
    return _call(sup, "count_children")


def get_childspec(sup: Any, id_or_pid: Any) -> tuple:
    """``("ok", spec)`` with every default filled in, or ``("error", "not_found")``."""
    return _call(sup, ("get_childspec", id_or_pid))


def stop(sup: Any, reason: Any = "normal", timeout: float | None = None) -> str:
    """Stop the supervisor: its children stop in reverse start order, then it exits."""
    return gen_server.stop(sup, reason, timeout)


# --------------------------------------------------------------------------
# The supervisor (a gen_server callback module)
# --------------------------------------------------------------------------


class _Child:
    """A child as the supervisor holds it."""

    __slots__ = ("spec", "pid", "state", "args")

    def __init__(self, spec: dict, args: tuple = ()) -> None:
        self.spec = spec
        self.pid: P.Pid | None = None
        self.state = "stopped"  # "running" | "restarting" | "stopped"
        self.args = args  # the extra args of a simple_one_for_one child

    @property
    def id(self) -> Any:
        return self.spec["id"]

    def __getitem__(self, key: str) -> Any:  # childspec.may reads child["state"]
        return self.state if key == "state" else self.spec[key]


class _Supervisor(gen_server.GenServer):
    """The supervisor's callbacks; its state is the object itself."""

    def __init__(self, flags: Any, specs: Any, name: Any) -> None:
        self.given_flags = flags
        self.given_specs = specs
        self.name = name
        self.flags: dict = {}
        self.children: list[_Child] = []  # static children, in start order
        self.dynamic: dict[P.Pid, _Child] = {}  # simple_one_for_one children by pid
        self.template: dict | None = None
        self.restarts: tuple = ()
        self.me: Any = None

    # -- init -------------------------------------------------------------------

    def init(self) -> Any:
        self.me = P.me()
        ok, flags = cs.check_flags(self.given_flags)
        if ok != "ok":
            return ("stop", ("supervisor_data", flags))
        self.flags = flags
        ok, specs = cs.check_specs(self.given_specs, flags)
        if ok != "ok":
            return ("stop", ("start_spec", specs))
        if self.simple:
            self.template = specs[0]
            return ("ok", self)
        for spec in specs:
            child = _Child(spec)
            failed = self._start(child)
            if failed is not None:
                self._report("start_error", failed, child)
                self._stop_all()
                return ("stop", ("shutdown", ("failed_to_start_child", spec["id"], failed)))
            if child.state == "running" or spec["restart"] != "temporary":
                self.children.append(child)
        return ("ok", self)

    @property
    def simple(self) -> bool:
        return self.flags.get("strategy") == "simple_one_for_one"

    # -- starting and stopping one child ---------------------------------------

    def _start(self, child: _Child) -> Any:
        """Start ``child``; None on success or ignore, else the failure reason."""
        start = child.spec["start"]
        fn, args = (start, ()) if callable(start) else (start[0], tuple(start[1]))
        try:
            ret = fn(*args, *child.args)
        except (Exit, StartError) as e:  # exit(r), or a behaviour's start_link failing with r
            result: Any = cs.Failed(e.reason)
        except Exception as e:  # a crashing start fails the child with the exception
            result = cs.Failed(e)
        else:
            result = cs.start_result(ret, _is_pid)
        if type(result) is cs.Started:
            child.pid = result.pid
            child.state = "running"
            link(result.pid)
            return None
        child.pid = None
        child.state = "stopped"
        if type(result) is cs.Failed:
            return result.reason
        return None  # ignored

    def _shutdown(self, child: _Child) -> None:
        """Stop a running child as OTP does: unlink, "shutdown", kill after its shutdown time."""
        pid = child.pid
        child.pid = None
        child.state = "stopped"
        if pid is None:
            return
        self.dynamic.pop(pid, None)
        reason = _stop_process(pid, child.spec["shutdown"], child.spec["restart"] == "permanent")
        if reason is not None:
            self._report("shutdown_error", reason, child, pid)

    def _stop_all(self) -> None:
        """Stop every child, in reverse start order (dynamic ones all at once)."""
        if self.dynamic:
            kids = list(self.dynamic.values())
            self.dynamic.clear()
            for child, reason in _stop_many([(c, c.pid) for c in kids], self.template["shutdown"]):
                self._report("shutdown_error", reason, child)
        for child in order.stop_order(self.children):
            self._shutdown(child)

    # -- messages ------------------------------------------------------------------

    def handle_info(self, msg: Any, state: Any) -> Any:
        match msg:
            case ("EXIT", pid, reason) if type(pid) is P.Pid:
                return self._child_exited(pid, reason)
            case ("$try_again_restart", key):
                child = key if isinstance(key, _Child) else self._find(key)
                if child is not None and child.state == "restarting":
                    return self._restart(child)
        return ("noreply", self)

    def _child_exited(self, pid: P.Pid, reason: Any) -> Any:
        child = self.dynamic.pop(pid, None)
        if child is None:
            child = next((c for c in self.children if c.pid is pid), None)
            if child is None:
                return ("noreply", self)
        restart = child.spec["restart"]
        if not (is_shutdown(reason) and restart != "permanent"):
            self._report("child_terminated", reason, child, pid)
        child.pid = None
        child.state = "stopped"
        if order.restart_needed(restart, reason):
            return self._restart(child)
        if restart == "temporary" and child in self.children:
            self.children.remove(child)
        if child.spec["significant"]:
            others = any(c.spec["significant"] and c.state == "running" for c in self._all())
            if order.auto_shutdown(self.flags["auto_shutdown"], True, others):
                return ("stop", "shutdown", self)
        return ("noreply", self)

    def _restart(self, child: _Child) -> Any:
        """Restart ``child`` by the strategy's plan, within the restart intensity."""
        verdict, self.restarts = order.add_restart(
            self.restarts, monotonic(), self.flags["intensity"], self.flags["period"]
        )
        if verdict == "terminate":
            self._report("shutdown", "reached_max_restart_intensity", child)
            return ("stop", "shutdown", self)
        if self.simple:
            failed = self._start(child)
            if child.state == "running":
                self.dynamic[child.pid] = child
            elif failed is not None:
                return self._start_failed(child, failed)
            return ("noreply", self)
        plan = order.restart_plan(
            self.flags["strategy"],
            [(c.id, c.spec["restart"], c.state == "running") for c in self.children],
            child.id,
        )
        for child_id in plan.stop:
            self._shutdown(self._find(child_id))
        for child_id in plan.drop:
            dropped = self._find(child_id)
            self._shutdown(dropped)
            self.children.remove(dropped)
        for child_id in plan.start:
            nxt = self._find(child_id)
            failed = self._start(nxt)
            if failed is not None:
                return self._start_failed(nxt, failed)
        return ("noreply", self)

    def _start_failed(self, child: _Child, reason: Any) -> Any:
        """A restart failed: report it and try again through a message to ourselves."""
        self._report("start_error", reason, child)
        child.state = "restarting"
        P.deliver(self.me, ("$try_again_restart", child if self.simple else child.id))
        return ("noreply", self)

    # -- calls ---------------------------------------------------------------------

    def handle_call(self, request: Any, from_: Any, state: Any) -> Any:
        match request:
            case ("start_child", arg):
                return ("reply", self._start_child(arg), self)
            case ("terminate_child", key):
                return ("reply", self._terminate_child(key), self)
            case ("restart_child", child_id):
                return ("reply", self._restart_child(child_id), self)
            case ("delete_child", child_id):
                return ("reply", self._delete_child(child_id), self)
            case "which_children":
                return ("reply", [self._which(c) for c in self._all()], self)
            case "count_children":
                return ("reply", self._count(), self)
            case ("get_childspec", key):
                child = self._find(key)
                if child is None and self.simple and type(key) is P.Pid:
                    child = self.dynamic.get(key)
                if child is None:
                    return ("reply", ("error", "not_found"), self)
                return ("reply", ("ok", cs.shown_spec(child.spec)), self)
        return ("reply", ("error", ("bad_call", request)), self)

    def _start_child(self, arg: Any) -> tuple:
        if self.simple:
            args = tuple(arg) if isinstance(arg, (tuple, list)) else (arg,)
            child = _Child(self.template, args)
            failed = self._start(child)
            if failed is not None:
                return ("error", failed)
            if child.pid is None:
                return ("ok", None)
            self.dynamic[child.pid] = child
            return ("ok", child.pid)
        ok, specs = cs.check_specs([arg], self.flags)
        if ok != "ok":
            return ("error", specs)
        spec = specs[0]
        existing = self._find(spec["id"])
        if existing is not None:
            if existing.state == "running":
                return ("error", ("already_started", existing.pid))
            return ("error", "already_present")
        child = _Child(spec)
        failed = self._start(child)
        if failed is not None:
            return ("error", failed)
        if child.state == "running" or spec["restart"] != "temporary":
            self.children.append(child)
        return ("ok", child.pid)

    def _terminate_child(self, key: Any) -> Any:
        if self.simple:
            child = self.dynamic.get(key) if type(key) is P.Pid else None
            if child is None:
                return ("error", "not_found")
            self._shutdown(child)
            return "ok"
        child = self._find(key)
        if child is None:
            return ("error", "not_found")
        self._shutdown(child)
        if child.spec["restart"] == "temporary":
            self.children.remove(child)
        return "ok"

    def _restart_child(self, child_id: Any) -> tuple:
        child = self._find(child_id) if not self.simple else None
        refused = cs.may("restart_child", child, self.flags["strategy"])
        if refused is not None:
            return ("error", refused)
        failed = self._start(child)
        if failed is not None:
            return ("error", failed)
        return ("ok", child.pid)

    def _delete_child(self, child_id: Any) -> Any:
        child = self._find(child_id) if not self.simple else None
        refused = cs.may("delete_child", child, self.flags["strategy"])
        if refused is not None:
            return ("error", refused)
        self.children.remove(child)
        return "ok"

    # -- helpers -----------------------------------------------------------------

    def _all(self) -> list[_Child]:
        return [*self.children, *self.dynamic.values()]

    def _find(self, key: Any) -> _Child | None:
        if type(key) is P.Pid:
            return next((c for c in self.children if c.pid is key), None)
        return next((c for c in self.children if c.id == key), None)

    def _which(self, c: _Child) -> tuple:
        shown = "restarting" if c.state == "restarting" else c.pid
        start = c.spec["start"]
        fn = start if callable(start) else start[0]
        module = getattr(fn, "__module__", None) or type(fn).__module__
        child_id = None if self.simple else c.id
        return (child_id, shown, c.spec["type"], [module])

    def _count(self) -> dict:
        kids = self._all()
        return {
            "specs": 1 if self.simple else len(self.children),
            "active": sum(1 for c in kids if c.state == "running"),
            "supervisors": sum(1 for c in kids if c.spec["type"] == "supervisor"),
            "workers": sum(1 for c in kids if c.spec["type"] == "worker"),
        }

    def _report(self, context: str, reason: Any, child: _Child, pid: Any = None) -> None:
        spec = child.spec
        _logger.report(
            "supervisor_report",
            context=context,
            supervisor=self.name if self.name is not None else repr(self.me),
            reason=reason,
            child={
                "id": None if self.simple else spec["id"],
                "pid": repr(pid if pid is not None else child.pid),
                "restart": spec["restart"],
                "shutdown": spec["shutdown"],
                "type": spec["type"],
            },
        )

    def terminate(self, reason: Any, state: Any) -> None:
        self._stop_all()

    def format_status(self, status: dict) -> dict:
        status = dict(status)
        status["state"] = {
            "flags": self.flags,
            "children": [self._which(c) for c in self._all()],
        }
        return status


# --------------------------------------------------------------------------
# Stopping processes (OTP's shutdown/2)
# --------------------------------------------------------------------------


def _down_of(mref: Any, timeout: float | None) -> Any:
    got = P.receive(
        lambda m: m[4] if type(m) is tuple and len(m) == 5 and m[1] is mref and m[0] == "DOWN" else NOMATCH,
        timeout=timeout,
    )
    return got


def _flush_exit(pid: P.Pid) -> Any:
    """Take an ``("EXIT", pid, reason)`` already in the mailbox: its reason, or TIMEOUT."""
    return P.receive(
        lambda m: m[2] if type(m) is tuple and len(m) == 3 and m[0] == "EXIT" and m[1] is pid else NOMATCH,
        timeout=0,
    )


def _is(reason: Any, *names: str) -> bool:
    return type(reason) is str and reason in names


def _expected(reason: Any, permanent: bool) -> bool:
    """Whether a child stopped with "shutdown" ended as OTP's shutdown/2 accepts."""
    if _is(reason, "shutdown", "noproc"):
        return True
    return not permanent and (_is(reason, "normal") or is_shutdown(reason))


def _stop_process(pid: P.Pid, shutdown: Any, permanent: bool) -> Any:
    """Stop one child as OTP's shutdown/2 does; None if it ended as expected, else the reason to report.

    A child killed because it outlived its shutdown time is reported (``"killed"``).
    """
    mref = monitor(pid)
    unlink(pid)
    early = _flush_exit(pid)
    if early is not TIMEOUT:  # it had exited already: report that reason unless orderly
        _down_of(mref, None)
        return None if _expected(early, permanent) else early
    if shutdown == "brutal_kill":
        exit_signal(pid, "kill")
        reason = _down_of(mref, None)
        return None if _is(reason, "killed", "noproc") else reason
    exit_signal(pid, "shutdown")
    reason = _down_of(mref, None if shutdown == "infinity" else shutdown)
    if reason is TIMEOUT:
        exit_signal(pid, "kill")
        return _down_of(mref, None)
    return None if _expected(reason, permanent) else reason


def _stop_many(kids: list, shutdown: Any) -> list:
    """Stop simple_one_for_one children all at once under one shutdown time."""
    watched = []
    for child, pid in kids:
        mref = monitor(pid)
        unlink(pid)
        _flush_exit(pid)
        exit_signal(pid, "kill" if shutdown == "brutal_kill" else "shutdown")
        watched.append((child, pid, mref))
    deadline = None if shutdown in ("infinity", "brutal_kill") else monotonic() + shutdown
    failures = []
    for child, pid, mref in watched:
        left = None if deadline is None else max(0.0, deadline - monotonic())
        reason = _down_of(mref, left)
        if reason is TIMEOUT:
            exit_signal(pid, "kill")
            failures.append((child, _down_of(mref, None)))  # outlived the shutdown time: reported
        elif not (_expected(reason, child.spec["restart"] == "permanent") or _is(reason, "killed")):
            failures.append((child, reason))
        demonitor(mref, flush=True)
    return failures

