"""Decisions of a dispatcher of OS processes (``dispatcher.define(name, processes=n)``): how a
function is named for another OS process, what each carrier node is called, and the one line
of JSON that tells a carrier node how to start.

Pure: nothing here starts a process or imports a module.  The configuration crosses a pipe
from the parent to its child as JSON (never pickle), and the child checks every field with
:func:`parse_config` before acting on any.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .._exceptions import Badarg
from . import allow as _allow
from . import handshake as _handshake

__all__ = ["NotImportable", "BadCarrierConfig", "CarrierConfig", "function_name", "carrier_name",
           "encode_config", "parse_config", "READY", "MAX_CONFIG"]

#: The line a carrier node writes on its standard output once it is up and connected.
READY = b"ready\n"
#: The largest configuration line a carrier node reads (a long ``sys.path`` fits many times).
MAX_CONFIG = 1 << 20


class NotImportable(Badarg):
    """The function cannot be found by name in another OS process: a lambda, a function defined
    inside another one, or one whose module and name do not lead back to it."""


class BadCarrierConfig(ValueError):
    """A carrier node's configuration line is not one this version writes."""


@dataclass(frozen=True)
class CarrierConfig:
    """What a carrier node needs: its node ``name``, the ``parent`` node it serves and the
    ``cookie`` they share, where to listen (``listen_host``) and register (``epmd_port``), the
    parent's ``sys_path``, how to load the parent's ``__main__`` (``main_path`` for a script,
    ``main_module`` for ``python -m``; at most one), and the TLS files when the parent uses TLS
    (``(certfile, keyfile, cafile, mutual)``)."""

    name: str
    parent: str
    cookie: str
    listen_host: str
    epmd_port: int | None
    sys_path: tuple[str, ...]
    main_path: str | None = None
    main_module: str | None = None
    tls: tuple[str, str, str, bool] | None = None


def function_name(module: Any, qualname: Any) -> str:
    """``"module:qualname"`` for a function found by that name, or :class:`NotImportable`.

    Only the name is checked here; the caller checks that the name leads back to the very
    function (a module-level function does, a lambda or a nested function does not).
    """
    if type(module) is not str or type(qualname) is not str or "<" in qualname:
        raise NotImportable(f"not a module-level function: {module}.{qualname}")
    name = f"{module}:{qualname}"
    try:
        _allow.parse(name)
    except _allow.BadFunctionName:
        raise NotImportable(f"not a module-level function: {module}.{qualname}") from None
    return name


_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def carrier_name(dispatcher: str, index: int, generation: int, os_pid: int, host: str) -> str:
    """The node name of carrier ``index`` (its ``generation``-th start) of ``dispatcher``,
    started by the OS process ``os_pid`` on ``host``: unique on the host, always a valid name."""
    alive = f"{_UNSAFE.sub('_', dispatcher)[:64]}-{index}-{generation}-{os_pid}"
    name = f"{alive}@{host}"
    if not _handshake.valid_name(name):
        raise Badarg(f"no node name can be made for dispatcher {dispatcher!r} on host {host!r}")
    return name


def encode_config(config: CarrierConfig) -> bytes:
    """``config`` as one line of JSON (ending in a newline)."""
    fields = {
        "name": config.name,
        "parent": config.parent,
        "cookie": config.cookie,
        "listen_host": config.listen_host,
        "epmd_port": config.epmd_port,
        "sys_path": list(config.sys_path),
        "main_path": config.main_path,
        "main_module": config.main_module,
        "tls": list(config.tls) if config.tls is not None else None,
    }
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def parse_config(line: Any) -> CarrierConfig:
    """The :class:`CarrierConfig` a line of :func:`encode_config` holds; raises
    :class:`BadCarrierConfig` for anything else (never another exception)."""
    if type(line) is not bytes or len(line) > MAX_CONFIG:
        raise BadCarrierConfig("not a configuration line")
    try:
        fields = json.loads(line)
    except (ValueError, RecursionError):
        raise BadCarrierConfig("not JSON") from None
    if type(fields) is not dict:
        raise BadCarrierConfig("not a JSON object")
    expected = {"name", "parent", "cookie", "listen_host", "epmd_port", "sys_path", "main_path",
                "main_module", "tls"}
    if set(fields) != expected:
        raise BadCarrierConfig(f"fields {sorted(map(str, fields))} are not {sorted(expected)}")
    name, parent = fields["name"], fields["parent"]
    if not _handshake.valid_name(name) or not _handshake.valid_name(parent):
        raise BadCarrierConfig("a node name is not alive@host")
    cookie, host = fields["cookie"], fields["listen_host"]
    if type(cookie) is not str or type(host) is not str or not host:
        raise BadCarrierConfig("cookie and listen_host are strings")
    port = fields["epmd_port"]
    if port is not None and (type(port) is not int or not 0 < port < 65536):
        raise BadCarrierConfig("epmd_port is a port number or null")
    path = fields["sys_path"]
    if type(path) is not list or not all(type(p) is str for p in path):
        raise BadCarrierConfig("sys_path is a list of strings")
    main_path, main_module = fields["main_path"], fields["main_module"]
    if main_path is not None and main_module is not None:
        raise BadCarrierConfig("at most one of main_path and main_module")
    if main_path is not None and (type(main_path) is not str or not main_path):
        raise BadCarrierConfig("main_path is a path or null")
    if main_module is not None and (
        type(main_module) is not str or not all(p.isidentifier() for p in main_module.split("."))
    ):
        raise BadCarrierConfig("main_module is a dotted module name or null")
    tls = fields["tls"]
    if tls is not None:
        if (type(tls) is not list or len(tls) != 4 or not all(type(f) is str for f in tls[:3])
                or type(tls[3]) is not bool):
            raise BadCarrierConfig("tls is [certfile, keyfile, cafile, mutual] or null")
        tls = (tls[0], tls[1], tls[2], tls[3])
    return CarrierConfig(name, parent, cookie, host, port, tuple(path), main_path, main_module, tls)
