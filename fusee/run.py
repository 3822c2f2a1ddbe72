"""A run, in four modules (this one gathers their names, for ``fusee.run`` importers):

* :mod:`fusee.run_state` — a run's in-memory state (:class:`_RunState`), the status names;
* :mod:`fusee.run_family` — its family ties: parent refs, telling parents, closing children;
* :mod:`fusee.ctx` — the :class:`Ctx` its workflow code gets, :class:`StepContext`;
* :mod:`fusee.run_process` — the run process (:func:`_run_main`).

Patch a name in the module that uses it (``fusee.run_state._tell_parents``, say), not here.
"""

from __future__ import annotations

from .ctx import (
    Ctx,
    _ContinueAsNew,
    _Deadline,
    _deliver_send,
    _Parked,
    _result_refused,
    _WAITING,
)
from .step_context import StepContext, _signature_takes_one, _takes_step_context
from .run_family import (
    _CHILD_DONE,
    _PARENT_CLOSED,
    _children_to_close,
    _close_children,
    _parent_ref,
    _same_parent,
    _same_parent_run,
    _tell_parents,
)
from .run_process import _STALLED, _run_body, _run_main
from .run_state import _DONE, INHERITED_DEDUPS, RUNNING, STATUSES, _inherited_dedups, _origin_of, _RunState

__all__ = [
    "Ctx",
    "StepContext",
    "RUNNING",
    "STATUSES",
    "INHERITED_DEDUPS",
    "_RunState",
    "_DONE",
    "_CHILD_DONE",
    "_PARENT_CLOSED",
    "_WAITING",
    "_STALLED",
    "_ContinueAsNew",
    "_Deadline",
    "_Parked",
    "_children_to_close",
    "_close_children",
    "_deliver_send",
    "_inherited_dedups",
    "_origin_of",
    "_parent_ref",
    "_result_refused",
    "_run_body",
    "_run_main",
    "_same_parent",
    "_same_parent_run",
    "_signature_takes_one",
    "_takes_step_context",
    "_tell_parents",
]
