"""Payload offload (docs/journal.md "Blobs"): big inputs, results and signals kept in blob files,
written before the records that refer to them, read back exactly, checked, collected with their runs."""

from __future__ import annotations

import errno
import os
import selectors
import signal
import subprocess
import sys

import pytest

import fusee
from fusee import blob_refs, inspection
from fusee.errors import Corrupt, NotFound, StorageFull
from fusee.testing import FaultyDisk, TestEngine, crash_everywhere

from . import _offload_child as child

T = 200  # the threshold in these tests
more = fusee.signal("more")


def big(tag: str, n: int) -> str:
    return (tag * (n // len(tag) + 1))[:n]


@fusee.workflow("offload.flow")
def flow(ctx, inp):
    a = ctx.step("a", lambda: big("step", 5000))
    got = ctx.wait_for(more)
    return {"input": inp, "a": a, "signal": got, "small": 1}


def blob_files(path, shard=0):
    d = os.path.join(path, "blobs", str(shard))
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def segment_bytes(path, shard=0):
    d = os.path.join(path, f"shard-{shard}")
    return b"".join(open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.endswith(".seg"))


def run_one(eng, wid="r", n=3000):
    inp = {"doc": big("input", n)}
    eng.start(flow, wid, inp)
    eng.signal(wid, more, [big("sig", n)])
    return eng.result(wid, timeout=20), inp


def expected(inp, n=3000):
    return {"input": inp, "a": big("step", 5000), "signal": [big("sig", n)], "small": 1}


def test_big_inputs_results_and_signals_come_back_exactly(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, [flow], shards=1, payload_offload_bytes=T, checkpoint_on_shutdown=False) as eng:
        got, inp = run_one(eng)
        assert got == expected(inp)
    # input, step result, signal value, result: four blobs; the log holds none of their bytes
    assert len(blob_files(path)) == 4
    assert big("step", 5000).encode() not in segment_bytes(path)
    assert b'"$blobs":' in segment_bytes(path)
    with fusee.Engine.open(path, [flow], payload_offload_bytes=T) as eng:  # recovery reads the log's blobs
        assert eng.result("r") == expected(inp)
        assert eng.describe("r")["status"] == "completed"
    with fusee.Engine.open(path, [flow], payload_offload_bytes=None) as eng:  # from the checkpoint; offload off
        assert eng.result("r") == expected(inp)
    assert [x["id"] for x in inspection.runs(path)] == ["r"]
    assert inspection.describe(path, "r")["result"] == expected(inp)
    assert inspection.verify(path) == []


def test_small_payloads_and_memory_are_untouched(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, [flow], shards=1) as eng:  # the default threshold, 256 KiB
        got, inp = run_one(eng)
        assert got == expected(inp)
    assert blob_files(path) == []
    with fusee.Engine.open(None, [flow], payload_offload_bytes=T) as eng:  # no disk, no blobs
        got, inp = run_one(eng)
        assert got == expected(inp)
    with pytest.raises(ValueError):
        fusee.Engine.open(None, [flow], payload_offload_bytes=-1)


def test_the_same_content_is_stored_once(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, [flow], shards=1, payload_offload_bytes=T, checkpoint_on_shutdown=False) as eng:
        for wid in ("x", "y"):
            eng.start(flow, wid, {"doc": big("input", 3000)})
            eng.signal(wid, more, [big("sig", 3000)])
        assert eng.result("x", timeout=20) == eng.result("y", timeout=20)
    assert len(blob_files(path)) == 4  # two runs, the same four contents


def test_blobs_go_with_their_runs_and_orphans_at_the_next_checkpoint(tmp_path):
    path = str(tmp_path / "d")
    d = os.path.join(path, "blobs", "0")
    with fusee.Engine.open(path, [flow], shards=1, payload_offload_bytes=T) as eng:
        got, inp = run_one(eng)
    # the checkpoint keeps the finished run's start and done: the input's and the result's blobs
    assert len(blob_files(path)) == 2
    orphan = blob_refs.blob_name(b'"nobody"')
    open(os.path.join(d, orphan), "wb").write(b'"nobody"')  # as a crash between a blob and its record leaves
    open(os.path.join(d, orphan + ".tmp"), "wb").write(b"half")
    with fusee.Engine.open(path, [flow], payload_offload_bytes=T, retention=None) as eng:
        assert eng.result("r") == expected(inp)
    assert len(blob_files(path)) == 2 and orphan not in blob_files(path)
    with fusee.Engine.open(path, [flow], payload_offload_bytes=T, retention=0) as eng:
        with pytest.raises(NotFound):
            eng.result("r")
    assert blob_files(path) == []  # the run is forgotten, its blobs with it


@fusee.workflow("offload.stream")
def streamer(ctx, n):
    """Big chunks from workflow code and from a step's body, a small one, then the close."""
    w = ctx.stream("s")
    w.write(big("code", n))

    def gen(s):
        for i in range(w.resume(), 2):
            w.write({"i": i, "text": big(f"step{i}", n)})
        return 2

    ctx.step("gen", gen)
    w.write("small")
    w.close()
    return "ok"


def stream_expected(n):
    return [big("code", n), {"i": 0, "text": big("step0", n)}, {"i": 1, "text": big("step1", n)}, "small"]


def test_big_stream_chunks_go_to_blobs_and_come_back_exactly(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, [streamer], shards=1, payload_offload_bytes=T, checkpoint_on_shutdown=False) as eng:
        eng.start(streamer, "st", 3000)
        assert list(eng.read_stream("st", "s", timeout=20)) == stream_expected(3000)  # read as they come
        assert eng.result("st", timeout=20) == "ok"
    assert len(blob_files(path)) == 3  # the three big chunks; the small one, input and result stay inline
    log = segment_bytes(path)
    assert big("code", 3000).encode() not in log and big("step1", 3000).encode() not in log
    assert b'"small"' in log
    # recovery from the log's blob references; then from the checkpoint (which keeps the finished run's
    # stream, its blobs with it); then, offload off, from a checkpoint holding the chunks inline (and on
    # again: the next checkpoint keeps them in blobs again)
    for threshold, blobs_after in ((T, 3), (T, 3), (None, 0), (T, 3)):
        with fusee.Engine.open(path, [streamer], payload_offload_bytes=threshold) as eng:
            assert list(eng.read_stream("st", "s", timeout=20)) == stream_expected(3000)
            assert list(eng.read_stream("st", "s", offset=2, timeout=20)) == stream_expected(3000)[2:]
            chunks = [rec for _, rec in eng.describe("st")["journal"] if type(rec).__name__ == "Chunk"]
            assert [c.step for c in chunks] == [None, "gen", "gen", None]
        assert len(blob_files(path)) == blobs_after
        assert inspection.verify(path) == []


def test_a_damaged_stream_blob_is_corrupt_naming_it(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, [streamer], shards=1, payload_offload_bytes=T, checkpoint_on_shutdown=False) as eng:
        eng.execute(streamer, "st", 3000, timeout=20)
    d = os.path.join(path, "blobs", "0")
    (victim,) = [os.path.join(d, f) for f in blob_files(path) if big("code", 3000).encode() in open(os.path.join(d, f), "rb").read()]
    data = bytearray(open(victim, "rb").read())
    data[10] ^= 0x01
    open(victim, "wb").write(bytes(data))
    with pytest.raises(Corrupt) as info:
        fusee.Engine.open(path, [streamer])
    assert info.value.path == victim


def _closed_dir(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, [flow], shards=1, payload_offload_bytes=T, checkpoint_on_shutdown=False) as eng:
        run_one(eng)
    return path


@pytest.mark.parametrize("damage", ["flip", "cut", "remove"])
@pytest.mark.parametrize("where", ["log", "checkpoint"])
def test_a_damaged_or_missing_blob_is_corrupt_naming_it(tmp_path, damage, where):
    path = _closed_dir(tmp_path)
    if where == "checkpoint":  # a clean shutdown: the records are in the checkpoint now
        with fusee.Engine.open(path, [flow], payload_offload_bytes=T) as eng:
            eng.result("r")
    victim = [os.path.join(path, "blobs", "0", f) for f in blob_files(path)][0]
    if damage == "remove":
        os.unlink(victim)
    else:
        data = bytearray(open(victim, "rb").read())
        if damage == "flip":
            data[len(data) // 2] ^= 0x01
        else:
            del data[-1:]
        open(victim, "wb").write(bytes(data))
    with pytest.raises(Corrupt) as info:
        fusee.Engine.open(path, [flow])
    assert info.value.path == victim
    with pytest.raises(Corrupt):
        inspection.runs(path)
    assert any(p.path == victim for p in inspection.verify(path))


def test_a_full_disk_while_writing_a_blob_records_nothing(tmp_path):
    path = str(tmp_path / "d")
    disk = FaultyDisk()
    with fusee.Engine.open(path, [flow], shards=1, payload_offload_bytes=T, disk=disk) as eng:
        disk.fail_all(errno.ENOSPC, ("fsync",))  # a blob's file sync (the log's flushes use fdatasync)
        with pytest.raises(StorageFull):
            eng.start(flow, "r", {"doc": big("input", 3000)})
        assert ("fsync", errno.ENOSPC) in disk.failed
        disk.heal()
        with pytest.raises(NotFound):
            eng.describe("r")
        assert not [f for f in os.listdir(os.path.join(path, "blobs", "0")) if f.endswith(".tmp")]
        got, inp = run_one(eng)  # writes work again without a reopen
        assert got == expected(inp)
    with fusee.Engine.open(path, [flow]) as eng:
        assert eng.result("r") == expected(inp)


def offload_case(eng: TestEngine):
    run = eng.start(flow, "c", {"doc": big("input", 1000)}, fusee.IdPolicy.ATTACH)
    eng.signal("c", more, [big("sig", 1000)], dedup="once")
    return run.result(10)


def test_crash_everywhere_with_offloaded_payloads():
    report = crash_everywhere(offload_case, [flow], payload_offload_bytes=T)
    assert report.result == {"input": {"doc": big("input", 1000)}, "a": big("step", 5000), "signal": [big("sig", 1000)], "small": 1}
    assert report.boundaries >= 4


# -- SIGKILL -----------------------------------------------------------------------------------


def _child_lines(proc, until, deadline=30.0):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    lines = []
    while len(lines) < until:
        if not sel.select(deadline):
            raise AssertionError(f"the child printed nothing for {deadline}s: {lines}")
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.decode().strip())
    return lines


@pytest.mark.parametrize("acks", [1, 4, 9])
def test_sigkill_loses_no_acknowledged_payload_and_leaves_no_orphan(tmp_path, acks):
    path = str(tmp_path / "d")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    seen: dict[str, str] = {}
    for rnd in range(2):
        proc = subprocess.Popen([sys.executable, "-m", "tests.fusee._offload_child", path], stdout=subprocess.PIPE, env=env)
        try:
            lines = _child_lines(proc, 1 + acks + rnd)
        finally:
            proc.send_signal(signal.SIGKILL)  # mid-run: the child goes on writing until the kill lands
            proc.wait()
            proc.stdout.close()
        for line in lines[1:]:
            _, wid, verdict = line.split(" ", 2)
            assert verdict == "ok", line
            seen[wid] = verdict
    with fusee.Engine.open(path, [child.bigflow], payload_offload_bytes=child.THRESHOLD) as eng:
        for wid in seen:
            assert eng.result(wid, timeout=20) == child.expected(int(wid[1:]))
    # the checkpoint's collection left exactly the blobs a kept record refers to
    with fusee.Engine.open(path, [child.bigflow], payload_offload_bytes=child.THRESHOLD, checkpoint_on_shutdown=False) as eng:
        pass
    for shard in range(2):
        d = os.path.join(path, "blobs", str(shard))
        from fusee import store

        cp = store.load(os.path.join(path, f"shard-{shard}"), shard)
        on_disk = set(os.listdir(d)) if os.path.isdir(d) else set()
        raw = store.decode(open(os.path.join(path, f"shard-{shard}", store.NAMES[0]), "rb").read())
        referred = {n for _, body in raw.records for n in blob_refs.refs(body)}
        assert on_disk == referred, shard
        assert cp is not None
    assert inspection.verify(path) == []
