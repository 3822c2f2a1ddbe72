"""Pids in URLs: the text of a local pid, read back from a path segment.

Pure.  A local pid prints as ``<0.N.0>``; in a URL the observer writes it
``0.N.0`` and also reads ``<0.N.0>`` (decoded from ``%3C0.N.0%3E``).
"""

from __future__ import annotations

import re

__all__ = ["MalformedPid", "MAX_DIGITS", "parse_pid", "url_text", "pid_id"]

#: The most digits a pid's number may have in a URL (a process table never grows past this).
MAX_DIGITS = 18

_PID = re.compile(r"<?0\.(0|[1-9][0-9]{0,%d})\.0>?" % (MAX_DIGITS - 1))


class MalformedPid(ValueError):
    """A URL's pid text is not a local pid's; ``reason`` says why, for a 400 answer."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(reason)
        self.text = text
        self.reason = reason


def parse_pid(text: object) -> int:
    """The number ``N`` of the local pid written ``0.N.0`` or ``<0.N.0>``; raises :class:`MalformedPid` otherwise."""
    if type(text) is not str:
        raise MalformedPid(repr(text), "a pid must be text")
    shown = text if len(text) <= 40 else text[:40] + "..."
    m = _PID.fullmatch(text)
    if m is None or text.startswith("<") != text.endswith(">"):
        raise MalformedPid(shown, f"malformed pid {shown!r}: expected 0.N.0 (a local pid, <0.N.0>)")
    return int(m.group(1))


def url_text(pid_repr: str) -> str:
    """The URL form of a pid's printed form: ``<0.12.0>`` -> ``0.12.0`` (other text unchanged but the brackets)."""
    if len(pid_repr) >= 2 and pid_repr[0] == "<" and pid_repr[-1] == ">":
        return pid_repr[1:-1]
    return pid_repr


def pid_id(pid_repr: str) -> int | None:
    """The number of a local pid from its printed form ``<0.N.0>``, or None for any other text (a remote pid)."""
    try:
        return parse_pid(pid_repr)
    except MalformedPid:
        return None
