"""A full or failing disk: every write, sync, allocation and rename of a scenario fails in turn
(fusee.testing.FaultyDisk), and once for real on a small tmpfs.  The calls waiting on the records get
StorageFull / StorageFailed, nothing acknowledged is lost, no partial file is left, the engine keeps
answering reads, and writes succeed again by themselves once the disk does."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import warnings

import pytest

import fusee
from fusee import StorageError, StorageFailed, StorageFull
from fusee import directory as d
from fusee.disk import OPS
from fusee.testing import FaultyDisk

from ._kit import SEG, count


@fusee.workflow("faults.two_steps")
def two_steps(ctx, x):
    a = ctx.step("a", lambda: count(f"a{x}") and x + 1)
    return ctx.step("b", lambda: a * 10)


def _expected(x):
    return (x + 1) * 10


def _leftovers(path):
    """Files a failure must never leave: ``.tmp`` files and segments past HEAD."""
    bad = []
    for root, _, files in os.walk(path):
        head = None
        if os.path.exists(os.path.join(root, d.HEAD_NAME)):
            head = d.read_head(root)
        for f in files:
            if f.endswith(".tmp"):
                bad.append(os.path.join(root, f))
            elif f.endswith(".seg") and head is not None and int(f[:-4]) > head.number:
                bad.append(os.path.join(root, f))
    return bad


def _run(path, disk, acknowledged, errors, workflows, shards, starts):
    """Open, execute ``starts`` (``(id, workflow, input)``), shut down; note what was acknowledged and
    which errors surfaced.  After each error, reads go on: every result acknowledged so far is there."""
    try:
        eng = fusee.Engine.open(path, workflows, shards=shards, segment_size=SEG, disk=disk)
    except StorageError as e:
        errors.append(e)
        return
    try:
        for wid, wf, x in starts:
            try:
                acknowledged[wid] = eng.execute(wf, wid, x, timeout=30)
            except StorageError as e:
                errors.append(e)
                assert {k: eng.result(k, timeout=20) for k in acknowledged} == acknowledged
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a checkpoint the disk refused
            eng.shutdown()


def _scenario(path, disk, acknowledged, errors):
    """Three workflows of two steps on one shard."""
    _run(path, disk, acknowledged, errors, [two_steps], 1, [(f"w{x}", two_steps, x) for x in range(3)])


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    """How often the scenario calls each operation on a sound disk."""
    disk = FaultyDisk()
    acknowledged, errors = {}, []
    _scenario(str(tmp_path_factory.mktemp("count")), disk, acknowledged, errors)
    assert errors == [] and acknowledged == {f"w{x}": _expected(x) for x in range(3)}
    assert disk.calls["write"] > 10 and disk.calls["fdatasync"] > 3 and disk.calls["rename"] > 0
    return dict(disk.calls)


@pytest.mark.parametrize("op", OPS)
def test_every_failure_point_surfaces_as_a_storage_error_and_loses_nothing(tmp_path, calls, op):
    """The n-th call of ``op`` fails (ENOSPC or EIO, alternately), for every n the scenario reaches."""
    assert calls[op] >= 1
    trials = 0
    for n in range(1, calls[op] + 1):
        code = errno.ENOSPC if n % 2 else errno.EIO
        path = str(tmp_path / f"{op}-{n}")
        disk = FaultyDisk()
        disk.fail_at(op, n, code)
        acknowledged, errors = {}, []
        _scenario(path, disk, acknowledged, errors)
        what = f"{op} #{n} {errno.errorcode[code]}"
        assert disk.failed == [(op, code)], what
        for e in errors:
            assert type(e) is (StorageFull if code == errno.ENOSPC else StorageFailed), (what, e)
            assert e.code in ("storage_full", "storage_failed") and e.errno == code
        assert _leftovers(path) == [], what
        # reopened on a sound disk: everything acknowledged is there, the rest can be done now
        with fusee.Engine.open(path, [two_steps]) as eng:
            assert {k: eng.result(k, timeout=20) for k in acknowledged} == acknowledged, what
            for x in range(3):  # attach: a run whose caller got the error may have ended since
                assert eng.execute(two_steps, f"w{x}", x, fusee.IdPolicy.ATTACH, timeout=20) == _expected(x), what
        trials += 1
    assert trials == calls[op]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_writes_succeed_again_once_the_disk_does_without_a_reopen(tmp_path, code):
    disk = FaultyDisk()
    path = str(tmp_path / "data")
    with fusee.Engine.open(path, [two_steps], shards=2, segment_size=SEG, disk=disk) as eng:
        assert eng.execute(two_steps, "before", 1, timeout=20) == 20
        disk.fail_all(code, ("write", "fdatasync", "allocate"))
        with pytest.raises(StorageFull if code == errno.ENOSPC else StorageFailed):
            eng.start(two_steps, "during", 2)
        assert eng.result("before", timeout=20) == 20  # reads are answered
        assert eng.metrics()["storage_failures"] >= 1
        disk.heal()
        assert eng.execute(two_steps, "after", 3, timeout=20) == 40  # no reopen
        assert eng.execute(two_steps, "during", 2, timeout=20) == 30  # the refused start left nothing behind
    with fusee.Engine.open(path, [two_steps]) as eng:
        assert [eng.result(k, timeout=20) for k in ("before", "during", "after")] == [20, 30, 40]


def test_a_run_whose_write_fails_is_rolled_back_and_runs_on_once_the_disk_heals(tmp_path):
    """A run's own record voided by a failed flush: nothing is recorded as failed; its process is loaded
    again after a pause, from its durable records, and finishes once the disk works."""
    disk = FaultyDisk()
    path = str(tmp_path / "data")
    with fusee.Engine.open(path, [two_steps], shards=1, segment_size=SEG, disk=disk) as eng:
        eng.execute(two_steps, "warm", 0, timeout=20)
        disk.fail_at("fdatasync", 2, errno.EIO)  # the start's flush works; the next one (a step's) fails
        run = eng.start(two_steps, "victim", 5)
        assert eng.result("victim", timeout=20) == 60
        assert disk.failed == [("fdatasync", errno.EIO)]
        assert eng.metrics()["storage_failures"] == 1
        d_ = eng.describe("victim")
        assert d_["status"] == "completed" and run.result(timeout=5) == 60
    with fusee.Engine.open(path, [two_steps]) as eng:
        assert eng.result("victim", timeout=20) == 60


def test_shutdown_on_a_full_disk_loses_nothing(tmp_path):
    disk = FaultyDisk()
    path = str(tmp_path / "data")
    eng = fusee.Engine.open(path, [two_steps], shards=2, segment_size=SEG, disk=disk)
    results = {f"k{i}": eng.execute(two_steps, f"k{i}", i, timeout=20) for i in range(4)}
    disk.fail_all(errno.ENOSPC)
    with pytest.warns(RuntimeWarning, match="no checkpoint written"):
        eng.shutdown()
    assert _leftovers(path) == []
    with fusee.Engine.open(path, [two_steps]) as eng:
        assert {k: eng.result(k, timeout=20) for k in results} == results


# -- for real: a small tmpfs -----------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not allowed here: {r.stderr.strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@fusee.workflow("faults.big")
def big(ctx, x):
    return ctx.step("blob", lambda: str(x) * 40_000)


def test_a_really_full_tmpfs(small_tmpfs):
    path = os.path.join(small_tmpfs, "data")
    filler = os.path.join(small_tmpfs, "filler")
    with fusee.Engine.open(path, [big], shards=1, segment_size=SEG) as eng:
        with open(filler, "wb") as fh:  # take every byte left
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC
        done, error = {}, None
        for i in range(200):  # fills the segment: its successor cannot be made
            try:
                done[f"b{i}"] = eng.execute(big, f"b{i}", i % 10, timeout=20)
            except StorageFull as e:
                error = e
                break
        assert error is not None and error.errno == errno.ENOSPC and done
        assert {k: eng.result(k, timeout=20) for k in done} == done  # reads go on on a full disk
        os.unlink(filler)  # space is back
        done["again"] = eng.execute(big, "again", 7, timeout=20)
        assert done["again"] == "7" * 40_000
    assert _leftovers(path) == []
    with fusee.Engine.open(path, [big]) as eng:
        assert {k: eng.result(k, timeout=20) for k in done} == done


# -- runs that talk across shards -----------------------------------------------------------


@fusee.workflow("faults.kid")
def kid(ctx, x):
    got = ctx.wait_for("poke", timeout=None)
    return ctx.step("k", lambda: [x, got])


@fusee.workflow("faults.parent")
def parent(ctx, n):
    ctx.start_child(kid, f"kid-{n}", n, parent_close="abandon")
    ctx.signal_workflow(f"kid-{n}", "poke", n * 100)
    return ctx.child(two_steps, f"sub-{n}", n)


def _family(path, disk, acknowledged, errors):
    """Two parents, each with a child elsewhere that it signals and one it waits for."""
    _run(path, disk, acknowledged, errors, [parent, kid, two_steps], 2, [(f"p{n}", parent, n) for n in range(2)])


def test_each_failed_flush_of_runs_with_children_and_signals_loses_nothing(tmp_path):
    """Parents start children on other shards and signal them; each flush (fdatasync) of the scenario
    fails in turn.  Afterwards every run the scenario started finishes with the one right answer."""
    disk = FaultyDisk()
    acknowledged, errors = {}, []
    _family(str(tmp_path / "count"), disk, acknowledged, errors)
    assert errors == [] and acknowledged == {"p0": _expected(0), "p1": _expected(1)}
    flushes = disk.calls["fdatasync"]
    assert flushes >= 8
    injected = 0
    for n in range(1, flushes + 1):
        path = str(tmp_path / f"f{n}")
        disk = FaultyDisk()
        disk.fail_at("fdatasync", n, errno.EIO if n % 2 else errno.ENOSPC)
        acknowledged, errors = {}, []
        _family(path, disk, acknowledged, errors)
        assert all(isinstance(e, StorageError) for e in errors), n
        # How many flushes group commit makes depends on timing (which records share a batch): a run of
        # the scenario that needed fewer than n had no failure to meet, and must simply be right.
        assert len(disk.failed) == 1 or (disk.failed == [] and errors == [] and disk.calls["fdatasync"] < n), n
        injected += len(disk.failed)
        assert _leftovers(path) == []
        with fusee.Engine.open(path, [parent, kid, two_steps]) as eng:
            for k in range(2):
                assert eng.execute(parent, f"p{k}", k, fusee.IdPolicy.ATTACH, timeout=30) == _expected(k), n
                assert eng.result(f"kid-{k}", timeout=30) == [k, k * 100], n
    assert injected >= flushes - 4, (injected, flushes)  # nearly every flush of the scenario failed in turn
