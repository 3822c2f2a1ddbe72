"""constellation: demand-driven stages (GenStage's model) on ensemble processes.

::

    import ensemble as e
    import constellation

    stage = constellation.start()                 # demand strategy, unlimited buffer
    stage.subscribe("s1", "me")                   # events come to this process
    stage.push([1, 2, 3])                         # buffered: nobody asked yet
    stage.ask("s1", 2)                            # delivered before ask returns
    e.receive(timeout=0)                          # ("events", "s1", (1, 2))
    stage.stop()                                  # ("cancelled", "s1") comes too

Layers, pure first: :mod:`constellation.core` (the protocol),
:mod:`constellation.dispatch` (strategies), :mod:`constellation.runtime`
(participant registry and routing), ``_source_core`` (a source's grants); then
the processes over them: the stage (``_stage``: :func:`start`, :class:`Stage`),
:mod:`constellation.consumer`, :mod:`constellation.source`,
:mod:`constellation.worker_pool` (``_pool_server``, ``_pool_types``), and
:mod:`constellation.telemetry` (its reporter runs in ``_notifier``).
"""

from __future__ import annotations

from typing import Any, Callable

from . import dispatch, runtime, telemetry
from ._stage import (
    InvalidBufferCapacity,
    InvalidCallTimeout,
    Stage,
    StageTimeout,
    StageUnavailable,
)
from ._stage import start as _start_stage
from .core import (
    BufferCapacityExceeded,
    DuplicateSubscription,
    InvalidDemand,
    StageError,
    SubscriptionCancelled,
    UnknownSubscription,
)
from .dispatch import Strategy, broadcast, custom, demand, partition
from .runtime import (
    InvalidConsumptionReport,
    MissingParticipantRoute,
    MissingSubscriptionRoute,
    ParticipantAlreadyRegistered,
    RoutingError,
)

__all__ = [
    "start",
    "Stage",
    "StageUnavailable",
    "StageTimeout",
    "InvalidCallTimeout",
    "InvalidBufferCapacity",
    "demand",
    "broadcast",
    "partition",
    "custom",
    "StageError",
    "InvalidDemand",
    "UnknownSubscription",
    "DuplicateSubscription",
    "SubscriptionCancelled",
    "BufferCapacityExceeded",
    "RoutingError",
    "ParticipantAlreadyRegistered",
    "MissingSubscriptionRoute",
    "MissingParticipantRoute",
    "InvalidConsumptionReport",
    "dispatch",
    "runtime",
    "telemetry",
]


def start(
    strategy: Strategy = demand(),  # noqa: B008 - strategies are immutable values
    buffer_capacity: int | None = None,
    call_timeout: float = 5.0,
    reporter: Callable[[telemetry.Event], Any] | None = None,
) -> Stage:
    """Start a stage process and answer its :class:`Stage` handle.

    ``strategy``: how buffered events go to subscriptions (:func:`demand`,
    :func:`broadcast`, :func:`partition`, :func:`custom`).
    ``buffer_capacity``: the most events the stage may hold undelivered
    (None: unlimited, else an int > 0: :func:`constellation.core.check_buffer_capacity`); a push that would exceed it is rejected whole with
    :class:`BufferCapacityExceeded`.  ``call_timeout``: seconds every call
    waits before raising :class:`StageTimeout` (a timed-out call may still
    complete).  ``reporter``: called with each :class:`telemetry.Event` in a
    separate notifier process (``telemetry.log`` logs them through structlog);
    a slow reporter never blocks the stage, a raising one loses only that
    event, and a notifier that is killed stops the stage.

    Raises :class:`InvalidCallTimeout` or :class:`InvalidBufferCapacity` for a
    bad setting.  The stage is not linked to the caller.
    """
    return _start_stage(strategy, buffer_capacity, call_timeout, reporter)


from . import source as source, worker_pool as worker_pool  # noqa: E402 - submodules that import the package
