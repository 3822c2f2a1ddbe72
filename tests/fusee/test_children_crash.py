"""Real crashes with child workflows: parents whose children live on other shards, SIGKILLed while they run.

The child OS process is ``tests/fusee/_children_crash_child.py`` (4 shards): waves of parents, each
running a step, an abandoned ``start_child``, three waited ``ctx.child`` children on other shards and a
last step.  It is killed at seeded random moments, the journal the kill left is read (a pure scan), and
the next round reopens the directory.  A final reopen in this process finishes everything.  Checked:

* nothing acknowledged is lost (a started parent's ``Start``, a reported result's ``Done``) and no
  reported result ever changes;
* every child ID has exactly one durable ``Start`` (a reopened parent attaches to its child, or takes
  the outcome it already has: never a second run), naming its parent's run and ``Child`` operation;
* the abandoned child's ``signal_workflow`` reaches its parent exactly once (one dedup), carrying the
  value of the child's durable step (a signal is never sent from a history that is then lost);
* every waited child's outcome is in its parent's journal (``ChildDone`` ``completed`` with the child's
  ``Done`` payload) and in the parent's result, in order; the abandoned child's is ``started``;
* no step whose record is durable ran again (parents' and children's): it ran once, in the round its
  ``Step`` first appeared, with the token recorded;
* some kill landed while a child was running (its ``Start`` durable, its ``Done`` not).

``CHILDREN_CRASH_SEEDS="1 2 3 ..."`` runs other seeds; ``CRASH_STATS=1 pytest -s`` prints what the kills hit.
Two in-process tests pin the orderings a kill can only rarely land between: a ``signal_workflow`` is
delivered only once its ``Send`` is durable, and a parent's end closes its children only once durable.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import pytest

import fusee
import fusee.disk
from fusee import records as r
from fusee.engine import shard_of
from fusee.replay import send_dedup

from . import _children_crash_child as kids
from . import _crash_child as base
from .test_crash import REPO, Round, run_child

CHILD = os.path.join(REPO, "tests", "fusee", "_children_crash_child.py")
# one seed by default (17 was the second): each seed drives the same code, 4 rounds of kills
SEEDS = tuple(int(s) for s in os.environ.get("CHILDREN_CRASH_SEEDS", "3").split())
ROUNDS = 4


def run_round(path: str, seed: int, number: int, waves: int, delay: float) -> list[str]:
    """Run the child for round ``number``, SIGKILL it ``delay`` s after ``ready``; its stdout lines."""
    rnd = Round(number, f"ready+{delay:.3f}")
    run_child(path, seed, rnd, waves, "ready", delay, script=CHILD)
    assert rnd.killed, f"round {number}: the child ended by itself (exit {rnd.returncode}):\n{rnd.stderr}"
    return rnd.lines


def one(runs: dict[str, list[kids.Run]], wid: str, where: str) -> kids.Run:
    got = runs.get(wid, [])
    assert len(got) == 1, f"{where}: {wid} has {len(got)} durable Start records, want exactly 1"
    return got[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
def test_parents_and_children_on_other_shards_survive_sigkill(tmp_path, seed):
    path = str(tmp_path / "data")
    side = path + ".steps"
    rng = random.Random(seed)
    reported: dict[str, Any] = {}
    acked: set[str] = set()
    first_durable: dict[tuple[str, str], tuple[int, str]] = {}  # (id, step) -> (round, token)
    children_running_at_kill = 0

    for number in range(ROUNDS):
        waves = max(1, kids.waves_in(kids.read_runs(path)))
        delay = rng.uniform(0.05, 0.6)
        lines = run_round(path, seed, number, waves, delay)
        where = f"seed {seed} round {number} (kill at ready+{delay:.3f})"
        runs = kids.read_runs(path)
        for line in lines:
            if line.startswith("ack start "):
                acked.add(line.split(" ")[2])
            elif line.startswith("result "):
                _, wid, v = line.split(" ", 2)
                done = one(runs, wid, where).done
                assert done is not None and (done.status, done.payload) == ("completed", json.loads(v)), (
                    f"{where}: the result of {wid} was reported but its Done is not durable"
                )
                assert reported.setdefault(wid, json.loads(v)) == json.loads(v), f"{where}: the result of {wid} changed"
        for wid in acked:
            one(runs, wid, where)
        for wid, rs in runs.items():
            assert len(rs) == 1, f"{where}: {wid} has {len(rs)} durable Start records"
            for name, step in rs[0].steps.items():
                first_durable.setdefault((wid, name), (number, step.payload))
            if "." in wid and rs[0].done is None:
                children_running_at_kill += 1

    # The final reopen, in this process: finish every parent of every wave the journal reached.
    base.set_side_file(side, "final")
    try:
        known = kids.read_runs(path)
        parents = kids.plan(seed, kids.waves_in(known))
        with fusee.Engine.open(path, workflows=[kids.brood, kids.kid], shards=kids.SHARDS, **kids.ENGINE_OPTIONS) as eng:
            results = kids.drive(eng, parents, known, lambda _: None, timeout=30)
    finally:
        base.set_side_file(None, "?")

    final = kids.read_runs(path)
    for wid, v in reported.items():
        assert results.get(wid, v) == v, f"seed {seed}: the result of {wid} changed after the reopen"
    cross_shard = 0
    for wid in parents:
        p = one(final, wid, "final")
        got = results[wid]
        assert p.done is not None and (p.done.status, p.done.payload) == ("completed", got), wid
        assert got["steps"] == [p.steps["p0"].payload, p.steps["p1"].payload], wid
        child_ops = {c.id: c for c in p.children.values()}
        assert sorted(child_ops) == sorted(kids.kids_of(wid)), f"{wid}: Child records {sorted(child_ops)}"
        for cid in kids.kids_of(wid):
            c = one(final, cid, f"final, child of {wid}")
            op = child_ops[cid]
            ref = c.start.parent
            assert (ref["id"], ref["run"], ref["seq"], ref["shard"]) == (wid, p.start.run, op.seq, p.shard), (cid, ref)
            assert ref["wait"] is (cid != kids.kid_id(wid, "free")), (cid, ref)
            assert c.done is not None and c.done.status == "completed", cid
            assert c.done.payload == {"id": cid, "tokens": [c.steps["k0"].payload, c.steps["k1"].payload]}, cid
            cross_shard += c.shard != p.shard
            cd = p.child_done[op.seq]
            if ref["wait"]:
                assert (cd.status, cd.payload) == ("completed", c.done.payload), cid
            else:
                assert (cd.status, cd.payload) == ("started", None), cid
                assert results[cid] == c.done.payload, cid
                assert [(s.target, s.name, s.payload) for s in c.sends] == [(wid, "hello", c.steps["k0"].payload)], cid
                dedups = {s.dedup for s in p.signals if s.name == "hello"}
                assert dedups == {send_dedup(cid, c.start.run, c.sends[0].seq)}, (cid, dedups)
                assert got["hello"] == c.steps["k0"].payload, f"{wid}: got {got['hello']!r} from a lost history of {cid}"
        assert got["kids"] == [final[cid][0].done.payload for cid in kids.kids_of(wid)[1:]], wid
    assert cross_shard == len(parents) * (kids.KIDS + 1)

    # No step whose record was durable ran again; in its round it ran exactly once, with the recorded token.
    order = {str(n): n for n in range(ROUNDS)} | {"final": ROUNDS}
    by_step: dict[tuple[str, str], list[tuple[int, str, Any]]] = {}
    for round_, wid, name, token, key in base.read_side_file(side):
        by_step.setdefault((wid, name), []).append((order[round_], token, key))
    for wid, rs in final.items():
        for name, step in rs[0].steps.items():
            ran = by_step.get((wid, name), [])
            r0, token = first_durable.get((wid, name), (ROUNDS, step.payload))
            assert token == step.payload, f"{wid} {name}: the recorded value changed"
            again = [r for r, _, _ in ran if r > r0]
            assert not again, f"{wid} {name}: durable after round {r0}, yet its body ran again in {again}"
            assert [t for r, t, _ in ran if r == r0] == [step.payload], f"{wid} {name}: ran {ran}, recorded {step.payload}"
            assert len({json.dumps(k) for _, _, k in ran}) == 1, f"{wid} {name}: keys differ: {ran}"
    assert children_running_at_kill > 0, "no kill landed while a child was running"
    if os.environ.get("CRASH_STATS"):
        reran = sum(1 for ran in by_step.values() if len(ran) > 1)
        print(f"\nseed {seed}: parents {len(parents)}, children running at a kill {children_running_at_kill}, "
              f"steps {len(by_step)}, steps run again (record not durable) {reran}, results reported {len(reported)}")


# -- a signal between runs never outruns its own record ------------------------------------------

ORDER: dict[str, Any] = {"slow": None, "engine": None, "seen": None}


@fusee.workflow("ordered_sender")
def ordered_sender(ctx, target):
    ctx.step("slow", lambda: ORDER.update(slow=ctx.workflow_id))  # from here on the sender's disk is slow
    ctx.signal_workflow(target, "go", "v")
    return "sent"


@fusee.workflow("ordered_target")
def ordered_target(ctx, sender_shard):
    ctx.wait_for("go")
    # runs once the target's Signal and Waited are durable: is the sender's Send durable by now?
    return ctx.step("look", lambda: ORDER.update(seen=ORDER["engine"].host.journal.durable_lsn(sender_shard), slow=None))


def test_signal_workflow_delivers_only_once_its_send_is_durable(tmp_path, monkeypatch):
    """A target must never hold a signal whose ``Send`` a crash could still take back (with the records
    before it: the sender would replay them differently and send something else, which dedup then drops).
    The sender's shard is made a slow disk while it sends; the target looks when its signal arrives."""
    shards = 4
    sender = next(f"snd-{n}" for n in range(100) if shard_of(f"snd-{n}", shards) == 0)
    target = next(f"tgt-{n}" for n in range(100) if shard_of(f"tgt-{n}", shards) == 1)
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if ORDER["slow"] is not None and f"{os.sep}shard-0{os.sep}" in os.readlink(f"/proc/self/fd/{fd}"):
            time.sleep(0.2)  # the emulated slow disk of shard 0 (not a synchronisation)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(fusee.disk, "RWF_DSYNC", None)  # every flush calls os.fdatasync
    try:
        with fusee.Engine.open(str(tmp_path / "d"), workflows=[ordered_sender, ordered_target], shards=shards) as eng:
            ORDER["engine"] = eng
            eng.start(ordered_target, target, 0)
            assert "sent" == eng.execute(ordered_sender, sender, target, timeout=30)
            assert eng.result(target, timeout=30) is None
            send_lsn = next(lsn for lsn, rec in eng.describe(sender)["journal"] if type(rec) is r.Send)
            assert ORDER["seen"] >= send_lsn, "the target got the signal before the sender's Send was durable"
    finally:
        ORDER.update(slow=None, engine=None, seen=None)


@fusee.workflow("closing_parent")
def closing_parent(ctx, kid_id):
    ctx.start_child(ordered_target, kid_id, 0, parent_close="terminate")
    ctx.step("slow", lambda: ORDER.update(slow=ctx.workflow_id))  # from here on the parent's disk is slow
    return "ended"


def test_a_parents_end_closes_its_children_only_once_durable(tmp_path, monkeypatch):
    """``parent_close="terminate"`` acts on the child only once the parent's ``Done`` is durable: a crash
    cannot take back the end that terminated it.  The parent's shard is a slow disk as it ends; each flush
    of the child's shard notes how far the parent's shard is durable."""
    shards = 4
    parent = next(f"par-{n}" for n in range(100) if shard_of(f"par-{n}", shards) == 0)
    kid = next(f"kid-{n}" for n in range(100) if shard_of(f"kid-{n}", shards) == 1)
    real = os.fdatasync
    seen: list[tuple[int, int]] = []  # at each flush of shard 1 once slow: (its last LSN, shard 0's durable LSN)

    def fdatasync(fd: int) -> None:
        where = os.readlink(f"/proc/self/fd/{fd}")
        if ORDER["slow"] is not None and f"{os.sep}shard-0{os.sep}" in where:
            time.sleep(0.2)  # the emulated slow disk of shard 0 (not a synchronisation)
        if ORDER["slow"] is not None and f"{os.sep}shard-1{os.sep}" in where:
            seen.append((ORDER["engine"].host.journal.last_lsn(1), ORDER["engine"].host.journal.durable_lsn(0)))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(fusee.disk, "RWF_DSYNC", None)  # every flush calls os.fdatasync
    try:
        with fusee.Engine.open(str(tmp_path / "d"), workflows=[closing_parent, ordered_target], shards=shards) as eng:
            ORDER["engine"] = eng
            assert "ended" == eng.execute(closing_parent, parent, kid, timeout=30)
            with pytest.raises(fusee.Terminated):
                eng.result(kid, timeout=30)
            parent_done = eng.describe(parent)["journal"][-1][0]
            kid_done = eng.describe(kid)["journal"][-1]
            assert type(kid_done[1]) is r.Done and kid_done[1].status == "terminated"
            first = next(durable for last, durable in seen if last >= kid_done[0])
            assert first >= parent_done, "the child was terminated before its parent's end was durable"
    finally:
        ORDER.update(slow=None, engine=None, seen=None)
