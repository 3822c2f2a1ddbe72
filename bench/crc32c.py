"""CRC32C throughput: the native (C) fusee.crc32c against its pure-Python fallback.

Run from the repository root::

    python bench/crc32c.py            # full run, a few seconds
    python bench/crc32c.py --quick    # smaller totals (CI smoke run)

Issue 6 makes CRC32C the first native function (docs/native.md: a C hot path
is kept only if a benchmark shows it pays).  Each measurement checksums one
buffer of random bytes over and over, one call per buffer, and reports MB/s
(10**6 bytes per second) of:

* native: ``fusee.crc32c.crc32c_native`` (C through cffi; the SSE4.2 crc32
  instruction where the CPU has it, else a slicing-by-8 table in C);
* python: ``fusee.crc32c.crc32c_python``, the slicing-by-8 pure-Python
  fallback (what runs without a C compiler or with ENSEMBLE_PURE_PYTHON=1);
* zlib: ``zlib.crc32``, for scale only: another polynomial (CRC-32/ISO-HDLC),
  the C of zlib, not a replacement.

Measurements (buffer sizes: 4 KiB, a journal page; 1 MiB, a large batch):

1. native vs python.  Target: native >= 10x python (it pays).
2. native vs zlib.crc32.  Informative.

Without the native module (not built, or ENSEMBLE_PURE_PYTHON=1) only python
vs zlib is measured (informative).  Times are ``time.perf_counter`` wall time
with the GC paused, best of 3 alternating runs (``bench/_harness.py``).

Output: one line per result, a Markdown summary table, then one JSON line.
"""

from __future__ import annotations

import os
import sys
import zlib
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (  # noqa: E402
    Result,
    Target,
    best_of,
    ensure_importable,
    run,
)

ensure_importable("fusee")

from fusee import crc32c as C  # noqa: E402

BENCH = "crc32c"
REPS = 3
SIZES = [("4 KiB", 4 << 10), ("1 MiB", 1 << 20)]
# Bytes checksummed per timed run: (full, quick).  The fallback is ~100x
# slower, so it gets less to chew through; the rates stay comparable.
FAST_TOTAL = (256 << 20, 16 << 20)
SLOW_TOTAL = (8 << 20, 1 << 20)
MB = 1e6


def _runner(fn: Callable[[bytes], int], buf: bytes, calls: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(calls):
            fn(buf)
    return run


def _rate(size: int, calls: int, seconds: float) -> float:
    return size * calls / seconds / MB


def bench_size(label: str, size: int, quick: bool, reps: int, number: int) -> list[Result]:
    buf = os.urandom(size)
    fast_calls = max(1, FAST_TOTAL[quick] // size)
    slow_calls = max(1, SLOW_TOTAL[quick] // size)
    impls: dict[str, tuple[Callable[[bytes], int], int]] = {
        "python": (C.crc32c_python, slow_calls),
        "zlib": (zlib.crc32, fast_calls),
    }
    if C.crc32c_native is not None:
        impls["native"] = (C.crc32c_native, fast_calls)
        assert C.crc32c_native(buf) == C.crc32c_python(buf)
    for fn, _ in impls.values():  # warm-up
        fn(buf)
    best, samples = best_of(reps, [(k, _runner(fn, buf, n)) for k, (fn, n) in impls.items()])
    rates = {k: _rate(size, impls[k][1], t) for k, t in best.items()}
    rate_samples = {k: [_rate(size, impls[k][1], t) for t in s] for k, s in samples.items()}
    calls = {k: n for k, (_, n) in impls.items()}

    if "native" not in rates:
        why = "ENSEMBLE_PURE_PYTHON is set" if C._native.FORCED_PURE else "the native module is not built"
        return [
            Result(f"python_zlib_{size}", f"{number}", f"crc32c python vs zlib.crc32, {label} buffers",
                   calls["python"], "MB/s", rates["python"],
                   note=f"no native figure: {why}; zlib.crc32 (another polynomial, for scale): "
                   f"{rates['zlib']:,.0f} MB/s",
                   samples={k: rate_samples[k] for k in ("python", "zlib")}),
        ]
    hw = "SSE4.2 crc32 instruction" if C.HARDWARE else "slicing-by-8 table in C"
    return [
        Result(f"native_python_{size}", f"{number}a", f"crc32c native vs python, {label} buffers",
               calls["native"], "MB/s", rates["native"], "python", rates["python"],
               Target("ratio>=", 10, "the C one pays: at least 10x the fallback", margin=3.0),
               note=f"native: {hw}; python N={calls['python']:,}",
               samples={k: rate_samples[k] for k in ("native", "python")}),
        Result(f"native_zlib_{size}", f"{number}b", f"crc32c native vs zlib.crc32, {label} buffers",
               calls["native"], "MB/s", rates["native"], "zlib.crc32", rates["zlib"],
               note="zlib.crc32 is another polynomial (CRC-32), for scale only",
               samples={k: rate_samples[k] for k in ("native", "zlib")}),
    ]


MEASUREMENTS = {
    str(number): (lambda quick, reps, label=label, size=size, number=number:
                  bench_size(label, size, quick, reps, number))
    for number, (label, size) in enumerate(SIZES, 1)
}


def main(argv: list[str] | None = None) -> int:
    return run(BENCH, __doc__, MEASUREMENTS, argv, dists=(), reps=REPS,
               quick_help="smaller totals (CI smoke run)",
               extra_env={"crc32c": C.IMPLEMENTATION, "hardware": C.HARDWARE})


if __name__ == "__main__":
    sys.exit(main())
