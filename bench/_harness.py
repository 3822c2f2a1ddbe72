"""Shared helpers for the benchmarks in bench/ (not a benchmark itself: .ci/run skips ``_*.py``).

What a benchmark gets from here:

* :func:`ensure_importable` -- makes ``import ensemble`` work from a source
  checkout that is not installed (adds the repository root to ``sys.path``).
* :func:`timed`, :func:`best_of` -- wall-clock timing with ``time.perf_counter``,
  the cyclic GC paused inside the timed region, best of N alternating runs.
* :func:`rss_bytes` -- resident set size from ``/proc/self/statm``.
* :class:`Result` / :class:`Target` -- one measurement: ensemble's figure, the
  peer's figure, their ratio and the verdict against a target; printed as one
  line (:meth:`Result.line`), as a Markdown table (:func:`markdown_table`) and
  as one JSON line (:func:`json_line`).
* the figures on disk, under ``bench/results/``: a full run writes
  ``<bench>.json`` (committed with the README's table); a quick run writes
  ``last/<bench>.quick.json`` (not committed), and ``--record`` makes it the
  committed baseline ``<bench>.quick.json``.
* the regression guard (:func:`guard`): a quick run fails (exit status 1) when
  a ratio with a target is worse than the committed quick baseline's by more
  than the noise margin (:data:`NOISE_MARGIN`, or the target's own ``margin``).
  Ratios only, never absolute times: both sides ran in the same run.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

__all__ = [
    "ensure_importable",
    "scaled",
    "gc_paused",
    "timed",
    "best_of",
    "rss_bytes",
    "loadavg",
    "Target",
    "Result",
    "markdown_table",
    "json_line",
    "environment",
    "NOISE_MARGIN",
    "guard",
]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(BENCH_DIR, "results")

#: How much worse than its committed quick baseline a ratio may come out in a quick run before the
#: guard fails CI.  Chosen from the spread of repeated quick runs on a loaded 2-core machine (the
#: README's "Regression guard" gives the measured spreads): the worst pair of runs of one commit
#: differed by 1.35x, so 1.6x leaves room for noise while a change that halves a rate (2x) fails.
NOISE_MARGIN = 1.6


def ensure_importable(module: str = "ensemble") -> None:
    """Import ``module``, adding the repository root to ``sys.path`` if needed.

    bench/ itself leaves ``sys.path`` first: benchmarks are named after the
    packages they measure (bench/fusee.py, bench/constellation.py), and from
    bench/ ``import fusee`` would find the benchmark instead of the package.
    """
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != BENCH_DIR]
    try:
        __import__(module)
    except ImportError:
        sys.path.insert(0, REPO_ROOT)
        __import__(module)


def scaled(n: int, quick: bool, divisor: int = 50, floor: int = 1) -> int:
    """``n`` in full mode; ``n // divisor`` (at least ``floor``) in quick mode."""
    return max(floor, n // divisor) if quick else n


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


class gc_paused:
    """Context manager: collect, then disable the cyclic GC; restore it on exit."""

    def __enter__(self) -> "gc_paused":
        gc.collect()
        self._was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._was_enabled:
            gc.enable()


def timed(fn: Callable[..., Any], *args: Any) -> float:
    """Seconds ``fn(*args)`` takes, GC paused.

    If ``fn`` returns a float it is taken as the seconds it measured itself
    (for runs that time only part of their work); otherwise the wall time of
    the whole call is returned.
    """
    with gc_paused():
        t0 = time.perf_counter()
        r = fn(*args)
        dt = time.perf_counter() - t0
    gc.collect()  # outside the timed region: free this run's garbage now
    return r if type(r) is float else dt


def best_of(
    reps: int, runs: Sequence[tuple[str, Callable[[], Any]]]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Run each ``(name, fn)`` ``reps`` times, alternating, and keep the best time.

    Even repetitions run the list in order, odd ones in reverse, so neither
    side always runs first (cache, allocator and frequency effects).  Returns
    ``({name: best seconds}, {name: [seconds of every run]})``.
    """
    samples: dict[str, list[float]] = {name: [] for name, _ in runs}
    for rep in range(reps):
        order = runs if rep % 2 == 0 else list(reversed(runs))
        for name, fn in order:
            samples[name].append(timed(fn))
    return {name: min(s) for name, s in samples.items()}, samples


# --------------------------------------------------------------------------
# Memory and machine
# --------------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process, in bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def loadavg() -> str:
    """The 1/5/15-minute load averages, or '?' where the OS does not tell."""
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except (AttributeError, OSError):
        return "?"


def environment(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Facts about this run worth keeping beside the numbers."""
    env = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "loadavg": loadavg(),
    }
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass
class Target:
    """A goal for one measurement.

    ``kind`` is ``"ratio<="`` or ``"ratio>="`` (ensemble/peer on the headline
    figure) or ``"value>="`` / ``"value<="`` (ensemble's own figure).
    """

    kind: str
    value: float
    text: str  # how the issue states it
    #: this measurement's own noise margin for the guard (None: :data:`NOISE_MARGIN`)
    margin: float | None = None

    def check(self, ens: float, ratio: float | None) -> bool:
        if self.kind == "ratio<=":
            return ratio is not None and ratio <= self.value
        if self.kind == "ratio>=":
            return ratio is not None and ratio >= self.value
        if self.kind == "value>=":
            return ens >= self.value
        if self.kind == "value<=":
            return ens <= self.value
        raise ValueError(f"unknown target kind {self.kind!r}")

    def short(self, unit: str) -> str:
        if self.kind in ("value>=", "value<="):
            return f"{self.kind[5:]} {_num(self.value)} {unit}"
        return f"{self.kind[5:]} {self.value:g}x"


@dataclass
class Result:
    """One measurement: ensemble's headline figure against a peer's.

    ``unit`` is the headline figure's unit: ``"s"`` (lower is better), a rate
    ending in ``"/s"`` (higher is better) or ``"B/proc"`` (lower is better).
    ``ratio`` is always ensemble / peer on that figure.
    """

    key: str
    number: str
    title: str
    n: int
    unit: str
    ensemble: float
    peer_name: str | None = None
    peer: float | None = None
    target: Target | None = None
    note: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)
    ratio: float | None = None
    verdict: str = "info"

    def __post_init__(self) -> None:
        if self.peer:
            self.ratio = self.ensemble / self.peer
        if self.target is not None:
            self.verdict = "PASS" if self.target.check(self.ensemble, self.ratio) else "MISS"

    @property
    def lower_is_better(self) -> bool:
        return not self.unit.endswith("/s")

    def figure(self, v: float | None) -> str:
        return "-" if v is None else _figure(v, self.unit)

    def ratio_text(self) -> str:
        if self.ratio is None:
            return "-"
        what = "time" if self.unit == "s" else ("memory" if self.unit.startswith("B") else "rate")
        return f"{self.ratio:.2f}x {what}"

    def line(self) -> str:
        """One console line with both figures, the ratio and the verdict."""
        parts = [f"[{self.number}] {self.title} (N={self.n:,})", f"ensemble {self.figure(self.ensemble)}"]
        if self.peer_name is not None:
            parts.append(f"{self.peer_name} {self.figure(self.peer)}")
            parts.append(f"ensemble/{self.peer_name} = {self.ratio_text()}")
        if self.target is not None:
            parts.append(f"target {self.target.short(self.unit)}: {self.verdict}")
        else:
            parts.append("(informative)")
        line = "  |  ".join(parts)
        if self.note:
            line += f"\n      note: {self.note}"
        return line


def markdown_table(results: Sequence[Result], spreads: dict[str, tuple[float, float]] | None = None) -> str:
    """The summary table, GitHub Markdown, ready for the README.

    With ``spreads`` (``{key: (lowest, highest) ratio}`` over repeated full runs, see
    ``--repeat``) a column shows each ratio's range.
    """
    spread_head, spread_rule = (" ratio over runs |", "---:|") if spreads else ("", "")
    rows = [
        f"| # | measurement | N | ensemble | peer | peer figure | ensemble / peer |{spread_head} target | result |",
        f"|---|---|---:|---:|---|---:|---:|{spread_rule}---|---|",
    ]
    for r in results:
        target = r.target.short(r.unit) if r.target else "-"
        spread = ""
        if spreads:
            lo_hi = spreads.get(r.key)
            spread = f" {lo_hi[0]:.2f}-{lo_hi[1]:.2f}x |" if lo_hi else " - |"
        rows.append(
            f"| {r.number} | {r.title} | {r.n:,} | {r.figure(r.ensemble)} | {r.peer_name or '-'} "
            f"| {r.figure(r.peer)} | {r.ratio_text()} |{spread} {target} | {r.verdict} |"
        )
    return "\n".join(rows)


def ratio_spreads(runs: Sequence[Sequence[Result]]) -> dict[str, tuple[float, float]]:
    """``{key: (lowest, highest) ratio}`` of each result over ``runs``."""
    out: dict[str, tuple[float, float]] = {}
    for run in runs:
        for r in run:
            if r.ratio is None:
                continue
            lo, hi = out.get(r.key, (r.ratio, r.ratio))
            out[r.key] = (min(lo, r.ratio), max(hi, r.ratio))
    return out


def json_line(bench: str, results: Sequence[Result], meta: dict[str, Any]) -> str:
    """Everything as one JSON object on one line (for scripts: ``tail -1 | jq``)."""
    return json.dumps(
        {"bench": bench, **meta, "results": [asdict(r) for r in results]},
        separators=(",", ":"),
        default=str,
    )


def _num(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}k"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _figure(v: float, unit: str) -> str:
    if unit == "s":
        if v < 1e-3:
            return f"{v * 1e6:.2f} us"
        return f"{v:.3f} s" if v >= 0.01 else f"{v * 1e3:.2f} ms"
    if unit.startswith("B"):
        return f"{v:,.0f} {unit}"
    return f"{_num(v)} {unit}"


# --------------------------------------------------------------------------
# Figures on disk and the regression guard
# --------------------------------------------------------------------------


def _figures(results: Sequence[Result]) -> dict[str, dict[str, Any]]:
    """``{key: {ratio, ensemble, peer, unit, lower_is_better, target, margin}}`` of ``results``."""
    return {
        r.key: {
            "number": r.number,
            "title": r.title,
            "ratio": r.ratio,
            "ensemble": r.ensemble,
            "peer": r.peer,
            "unit": r.unit,
            "lower_is_better": r.lower_is_better,
            "target": None if r.target is None else {"kind": r.target.kind, "value": r.target.value},
            "margin": None if r.target is None else r.target.margin,
            "verdict": r.verdict,
        }
        for r in results
    }


def write_results(path: str, bench: str, results: Sequence[Result], meta: dict[str, Any]) -> None:
    """Write ``results`` as JSON to ``path`` (atomically: a temporary file, then a rename)."""
    _write_figures(path, bench, _figures(results), meta)


def read_results(path: str) -> dict[str, dict[str, Any]] | None:
    """The figures a :func:`write_results` file holds, or None when there is none (or it is unreadable)."""
    try:
        with open(path) as f:
            doc = json.load(f)
        got = doc["results"]
        return got if isinstance(got, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _how_much_worse(r: Result, baseline: dict[str, dict[str, Any]] | None) -> float | None:
    """How many times worse ``r``'s ratio is than the baseline's (> 1: worse), or None when ``r``
    is not guarded (no target, no ratio, or no baseline figure for its key)."""
    if r.target is None or r.ratio is None or not baseline or r.key not in baseline:
        return None
    base = baseline[r.key].get("ratio")
    if not isinstance(base, (int, float)) or base <= 0 or r.ratio <= 0:
        return None
    return r.ratio / base if r.lower_is_better else base / r.ratio


def regressed(results: Sequence[Result], baseline: dict[str, dict[str, Any]] | None) -> list[tuple[Result, float]]:
    """``(result, how many times worse)`` for each guarded result of ``results`` worse than
    ``baseline`` by more than its margin."""
    out = []
    for r in results:
        worse = _how_much_worse(r, baseline)
        if worse is not None and worse > (r.target.margin or NOISE_MARGIN):  # type: ignore[union-attr]
            out.append((r, worse))
    return out


def guard(results: Sequence[Result], baseline: dict[str, dict[str, Any]] | None) -> list[str]:
    """The regressions of ``results`` against ``baseline``: one line per guarded ratio that came out
    worse than the baseline's by more than its margin (empty: nothing regressed).

    Guarded: each result with a target and a ratio whose key the baseline also has with a ratio.
    "Worse" is by the ratio's direction: higher for a time or a memory figure (ensemble/peer), lower
    for a rate.  This holds also while the target is met: a change that halves a rate fails even
    where the target had room to spare.
    """
    lines = []
    for r, worse in regressed(results, baseline):
        base = baseline[r.key]["ratio"]  # type: ignore[index]
        margin = r.target.margin or NOISE_MARGIN  # type: ignore[union-attr]
        lines.append(
            f"[{r.number}] {r.title}: ratio {r.ratio:.3g} against the baseline's {base:.3g} "
            f"({worse:.2f}x worse, margin {margin:g}x; target {r.target.short(r.unit)})"  # type: ignore[union-attr]
        )
    return lines


def better(a: Result, b: Result) -> Result:
    """Of two measurements of one result, the one with the better ratio (a when neither has one)."""
    if a.ratio is None or b.ratio is None:
        return a
    if a.lower_is_better:
        return a if a.ratio <= b.ratio else b
    return a if a.ratio >= b.ratio else b


def median_figures(runs: Sequence[Sequence[Result]]) -> dict[str, dict[str, Any]]:
    """The figures of the first run, each ratio replaced by its median over ``runs`` (a baseline
    recorded from several quick runs is a typical one, not a lucky or an unlucky one)."""
    figures = _figures(runs[0])
    for key, fig in figures.items():
        ratios = sorted(r.ratio for run in runs for r in run if r.key == key and r.ratio is not None)
        if ratios:
            fig["ratio"] = ratios[len(ratios) // 2]
    return figures


# --------------------------------------------------------------------------
# The driver every benchmark's main() uses
# --------------------------------------------------------------------------


def versions(dists: Sequence[str]) -> dict[str, str]:
    """The installed version of each distribution (``"not installed"`` when absent), and ensemble's."""
    from importlib import metadata

    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    try:
        import ensemble

        out["ensemble"] = getattr(ensemble, "__version__", "?")
    except ImportError:
        out["ensemble"] = "not importable"
    return out


def run(
    bench: str,
    doc: str,
    measurements: dict[str, Callable[[bool, int], list[Result]]],
    argv: list[str] | None = None,
    *,
    dists: Sequence[str] = ("gevent", "greenlet"),
    reps: int = 3,
    quick_help: str = "every N divided by 50 (CI smoke run)",
    add_arguments: Callable[[Any], None] | None = None,
    before: Callable[[Any], int | None] | None = None,
    after: Callable[[Any], None] | None = None,
    prints_own_lines: Sequence[str] = (),
    extra_env: dict[str, Any] | None = None,
) -> int:
    """Parse ``--quick/--reps/--only``, run the chosen measurements, print lines, table and JSON.

    ``add_arguments(parser)`` adds a benchmark's own options; ``before(args)``
    may answer an exit status to stop early (a child process's mode);
    ``after(args)`` prints extra output before the table; the measurements in
    ``prints_own_lines`` print their lines themselves as they go;
    ``extra_env`` adds facts to the printed environment and the JSON line.
    """
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--reps", type=int, default=reps, help="repetitions per side (best is kept)")
    ap.add_argument("--only", default="", help="comma-separated measurement numbers, e.g. 1,2")
    ap.add_argument(
        "--record",
        action="store_true",
        help="quick mode: make this run's figures the committed baseline the guard compares with",
    )
    ap.add_argument("--no-guard", action="store_true", help="quick mode: report regressions, do not fail")
    ap.add_argument("--repeat", type=int, default=1,
                    help="full mode: run everything this many times; the table shows the last run "
                    "and each ratio's range over all of them")
    if add_arguments is not None:
        add_arguments(ap)
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if before is not None:
        status = before(args)
        if status is not None:
            return status

    chosen = [k.strip() for k in args.only.split(",") if k.strip()] or list(measurements)
    unknown = [k for k in chosen if k not in measurements]
    if unknown:
        ap.error(f"unknown measurement(s): {', '.join(unknown)}")

    mode = "quick" if args.quick else "full"
    env = environment({**versions(dists), **(extra_env or {})})
    print(f"{bench} ({mode} mode, best of {args.reps})  " + "  ".join(f"{k}={v}" for k, v in env.items()))
    t_start = time.perf_counter()
    results: list[Result] = []
    for key in chosen:
        got = measurements[key](args.quick, args.reps)
        if key not in prints_own_lines:
            for r in got:
                print(r.line(), flush=True)
        for r in got:
            _RESULT_SOURCE[r.key] = key
        results.extend(got)
    runs = [results]
    for _ in range(max(1, args.repeat) - 1):
        results = _measure(measurements, chosen, args)
        runs.append(results)
    spreads = ratio_spreads(runs) if len(runs) > 1 else None
    elapsed = time.perf_counter() - t_start
    if after is not None:
        after(args)

    print(f"\ntotal {elapsed:.1f} s; load average now {loadavg()}\n")
    if spreads:
        print(f"(the last of {len(runs)} runs; the ratio column's range is over all of them)")
    print(markdown_table(results, spreads))
    print()
    env["loadavg_end"] = loadavg()
    meta = {"mode": mode, "reps": args.reps, "seconds": round(elapsed, 2), **env}
    if spreads:
        meta["repeat"] = len(runs)
        meta["ratio_spreads"] = {k: list(v) for k, v in spreads.items()}
    print(json_line(bench, results, meta))
    name = os.path.splitext(os.path.basename(bench))[0]
    baseline_path = os.path.join(RESULTS_DIR, f"{name}.quick.json")
    if not args.quick:
        if not args.only:  # a partial run does not replace the full figures
            write_results(os.path.join(RESULTS_DIR, f"{name}.json"), bench, results, meta)
        return 0
    write_results(os.path.join(RESULTS_DIR, "last", f"{name}.quick.json"), bench, results, meta)
    where = os.path.relpath(baseline_path, REPO_ROOT)
    if args.record and not args.only:
        runs = [results] + [_measure(measurements, chosen, args) for _ in range(RECORD_RUNS - 1)]
        _write_figures(baseline_path, bench, median_figures(runs), meta)
        print(f"recorded as the guard's baseline (median of {RECORD_RUNS} quick runs): {where}")
        return 0
    baseline = read_results(baseline_path)
    if baseline is None:
        print(f"guard: no baseline at {where} (record one with --quick --record)")
        return 0
    print(f"guard: ratios against {where}, noise margin {NOISE_MARGIN:g}x (or the measurement's own); "
          f"a regression must show {RETRIES + 1} times in a row")
    for _ in range(RETRIES):
        again = regressed(results, baseline)
        if not again:
            break
        redo = sorted({_RESULT_SOURCE[r.key] for r, _ in again if r.key in _RESULT_SOURCE})
        for line in guard([r for r, _ in again], baseline):
            print(f"  worse than the baseline, measuring again: {line}")
        fresh = {r.key: r for r in _measure(measurements, redo, args, echo=False)}
        results = [better(r, fresh[r.key]) if r.key in fresh else r for r in results]
    regressions = guard(results, baseline)
    for line in regressions:
        print(f"REGRESSION {line}")
    if regressions and not args.no_guard:
        return 1
    print("guard: no regression" if not regressions else "guard: regressions reported, not failing (--no-guard)")
    return 0


#: Quick runs a ``--record`` takes the median of.
RECORD_RUNS = 3
#: How many times a guarded measurement that came out worse than its margin is measured again
#: (its best is kept) before the guard fails the run: noise rarely repeats, a real loss does.
RETRIES = 2


def _measure(measurements: dict[str, Callable[[bool, int], list[Result]]], keys: Sequence[str],
             args: Any, echo: bool = True) -> list[Result]:
    out: list[Result] = []
    for key in keys:
        got = measurements[key](args.quick, args.reps)
        if echo:
            for r in got:
                print(r.line(), flush=True)
        out.extend(got)
    return out


#: result key -> the measurement key that produced it, filled by :func:`run` as it measures.
_RESULT_SOURCE: dict[str, str] = {}


def _write_figures(path: str, bench: str, figures: dict[str, dict[str, Any]], meta: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"bench": bench, **meta, "results": figures}, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)
