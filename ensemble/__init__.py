"""ensemble: Erlang/OTP's process model on gevent.

Processes are greenlets with a pid, a mailbox and Erlang's exit semantics:
spawn, send, selective receive, links, monitors, exit signals that land
wherever a process is parked, names, aliases, timers and hibernation.
Dispatchers place processes on native OS threads, each running its own hub.

Layout: every decision (what a signal does, which message a receive takes,
restart plans, timer order, what a callback's return means...) is a pure
function in :mod:`ensemble.decide`, one module per asker.  The modules here
carry the answers out: :mod:`ensemble._process` (the process table, delivery,
parking, signals) and its neighbours (``_spawn``, ``_links``, ``_names``,
``_info``, ``_carrier``, :mod:`ensemble.dispatcher`, :mod:`ensemble.timer`,
``_passivate``), and the behaviours (:mod:`ensemble.gen_server`,
:mod:`ensemble.gen_statem`, :mod:`ensemble.gen_event`, :mod:`ensemble.supervisor`,
:mod:`ensemble.application`, :mod:`ensemble.sys`) over OTP's shared plumbing
(``_gen``, ``_sysmsg``).  :mod:`ensemble.threads` and :mod:`ensemble.native` are
the public primitives the layers above use.
"""

from __future__ import annotations

from . import dispatcher as dispatcher
from . import logger as logger  # installs the crash report
from . import threads as threads
from ._exceptions import Badarg as Badarg
from ._exceptions import CallError as CallError
from ._exceptions import EnsembleError as EnsembleError
from ._exceptions import Exit as Exit
from ._exceptions import ExitSignal as ExitSignal
from ._exceptions import StartError as StartError
from ._info import flush as flush
from ._info import is_alive as is_alive
from ._info import node as node
from ._info import process_info as process_info
from ._info import processes as processes
from ._info import self as self
from ._info import set_state as set_state
from ._info import state as state
from ._info import update_state as update_state
from ._links import demonitor as demonitor
from ._links import exit as exit
from ._links import link as link
from ._links import monitor as monitor
from ._links import trap_exit as trap_exit
from ._links import unlink as unlink
from ._names import alias as alias
from ._names import register as register
from ._names import registered as registered
from ._names import send as send
from ._names import unalias as unalias
from ._names import unregister as unregister
from ._names import whereis as whereis
from ._passivate import passivate as passivate
from ._passivate import passivation_refused as passivation_refused
from ._process import Pid as Pid
from ._process import receive as receive
from ._spawn import exit_reason as exit_reason
from ._spawn import hibernate as hibernate
from ._spawn import join as join
from ._spawn import spawn as spawn
from ._spawn import spawn_actor as spawn_actor
from ._spawn import spawn_link as spawn_link
from ._spawn import spawn_monitor as spawn_monitor
from ._terms import TIMEOUT as TIMEOUT
from ._terms import Alias as Alias
from ._terms import Ref as Ref
from ._terms import make_ref as make_ref
from .decide.receive import NOMATCH as NOMATCH

__version__ = "0.1.0"

__all__ = [
    "Alias",
    "Badarg",
    "CallError",
    "EnsembleError",
    "Exit",
    "ExitSignal",
    "NOMATCH",
    "Pid",
    "Ref",
    "StartError",
    "TIMEOUT",
    "alias",
    "demonitor",
    "dispatcher",
    "exit",
    "exit_reason",
    "flush",
    "hibernate",
    "is_alive",
    "join",
    "link",
    "logger",
    "make_ref",
    "monitor",
    "native",
    "node",
    "passivate",
    "passivation_refused",
    "process_info",
    "processes",
    "receive",
    "register",
    "registered",
    "self",
    "send",
    "set_state",
    "spawn",
    "spawn_actor",
    "spawn_link",
    "spawn_monitor",
    "state",
    "threads",
    "timer",
    "trap_exit",
    "unalias",
    "unlink",
    "unregister",
    "update_state",
    "whereis",
]


#: The decision modules' former names (before they moved into :mod:`ensemble.decide`), kept so
#: that ``import ensemble.select`` and ``from ensemble import order`` go on working: each gives the
#: very module object of its new place.
FORMER_NAMES: dict[str, str] = {
    "_values": "values",
    "signal": "signal",
    "select": "receive",
    "life": "life",
    "timers": "timer",
    "order": "supervisor",
    "childspec": "childspec",
    "callback": "gen_server",
    "request": "request",
    "statem": "gen_statem",
    "appdecide": "application",
    "eventdecide": "gen_event",
}


def _register_former_names() -> None:
    import importlib
    import sys as _sys

    for former, name in FORMER_NAMES.items():
        module = importlib.import_module(f"{__name__}.decide.{name}")
        _sys.modules.setdefault(f"{__name__}.{former}", module)
        globals().setdefault(former, module)


_register_former_names()


def __getattr__(name: str):  # ensemble.timer, .native and .dist are imported on first use
    if name in ("timer", "native", "dist", "rpc", "pg", "global_"):
        import importlib

        return importlib.import_module("." + name, __name__)
    if name in ("nodes", "monitor_node", "spawn_on"):  # distribution's, at the top as in Erlang
        from . import dist

        return getattr(dist, name)
    raise AttributeError(f"module 'ensemble' has no attribute {name!r}")
