"""Where the observer listens: ``--http ADDR`` read as (host, port).

Pure.  ``ADDR`` is ``host:port``, ``[v6]:port``, ``:port`` or ``port``; a
missing host is loopback (:data:`DEFAULT_HOST`), port 0 asks the OS for a free one.
"""

from __future__ import annotations

__all__ = ["BadAddress", "DEFAULT_HOST", "DEFAULT_PORT", "parse_address", "format_address"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8091


class BadAddress(ValueError):
    """``--http``'s value is not an address; the message says why."""


def parse_address(text: object) -> tuple[str, int]:
    """``(host, port)`` of ``text``; raises :class:`BadAddress` for anything else."""
    if type(text) is not str or not text or len(text) > 300:
        raise BadAddress(f"not an address: {text!r} (expected host:port)")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise BadAddress(f"not an address: {text!r} (an IPv6 host is written [addr]:port)")
        host = host[1:-1]
    elif ":" in host:
        raise BadAddress(f"not an address: {text!r} (an IPv6 host is written [addr]:port)")
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise BadAddress(f"not a port: {port_text!r} in {text!r}")
    port = int(port_text)
    if port > 65535:
        raise BadAddress(f"port {port} is out of range (0-65535)")
    if any(c.isspace() for c in host) or "/" in host:
        raise BadAddress(f"not a host: {host!r}")
    return (host or DEFAULT_HOST, port)


def format_address(host: str, port: int) -> str:
    """The ``ADDR`` text of ``(host, port)``: the inverse of :func:`parse_address`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
