"""A real SIGKILL while objects take calls: nothing acknowledged is lost, and nothing runs twice.

The child (``tests/fusee/_objects_child.py``) deposits into key ``acct/main`` from outside, printing each
acknowledged call, while a workflow deposits into ``acct/w`` through ``ctx.object``; both keys' runs
continue as new every few calls.  It is SIGKILLed once 20 calls were acknowledged (the next in flight).
Reopened here: every acknowledged call ID answers the same again, the key's total is the sum of the calls
applied, each once (its version counts them), and the workflow ends with every deposit applied once.
"""

from __future__ import annotations

import os
import signal as _signal
import subprocess
import sys

import fusee

from . import _objects_child as child
from .test_concurrency import REPO, read_lines_until

CHILD = os.path.join(REPO, "tests", "fusee", "_objects_child.py")


def test_sigkill_during_object_calls_loses_nothing_acknowledged(tmp_path, monkeypatch):
    from fusee import object_core

    monkeypatch.setattr(object_core, "ROLL_AFTER", object_core.ROLL_AFTER)  # define() lowers it: put it back after
    path = str(tmp_path / "data")
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, CHILD, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        lines = read_lines_until(proc, {"ack call c19 190"})
    finally:
        proc.send_signal(_signal.SIGKILL)
        proc.wait()
    acked = {}
    for line in lines:
        if line.startswith("ack call "):
            _, _, cid, v = line.split()
            acked[cid] = int(v)
    assert len(acked) >= 20
    with fusee.Engine.open(path, workflows=[child.payer], **child.ENGINE_OPTIONS) as eng:
        child.define(eng)
        main = eng.object("acct", "main")
        st = main.state()
        applied = st.version  # each deposit changes the total: one version per call applied
        assert applied in (len(acked), len(acked) + 1)  # the call in flight may have been applied
        assert st.values["total"] == sum(range(applied))
        for cid, v in acked.items():  # answered from the journal, or the answers a key remembers
            assert main.call("deposit", int(cid[1:]), call_id=cid) == v
        assert main.state() == st  # nothing ran again
        assert main.call("deposit", 1000, call_id="after") == st.values["total"] + 1000
        eng.signal("p", "stop")
        expected = [sum(range(1, i + 1)) for i in range(1, child.DEPOSITS + 1)]
        assert eng.result("p", 30) == expected + [expected[-1]]
        assert eng.object("acct", "w").state() == fusee.StateView({"total": expected[-1]}, child.DEPOSITS)
