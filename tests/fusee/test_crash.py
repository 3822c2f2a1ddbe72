"""Real crashes: a child OS process running workflows is SIGKILLed at random moments, then reopened.

The child is ``tests/fusee/_crash_child.py``: it starts workflows (ids from the seed), signals them,
waits for their results, and prints a line after each acknowledged action; every step body logs
its execution to a side file.  The parent kills it after a seeded random delay, reads the journal
the kill left (a pure scan of the segment files, before anything reopens them) and checks:

* every acknowledged start has its ``Start`` record, every acknowledged signal its ``Signal``
  record, every reported result its ``Done`` record with that value: nothing acknowledged is lost;
* no result ever reported changes (later rounds, and the final in-process reopen, report the same);
* no step whose record is durable ran again: a step body ran exactly once in the round its ``Step``
  record first appeared (with the token that record holds), and never in a later round; bodies whose
  record was lost may run again, always with the same idempotency key;
* the gate: when a step body ran, the run's earlier steps were already in the journal.

Then the segment files of a closed directory are damaged: the last segment of a shard truncated
at random offsets, and bits flipped in acknowledged frames.  The reopen either recovers (a torn
tail: exactly the records before the damage) or refuses with ``fusee.errors.Corrupt`` naming the
file and the offset of the damaged frame, as docs/journal.md says.

Everything is deterministic given the seed except the kills' exact landing points.  The parent
never sleeps to synchronise: it waits for the child's stdout lines, with deadlines, and the only
timed wait is the kill delay itself.  ``CRASH_STATS=1 pytest -s`` prints where the kills landed,
how many step bodies ran again, and what the damaged reopens did; ``CRASH_SEEDS="1 2 3 ..."`` runs
other seeds (one by default).
"""

from __future__ import annotations

import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

import fusee
from fusee import segment as seg
from fusee.errors import Corrupt, NotFound

from . import _crash_child as child

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD = os.path.join(REPO, "tests", "fusee", "_crash_child.py")
LINE_DEADLINE = 30.0  # seconds a child may take to print the next expected line
# One seed per pass: each seed drives the same code (kills from "opening" and from "ready", 8 rounds);
# ``CRASH_SEEDS="11 29 ..."`` runs more (29 was the second default until the suite outgrew its budget).
SEEDS = tuple(int(s) for s in os.environ.get("CRASH_SEEDS", "11").split())
ROUNDS = 8  # children per seed, each driving the waves left unfinished, then new ones until killed


# -- running the child ---------------------------------------------------------------------


@dataclass
class Round:
    """One child's life: what it printed, and how it ended."""

    number: int
    kill_at: str  # "opening+<s>", "ready+<s>"
    lines: list[str] = field(default_factory=list)
    killed: bool = False
    returncode: int | None = None
    stderr: str = ""


class _Lines:
    """Lines of a child's stdout, read with deadlines (selectors, no threads, no sleeps)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.fd = proc.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self.fd, False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.fd, selectors.EVENT_READ)
        self.buf = b""
        self.lines: list[str] = []
        self.eof = False
        self.want: str | None = None

    def pump(self, until: float, stop: str | None = None) -> None:
        """Read what arrives until the monotonic time ``until``, end of file, or the line ``stop``."""
        while not self.eof:
            left = until - time.monotonic()
            if left <= 0:
                return
            if not self.sel.select(left):
                return
            if self._read() == stop and stop is not None:
                return

    def _read(self) -> str | None:
        """Read once; returns ``stop`` matching: the first new line equal to ``self.want``, if any."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return None
        if not data:
            self.eof = True
            return None
        self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        new = [x.decode() for x in done]
        self.lines.extend(new)
        return self.want if self.want in new else None

    def wait_for(self, line: str, deadline: float) -> bool:
        """Read until ``line`` was printed (True) or the child closed its stdout (False)."""
        self.want = line
        found = line in self.lines
        while not found:
            if self.eof:
                return False
            if time.monotonic() > deadline:
                raise AssertionError(f"the child did not print {line!r} within {LINE_DEADLINE} s: {self.lines[-5:]}")
            self.pump(deadline, line)
            found = line in self.lines[-200:] or line in self.lines
        self.want = None
        return True

    def drain(self) -> None:
        """Everything left, up to end of file (after the child died)."""
        deadline = time.monotonic() + LINE_DEADLINE
        while not self.eof and time.monotonic() < deadline:
            self.pump(deadline)
        self.sel.close()


def run_child(path: str, seed: int, rnd: Round, waves: int, anchor: str | None, delay: float = 0.0,
              forever: bool = False, script: str = CHILD) -> None:
    """Run the child ``script`` (``path seed round waves [forever]``) for round ``rnd``; SIGKILL it
    ``delay`` s after it prints ``anchor`` (None: never)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    err_path = f"{path}.stderr.{rnd.number}"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, script, path, str(seed), str(rnd.number), str(waves)] + (["forever"] if forever else []),
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=REPO,
        )
        out = _Lines(proc)
        try:
            if anchor is not None and out.wait_for(anchor, time.monotonic() + LINE_DEADLINE):
                out.pump(time.monotonic() + delay)  # the kill delay: keep reading meanwhile
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                    rnd.killed = True
            out.drain()
            rnd.returncode = proc.wait(timeout=LINE_DEADLINE)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]
    with open(err_path, encoding="utf-8", errors="replace") as f:
        rnd.stderr = f.read()
    rnd.lines = out.lines
    if rnd.killed:
        # Killed: only SIGKILL is acceptable; anything printed to stderr before it is a failure.
        assert rnd.returncode == -signal.SIGKILL, f"round {rnd.number} exited {rnd.returncode}:\n{rnd.stderr}"
        assert "Traceback" not in rnd.stderr, f"round {rnd.number} failed before the kill:\n{rnd.stderr}"
    else:
        assert rnd.returncode == 0 and "done" in rnd.lines, f"round {rnd.number} exited {rnd.returncode}:\n{rnd.stderr}"


def parse(lines: list[str]) -> tuple[list[str], list[tuple[str, int]], list[tuple[str, Any]]]:
    """The acknowledged starts, signals ``(id, n)`` and results ``(id, value)`` a child printed."""
    starts, signals, results = [], [], []
    for line in lines:
        if line.startswith("ack start "):
            starts.append(line.split(" ")[2])
        elif line.startswith("ack signal "):
            _, _, wid, n = line.split(" ")
            signals.append((wid, int(n)))
        elif line.startswith("result "):
            _, wid, v = line.split(" ", 2)
            results.append((wid, json.loads(v)))
    return starts, signals, results


# -- the crash test --------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_at_random_moments_loses_nothing_acknowledged(tmp_path, seed):
    path = str(tmp_path / "data")
    side = path + ".steps"
    rng = random.Random(seed)
    reported: dict[str, Any] = {}  # id -> the result first reported
    acked_starts: set[str] = set()
    acked_signals: set[tuple[str, int]] = set()
    first_durable: dict[tuple[str, str], tuple[int, Any]] = {}  # (id, step) -> (round, token)
    rounds: list[Round] = []
    kills_landed = {"opening": 0, "working": 0}

    for number in range(ROUNDS):
        # A quarter of the kills land from "opening" (maybe inside recovery or segment creation),
        # the rest at tens of milliseconds to most of a second into the work.
        if rng.random() < 0.25:
            anchor, delay = "opening", rng.uniform(0.0, 0.15)
        else:
            anchor, delay = "ready", rng.uniform(0.01, 0.5)
        rnd = Round(number, f"{anchor}+{delay:.3f}")
        run_child(path, seed, rnd, max(1, child.waves_in(child.read_journal(path))), anchor, delay, forever=True)
        rounds.append(rnd)
        kills_landed["working" if "ready" in rnd.lines else "opening"] += 1

        journal = child.read_journal(path)  # what the kill left: nothing has reopened it yet
        starts, signals, results = parse(rnd.lines)
        where = f"seed {seed} round {number} (kill at {rnd.kill_at})"

        for wid in starts:
            assert wid in journal, f"{where}: acknowledged start of {wid} is not in the journal"
        for wid, n in signals:
            assert f"{wid}:{n}" in journal[wid].signals, f"{where}: acknowledged signal {n} of {wid} is lost"
        for wid, v in results:
            done = journal[wid].done
            assert done is not None and (done.status, done.payload) == ("completed", v), (
                f"{where}: result of {wid} was reported but its Done record is not durable"
            )
            assert reported.setdefault(wid, v) == v, f"{where}: the result of {wid} changed"
        acked_starts.update(starts)
        acked_signals.update(signals)

        for wid, st in journal.items():
            for name, step in st.steps.items():
                first_durable.setdefault((wid, name), (number, step.payload))
        check_gate(journal, child.read_side_file(side), str(number), where)

    # The final reopen, in this process: finish every run and compare.
    child.set_side_file(side, "final")
    try:
        known = child.read_journal(path)
        work = child.plan(seed, child.waves_in(known))
        out: list[str] = []
        with fusee.Engine.open(path, workflows=[child.crashy], shards=4, **child.ENGINE_OPTIONS) as engine:
            for wid in sorted(acked_starts):
                d = engine.describe(wid)
                assert (d["id"], d["type"]) == (wid, "crashy")
            results = child.drive(engine, work, known, out.append, result_timeout=30)
            for wid in results:
                d = engine.describe(wid)
                assert d["status"] == "completed" and d["result"] == results[wid]
    finally:
        child.set_side_file(None, "?")

    final = child.read_journal(path)
    executions = child.read_side_file(side)
    order = {str(n): n for n in range(ROUNDS)} | {"final": ROUNDS}

    for wid, v in reported.items():
        assert results[wid] == v, f"seed {seed}: the result of {wid} changed after the reopen"
    for wid, n in acked_signals:
        assert f"{wid}:{n}" in results[wid]["signals"]
    for wid, inp in work:
        st = final[wid]
        v = results[wid]
        assert v["signals"] == [f"{wid}:{n}" for n in range(child.SIGNALS)], f"{wid}: signals {v['signals']}"
        assert v["tokens"] == [st.steps[f"s{i}"].payload for i in range(child.STEPS)], wid
        assert st.done is not None and st.done.payload == v

    by_step: dict[tuple[str, str], list[tuple[int, str, Any]]] = {}
    for r, wid, name, token, key in executions:
        by_step.setdefault((wid, name), []).append((order[r], token, key))
    for wid, st in final.items():
        for name, step in st.steps.items():
            runs = by_step.get((wid, name), [])
            r0, token = first_durable.get((wid, name), (ROUNDS, step.payload))
            assert token == step.payload, f"{wid} {name}: the recorded value changed"
            again = [r for r, _, _ in runs if r > r0]
            assert not again, f"{wid} {name}: durable after round {r0}, yet its body ran again in {again}"
            there = [t for r, t, _ in runs if r == r0]
            assert there == [step.payload], f"{wid} {name}: ran {there} in round {r0}, recorded {step.payload}"
            assert len({json.dumps(k) for _, _, k in runs}) == 1, f"{wid} {name}: keys differ: {runs}"

    # The test must have crashed something that was running, not only idle children.
    assert all(r.killed for r in rounds) and kills_landed["working"] >= 2, kills_landed
    if os.environ.get("CRASH_STATS"):
        reran = sum(1 for runs in by_step.values() if len(runs) > 1)
        print(f"\nseed {seed}: kills {[r.kill_at for r in rounds]} landed {kills_landed}; "
              f"lines {[len(r.lines) for r in rounds]}; runs {len(final)}; steps {len(by_step)}, "
              f"executions {len(executions)}, steps run again (record not durable) {reran}; "
              f"results reported before the end {len(reported)}")


def check_gate(journal: dict[str, child.RunState], executions: list[tuple], round_: str, where: str) -> None:
    """A step body ran only once the run's earlier steps were durable (in the journal after the kill)."""
    for r, wid, name, _, _ in executions:
        if r != round_:
            continue
        i = int(name[1:])
        st = journal.get(wid)
        assert st is not None, f"{where}: step {name} of {wid} ran before its Start was durable"
        missing = [f"s{j}" for j in range(i) if f"s{j}" not in st.steps]
        assert not missing, f"{where}: step {name} of {wid} ran before {missing} were durable"


# -- damaged segment files ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def closed_dir(tmp_path_factory) -> str:
    """A directory two clean child sessions wrote (two segments with frames per shard), shut down."""
    path = str(tmp_path_factory.mktemp("closed") / "data")
    for number in range(2):
        rnd = Round(number, "none")
        run_child(path, 7, rnd, number + 1, None)
        assert not rnd.killed
    return path


def _copy_with(path: str, dest: str, damaged: str) -> str:
    """Copy the directory to ``dest``: hard links for every file but ``damaged``, which is copied."""
    for root, _, files in os.walk(path):
        rel = os.path.relpath(root, path)
        os.makedirs(os.path.join(dest, rel), exist_ok=True)
        for f in files:
            src = os.path.join(root, f)
            dst = os.path.join(dest, rel, f)
            if os.path.samefile(src, damaged):
                shutil.copyfile(src, dst)
            else:
                os.link(src, dst)
    return os.path.join(dest, os.path.relpath(damaged, path))


def _shard_files(path: str) -> dict[int, list[tuple[str, seg.Scan]]]:
    return child.segments(path)


def _expect(scans: list[tuple[str, seg.Scan]], index: int, first_lost: int, lost_lsn: int) -> tuple[str, int] | None:
    """Where the open must refuse (``(path, offset)``), or None for a torn tail.

    The frame at offset ``first_lost`` (LSN ``lost_lsn``) of segment ``index`` is the first one
    damaged or gone.  It was acknowledged, and the open must say so, if a frame of a later batch
    follows it in its segment or any later segment exists in the shard.
    """
    p, sc = scans[index]
    later_batch = any(fr.lsn - fr.batch > lost_lsn for fr in sc.frames if fr.offset > first_lost)
    if later_batch or index + 1 < len(scans):
        return (p, first_lost)
    return None


def _reopen(root: str, shard: int, lost_lsn: int, expected: tuple[str, int] | None, what: str,
            original: dict[str, child.RunState], results: dict[str, Any]) -> str:
    """Open the engine on the damaged copy ``root`` and check the outcome; returns "corrupt" or "recovered".

    Recovered: runs whose ``Start`` came before the damage are there, those after are not; a run
    whose ``Done`` survived has its result; runs of undamaged shards are untouched.
    """
    try:
        engine = fusee.Engine.open(root, workflows=[child.crashy], shards=4, **child.ENGINE_OPTIONS)
    except Corrupt as e:
        assert expected is not None, f"{what}: refused ({e}) but the damage is a torn tail"
        assert (os.path.realpath(e.path), e.offset) == (os.path.realpath(expected[0]), expected[1]), f"{what}: {e}"
        assert e.code == "corrupt" and str(e.offset) in str(e) and os.path.basename(expected[0]) in str(e)
        return "corrupt"
    try:
        assert expected is None, f"{what}: opened, but the damage at {expected} was acknowledged"
        for wid, st in original.items():
            damaged = st.shard == shard
            if damaged and st.start_lsn >= lost_lsn:
                with pytest.raises(NotFound):
                    engine.describe(wid)
                continue
            d = engine.describe(wid)
            assert d["id"] == wid
            if not damaged or st.done_lsn < lost_lsn:
                assert (d["status"], d["result"]) == ("completed", results[wid]), f"{what}: {wid} changed"
    finally:
        engine.shutdown()
    return "recovered"


def _originals(closed_dir: str) -> tuple[dict[str, child.RunState], dict[str, Any]]:
    original = child.read_journal(closed_dir)
    results = {wid: st.done.payload for wid, st in original.items() if st.done is not None}
    assert len(results) == len(original) == 2 * child.PER_WAVE
    return original, results


def test_a_truncated_segment_is_refused_naming_the_file_and_the_cut(closed_dir, tmp_path):
    """Segments are preallocated to the size their header records: a cut anywhere (in the header, in the
    frames, exactly at a frame, past the last frame, or to nothing) is refused, never read as a torn tail."""
    rng = random.Random(1234)
    original, results = _originals(closed_dir)
    shards = _shard_files(closed_dir)
    child.set_side_file(None, "trunc")
    for trial in range(10):
        shard = rng.choice(sorted(s for s, scans in shards.items() if any(sc.frames for _, sc in scans)))
        scans = shards[shard]
        index = max(i for i, (_, sc) in enumerate(scans) if sc.frames)  # the last segment holding frames
        p, sc = scans[index]
        end = sc.end
        if trial == 0:
            cut = rng.randrange(1, seg.HEADER_SIZE)  # inside the header
        elif trial == 1:
            cut = sc.frames[-1].offset  # exactly at the last frame: the whole last record gone
        elif trial == 2:
            cut = end + 1  # past the last frame
        elif trial == 3:
            cut = 0  # emptied
        else:
            cut = rng.randrange(seg.HEADER_SIZE, end)
        root = str(tmp_path / f"t{trial}")
        copy = _copy_with(closed_dir, root, p)
        os.truncate(copy, cut)
        what = f"trial {trial}: shard {shard} {os.path.basename(p)} cut at {cut}"
        expected = (copy, 0) if cut < seg.HEADER_SIZE else (copy, cut)
        assert _reopen(root, shard, 0, expected, what, original, results) == "corrupt"


def test_bit_flips_in_acknowledged_frames_are_refused_with_file_and_offset(closed_dir, tmp_path):
    rng = random.Random(4321)
    original, results = _originals(closed_dir)
    shards = _shard_files(closed_dir)
    outcomes = []
    child.set_side_file(None, "flip")
    for trial in range(10):
        shard = rng.choice(sorted(s for s, scans in shards.items() if any(sc.frames for _, sc in scans)))
        scans = shards[shard]
        with_frames = [i for i, (_, sc) in enumerate(scans) if sc.frames]
        # Mostly acknowledged frames with a later batch after them; now and then the shard's last batch.
        index = with_frames[0] if trial % 3 else with_frames[-1]
        p, sc = scans[index]
        fr = rng.choice(sc.frames) if trial % 3 else sc.frames[-1]
        size = seg.FRAME_HEADER + len(fr.body)
        at = fr.offset + rng.randrange(size)
        root = str(tmp_path / f"f{trial}")
        copy = _copy_with(closed_dir, root, p)
        with open(copy, "r+b") as f:
            f.seek(at)
            b = f.read(1)[0]
            f.seek(at)
            f.write(bytes([b ^ (1 << rng.randrange(8))]))
        what = f"trial {trial}: shard {shard} {os.path.basename(p)} lsn {fr.lsn}, bit flipped at {at}"
        expected = _expect([(pp if i != index else copy, s) for i, (pp, s) in enumerate(scans)], index, fr.offset, fr.lsn)
        outcomes.append(_reopen(root, shard, fr.lsn, expected, what, original, results))
    if os.environ.get("CRASH_STATS"):
        print(f"\nbit flips: {outcomes}")
    assert "corrupt" in outcomes and "recovered" in outcomes
