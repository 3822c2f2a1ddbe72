"""The child program of tests/fusee/test_children_crash.py: parents running children on other shards, until killed.

Run as ``python tests/fusee/_children_crash_child.py <dir> <seed> <round> <waves>`` with the repository
root on ``PYTHONPATH``.  It reads what the directory's journal holds (a pure scan, before the engine
opens it), opens an engine there (``shards=4``) and drives the parents of waves ``0 .. waves-1``: starts
those never started, then waits for each parent's result and for its abandoned child's.  Then it goes on
with waves ``waves, waves+1, ...`` until it is killed.  After each acknowledged action it prints a line
and flushes:

    ready                   the engine is open
    ack start <id>          engine.start of parent <id> returned
    result <id> <json>      a run's result (a parent or an abandoned child), as compact JSON
    wave <n>                about to drive wave n

A parent (:func:`brood`) runs a step, starts one child that outlives it (``start_child``, ``abandon``)
and signals its first token back (``signal_workflow``), runs ``KIDS`` children one after another
(``ctx.child``), each on a shard other than its own, waits for that signal, then runs a last step; it
returns its steps' tokens, its children's results and the signal.  A child (:func:`kid`) runs a step,
sleeps briefly, runs another step.  Every step body logs its execution to ``<dir>.steps`` through
``tests/fusee/_crash_child.py`` (one fsync'ed line: round, workflow ID, step, token, key), and each
``fdatasync`` first sleeps a random few milliseconds (:data:`FLUSH_JITTER`), so kills land while
records are in flight and shards become durable out of order.

The module is also imported by the test: the workflows, :func:`plan`, :func:`read_runs` and :func:`drive`.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

if __name__ == "__main__":  # run as a script: the repository root is on PYTHONPATH
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fusee  # noqa: E402
from fusee import records as rec  # noqa: E402
from fusee.engine import shard_of  # noqa: E402
from tests.fusee import _crash_child as base  # noqa: E402

SHARDS = 4
PER_WAVE = 3  # parents per wave
KIDS = 3  # children each parent waits for (plus one it starts and abandons)
NAP = 0.01  # seconds each child sleeps between its steps
#: Each fdatasync first sleeps a random time up to this (seconds): shards' flushes finish out of order, so
#: a record durable in one shard while what caused it in another is not yet lasts milliseconds, not microseconds.
FLUSH_JITTER = 0.008
ENGINE_OPTIONS: dict[str, Any] = dict(base.ENGINE_OPTIONS)


@fusee.workflow("brood_kid", version=1)
def kid(ctx: Any, inp: dict[str, Any]) -> dict[str, Any]:
    """Two logged steps around a short durable sleep; returns its ID and the steps' tokens.

    With ``"parent"`` in its input it also signals its first step's token to that run (``"hello"``)."""
    wid = inp["id"]
    a = ctx.step("k0", lambda s: base._body(wid, "k0", s.key))
    if "parent" in inp:
        ctx.signal_workflow(inp["parent"], "hello", a)
    ctx.sleep("nap", NAP)
    b = ctx.step("k1", lambda s: base._body(wid, "k1", s.key))
    return {"id": wid, "tokens": [a, b]}


@fusee.workflow("brood", version=1)
def brood(ctx: Any, inp: dict[str, Any]) -> dict[str, Any]:
    """A step, an abandoned ``start_child`` (which signals back), ``KIDS`` waited children in turn, the
    abandoned child's signal, a last step."""
    wid = inp["id"]
    first = ctx.step("p0", lambda s: base._body(wid, "p0", s.key))
    free = kid_id(wid, "free")
    ctx.start_child(kid, free, {"id": free, "parent": wid}, parent_close="abandon")
    kids = [ctx.child(kid, kid_id(wid, f"k{j}"), {"id": kid_id(wid, f"k{j}")}) for j in range(KIDS)]
    hello = ctx.wait_for("hello")
    last = ctx.step("p1", lambda s: base._body(wid, "p1", s.key))
    return {"steps": [first, last], "kids": kids, "hello": hello}


def kid_id(parent: str, tag: str) -> str:
    """The ID of the parent's child ``tag``: the first ``<parent>.<tag>.<n>`` living on another shard."""
    home = shard_of(parent, SHARDS)
    for n in itertools.count():
        cid = f"{parent}.{tag}.{n}"
        if shard_of(cid, SHARDS) != home:
            return cid
    raise AssertionError  # unreachable


def kids_of(parent: str) -> list[str]:
    """Every child ID of a parent: the abandoned one, then the waited ones in order."""
    return [kid_id(parent, "free")] + [kid_id(parent, f"k{j}") for j in range(KIDS)]


def wave(seed: int, w: int) -> list[str]:
    return [f"b{seed}-{w}-{i}" for i in range(PER_WAVE)]


def plan(seed: int, waves: int) -> list[str]:
    return [wid for w in range(waves) for wid in wave(seed, w)]


def waves_in(runs: dict[str, list["Run"]]) -> int:
    """1 + the highest wave number among the journal's parents."""
    return 1 + max((int(wid.split("-")[1]) for wid in runs if "." not in wid), default=-1)


# -- reading a directory's journal without opening it ------------------------------------


@dataclass
class Run:
    """One run the journal holds: its Start, step records by name, child records by seq, its Done."""

    shard: int
    start: rec.Start
    steps: dict[str, rec.Step] = field(default_factory=dict)
    signals: list[rec.Signal] = field(default_factory=list)
    sends: list[rec.Send] = field(default_factory=list)
    children: dict[int, rec.Child] = field(default_factory=dict)
    child_done: dict[int, rec.ChildDone] = field(default_factory=dict)
    done: rec.Done | None = None


def read_runs(path: str) -> dict[str, list[Run]]:
    """Every run the journal at ``path`` holds, by workflow ID, in journal order (several if restarted)."""
    by_run: dict[tuple[int, int], Run] = {}
    out: dict[str, list[Run]] = {}
    for shard, scans in base.segments(path).items():
        for _, sc in scans:
            for fr in sc.frames:
                r = rec.decode_record(fr.body)
                if type(r) is rec.Start:
                    run = by_run[(shard, r.run)] = Run(shard, r)
                    out.setdefault(r.id, []).append(run)
                    continue
                run = by_run[(shard, r.run)]
                if type(r) is rec.Step:
                    assert r.name not in run.steps, f"{run.start.id}: two Step records for {r.name}"
                    run.steps[r.name] = r
                elif type(r) is rec.Signal:
                    run.signals.append(r)
                elif type(r) is rec.Send:
                    run.sends.append(r)
                elif type(r) is rec.Child:
                    run.children[r.seq] = r
                elif type(r) is rec.ChildDone:
                    assert r.seq not in run.child_done, f"{run.start.id}: two ChildDone records for {r.seq}"
                    run.child_done[r.seq] = r
                elif type(r) is rec.Done:
                    run.done = r
    return out


# -- driving -------------------------------------------------------------------------------


def drive(engine: Any, parents: list[str], known: dict[str, list[Run]], say: Callable[[str], None],
          timeout: float | None = None) -> dict[str, Any]:
    """Start the parents ``known`` lacks, then collect each parent's result and its abandoned child's."""
    for wid in parents:
        if wid not in known:
            engine.start(brood, wid, {"id": wid})
            say(f"ack start {wid}")
    results = {}
    for wid in parents:
        for x in (wid, kid_id(wid, "free")):
            v = engine.result(x) if timeout is None else engine.result(x, timeout=timeout)
            results[x] = v
            say(f"result {x} {json.dumps(v, sort_keys=True, separators=(',', ':'))}")
    return results


def jittery_disk(most: float, seed: int) -> None:
    """Make every ``os.fdatasync`` of this process first sleep a random time in ``[0, most)`` seconds."""
    import random
    import time

    real, rng = os.fdatasync, random.Random(seed)

    def fdatasync(fd: int) -> None:
        time.sleep(rng.uniform(0.0, most))
        real(fd)

    os.fdatasync = fdatasync
    import fusee.disk

    fusee.disk.RWF_DSYNC = None  # every flush calls os.fdatasync (not one pwritev2 with RWF_DSYNC)


def main(argv: list[str]) -> int:
    path, seed, round_, waves = argv[0], int(argv[1]), argv[2], int(argv[3])
    base.set_side_file(path + ".steps", round_)
    jittery_disk(FLUSH_JITTER, int(seed) * 100 + int(round_))

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    known = read_runs(path)
    engine = fusee.Engine.open(path, workflows=[brood, kid], shards=SHARDS, **ENGINE_OPTIONS)
    say("ready")
    drive(engine, plan(seed, waves), known, say)
    for w in itertools.count(waves):
        say(f"wave {w}")
        drive(engine, wave(seed, w), known, say)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
