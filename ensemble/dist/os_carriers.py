"""A dispatcher of OS processes: ``dispatcher.define(name, processes=n)``.

Its carriers are ``n`` carrier nodes (:mod:`ensemble.dist.carrier_node`), local OS processes
that ensemble starts when the first process is spawned on the dispatcher and stops with it
(``dispatcher.shutdown``).  ``spawn(fn, *args, dispatcher=name)`` of an importable function
(module-level, found again by ``"module:qualname"``; the parent's ``__main__`` is loaded in
each carrier node as :mod:`multiprocessing` loads it) runs ``fn(*args)`` in a process there,
through distribution: the pid is a remote pid, links, monitors and exit signals work as with any
process of another node, and the arguments cross the wire (:mod:`ensemble.dist.codec`).  Carrier
nodes are handed out round-robin; one that has died is started again, with a new name, when
its turn comes.

This OS process must be a node to talk to its carrier nodes: if it is not one when the first
carrier starts, it becomes ``ensemble-<os pid>@127.0.0.1`` (loopback, a random cookie).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from typing import Any

import gevent
from gevent.os import tp_read

from .. import _process as P
from .._exceptions import Badarg, EnsembleError
from ..decide import carrier_nodes as _decide
from ..decide.carrier_nodes import NotImportable
from .functions import importable_name

__all__ = ["OsPool", "OsCarrier", "CarrierStartError", "NotImportable", "importable_name"]

#: Seconds a carrier node has to start and connect back.
START_TIMEOUT = 60.0
#: Seconds a spawn waits for its carrier node's answer (a node busy computing answers late).
SPAWN_TIMEOUT = 60.0
#: Seconds a stopping carrier node has to exit before it is killed.
STOP_TIMEOUT = 5.0


class CarrierStartError(EnsembleError):
    """A carrier node of a dispatcher of OS processes did not start; ``reason`` says why."""

    def __init__(self, dispatcher: str, reason: str) -> None:
        super().__init__(f"a carrier node of dispatcher {dispatcher!r} did not start: {reason}")
        self.dispatcher = dispatcher
        self.reason = reason


class OsCarrier:
    """One carrier node: the child OS process ``popen``, node ``node``."""

    __slots__ = ("dispatcher", "index", "node", "popen")

    def __init__(self, dispatcher: str, index: int, node: str, popen: subprocess.Popen) -> None:
        self.dispatcher = dispatcher
        self.index = index
        self.node = node
        self.popen = popen

    def __repr__(self) -> str:
        return f"<carrier node {self.node} of {self.dispatcher!r}>"

    def alive(self) -> bool:
        """Whether the OS process runs and this node is connected to it."""
        from .node import NODE_STATE

        n = NODE_STATE.node
        return self.popen.poll() is None and n is not None and self.node in n.conns

    def spawn(self, fn: Any, args: tuple, name: Any, link: bool, monitor: bool, trap_exit: bool,
              state: Any) -> tuple[Any, Any]:
        """Spawn ``fn(*args)`` on this carrier node; answer ``(pid, ref)`` as ``_spawn_opt`` does."""
        if name is not None:
            raise Badarg(f"a process on dispatcher {self.dispatcher!r} runs in another OS process: "
                         "it cannot be registered here (let it register itself there)")
        fname = importable_name(fn)
        from . import spawn_on

        if trap_exit or state is not P.NO_STATE:
            has_state = state is not P.NO_STATE
            args = (fname, tuple(args), bool(trap_exit), has_state, state if has_state else None)
            fname = "ensemble.dist.carrier_node:run_with"
        got = spawn_on(self.node, fname, *args, link=link, monitor=monitor, timeout=SPAWN_TIMEOUT)
        return got if monitor else (got, None)

    def stop(self) -> None:
        """Close the node's standard input (it exits at once) and reap it, killing it if needed."""
        popen = self.popen
        try:
            popen.stdin.close()
        except OSError:
            pass
        pool = gevent.get_hub().threadpool
        try:
            pool.apply(popen.wait, (STOP_TIMEOUT,))
        except subprocess.TimeoutExpired:
            popen.kill()
            pool.apply(popen.wait)
        popen.stdout.close()


class OsPool:
    """The carrier nodes of one dispatcher of OS processes (started on first use)."""

    __slots__ = ("name", "size", "carriers", "generations", "next", "closed", "starting")

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.carriers: list[OsCarrier] = []  # Invariant: empty until the pool starts
        self.generations = [0] * size
        self.next = 0
        self.closed = False
        self.starting: Any = None  # the greenlet starting carrier nodes, on the node's carrier

    def place(self) -> OsCarrier:
        """The carrier node the next process goes to (starting the pool, or a dead one's
        replacement, first)."""
        carriers = self.carriers
        if carriers:
            i = self.next
            self.next = i + 1 if i + 1 < len(carriers) else 0
            c = carriers[i]
            if c.alive():
                return c
        self._start()
        carriers = self.carriers
        i = self.next % len(carriers)
        self.next = i + 1 if i + 1 < len(carriers) else 0
        return carriers[i]

    def _start(self) -> None:
        """Start every carrier node that is missing or dead, on the node's carrier, one start at
        a time (callers on any thread wait for it)."""
        from . import _on_carrier_wait
        from .node import NODE_STATE

        _ensure_node()
        node = NODE_STATE.node
        _on_carrier_wait(node, self._start_here, node)

    def _start_here(self, node: Any) -> None:
        while self.starting is not None:  # another caller is starting them: wait for it
            self.starting.join()
        if self.closed:
            raise Badarg(f"dispatcher {self.name!r} has been shut down")
        self.starting = gevent.getcurrent()
        try:
            self._start_missing(node)
        finally:
            self.starting = None

    def _start_missing(self, node: Any) -> None:
        current = {c.index: c for c in self.carriers if c.alive()}
        launching: list[tuple[int, str, subprocess.Popen]] = []
        for index in range(self.size):
            if index in current:
                continue
            old = next((c for c in self.carriers if c.index == index), None)
            if old is not None:
                old.popen.kill()
                old.stop()
            self.generations[index] += 1
            launching.append(self._launch(node, index))
        started: list[OsCarrier] = []
        try:
            for index, name, popen in launching:
                _wait_ready(self.name, name, popen)
                started.append(OsCarrier(self.name, index, name, popen))
        except BaseException:
            for _index, _name, popen in launching:
                popen.kill()
            raise
        current.update((c.index, c) for c in started)
        self.carriers = [current[i] for i in range(self.size)]

    def _launch(self, node: Any, index: int) -> tuple[int, str, subprocess.Popen]:
        import multiprocessing.spawn as mp_spawn

        host = node.name.split("@", 1)[1]
        name = _decide.carrier_name(self.name, index, self.generations[index], os.getpid(), host)
        prep = mp_spawn.get_preparation_data(name)
        tls = getattr(node, "tls_config", None)
        config = _decide.CarrierConfig(
            name=name,
            parent=node.name,
            cookie=node.cookie,
            listen_host=node.listener.getsockname()[0],
            epmd_port=node.epmd_port,
            sys_path=tuple(p for p in sys.path if type(p) is str),
            main_path=prep.get("init_main_from_path"),
            main_module=prep.get("init_main_from_name"),
            tls=(tls.certfile, tls.keyfile, tls.cafile, tls.mutual) if tls is not None else None,
        )
        popen = subprocess.Popen(
            [sys.executable, "-m", "ensemble.dist.carrier_node"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
        )
        popen.stdin.write(_decide.encode_config(config))
        popen.stdin.flush()
        return index, name, popen

    def stop(self) -> None:
        """Refuse new spawns and stop every carrier node (their processes die with
        ``noconnection`` at their links and monitors)."""
        self.closed = True
        carriers, self.carriers = self.carriers, []
        for c in carriers:
            c.stop()


def _wait_ready(dispatcher: str, name: str, popen: subprocess.Popen) -> None:
    """Wait for the carrier node's ``ready`` line; raise :class:`CarrierStartError` if it exits,
    says something else or takes longer than :data:`START_TIMEOUT`."""
    line = b""
    with gevent.Timeout(START_TIMEOUT, False):
        while not line.endswith(b"\n") and len(line) < 64:
            chunk = tp_read(popen.stdout.fileno(), 64)
            if not chunk:
                break
            line += chunk
    if line != _decide.READY:
        popen.kill()
        code = popen.wait()
        raise CarrierStartError(dispatcher, f"node {name} exited with {code} before it was ready"
                                if not line else f"node {name} answered {line[:64]!r}")


def _ensure_node() -> None:
    """Make this OS process a node (loopback, a random cookie) unless it is one already."""
    from . import DistError, start
    from .node import NODE_STATE

    if NODE_STATE.node is not None:
        return
    try:
        start(f"ensemble-{os.getpid()}@127.0.0.1", cookie=secrets.token_urlsafe(24))
    except DistError:
        if NODE_STATE.node is None:
            raise
