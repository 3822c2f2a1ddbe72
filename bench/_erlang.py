"""Run the Erlang side of a benchmark (bench/erlang/ens_bench.erl) when ``erl`` is installed.

Not a benchmark itself (.ci/run skips ``_*.py``).  :func:`seconds` compiles the
module once per run into a temporary directory with ``erlc`` and answers the
seconds Erlang took for the same work (best of 3, timed inside Erlang), or None
when ``erl``/``erlc`` is missing or the run fails: the Erlang figure is
information beside a benchmark, never a reason for it to fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

__all__ = ["available", "seconds", "compiled"]

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "erlang", "ens_bench.erl")
_compiled: dict[str, str] = {}  # source -> the directory holding its .beam, once compiled


def available() -> bool:
    """Whether ``erl`` and ``erlc`` are on PATH."""
    return shutil.which("erl") is not None and shutil.which("erlc") is not None


def compiled(source: str = _SOURCE) -> str | None:
    """The directory holding ``source`` (an .erl file) compiled with ``erlc``, once per run; None when
    ``erlc`` is missing or fails."""
    if source in _compiled:
        return _compiled[source]
    if not available():
        return None
    out = tempfile.mkdtemp(prefix="ens-bench-erl-")
    try:
        subprocess.run(["erlc", "-o", out, source], check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    _compiled[source] = out
    return out


def seconds(what: str, n: int) -> float | None:
    """Seconds Erlang takes for ``n`` of ``what`` (``ping_pong``, ``one_way``, ``call``), or None."""
    if not available():
        return None
    beam = compiled()
    if beam is None:
        return None
    try:
        done = subprocess.run(
            ["erl", "-noshell", "-pa", beam, "-eval", f"ens_bench:run({what}, {int(n)})", "-s", "init", "stop"],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return float(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
