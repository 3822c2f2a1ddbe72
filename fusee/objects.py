"""Virtual objects (spec §3.9): keyed state with handlers, the imperative shell over :mod:`fusee.object_core`.

::

    cart = engine.object_type("cart").exclusive("add", add).shared("total", total)
    engine.object("cart", "alice").call("add", {"sku": "A1"}, call_id="req-17")

Built from runs, like schedules: nothing of it touches the journal's format.

* Each key is a **coordinator run** ``fusee.object/<type>/<key>`` (type ``fusee.object``), started by its
  first call (or edit) and waiting forever on one signal.  Its input is the key's :class:`~fusee.object_core.Obj`.
* An **exclusive call** is an update of that run (``fusee.call``, update ID = the call ID): it takes its turn
  (one handler at a time per key: the run's updates run one at a time), is applied once per call ID
  (the update's dedup; across continue-as-new, the answers the key remembers), and its handler runs at
  its place in the run's journal, where its steps are recorded and replayed.  Its ``UpdateDone`` is the
  **commit**: answer and state change in one record, so a call's state is durable exactly when its
  answer is, and a handler that raised commits nothing.  On replay the state is the recorded commit's.
* A **shared call** runs in the caller, against the key's last durable commit (read from the run's
  journal, :func:`fusee.object_core.state_of`), concurrently with anything else; its state is read-only
  (:class:`fusee.errors.ReadOnlyState`).  Nothing is recorded at the object.
* An **outside edit** (``ObjectRef.set`` / ``clear``) is an update too (``fusee.edit``), so it waits for a
  running handler; its version check is the update's validator (a mismatch records nothing and raises
  :class:`fusee.errors.VersionMismatch`).
* From workflow code, ``ctx.object(type, key).call(...)`` is a **step** whose body makes the call with the
  call ID ``fusee.call/<the step's key>`` (or the one given): the answer is recorded in the calling run
  (replayed exactly); a body run again after a crash sends the same call ID, answered once.
* A key's run continues as new after :data:`fusee.object_core.ROLL_AFTER` calls (told by the caller that
  saw it: a signal), carrying values, version and its last answers.  A terminated object run is started
  again by the next call with the state it had.

Object types are per engine (:func:`object_type`); a key's run recovered by ``Engine.open`` before its
type's handlers are defined again waits for them (define them right after the open).
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Final, NamedTuple

import ensemble as _e
from ensemble import NOMATCH

from . import codec as _codec
from . import object_core as core
from .errors import (
    AlreadyExists,
    CallFailed,
    Cancelled,
    DeterminismError,
    EngineFailed,
    Error,
    NotFound,
    NotRunning,
    ReadOnlyState,
    ShardCrashed,
    StorageError,
    Terminated,
    UnknownHandler,
    UnknownObjectType,
    UpdateFailed,
    UpdateRejected,
    failure_of,
)
from .step_context import StepContext, _takes_step_context
from .workflow import IdPolicy, Retry, Workflow

if TYPE_CHECKING:
    from .engine import Engine
    from .host import Host

__all__ = [
    "OBJECT_TYPE",
    "ObjectType",
    "ObjectRef",
    "ObjectCtx",
    "State",
    "StateView",
    "object_type",
    "object_ref",
    "workflows",
]

OBJECT_TYPE: Final = core.OBJECT_TYPE
#: The update names of a key's run: an exclusive call, an outside edit.
CALL: Final = "fusee.call"
EDIT: Final = "fusee.edit"
#: The signal a key's run waits for: continue as new.
ROLL: Final = "fusee.roll"
#: How a workflow's object call step retries what is not the handler's answer (a shard restarting, a full disk).
CALL_RETRY: Final = Retry(attempts=8, initial=0.05, factor=2, maximum=2.0)
#: Seconds after an engine opens during which workflow code calling a type not yet defined waits for it
#: (recovered runs replay while the application defines its types) instead of raising.
GRACE: Final = 5.0
_REGISTERED = "fusee_object_registered"
_KINDS: Final = ("exclusive", "shared")


class StateView(NamedTuple):
    """An object key's committed state as read from outside: ``values`` (a fresh dict) and ``version``."""

    values: dict[str, Any]
    version: int


# -- the per-engine registry ------------------------------------------------------------------


class _Registry:
    """The object types of one host.  ``lock`` guards ``types`` and ``waiters`` (types are defined on the
    application's thread, read by runs on shard threads); ``waiters`` are the run processes waiting for a
    handler to be defined (told ``_REGISTERED``)."""

    __slots__ = ("lock", "types", "waiters", "opened", "opened_at")

    def __init__(self, now: float) -> None:
        self.lock = threading.Lock()
        self.types: dict[str, ObjectType] = {}
        self.waiters: set[Any] = set()
        self.opened = time.monotonic()  # when the engine opened (its first use, at the latest)
        self.opened_at = now  # the same, in the engine's clock (runs started before it were recovered)

    def lookup(self, type: str, handler: str) -> tuple[str, Callable[..., Any]] | None:
        with self.lock:
            t = self.types.get(type)
            return None if t is None else t._handlers.get(handler)

    def tell(self) -> None:
        with self.lock:
            waiters, self.waiters = self.waiters, set()
        for pid in waiters:
            _e.send(pid, _REGISTERED)


_REGISTRY_LOCK = threading.Lock()


def registry(host: "Host") -> _Registry:
    """The object types of ``host`` (made at its first use)."""
    reg = getattr(host, "object_types", None)
    if reg is None:
        with _REGISTRY_LOCK:
            reg = getattr(host, "object_types", None)
            if reg is None:
                reg = host.object_types = _Registry(host.clock.now())  # type: ignore[attr-defined]
    return reg


def _await_handler(host: "Host", type: str, handler: str, until: float | None = None) -> tuple[str, Callable[..., Any]] | None:
    """Handler ``handler`` of object type ``type``, waiting (in a run process) until it is defined, or until
    ``until`` (monotonic seconds; None: no limit): then None."""
    reg = registry(host)
    while True:
        with reg.lock:
            t = reg.types.get(type)
            got = None if t is None else t._handlers.get(handler)
            if got is not None:
                return got
            reg.waiters.add(_e.self())
        left = None if until is None else until - time.monotonic()
        if left is not None and left <= 0:
            return None
        _e.receive(lambda m: m if m == _REGISTERED else NOMATCH, timeout=left)


class ObjectType:
    """An object type of an engine (:meth:`fusee.Engine.object_type`): its handlers by name, each
    ``fn(ctx, arg)`` with ``ctx`` an :class:`ObjectCtx`.  :meth:`exclusive` and :meth:`shared` define one
    and return the type (to chain), or, without ``fn``, a decorator."""

    __slots__ = ("name", "_handlers", "_registry", "_engine")

    def __init__(self, name: str, reg: _Registry, engine: "Engine") -> None:
        self.name = name
        self._handlers: dict[str, tuple[str, Callable[..., Any]]] = {}
        self._registry = reg
        self._engine = engine

    def __repr__(self) -> str:
        return f"<fusee.ObjectType {self.name!r} {sorted(self._handlers)}>"

    @property
    def handlers(self) -> dict[str, str]:
        """Each handler's name and kind (``"exclusive"`` or ``"shared"``)."""
        with self._registry.lock:
            return {n: k for n, (k, _) in self._handlers.items()}

    def exclusive(self, name: str, fn: Callable[..., Any] | None = None) -> Any:
        """Define exclusive handler ``name``: calls of one key take turns; it may run steps (recorded in the
        key's run), read and change ``ctx.state``, committed with its result.  A handler that raises answers
        :class:`fusee.errors.CallFailed` and commits nothing."""
        return self._define("exclusive", name, fn)

    def shared(self, name: str, fn: Callable[..., Any] | None = None) -> Any:
        """Define shared handler ``name``: runs in the caller, concurrently with any other call, against the
        key's last committed state, which it only reads (``ctx.state.set`` raises :class:`ReadOnlyState`);
        nothing is recorded at the object."""
        return self._define("shared", name, fn)

    def _define(self, kind: str, name: Any, fn: Any) -> Any:
        if type(name) is not str or not name:
            raise TypeError(f"a handler's name is a non-empty str, not {name!r}")
        if fn is None:
            def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
                self._define(kind, name, f)
                return f

            return decorate
        if not callable(fn):
            raise TypeError(f"a handler is a function fn(ctx, arg), not {fn!r}")
        with self._registry.lock:
            held = self._handlers.get(name)
            if held is not None and held[0] != kind:
                raise ValueError(f"handler {name!r} of object type {self.name!r} is {held[0]} already")
            self._handlers[name] = (kind, fn)
        self._registry.tell()
        return self

    def __call__(self, key: str) -> "ObjectRef":
        """``engine.object(self, key)``."""
        return ObjectRef(self._engine, self.name, key)


def object_type(engine: "Engine", name: Any) -> ObjectType:
    """The object type ``name`` of ``engine`` (made now if it has none)."""
    if type(name) is not str or not name or "/" in name:
        raise ValueError(f"an object type's name is a non-empty str without '/', not {name!r}")
    reg = registry(engine.host)
    with reg.lock:
        t = reg.types.get(name)
        if t is None:
            t = reg.types[name] = ObjectType(name, reg, engine)
    reg.tell()
    return t


def defined_types(engine: "Engine") -> dict[str, dict[str, str]]:
    """The object types defined on ``engine``, by name: each handler's name and kind (``"exclusive"`` or
    ``"shared"``), in name order (the HTTP API's ``GET /api/objects``)."""
    reg = registry(engine.host)
    with reg.lock:
        return {n: {h: k for h, (k, _) in sorted(t._handlers.items())} for n, t in sorted(reg.types.items())}


def _type_name(t: Any) -> str:
    if type(t) is ObjectType:
        return t.name
    if type(t) is not str or not t:
        raise TypeError(f"an object type is an ObjectType or its name, not {t!r}")
    return t


def _check_key(key: Any) -> str:
    if type(key) is not str:
        raise TypeError(f"an object's key is a str, not {key!r}")
    return key


def _check_call_id(call_id: Any) -> None:
    if call_id is not None and (type(call_id) is not str or not call_id):
        raise TypeError(f"call_id is None or a non-empty str, not {call_id!r}")


def _handler_of(host: "Host", t: str, handler: Any) -> tuple[str, Callable[..., Any]]:
    """The kind and function of ``handler`` of ``type``: :class:`UnknownObjectType`, :class:`UnknownHandler`."""
    if type(handler) is not str:
        raise TypeError(f"a handler's name is a str, not {handler!r}")
    reg = registry(host)
    with reg.lock:
        ot = reg.types.get(t)
        if ot is None:
            raise UnknownObjectType(t, sorted(reg.types))
        got = ot._handlers.get(handler)
        if got is None:
            raise UnknownHandler(t, handler, sorted(ot._handlers))
        return got


# -- the state a handler sees -------------------------------------------------------------------


class State:
    """``ctx.state`` of a handler: the key's values as the handler left them so far.  ``get(k, default)``,
    ``set(k, v)`` (``v`` checked by the codec at once: :class:`fusee.errors.NotSerializable`),
    ``clear(k=None)`` (one key, or all), ``keys()``, ``in``.  Changes are committed with the handler's
    result, or dropped if it raises.  A shared handler's is read-only (:class:`ReadOnlyState`)."""

    __slots__ = ("_values", "_sets", "_removed", "_cleared", "_writable", "_type", "_handler")

    def __init__(self, values: Any, writable: bool, type: str = "", handler: str = "") -> None:
        self._values = values  # never mutated: the first change copies it
        self._sets: dict[str, Any] = {}
        self._removed: set[str] = set()
        self._cleared = False
        self._writable = writable
        self._type = type
        self._handler = handler

    def __repr__(self) -> str:
        return f"<fusee.objects.State {dict(self._values)!r}>"

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default``."""
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def keys(self) -> list[str]:
        """The keys set, in order."""
        return list(self._values)

    def _change(self) -> None:
        if not self._writable:
            raise ReadOnlyState(self._type, self._handler)
        if not self._sets and not self._removed and not self._cleared:
            self._values = dict(self._values)

    def set(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (committed with the handler's result)."""
        if type(key) is not str:
            raise TypeError(f"a state key is a str, not {key!r}")
        if not self._writable:
            raise ReadOnlyState(self._type, self._handler)
        _codec.encode(value, root=f"state[{key!r}]")  # NotSerializable: raised here, naming the path
        self._change()
        self._values[key] = value
        self._sets[key] = value
        self._removed.discard(key)

    def clear(self, key: str | None = None) -> None:
        """Remove ``key``, or every key (None)."""
        if key is not None and type(key) is not str:
            raise TypeError(f"a state key is None or a str, not {key!r}")
        self._change()
        if key is None:
            self._values.clear()
            self._sets.clear()
            self._removed.clear()
            self._cleared = True
        else:
            self._values.pop(key, None)
            self._sets.pop(key, None)
            self._removed.add(key)

    def delta(self) -> core.Delta:
        """What the handler changed (:class:`fusee.object_core.Delta`)."""
        return core.Delta(dict(self._sets), tuple(sorted(self._removed)), self._cleared)


class ObjectCtx:
    """What a handler gets: ``type``, ``key``, ``handler``, ``call_id``, ``exclusive``; ``state``
    (:class:`State`); ``step(name, fn, retry=None, read_only=False)`` as in workflow code (an exclusive
    handler's steps are recorded in the key's run and replayed; a shared handler's run ``fn`` each time,
    nothing recorded), ``now()``, ``random()``, ``uuid()`` (recorded in an exclusive handler), and
    ``object(type, key)`` to call another object (not the key itself from an exclusive handler: it
    holds the key's turn)."""

    __slots__ = ("_ctx", "_host", "type", "key", "handler", "call_id", "exclusive", "state", "_steps")

    def __init__(self, ctx: Any, host: "Host", type: str, key: str, handler: str, call_id: Any, state: State, exclusive: bool) -> None:
        self._ctx = ctx
        self._host = host
        self.type = type
        self.key = key
        self.handler = handler
        self.call_id = call_id
        self.exclusive = exclusive
        self.state = state
        self._steps = 0

    def __repr__(self) -> str:
        return f"<fusee.ObjectCtx {self.type}/{self.key} {self.handler!r}>"

    def step(self, name: str, fn: Callable[..., Any], retry: Retry | None = None, read_only: bool = False) -> Any:
        if self.exclusive:
            return self._ctx.step(name, fn, retry, read_only)
        if type(name) is not str:
            raise TypeError(f"a step's name is a str, not {name!r}")
        self._steps += 1
        if _takes_step_context(fn):
            return fn(StepContext(f"{core.object_id(self.type, self.key)}/shared/{self.call_id}/{self._steps}", name, 1))
        return fn()

    def now(self) -> float:
        return self._ctx.now() if self.exclusive else self._host.clock.now()

    def random(self) -> float:
        import random as _random

        return self._ctx.random() if self.exclusive else _random.random()

    def uuid(self) -> str:
        import uuid as _uuid

        return self._ctx.uuid() if self.exclusive else str(_uuid.uuid4())

    def object(self, type: Any, key: str) -> Any:
        t = _type_name(type)
        _check_key(key)
        if self.exclusive:
            if t == self.type and key == self.key:
                raise Error(f"an exclusive handler of {t}/{key} cannot call its own key (it holds the key's turn)")
            return WorkflowObjectRef(self._ctx, t, key)
        return ObjectRef(_engine_of(self._host), t, key)


# -- the key's run (the coordinator) ------------------------------------------------------------


class _Stale(Exception):
    """An edit's validator refused it: the message is the version the key has."""


def _object_run(ctx: Any, plain: Any) -> Any:
    """The coordinator ``fusee.object/<type>/<key>``: take calls and edits as updates (one at a time), keep
    the committed state, continue as new when told (:data:`ROLL`); cancels are ignored (an object has no
    end of its own; terminate ends its run, and the next call starts another with the state it had)."""
    box = [core.Obj.of_plain(plain)]

    def check_edit(v: Any) -> None:
        seen = core.check_version(box[0], v.get("version") if isinstance(v, dict) else None)
        if seen is not None:
            raise _Stale(str(seen))

    ctx.on_update(CALL, lambda v: _take_call(ctx, box, v))
    ctx.on_update(EDIT, lambda v: _take_edit(ctx, box, v), validator=check_edit)
    while True:
        try:
            ctx.wait_for(ROLL)
        except Cancelled:
            continue
        ctx.continue_as_new(core.rolled(box[0]).plain())


def _recorded(ctx: Any, uid: Any) -> Any:
    done = ctx._st.machine.history.update_outcome(uid)
    if done is not None and done[0].status == "ok" and core.is_commit(done[0].payload):
        return done[0].payload
    return None


def _take_call(ctx: Any, box: list[core.Obj], v: Any) -> dict[str, Any]:
    """Exclusive call ``v`` (``{"h": handler, "a": arg, "c": call ID}``) on the key: its commit."""
    o = box[0]
    host = ctx._st.host
    cid, h, arg = v["c"], v["h"], v.get("a")
    prev = core.recall(o, cid)
    if prev is not None:  # answered by an earlier run of this key (before it continued as new)
        p = core.again(o, cid, prev)
    else:
        got = _await_handler(host, o.type, h)
        assert got is not None
        kind, fn = got
        state = State(o.values, True, o.type, h)
        octx = ObjectCtx(ctx, host, o.type, o.key, h, cid, state, True)
        try:
            if kind != "exclusive":
                raise Error(f"handler {h!r} of object type {o.type!r} is {kind}, not exclusive")
            value = fn(octx, arg)
            _codec.encode(value, root="result")  # NotSerializable: the call fails, saying where
            ok, res = True, value
        except (DeterminismError, Terminated, StorageError, ShardCrashed, EngineFailed):
            raise
        except Exception as exc:
            ok, res = False, failure_of(exc)
        p = core.commit(o, cid, ok, res, state.delta() if ok else core.Delta())
    rec = _recorded(ctx, cid)
    if rec is not None:
        p = rec  # replay: the recorded commit, whatever the handler did this time
    box[0] = core.apply(o, p)
    return p


def _take_edit(ctx: Any, box: list[core.Obj], v: Any) -> dict[str, Any]:
    """Outside edit ``v`` (``{"op", "k", "v", "version", "c"}``) on the key: its commit."""
    o = box[0]
    seen = core.check_version(o, v.get("version"))
    if seen is not None:  # cannot happen live (the validator ran just before); kept for the record
        p: dict[str, Any] = {"ok": False, "failure": {"type": "VersionMismatch", "message": str(seen)}, "version": o.version, "edit": v["op"]}
    else:
        p = core.edit(o, v["op"], v.get("k"), v.get("v"))
    rec = _recorded(ctx, v.get("c"))
    if rec is not None:
        p = rec
    box[0] = core.apply(o, p)
    return p


def workflows() -> list[Workflow]:
    """The built-in ``fusee.object`` workflow type (every engine has it)."""
    return [Workflow(OBJECT_TYPE, 1, _object_run)]


# -- calls and edits (the caller's side) --------------------------------------------------------


def _engine_of(host: "Host") -> "Engine":
    """An :class:`fusee.engine.Engine` face over ``host`` (its update path, from a run's process)."""
    eng = getattr(host, "object_engine", None)
    if eng is None:  # ``host.facade``: the Engine class, set by fusee.engine.open_engine (no import cycle)
        eng = host.object_engine = host.facade(host)  # type: ignore[attr-defined]
    return eng


def _seed(host: "Host", t: str, key: str) -> Any:
    """The input of a key's new run: the state its last run ended with (terminated), or a new key's."""
    oid = core.object_id(t, key)
    try:
        d = host.call(host.shard_of(oid), ("describe", oid))
    except NotFound:
        return core.new(t, key).plain()
    o, lsn = core.state_of(d["input"], d["journal"])
    if lsn:
        host.wait_durable(host.shard_of(oid), lsn)
    return core.rolled(o).plain()


def _update(host: "Host", t: str, key: str, name: str, value: Any, uid: str, timeout: float | None) -> dict[str, Any]:
    """Update ``name`` of key ``t``/``key``'s run (starting it, with its last state, if it has none running);
    the commit once durable.  Tells the run to continue as new once it took :data:`ROLL_AFTER` calls."""
    eng = _engine_of(host)
    oid = core.object_id(t, key)
    w = host.workflow(OBJECT_TYPE)
    policy = IdPolicy("attach", "fail")
    for _ in range(20):
        try:
            payload, st = eng._update(oid, name, value, timeout, uid, (w, core.new(t, key).plain(), policy, None))
        except Error as exc:
            if type(exc) is AlreadyExists or type(exc) is NotRunning:
                # its run ended (terminated): start the next with the state it had
                policy = IdPolicy("attach", "start_new")
                seed = _seed(host, t, key)
                try:
                    payload, st = eng._update(oid, name, value, timeout, uid, (w, seed, policy, None))
                except NotRunning:
                    continue
            else:
                raise
        break
    else:  # pragma: no cover - a run terminated over and over
        raise NotRunning(oid, None, f"call {name!r}")
    if len(st.machine.history._updates) >= core.ROLL_AFTER:
        try:  # not waited for: the roll is the key's business; a lost one is asked for by the next caller
            host.call(host.shard_of(oid), ("signal", oid, ROLL, None, f"{ROLL}/{st.run}"))
        except Error:
            pass
    return payload


def _answer(t: str, key: str, handler: str, call_id: Any, p: dict[str, Any]) -> Any:
    if p.get("ok"):
        return p.get("value")
    raise CallFailed(t, key, handler, call_id, p.get("failure"))


def call_answer(host: "Host", t: str, key: str, handler: str, arg: Any, call_id: str, timeout: float | None = None, kind_fn: Any = None) -> dict[str, Any]:
    """Call ``handler`` of key ``t``/``key`` with ``arg`` as call ``call_id``: its answer ``{"ok": True,
    "value": v}`` or ``{"ok": False, "failure": f}`` (the handler's own failure is an answer, not raised)."""
    kind, fn = _handler_of(host, t, handler) if kind_fn is None else kind_fn
    if kind == "exclusive":
        p = _update(host, t, key, CALL, {"h": handler, "a": arg, "c": call_id}, call_id, timeout)
        return core.answer_of(p)
    o, _ = _committed(host, t, key)
    octx = ObjectCtx(None, host, t, key, handler, call_id, State(o.values, False, t, handler), False)
    try:
        value = fn(octx, arg)
    except ReadOnlyState:
        raise
    except Exception as exc:
        return {"ok": False, "failure": failure_of(exc)}
    return {"ok": True, "value": value}


def _committed(host: "Host", t: str, key: str) -> tuple[core.Obj, int]:
    """Key ``t``/``key``'s last committed state, once durable (a key never called: a new one)."""
    oid = core.object_id(t, key)
    shard = host.shard_of(oid)
    try:
        d = host.call(shard, ("describe", oid), again=True)
    except NotFound:
        return core.new(t, key), 0
    o, lsn = core.state_of(d["input"], d["journal"])
    if lsn:
        host.wait_durable(shard, lsn)
    return o, lsn


class ObjectRef:
    """Object ``type`` / ``key`` of an engine (:meth:`fusee.Engine.object`): :meth:`call` a handler, read
    (:meth:`state`) and edit (:meth:`set`, :meth:`clear`) its state from outside."""

    __slots__ = ("engine", "type", "key")

    def __init__(self, engine: "Engine", type: Any, key: Any) -> None:
        self.engine = engine
        self.type = _type_name(type)
        self.key = _check_key(key)

    def __repr__(self) -> str:
        return f"<fusee.ObjectRef {self.type}/{self.key}>"

    @property
    def id(self) -> str:
        """The key's run's workflow ID, ``fusee.object/<type>/<key>``."""
        return core.object_id(self.type, self.key)

    def call(self, handler: str, arg: Any = None, *, call_id: str | None = None, timeout: float | None = None) -> Any:
        """Call ``handler(ctx, arg)`` on this key and return its result, once its commit is durable (an
        exclusive handler's; a shared one's at once).

        ``call_id`` (default: a fresh one): a call sent again with the same ID (after a timeout, a crash) runs
        once and answers the same (an exclusive handler's; a key remembers the answers of at least its last
        :data:`fusee.object_core.RECENT_CALLS` calls).  A handler that raises gives :class:`CallFailed` (its
        state changes dropped).  Raised here with nothing recorded: :class:`UnknownObjectType`,
        :class:`UnknownHandler`, ``TypeError``, :class:`fusee.errors.NotSerializable` (``arg``).
        ``timeout`` (seconds): ``TimeoutError`` (the call may still run: send it again with its ``call_id``)."""
        host = self.engine.host
        kind_fn = _handler_of(host, self.type, handler)
        _check_call_id(call_id)
        _codec.encode(arg, root="arg")  # NotSerializable: raised here, nothing recorded
        if call_id is None:
            call_id = f"fusee.call/{os.urandom(12).hex()}"
        a = call_answer(host, self.type, self.key, handler, arg, call_id, timeout, kind_fn)
        return _answer(self.type, self.key, handler, call_id, a)

    def state(self) -> StateView:
        """The key's last committed state (durable) and its version (0: never changed)."""
        _handler_types(self.engine.host, self.type)
        o, _ = _committed(self.engine.host, self.type, self.key)
        return StateView(dict(o.values), o.version)

    def get(self, key: str, default: Any = None) -> Any:
        """One value of :meth:`state`."""
        return self.state().values.get(key, default)

    def set(self, key: str, value: Any, *, version: int | None = None, timeout: float | None = None) -> int:
        """Set ``key`` of the state to ``value`` from outside, after any running handler (it takes its turn);
        returns the new version once durable.  ``version``: the version the state must have, else
        :class:`fusee.errors.VersionMismatch` with nothing recorded."""
        if type(key) is not str:
            raise TypeError(f"a state key is a str, not {key!r}")
        _codec.encode(value, root=f"state[{key!r}]")
        return self._edit("set", key, value, version, timeout)

    def clear(self, key: str | None = None, *, version: int | None = None, timeout: float | None = None) -> int:
        """Remove ``key`` (None: every key) from the state, as :meth:`set` does; returns the new version."""
        if key is not None and type(key) is not str:
            raise TypeError(f"a state key is None or a str, not {key!r}")
        return self._edit("clear", key, None, version, timeout)

    def _edit(self, op: str, key: Any, value: Any, version: Any, timeout: Any) -> int:
        from .errors import VersionMismatch

        _handler_types(self.engine.host, self.type)
        if version is not None and (type(version) is not int or version < 0):
            raise TypeError(f"version is None or an int >= 0, not {version!r}")
        uid = f"fusee.edit/{os.urandom(12).hex()}"
        try:
            p = _update(self.engine.host, self.type, self.key, EDIT, {"op": op, "k": key, "v": value, "version": version, "c": uid}, uid, timeout)
        except UpdateRejected as exc:
            f = exc.failure if isinstance(exc.failure, dict) else {}
            if f.get("type") == "_Stale":
                raise VersionMismatch(self.type, self.key, version, int(f.get("message", -1))) from None
            raise
        except UpdateFailed as exc:  # pragma: no cover - an edit's handler does not raise
            raise CallFailed(self.type, self.key, EDIT, uid, exc.failure) from None
        if not p.get("ok"):
            raise VersionMismatch(self.type, self.key, version, p.get("version"))
        return int(p["value"])


def _handler_types(host: "Host", t: str) -> None:
    reg = registry(host)
    with reg.lock:
        if t not in reg.types:
            raise UnknownObjectType(t, sorted(reg.types))


def object_ref(engine: "Engine", type: Any, key: Any) -> ObjectRef:
    """``engine.object(type, key)``: :class:`UnknownObjectType` for a type the engine does not have."""
    ref = ObjectRef(engine, type, key)
    _handler_types(engine.host, ref.type)
    return ref


def workflow_ref(ctx: Any, type: Any, key: Any) -> "WorkflowObjectRef":
    """``ctx.object(type, key)`` (:meth:`fusee.ctx.Ctx.object`): the type's name and the key checked."""
    return WorkflowObjectRef(ctx, _type_name(type), _check_key(key))


class WorkflowObjectRef:
    """``ctx.object(type, key)`` in workflow code (or in an exclusive handler): :meth:`call` is a step of the
    calling run, so its answer is recorded there and replayed."""

    __slots__ = ("_ctx", "type", "key")

    def __init__(self, ctx: Any, type: str, key: str) -> None:
        self._ctx = ctx
        self.type = type
        self.key = key

    def __repr__(self) -> str:
        return f"<fusee.WorkflowObjectRef {self.type}/{self.key}>"

    def call(self, handler: str, arg: Any = None, *, call_id: str | None = None) -> Any:
        """Call ``handler`` with ``arg`` as :meth:`ObjectRef.call` does, durably: a step named
        ``object <type>/<key> <handler>`` whose body makes the call with the call ID ``call_id`` or
        ``fusee.call/<the step's key>`` (the same if the body runs again after a crash: answered once).
        The answer is recorded in this run and replayed; a handler's failure raises :class:`CallFailed`
        here (recorded, not retried).  Bad input raises here with nothing recorded (as ``ObjectRef.call``)."""
        ctx = self._ctx
        st = ctx._st
        host = st.host
        t, key = self.type, self.key
        _check_call_id(call_id)
        reg = registry(host)
        try:
            kind, _ = _handler_of(host, t, handler)
        except (UnknownObjectType, UnknownHandler):
            # a run recovered by the open may replay before the application defines its types again: it
            # waits for them (a little, once its replay is over); a run of this engine's life raises at once
            until = reg.opened + GRACE
            if not st.machine.replaying and (st.started > reg.opened_at or time.monotonic() >= until):
                raise
            if _await_handler(host, t, handler, None if st.machine.replaying else until) is None:
                raise
            kind, _ = _handler_of(host, t, handler)
        _codec.encode(arg, root="arg")  # NotSerializable: raised here, nothing recorded

        def body(s: Any) -> Any:
            return call_answer(host, t, key, handler, arg, call_id or f"fusee.call/{s.key}")

        a = ctx.step(f"object {t}/{key} {handler}", body, retry=CALL_RETRY, read_only=kind == "shared")
        return _answer(t, key, handler, call_id, a)
