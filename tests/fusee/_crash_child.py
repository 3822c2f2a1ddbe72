"""The child program of tests/fusee/test_crash.py: runs workflows on a data directory until killed.

Run as ``python tests/fusee/_crash_child.py <dir> <seed> <round> <waves> [forever]`` with the
repository root on ``PYTHONPATH``.  It reads what the directory's journal already holds (a pure
scan of the segment files, before the engine opens it), opens an engine there, and drives the
workflows of waves ``0 .. waves-1`` (ids from the seed) to their end: it starts those that were
never started, sends each the signals its journal does not hold yet, and waits for every result.
With ``forever`` it then goes on with waves ``waves, waves+1, ...`` until it is killed.  After each
acknowledged action it writes one line to stdout and flushes:

    opening                      about to call Engine.open
    ready                        the engine is open
    ack start <id>               engine.start returned
    ack signal <id> <n>          engine.signal returned (signal number n, value "<id>:<n>")
    result <id> <json>           the run's result, as compact JSON
    wave <n>                     about to drive wave n (forever mode)
    done                         waves 0 .. waves-1 finished (then a clean shutdown, unless forever)

Every step body appends ``<round> <id> <step name> <token> <json key>`` to the side file
``<dir>.steps`` (``O_APPEND``, one ``os.write`` and ``fsync`` per line) and returns the random
token, so the parent can count executions and compare the recorded values with what ran.

The child emulates a slow disk: each ``os.fdatasync`` first sleeps ``FLUSH_DELAY`` seconds (on the
journal's flusher thread).  A kill loses nothing that reached the page cache, so without this the
windows in which a bug could show (a record appended but not yet written while an acknowledgement
or a step body runs ahead of it) would last microseconds; with it they last milliseconds.

The module is also imported by the test: :func:`crashy` (the workflow), :func:`read_journal` (the
records in a directory, read without opening it) and :func:`drive` (the loop above).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

if __name__ == "__main__":  # run as a script: the repository root is on PYTHONPATH
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fusee  # noqa: E402
from fusee import records as rec  # noqa: E402
from fusee import segment as seg  # noqa: E402

SIGNAL = "go"
#: Workflows per wave, steps per workflow, signals per workflow (waited for after step STEPS // 2).
PER_WAVE = 12
STEPS = 8
SIGNALS = 3
#: Seconds each fdatasync of the child sleeps first (the emulated slow disk).
FLUSH_DELAY = 0.002
#: Passed to Engine.open by the child and the test (small segments keep every open cheap).
# checkpoint_on_shutdown off: read_journal (the oracle) reads every record from the segments
ENGINE_OPTIONS: dict[str, Any] = {"segment_size": 256 << 10, "checkpoint_on_shutdown": False}

# -- the side file ---------------------------------------------------------------------------

_side: dict[str, Any] = {"fd": -1, "round": "?"}


def set_side_file(path: str | None, round_: str) -> None:
    """Where step bodies log their executions (None: close it), and the round they log."""
    if _side["fd"] >= 0:
        os.close(_side["fd"])
        _side["fd"] = -1
    if path is not None:
        _side["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _side["round"] = round_


def _body(wid: str, name: str, key: Any) -> str:
    token = os.urandom(6).hex()
    line = f"{_side['round']} {wid} {name} {token} {json.dumps(key)}\n".encode()
    fd = _side["fd"]
    if fd >= 0:
        os.write(fd, line)
        os.fsync(fd)
    return token


def read_side_file(path: str) -> list[tuple[str, str, str, str, Any]]:
    """The executions logged: ``(round, id, step name, token, key)`` in order."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                continue  # a line cut by the kill (never the case with one write, but be safe)
            r, wid, name, token, key = line[:-1].split(" ", 4)
            out.append((r, wid, name, token, json.loads(key)))
    return out


# -- the workflow ------------------------------------------------------------------------


@fusee.workflow("crashy", version=1)
def crashy(ctx: Any, inp: dict[str, Any]) -> dict[str, Any]:
    """``steps`` steps returning random tokens, with ``signals`` waits for "go" halfway through."""
    wid = inp["id"]
    tokens: list[str] = []
    signals: list[Any] = []
    for i in range(inp["steps"]):
        name = f"s{i}"
        tokens.append(ctx.step(name, lambda s, name=name: _body(wid, name, s.key)))
        if i == inp["steps"] // 2:
            for _ in range(inp["signals"]):
                signals.append(ctx.wait_for(SIGNAL))
    return {"tokens": tokens, "signals": signals}


def wave(seed: int, w: int) -> list[tuple[str, dict[str, Any]]]:
    """The ``(id, input)`` of the workflows of wave ``w``, in start order."""
    order = list(range(PER_WAVE))
    random.Random(seed * 1000 + w).shuffle(order)
    return [(f"c{seed}-{w}-{i}", {"id": f"c{seed}-{w}-{i}", "steps": STEPS, "signals": SIGNALS}) for i in order]


def plan(seed: int, waves: int) -> list[tuple[str, dict[str, Any]]]:
    """The ``(id, input)`` of every workflow of waves ``0 .. waves-1``, in start order."""
    return [x for w in range(waves) for x in wave(seed, w)]


def waves_in(known: dict[str, "RunState"]) -> int:
    """How many waves the journal's workflow IDs reach (1 + the highest wave number seen)."""
    return 1 + max((int(wid.split("-")[1]) for wid in known), default=-1)


# -- reading a directory's journal without opening it ------------------------------------


@dataclass
class RunState:
    """What the journal holds for one workflow ID."""

    shard: int
    run: int
    start: rec.Start
    start_lsn: int
    steps: dict[str, rec.Step] = field(default_factory=dict)  # by step name
    signals: list[Any] = field(default_factory=list)  # payloads of Signal records, in order
    done: rec.Done | None = None
    done_lsn: int = 0


def segments(path: str) -> dict[int, list[tuple[str, seg.Scan]]]:
    """Each shard's segments, in number order, scanned (pure: nothing is written)."""
    out: dict[int, list[tuple[str, seg.Scan]]] = {}
    if not os.path.isdir(path):
        return out
    for d in sorted(os.listdir(path)):
        if not d.startswith("shard-"):
            continue
        shard = int(d[len("shard-") :])
        sd = os.path.join(path, d)
        files = sorted((f for f in os.listdir(sd) if f.endswith(".seg")), key=lambda f: int(f.split(".")[0]))
        scans = []
        for f in files:
            p = os.path.join(sd, f)
            with open(p, "rb") as fh:
                scans.append((p, seg.scan(fh.read(), p)))
        out[shard] = scans
    return out


def read_journal(path: str) -> dict[str, RunState]:
    """Every run the journal at ``path`` holds, by workflow ID (read with fusee.segment + fusee.records)."""
    by_run: dict[tuple[int, int], RunState] = {}
    out: dict[str, RunState] = {}
    for shard, scans in segments(path).items():
        for _, sc in scans:
            for fr in sc.frames:
                r = rec.decode_record(fr.body)
                if isinstance(r, rec.Start):
                    st = RunState(shard, r.run, r, fr.lsn)
                    by_run[(shard, r.run)] = st
                    out[r.id] = st
                    continue
                st = by_run.get((shard, r.run))
                if st is None:
                    raise AssertionError(f"shard {shard} lsn {fr.lsn}: a {type(r).__name__} of run {r.run} without its Start")
                if isinstance(r, rec.Step):
                    assert r.name not in st.steps, f"{st.start.id}: two Step records for {r.name}"
                    st.steps[r.name] = r
                elif isinstance(r, rec.Signal):
                    st.signals.append(r.payload)
                elif isinstance(r, rec.Done):
                    st.done, st.done_lsn = r, fr.lsn
    return out


# -- driving the workflows ---------------------------------------------------------------


def drive(
    engine: Any,
    work: list[tuple[str, dict[str, Any]]],
    known: dict[str, RunState],
    say: Callable[[str], None],
    result_timeout: float | None = None,
) -> dict[str, Any]:
    """Start what ``known`` lacks, send the missing signals, collect every result (also returned)."""
    for wid, inp in work:
        if wid not in known:
            engine.start(crashy, wid, inp)
            say(f"ack start {wid}")
    for n in range(SIGNALS):
        for wid, _ in work:
            st = known.get(wid)
            if st is not None and len(st.signals) > n:
                continue  # recorded before (acknowledged or not): never sent twice
            engine.signal(wid, SIGNAL, f"{wid}:{n}")
            say(f"ack signal {wid} {n}")
    results = {}
    for wid, _ in work:
        if result_timeout is None:
            v = engine.result(wid)
        else:
            v = engine.result(wid, timeout=result_timeout)
        results[wid] = v
        say(f"result {wid} {json.dumps(v, sort_keys=True, separators=(',', ':'))}")
    return results


def slow_disk(delay: float) -> None:
    """Make every ``os.fdatasync`` of this process sleep ``delay`` seconds first."""
    import time

    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        time.sleep(delay)
        real(fd)

    os.fdatasync = fdatasync
    import fusee.disk

    fusee.disk.RWF_DSYNC = None  # every flush calls os.fdatasync (not one pwritev2 with RWF_DSYNC)


def main(argv: list[str]) -> int:
    path, seed, round_, waves = argv[0], int(argv[1]), argv[2], int(argv[3])
    forever = argv[4:] == ["forever"]
    set_side_file(path + ".steps", round_)
    slow_disk(FLUSH_DELAY)

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    known = read_journal(path)
    say("opening")
    engine = fusee.Engine.open(path, workflows=[crashy], shards=4, **ENGINE_OPTIONS)
    say("ready")
    drive(engine, plan(seed, waves), known, say)
    say("done")
    if forever:
        for w in itertools.count(waves):
            say(f"wave {w}")
            drive(engine, wave(seed, w), known, say)
    engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
