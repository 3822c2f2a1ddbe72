"""Schedules across crashes (issue 16 point 4): ``crash_everywhere`` (a crash after every record
boundary of a scenario, in-process), and a SIGKILLed engine process whose schedule goes on after the
reopen without a duplicate or a lost fire.

Run as a program, this file is the SIGKILL test's child: ``python test_schedule_crash.py <dir>``
opens an engine on ``<dir>``, schedules ``tick`` every second (overlap ``allow``), prints
``ack schedule``, and prints ``ran <id>`` from each fired run's step until it is killed.
"""

from __future__ import annotations

import os
import signal as _signal
import subprocess
import sys
from typing import Any

if __name__ == "__main__":  # run as the child program: the repository root is on PYTHONPATH
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fusee  # noqa: E402
from fusee import records as r  # noqa: E402
from fusee import schedule as S  # noqa: E402


def print_line(what: str, id: str) -> None:
    sys.stdout.write(f"{what} {id}\n")
    sys.stdout.flush()


#: Where fired runs report ``(what, id)``: stdout in the child, the test's process in the test.
REPORT = [print_line]
OPTIONS: dict[str, Any] = {"segment_size": 1 << 20, "shards": 2}


@fusee.workflow("tick")
def tick(ctx: Any, inp: Any) -> Any:
    ctx.step("ran", lambda: REPORT[0]("ran", ctx.workflow_id))
    return ctx.workflow_id


def child_main(path: str) -> int:
    import ensemble

    engine = fusee.Engine.open(path, workflows=[tick], **OPTIONS)
    engine.schedule("k", tick, every="1s", overlap="allow")
    print_line("ack", "schedule")
    ensemble.receive(lambda m: ensemble.NOMATCH, timeout=3600)  # wait to be killed
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))

# -- the tests -----------------------------------------------------------------------------------

from fusee.testing import crash_everywhere, wait_until  # noqa: E402

from ._kit import next_probe, tell  # noqa: E402
from .test_concurrency import REPO, read_lines_until  # noqa: E402
from .test_schedule import MIDNIGHT, T0, job  # noqa: E402


def _exists(eng: Any, id: str) -> bool:
    try:
        eng.engine.run(S.wrapper_id(id))
        return True
    except fusee.NotFound:
        return False


def test_a_schedule_survives_a_crash_after_every_record():
    """Create, wait armed, jump past two due times (overlap allow), and collect both runs' results: the
    same after a crash at any record boundary, and no step that was durable runs again."""

    def case(eng: Any) -> Any:
        try:
            h = eng.schedule("cw", job, every="1m", overlap="allow", input=7)
        except fusee.AlreadyExists:
            h = eng.schedule_handle("cw")
        if eng.now() < MIDNIGHT + 120:
            # the coordinator arms its wait relative to the clock: jump only once it waits
            wait_until(lambda: MIDNIGHT + 60 in eng.clock.waiting(), timeout=20, what="the first wait armed")
            eng.advance_to(MIDNIGHT + 120)
        ids = [S.run_id("cw", MIDNIGHT + 60), S.run_id("cw", MIDNIGHT + 120)]
        wait_until(lambda: all(_exists(eng, id) for id in ids), timeout=20, what="both fired")
        results = [h.result(id, timeout=20) for id in ids]
        wait_until(lambda: h.describe()["next"] == MIDNIGHT + 180, timeout=20, what="the schedule caught up")
        d = h.describe()
        return results, d["fired"], sorted(x["id"] for x in d["recent"])

    report = crash_everywhere(case, [job], shards=2, start=T0)
    assert report.result == ([[S.run_id("cw", MIDNIGHT + 60), 7], [S.run_id("cw", MIDNIGHT + 120), 7]], 2,
                             [S.run_id("cw", MIDNIGHT + 60), S.run_id("cw", MIDNIGHT + 120)])
    assert report.boundaries >= 20


def _starts(engine: Any) -> dict[str, list[int]]:
    """Every run ``Start`` the reopened engine recovered from the log, by workflow ID: run numbers."""
    out: dict[str, list[int]] = {}
    j = engine.host.journal
    for shard in range(engine.shards):
        for _lsn, body in j.recovered(shard):
            rec = r.decode_record(body)
            if type(rec) is r.Start:
                out.setdefault(rec.id, []).append(rec.run)
    return out


def test_a_sigkilled_engine_s_schedule_goes_on_without_a_duplicate_or_a_lost_fire(tmp_path):
    path = str(tmp_path / "data")
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        lines = read_lines_until(proc, {"ack schedule"})
        buf = [b""]
        while sum(1 for x in lines if x.startswith("ran ")) < 2:
            lines += _more_lines(proc, buf)
    finally:
        proc.send_signal(_signal.SIGKILL)
        proc.wait()
    before = {x.split(" ", 1)[1] for x in lines if x.startswith("ran ")}
    REPORT[0] = lambda what, id: tell(what, id)
    try:
        with fusee.Engine.open(path, workflows=[tick], **OPTIONS) as eng:
            starts = _starts(eng)
            h = eng.schedule_handle("k")
            after = set()
            while len(after) < 2:
                kind, id = next_probe(timeout=30)
                after.add(id)
            d = h.describe()
            h.pause()
            # the wrappers: started one after another by the schedule, so always a prefix of its fires
            ids = sorted(x["id"][len(S.RUN_TYPE) + 1 :] for x in eng.list() if x["type"] == S.RUN_TYPE)
            runs = [x["id"] for x in eng.list() if x["type"] == "tick"]
            for id in runs + [S.wrapper_id(x) for x in ids]:  # no ID started twice, before or after the kill
                assert len(starts.get(id, [])) <= 1, (id, starts.get(id))
                if id in starts:
                    assert eng.describe(id)["run"] == starts[id][0]
            assert before <= set(ids) and after <= set(ids)
            # no fire lost: overlap allow and the catch-up window take every second, the downtime's too
            seconds = sorted(S.Spec("k", "tick", every=1.0).at_or_after(_time_of(id)) for id in ids)
            assert seconds == [seconds[0] + i for i in range(len(seconds))]
            assert d["fired"] >= len(before) + 1
    finally:
        REPORT[0] = print_line


def _more_lines(proc: subprocess.Popen, buf: list[bytes]) -> list[str]:
    """The next whole line(s) the child prints (``buf``: the partial line carried between calls)."""
    import selectors
    import time

    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    end = time.monotonic() + 30
    try:
        while True:
            left = end - time.monotonic()
            assert left > 0, "the child printed nothing more"
            if not sel.select(left):
                continue
            chunk = os.read(fd, 65536)
            assert chunk, f"the child ended; stderr: {proc.stderr.read()!r}"  # type: ignore[union-attr]
            *done, buf[0] = (buf[0] + chunk).split(b"\n")
            if done:
                return [x.decode() for x in done]
    finally:
        sel.close()


def _time_of(id: str) -> float:
    """The due time a fired run's ID names."""
    from datetime import datetime, timezone

    return datetime.strptime(id.split("@", 1)[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
