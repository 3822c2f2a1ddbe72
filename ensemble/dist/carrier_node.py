"""A carrier node: the OS process behind one carrier of a dispatcher of OS processes.

Started by :mod:`ensemble.dist.os_carriers` as ``python -m ensemble.dist.carrier_node``; it
reads one line of configuration (JSON, :func:`ensemble.decide.carrier_nodes.parse_config`) on
its standard input, loads the parent's ``sys.path`` and ``__main__`` (as :mod:`multiprocessing`
does for its spawned workers: a script's top level runs again, under the name
``__mp_main__``), starts as a node with the parent's cookie, connects to the parent and
writes ``ready`` on its standard output.  From then on the parent spawns processes here; only
the parent may spawn (the connection the parent's handshake authenticated), every other node
is held to this node's ``allow``, which lets nothing in.

It exits when its standard input closes (the parent stopped the dispatcher, or died, even by
SIGKILL) or when its connection to the parent goes.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any


def _load_main(config: Any) -> None:
    """The parent's ``__main__`` as this process's, so ``"__main__:fn"`` names the same function."""
    import multiprocessing.spawn as mp_spawn

    if config.main_path is not None:
        mp_spawn.import_main_path(config.main_path)
    elif config.main_module is not None:
        mp_spawn._fixup_main_from_name(config.main_module)


def _exit_on_eof() -> None:
    """Block this native thread until standard input closes, then end the OS process at once."""
    try:
        while os.read(0, 65536):
            pass
    finally:
        os._exit(0)


def run_with(fname: str, args: tuple, trap_exit: bool, has_state: bool, state: Any) -> Any:
    """The body of a process spawned here with ``trap_exit`` or a state cell: set them, then run
    the function ``fname`` names (the parent checked that it is importable)."""
    import ensemble as e

    from .functions import resolve

    fn = resolve(fname)
    if fn is None:
        raise e.Badarg(f"undefined function {fname!r} on this carrier node")
    if trap_exit:
        e.trap_exit(True)
    if has_state:
        e.set_state(state)
    return fn(*args)


def main() -> int:
    from ..decide.carrier_nodes import MAX_CONFIG, READY, BadCarrierConfig, parse_config

    line = sys.stdin.buffer.readline(MAX_CONFIG + 1)
    try:
        config = parse_config(line)
    except BadCarrierConfig as e:
        print(f"ensemble carrier node: bad configuration: {e}", file=sys.stderr)
        return 2
    ready_fd = os.dup(1)
    os.dup2(2, 1)  # what this process prints goes to the parent's stderr, not the control pipe
    threading.Thread(target=_exit_on_eof, name="carrier-stdin", daemon=True).start()
    sys.path[:] = list(config.sys_path)
    _load_main(config)

    import ensemble as e
    from ensemble import dist

    tls = dist.TLS(*config.tls) if config.tls is not None else None
    dist.start(config.name, cookie=config.cookie, listen=f"{config.listen_host}:0", tls=tls,
               epmd_port=config.epmd_port)
    from .node import NODE_STATE

    NODE_STATE.node.trusted = frozenset({config.parent})
    if not dist.connect(config.parent):
        print(f"ensemble carrier node {config.name}: cannot reach {config.parent}", file=sys.stderr)
        return 3
    e.monitor_node(config.parent)
    os.write(ready_fd, READY)
    os.close(ready_fd)
    e.receive(lambda m: m if m == ("nodedown", config.parent) else e.NOMATCH)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
