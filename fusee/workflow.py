"""Workflow definitions and what they are made of: :func:`workflow`, :func:`signal`,
:class:`Retry`, :class:`IdPolicy`, the shard of an ID, and :class:`Clock` (where an
engine's time comes from)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import ensemble as _e
from ensemble import NOMATCH

from . import durations as _durations
from .crc32c import crc32c


if TYPE_CHECKING:
    from .ctx import Ctx

_WAKE = "fusee_wake"

# -- time ---------------------------------------------------------------------------------


class Clock:
    """Where an engine's time comes from: wall-clock unix seconds, and how a run waits for a moment.

    ``now()`` is unix seconds.  ``pause(at)`` parks the calling run process until
    a ``"fusee_wake"`` message arrives (taking it) or until ``now() >= at``
    (``at`` None: no deadline).  :class:`fusee.testing.TestEngine` passes a
    virtual clock; this one is the real one.
    """

    __slots__ = ()

    def now(self) -> float:
        return time.time()

    def pause(self, at: float | None) -> None:
        timeout = None if at is None else max(0.0, at - time.time())
        _e.receive(_wake, timeout=timeout)


REAL_CLOCK = Clock()


# -- definitions -------------------------------------------------------------------------


class Workflow:
    """A workflow type: ``name``, ``version`` and the function ``fn(ctx, input)``; made by :func:`workflow`."""

    __slots__ = ("name", "version", "fn", "__wrapped__", "__dict__")

    def __init__(self, name: str, version: int, fn: Callable[..., Any]) -> None:
        if type(name) is not str or not name:
            raise TypeError(f"a workflow's name is a non-empty str, not {name!r}")
        Workflow._check_version(version)
        if not callable(fn):
            raise TypeError(f"a workflow is a function fn(ctx, input), not {fn!r}")
        self.name = name
        self.version = version
        self.fn = fn
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)

    @staticmethod
    def _check_version(version: Any) -> None:
        if type(version) is not int or version < 0:
            raise TypeError(f"a workflow's version is an int >= 0, not {version!r}")

    def __call__(self, ctx: "Ctx", input: Any) -> Any:
        return self.fn(ctx, input)

    def __repr__(self) -> str:
        return f"<fusee.workflow {self.name!r} version {self.version}>"


def workflow(
    name: Any = None,
    version: int = 1,
    concurrency: int | None = None,
    key: Callable[[Any], Any] | None = None,
) -> Any:
    """Decorate ``def fn(ctx, input)`` as the workflow type ``name`` at ``version``.

    Works bare, ``@fusee.workflow`` (the type's name is ``fn.__qualname__``, version 1),
    and with arguments, ``@fusee.workflow("checkout", version=2)`` or
    ``@fusee.workflow(version=2)`` (``name`` None: ``fn.__qualname__`` again).

    ``concurrency``: at most that many runs of the type at once (of one key, with ``key(input)``
    giving a run's key, a str or int); the others wait in start order, ``queued``
    (:mod:`fusee.concurrency`).
    """
    if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
        raise ValueError(f"concurrency is None or an int >= 1, not {concurrency!r}")
    if key is not None and (concurrency is None or not callable(key)):
        raise ValueError("key= is a function of the input, and needs concurrency=")
    if name is not None and type(name) is not str:
        if callable(name):  # bare: @fusee.workflow
            return _define(name, None, version, concurrency, key)
        raise TypeError(f"a workflow's name is a non-empty str (or None: the function's name), not {name!r}")
    if name is not None and not name:
        raise TypeError("a workflow's name is a non-empty str (or None: the function's name), not ''")
    Workflow._check_version(version)
    return lambda fn: _define(fn, name, version, concurrency, key)


def _define(
    fn: Callable[..., Any], name: str | None, version: int, concurrency: int | None, key: Any
) -> Workflow:
    if name is None:
        name = getattr(fn, "__qualname__", None)
        if type(name) is not str or not name:
            raise TypeError(f"{fn!r} has no __qualname__ to name its workflow: give the name, @fusee.workflow(\"name\")")
    wf = Workflow(name, version, fn)
    wf.concurrency = concurrency
    wf.key = key
    return wf


@dataclass(frozen=True, slots=True)
class Signal:
    """A declared signal name (from :func:`signal`); ``wait_for`` and ``Engine.signal`` take it or its name."""

    name: str


def signal(name: str) -> Signal:
    """Declare the signal ``name``."""
    if type(name) is not str or not name:
        raise TypeError(f"a signal's name is a non-empty str, not {name!r}")
    return Signal(name)


def _signal_name(s: Any) -> str:
    if type(s) is Signal:
        return s.name
    if type(s) is str and s:
        return s
    raise TypeError(f"a signal is a fusee.signal(...) or its name, not {s!r}")


@dataclass(frozen=True, slots=True)
class Retry:
    """How a step retries: ``attempts`` in all (1: no retry); attempt n+1 is due ``min(maximum, initial * factor**(n-1))`` after attempt n failed.

    ``initial`` and ``maximum`` are durations (seconds or strings like ``"1s"``).
    """

    attempts: int = 1
    initial: Any = 1.0
    factor: float = 2.0
    maximum: Any = 60.0

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ValueError(f"Retry.attempts is an int >= 1, not {self.attempts!r}")
        object.__setattr__(self, "initial", _durations.parse(self.initial))
        object.__setattr__(self, "maximum", _durations.parse(self.maximum))
        if type(self.factor) not in (int, float) or not self.factor >= 1:
            raise ValueError(f"Retry.factor is a number >= 1, not {self.factor!r}")

    def delay(self, attempt: int) -> float:
        """Seconds between failed attempt ``attempt`` (1-based) and the next."""
        return float(min(self.maximum, self.initial * self.factor ** (attempt - 1)))


_NO_RETRY = Retry(1)

_ON_RUNNING = ("fail", "attach", "terminate")
_ON_FINISHED = ("fail", "attach", "start_new")


@dataclass(frozen=True, slots=True)
class IdPolicy:
    """What a start does when its workflow ID is taken: by a running run (``on_running``: ``"fail"``,
    ``"attach"``, ``"terminate"`` it and start anew) or a finished one (``on_finished``: ``"fail"``,
    ``"attach"``, ``"start_new"``).  The default fails both ways with :class:`AlreadyExists`;
    :attr:`IdPolicy.ATTACH` attaches to either."""

    on_running: str = "fail"
    on_finished: str = "fail"

    def __post_init__(self) -> None:
        if self.on_running not in _ON_RUNNING:
            raise ValueError(f"IdPolicy.on_running is one of {_ON_RUNNING}, not {self.on_running!r}")
        if self.on_finished not in _ON_FINISHED:
            raise ValueError(f"IdPolicy.on_finished is one of {_ON_FINISHED}, not {self.on_finished!r}")

    def plain(self) -> list[str]:
        """The policy as recorded in ``Start.policy``."""
        return [self.on_running, self.on_finished]


IdPolicy.DEFAULT = IdPolicy()  # type: ignore[attr-defined]
IdPolicy.ATTACH = IdPolicy("attach", "attach")  # type: ignore[attr-defined]
IdPolicy.START_NEW = IdPolicy("fail", "start_new")  # type: ignore[attr-defined]
IdPolicy.TERMINATE = IdPolicy("terminate", "start_new")  # type: ignore[attr-defined]


def shard_of(workflow_id: str, shards: int) -> int:
    """The shard a workflow ID lives on: ``crc32c(utf-8 id) % shards`` (stable across processes)."""
    return crc32c(workflow_id.encode("utf-8", "surrogatepass")) % shards


def _wake(m: Any) -> Any:
    return m if m == _WAKE else NOMATCH
