"""Durations: seconds (``int``/``float``), a ``timedelta``, or a string like ``"1s"``, ``"5m"``, ``"1h30m"``.

Pure: :func:`parse` turns any of them into a ``float`` of seconds, or raises
``ValueError`` (a malformed or negative duration) / ``TypeError`` (not a
duration at all).  Units: ``ms``, ``s``, ``m``, ``h``, ``d``, ``w``; a string
may chain several (``"1h30m"``, ``"1m 30s"``) and a bare number string is
seconds (``"2.5"``).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any, Final

__all__ = ["parse", "UNITS"]

UNITS: Final[dict[str, float]] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}

_PART: Final = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)")
_NUMBER: Final = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*")


def parse(d: Any) -> float:
    """``d`` in seconds, as a finite ``float`` >= 0."""
    t = type(d)
    if t is bool:
        raise TypeError(f"a duration is seconds or a string like '5m', not {d!r}")
    if t is int or t is float:
        seconds = float(d)
    elif isinstance(d, timedelta):
        seconds = d.total_seconds()
    elif t is str:
        seconds = _parse_text(d)
    else:
        raise TypeError(f"a duration is seconds or a string like '5m', not {d!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration is finite and >= 0, not {d!r}")
    return seconds


def _parse_text(text: str) -> float:
    m = _NUMBER.fullmatch(text)
    if m:
        return float(m.group(1))
    total, pos = 0.0, 0
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"not a duration: {text!r} (use e.g. '500ms', '1s', '5m', '2h', '1d', '1h30m')")
        total += float(m.group(1)) * UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"not a duration: {text!r} (use e.g. '500ms', '1s', '5m', '2h', '1d', '1h30m')")
    return total
