"""A real SIGKILL while updates are applied: nothing acknowledged is lost.

The child (``tests/fusee/_interact_child.py``) pauses a run on a failing step and resumes it, settles an
async step, then applies updates one after another, printing each acknowledgement; it is SIGKILLed
once 20 updates were acknowledged (mid-stream: the next one is in flight).  Reopened here, the journal
holds the ``Resumed``, the ``Settled`` and an ``UpdateDone`` with the acknowledged result for every
acknowledged update; an update sent again with an acknowledged ID answers the same; the run goes on
and its total is the sum of the updates applied, each once.
"""

from __future__ import annotations

import os
import signal as _signal
import subprocess
import sys

import fusee
from fusee import records as r

from . import _interact_child as child
from .test_concurrency import REPO, read_lines_until

CHILD = os.path.join(REPO, "tests", "fusee", "_interact_child.py")


def test_sigkill_during_updates_loses_nothing_acknowledged(tmp_path):
    path = str(tmp_path / "data")
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, CHILD, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        lines = read_lines_until(proc, {"ack resume", "ack complete", "ack update u19 190"})
    finally:
        proc.send_signal(_signal.SIGKILL)
        proc.wait()
    acked = {}
    for line in lines:
        if line.startswith("ack update "):
            _, _, uid, v = line.split()
            acked[uid] = int(v)
    assert len(acked) >= 20
    with fusee.Engine.open(path, workflows=[child.inter], **child.ENGINE_OPTIONS) as eng:
        journal = [rec for _, rec in eng.describe("i")["journal"]]
        done = {rec.id: rec.payload for rec in journal if type(rec) is r.UpdateDone}
        for uid, v in acked.items():
            assert done.get(uid) == v, (uid, v, done.get(uid))
        assert any(type(rec) is r.Resumed for rec in journal)
        assert [rec.payload for rec in journal if type(rec) is r.Settled] == [1000]
        assert eng.update("i", "add", 5, update_id="u3") == acked["u3"]  # answered from the journal
        applied = [rec.payload for rec in journal if type(rec) is r.Update]
        assert len(applied) == len({rec.id for rec in journal if type(rec) is r.Update})  # each applied once
        last = eng.update("i", "add", 1, update_id="after")
        assert last == sum(applied) + 1
        eng.signal("i", "stop")
        assert eng.result("i", 30) == [last, 1000]
