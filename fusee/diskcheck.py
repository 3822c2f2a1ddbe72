"""The disk's fdatasync floor (``fusee disk-check``): what one durable step costs at least on it.

:func:`measure` times ``count`` 4 KiB writes at the next offset of a preallocated, zero-filled file
each followed by ``fdatasync``, the way fusee's journal writes a flush (docs/fusee.md, "the fdatasync
floor").  :func:`summarize` and :func:`explain` are pure: percentiles, and what they mean for step
latency and throughput.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

__all__ = ["measure", "summarize", "explain", "PAGE"]

PAGE = 4096


def measure(directory: str, count: int = 1000) -> list[float]:
    """Seconds of each of ``count`` 4 KiB write + ``fdatasync`` into a preallocated, zero-filled file
    made in ``directory`` (and deleted after)."""
    if type(count) is not int or count < 1:
        raise ValueError(f"count is an int >= 1, not {count!r}")
    fd, path = tempfile.mkstemp(prefix=".fusee-disk-check-", dir=directory)
    try:
        size = PAGE * (count + 1)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            pass
        zeros = bytes(1 << 20)
        left = size
        while left > 0:
            left -= os.write(fd, zeros[: min(left, len(zeros))])
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        block = os.urandom(PAGE)
        out = []
        clock = time.perf_counter
        for _ in range(count):
            t0 = clock()
            os.write(fd, block)
            os.fdatasync(fd)
            out.append(clock() - t0)
        return out
    finally:
        os.close(fd)
        os.unlink(path)


def _pct(xs: list[float], q: float) -> float:
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def summarize(samples: list[float]) -> dict[str, Any]:
    """``count`` and ``p50``, ``p99``, ``p999``, ``max``, ``mean`` of ``samples`` in microseconds."""
    if not samples:
        raise ValueError("no samples")
    xs = sorted(samples)
    us = 1e6
    return {
        "count": len(xs),
        "p50_us": _pct(xs, 0.50) * us,
        "p99_us": _pct(xs, 0.99) * us,
        "p999_us": _pct(xs, 0.999) * us,
        "max_us": xs[-1] * us,
        "mean_us": sum(xs) / len(xs) * us,
    }


def explain(s: dict[str, Any]) -> list[str]:
    """What summary ``s`` means for fusee's steps, as lines for a person."""
    p50, p99 = s["p50_us"], s["p99_us"]
    per_s = 1e6 / p50 if p50 > 0 else float("inf")
    lines = [
        f"fdatasync floor: p50 {p50:,.0f} us, p99 {p99:,.0f} us, p99.9 {s['p999_us']:,.0f} us, "
        f"max {s['max_us']:,.0f} us, mean {s['mean_us']:,.0f} us ({s['count']} writes of 4 KiB)",
        f"- a step with effects waits for its run's earlier records to be durable: one workflow running "
        f"steps one after another takes at least ~{p50:,.0f} us a step (~{per_s:,.0f} steps/s), ~{p99:,.0f} us at p99;",
        "- start, signal, cancel and result return once their record is durable: each costs at least one floor;",
        "- under load one fdatasync covers every record that arrived meanwhile (group commit), so throughput "
        "grows with concurrent workflows while each step still waits about one floor;",
        "- read_only steps and in-memory engines (Engine.open(None)) do not wait for the disk.",
    ]
    if p50 > 2000:
        lines.append("- this disk is slow for durable steps (> 2 ms): consider a local SSD/NVMe for the data directory.")
    elif p50 < 50:
        lines.append("- a floor under 50 us suggests a write cache that is not flushed (tmpfs, or a disk that lies): "
                     "check that this directory really is durable storage.")
    return lines
