"""fusee.journal: segments on disk, recovery, group commit on carrier threads, in-memory mode."""

from __future__ import annotations

import os

import pytest

import ensemble as e
from ensemble.threads import allocate_lock, get_ident
import fusee.disk
from fusee import segment as seg
from fusee.errors import Corrupt
from fusee.journal import DEFAULT_SEGMENT_SIZE, Journal

SMALL = 64 << 10


def seg_files(path: str, shard: int = 0) -> list[str]:
    """The segment file names of a shard, in number order."""
    d = os.path.join(path, f"shard-{shard}")
    return sorted((f for f in os.listdir(d) if f.endswith(".seg")), key=lambda f: int(f.split(".")[0]))


def write(j: Journal, shard: int, bodies: list[bytes]) -> list[int]:
    """Append ``bodies`` and wait until the last is durable; their LSNs."""
    lsns = [j.append(shard, b) for b in bodies]
    assert j.wait_durable(shard, lsns[-1], timeout=10)
    return lsns


class Gate:
    """Wraps os.fdatasync: the first call parks its thread until ``release``; counts concurrency and threads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold_first: bool = True) -> None:
        self.real = os.fdatasync
        self.entered = allocate_lock()
        self.entered.acquire()
        self.gate = allocate_lock()
        if hold_first:
            self.gate.acquire()
        self.count = allocate_lock()
        self.calls = 0
        self.now = 0
        self.max = 0
        self.idents: set[int] = set()
        monkeypatch.setattr(os, "fdatasync", self)
        monkeypatch.setattr(fusee.disk, "RWF_DSYNC", None)  # every flush calls os.fdatasync

    def __call__(self, fd: int) -> None:
        with self.count:
            self.calls += 1
            self.now += 1
            self.max = max(self.max, self.now)
            self.idents.add(get_ident())
            first = self.calls == 1
        try:
            if first:
                self.entered.release()
                with self.gate:
                    pass
            self.real(fd)
        finally:
            with self.count:
                self.now -= 1

    def wait_entered(self) -> None:
        """Block until the first fdatasync has started (and is held)."""
        self.entered.acquire()

    def release(self) -> None:
        self.gate.release()


def test_round_trip_append_close_reopen(tmp_path):
    """Records appended before close are recovered by the next open with their LSNs, per shard."""
    path = str(tmp_path)
    with Journal.open(path, 2, segment_size=SMALL) as j:
        a = [j.append(0, b"a%d" % i) for i in range(5)]
        b = [j.append(1, b"b%d" % i) for i in range(3)]
    with Journal.open(path, 2, segment_size=SMALL) as j:
        got = (j.recovered(0), j.recovered(1))
    expected = ([(lsn, b"a%d" % i) for i, lsn in enumerate(a)], [(lsn, b"b%d" % i) for i, lsn in enumerate(b)])
    assert expected == got


def test_lsns_are_consecutive_across_opens_and_segments(tmp_path):
    """LSNs continue from the last recovered one across opens, and across rollovers to new segments."""
    path = str(tmp_path)
    bodies = [bytes([i]) * 300 for i in range(40)]
    for part in range(4):
        with Journal.open(path, 1, segment_size=seg.HEADER_SIZE + 1024) as j:
            for body in bodies[part * 10 : part * 10 + 10]:
                write(j, 0, [body])
    with Journal.open(path, 1, segment_size=seg.HEADER_SIZE + 1024) as j:
        got = j.recovered(0)
    assert list(enumerate(bodies, start=1)) == got
    assert len(seg_files(path)) > 5  # 300-byte records: three per 1 KiB segment, so it rolled over


def test_where_locates_a_recovered_record(tmp_path):
    """where(shard, lsn) gives the file and offset of a recovered record's frame."""
    path = str(tmp_path)
    with Journal.open(path, 1, segment_size=SMALL) as j:
        write(j, 0, [b"one", b"two"])
    with Journal.open(path, 1, segment_size=SMALL) as j:
        write(j, 0, [b"three"])
    with Journal.open(path, 1, segment_size=SMALL) as j:
        got = [j.where(0, lsn) for lsn in (1, 2, 3)]
    shard = os.path.join(path, "shard-0")
    expected = [
        (os.path.join(shard, "1.seg"), seg.HEADER_SIZE),
        (os.path.join(shard, "1.seg"), seg.HEADER_SIZE + seg.FRAME_HEADER + 3),
        (os.path.join(shard, "2.seg"), seg.HEADER_SIZE),
    ]
    assert expected == got


def test_every_open_starts_a_fresh_segment(tmp_path):
    """Each open writes into a new segment numbered after the last one holding records."""
    path = str(tmp_path)
    for n in range(3):
        with Journal.open(path, 1, segment_size=SMALL) as j:
            write(j, 0, [b"open%d" % n])
    files = seg_files(path)
    holds = [[f.body for f in seg.scan(open(os.path.join(path, "shard-0", f), "rb").read()).frames] for f in files]
    assert (["1.seg", "2.seg", "3.seg"], [[b"open0"], [b"open1"], [b"open2"]]) == (files, holds)


def test_trailing_segment_without_records_is_replaced(tmp_path):
    """An open that wrote nothing leaves a segment the next open deletes once HEAD names a newer one;
    numbers are never reused."""
    path = str(tmp_path)
    with Journal.open(path, 1, segment_size=SMALL) as j:
        write(j, 0, [b"x"])
    for _ in range(3):
        Journal.open(path, 1, segment_size=SMALL).close()
    assert ["1.seg", "4.seg"] == seg_files(path)


def test_preallocated_segment_size_is_constant_across_flushes(tmp_path):
    """Flushes write inside the preallocated file: its st_size never changes."""
    path = str(tmp_path)
    with Journal.open(path, 1, segment_size=SMALL) as j:
        f = os.path.join(path, "shard-0", "1.seg")
        before = os.stat(f).st_size
        for i in range(20):
            write(j, 0, [b"r%d" % i] * 3)
        after = os.stat(f).st_size
    assert (SMALL, SMALL) == (before, after)


def test_torn_last_batch_is_dropped_on_recovery(tmp_path):
    """A segment cut inside its last batch recovers the earlier batches, and later opens continue from there."""
    path = str(tmp_path)
    with Journal.open(path, 1, segment_size=SMALL) as j:
        write(j, 0, [b"first"])
        write(j, 0, [b"second-batch", b"more"])
    f = os.path.join(path, "shard-0", "1.seg")
    with open(f, "r+b") as fh:
        end = seg.scan(fh.read()).end
        fh.seek(end - 3)
        fh.write(bytes(3))  # a torn write: the tail of the last frame never reached the disk
    with Journal.open(path, 1, segment_size=SMALL) as j:
        first = j.recovered(0)
        write(j, 0, [b"after"])
    with Journal.open(path, 1, segment_size=SMALL) as j:
        second = j.recovered(0)
    assert ([(1, b"first"), (2, b"second-batch")], [(1, b"first"), (2, b"second-batch"), (3, b"after")]) == (
        first,
        second,
    )


def test_bit_flip_in_an_acknowledged_record_is_corrupt(tmp_path):
    """A flipped bit in a record a later batch follows refuses the open, naming the file and offset."""
    path = str(tmp_path)
    with Journal.open(path, 1, segment_size=SMALL) as j:
        write(j, 0, [b"acknowledged"])
        write(j, 0, [b"later"])
    f = os.path.join(path, "shard-0", "1.seg")
    with open(f, "r+b") as fh:
        fh.seek(seg.HEADER_SIZE + seg.FRAME_HEADER + 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x04]))
    with pytest.raises(Corrupt) as info:
        Journal.open(path, 1, segment_size=SMALL)
    assert (f, seg.HEADER_SIZE) == (info.value.path, info.value.offset)


def test_damaged_tail_of_an_earlier_segment_is_corrupt(tmp_path):
    """A damaged last batch in a segment that a later segment continues was acknowledged: Corrupt there."""
    path = str(tmp_path)
    with Journal.open(path, 1, segment_size=SMALL) as j:
        write(j, 0, [b"one"])
        write(j, 0, [b"two"])
    with Journal.open(path, 1, segment_size=SMALL) as j:
        write(j, 0, [b"three"])
    f = os.path.join(path, "shard-0", "1.seg")
    second = seg.HEADER_SIZE + seg.FRAME_HEADER + 3
    with open(f, "r+b") as fh:
        fh.seek(second + seg.FRAME_HEADER)
        fh.write(b"T")  # "two" -> "Two"
    with pytest.raises(Corrupt) as info:
        Journal.open(path, 1, segment_size=SMALL)
    assert (f, second) == (info.value.path, info.value.offset)


def test_concurrent_appenders_share_flushes_with_one_in_flight(tmp_path, monkeypatch):
    """64 processes appending while a flush is in flight all go into the next single flush."""
    gate = Gate(monkeypatch)
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        j.append(0, b"opener")
        gate.wait_entered()  # the first flush is now in flight, held in fdatasync
        me = e.self()

        def appender(i: int) -> None:
            lsn = j.append(0, b"p%d" % i)
            e.send(me, ("appended", i))
            e.send(me, ("durable", i, j.wait_durable(0, lsn, timeout=10)))

        for i in range(64):
            e.spawn(appender, i)
        appended = sorted(e.receive(lambda m: m[1] if m[0] == "appended" else e.NOMATCH) for _ in range(64))
        gate.release()
        durable = [e.receive(lambda m: m[2] if m[0] == "durable" else e.NOMATCH) for _ in range(64)]
        m = j.metrics()
    assert list(range(64)) == appended
    assert [True] * 64 == durable
    assert (2, 65, 32.5) == (m["flushes"], m["records"], m["records_per_flush"])
    assert (1, 1) == (gate.max, m["max_flushes_in_flight"])


def test_one_flush_in_flight_under_load(tmp_path, monkeypatch):
    """Across many rounds of concurrent appenders on several carriers, never two flushes of a shard at once."""
    gate = Gate(monkeypatch, hold_first=False)
    e.dispatcher.define("test-appenders", 2)
    with Journal.open(str(tmp_path), 1, segment_size=1 << 20) as j:
        me = e.self()

        def appender(i: int) -> None:
            for k in range(10):
                assert j.wait_durable(0, j.append(0, b"%d-%d" % (i, k)), timeout=10)
            e.send(me, ("done", i))

        for i in range(32):
            e.spawn(appender, i, dispatcher="test-appenders" if i % 2 else "default")
        done = sorted(e.receive(lambda m: m[1] if m[0] == "done" else e.NOMATCH) for _ in range(32))
        m = j.metrics()
    e.dispatcher.shutdown("test-appenders")
    assert list(range(32)) == done
    assert (1, 320) == (gate.max, m["records"])
    assert m["records_per_flush"] > 1


def test_flush_runs_on_a_carrier_thread_not_the_callers(tmp_path, monkeypatch):
    """The write and fdatasync run on a native thread other than the main one; on_durable callbacks too."""
    gate = Gate(monkeypatch, hold_first=False)
    seen = []
    with Journal.open(str(tmp_path), 2, segment_size=SMALL) as j:
        lsn = j.append(1, b"x")
        j.on_durable(1, lsn, lambda: seen.append(get_ident()))
        assert j.wait_durable(1, lsn, timeout=10)
        idents = set(j.metrics()["flush_thread_idents"])
    main = get_ident()
    assert (False, False, 1) == (main in gate.idents, main in idents | set(seen), len(seen))


def test_wait_durable_times_out_while_the_flush_is_held(tmp_path, monkeypatch):
    """wait_durable answers False when the record is not durable by the timeout, then True once it is."""
    gate = Gate(monkeypatch)
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        lsn = j.append(0, b"slow")
        gate.wait_entered()
        early = j.wait_durable(0, lsn, timeout=0.01)
        gate.release()
        late = j.wait_durable(0, lsn, timeout=10)
    assert (False, True) == (early, late)


def test_in_memory_journal_is_durable_at_once(tmp_path):
    """With path None every append is durable at once and on_durable runs in the caller."""
    j = Journal.open(None, 2)
    lsns = [j.append(0, b"m%d" % i) for i in range(3)]
    called = []
    j.on_durable(0, lsns[-1], lambda: called.append(get_ident()))
    got = (lsns, j.durable_lsn(0), j.wait_durable(0, 3), j.recovered(0), called, j.append(1, b"x"))
    j.close()
    assert ([1, 2, 3], 3, True, [], [get_ident()], 1) == got


def test_an_idle_flusher_can_be_killed(tmp_path):
    """exit(pid, "kill") stops a flusher waiting for work; close() still returns."""
    import time

    j = Journal.open(str(tmp_path), 1, segment_size=SMALL)
    write(j, 0, [b"a"])
    pid = j._shards[0].pid
    t0 = time.monotonic()
    e.exit(pid, "kill")
    reason = e.exit_reason(pid)
    waited = time.monotonic() - t0
    j.close()
    assert (e.is_alive(pid), waited < 2.0) == (False, True), reason


def test_wait_durable_timeout_leaves_no_stray_message(tmp_path, monkeypatch):
    """A timed-out wait_durable leaves the caller's mailbox as it was, also once the flush lands."""
    gate = Gate(monkeypatch)
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        e.send(e.self(), "mine")
        lsn = j.append(0, b"slow")
        gate.wait_entered()
        early = j.wait_durable(0, lsn, timeout=0.01)
        gate.release()
        late = j.wait_durable(0, lsn, timeout=10)
        lsn2 = j.append(0, b"next")
        assert j.wait_durable(0, lsn2, timeout=10)
        got = [e.receive(timeout=0.05), e.receive(timeout=0.05)]
    assert (False, True, ["mine", e.TIMEOUT]) == (early, late, got)


def test_one_flush_wakes_every_waiter_on_a_carrier(tmp_path, monkeypatch):
    """32 waiters parked on one carrier behind a held flush all wake from it, each exactly once."""
    gate = Gate(monkeypatch)
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        j.append(0, b"opener")
        gate.wait_entered()
        me = e.self()
        lsns = [j.append(0, b"w%d" % i) for i in range(32)]

        def waiter(i: int) -> None:
            ok = j.wait_durable(0, lsns[i], timeout=10)
            extra = e.receive(timeout=0.02)
            e.send(me, ("woke", i, ok, extra))

        for i in range(32):
            e.spawn(waiter, i)
        e.receive(timeout=0.05)  # let them park
        gate.release()
        got = sorted(e.receive(lambda m: m[1:] if m[0] == "woke" else e.NOMATCH) for _ in range(32))
    assert [(i, True, e.TIMEOUT) for i in range(32)] == got


def test_a_waiter_on_the_shards_own_carrier_flushes_inline(tmp_path):
    """A process on ``home(shard)`` that waits for its record does the flush itself, on that carrier's
    thread (no hand-off to the flusher); a waiter elsewhere leaves it to the flusher."""
    with Journal.open(str(tmp_path), 2, segment_size=SMALL) as j:
        me = e.self()

        def appender() -> None:
            oks = []
            for i in range(3):
                lsn = j.append(1, b"i%d" % i)
                oks.append(j.wait_durable(1, lsn, timeout=10))
            e.send(me, ("done", oks, get_ident()))

        e.spawn(appender, dispatcher=j.home(1))
        _, oks, ident = e.receive(lambda m: m if m[0] == "done" else e.NOMATCH, timeout=10)
        inline = j.metrics()["inline_flushes"]
        write(j, 0, [b"from the main thread"])
        m = j.metrics()
    assert (oks, inline, m["inline_flushes"], m["flushes"]) == ([True] * 3, 3, 3, 4)
    assert ident in m["flush_thread_idents"] and get_ident() not in m["flush_thread_idents"]


def test_waiters_on_the_home_carrier_share_one_inline_flush(tmp_path, monkeypatch):
    """Processes on the shard's carrier that a flush woke together commit their next records together."""
    gate = Gate(monkeypatch)
    n = 16
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        j.append(0, b"opener")
        gate.wait_entered()  # the first flush is held: every first record below waits for the next one
        me = e.self()

        def worker(i: int) -> None:
            for k in range(3):
                assert j.wait_durable(0, j.append(0, b"w%d.%d" % (i, k)), timeout=10)
            e.send(me, ("done", i))

        for i in range(n):  # queued behind the held flush, which blocks their carrier's thread
            e.spawn(worker, i, dispatcher=j.home(0))
        gate.release()
        done = sorted(e.receive(lambda m: m[1] if m[0] == "done" else e.NOMATCH, timeout=10) for _ in range(n))
        m = j.metrics()
    assert done == list(range(n))
    # 1 + 3n records; one flush per round would be 4 flushes; allow slack for scheduling, but far from 3n
    assert m["flushes"] <= 8, m


def _fill_past_half(j: Journal, shard: int, size: int) -> list[bytes]:
    """Append and flush records until the shard's current segment is more than half full."""
    bodies = []
    while j._shards[shard].seg_pos <= size // 2:
        b = b"r%05d" % len(bodies) + bytes(200)
        bodies.append(b)
        write(j, shard, [b])
    return bodies


def test_a_rollover_takes_the_spare_segment_prepared_off_the_flush_path(tmp_path):
    """Past half a segment, the next one is prepared on another carrier; the rollover takes it, and
    every record survives a reopen."""
    bodies = []
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        for _ in range(3):  # three segments' worth: at least two rollovers
            bodies += _fill_past_half(j, 0, SMALL)
            with j._shards[0].spare_lock:  # the preparation (if under way) is done
                pass
            while j._shards[0].seg_pos > SMALL // 2:
                b = b"s%05d" % len(bodies) + bytes(200)
                bodies.append(b)
                write(j, 0, [b])
        used = j.metrics()["spare_segments_used"]
        segments = j.metrics()["segments"][0]
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        got = [b for _, b in j.recovered(0)]
    assert used >= 2 and segments >= 3
    assert got == bodies


def test_a_spare_segment_left_by_a_crash_is_deleted_at_the_next_open(tmp_path):
    """A prepared, unused spare (its header still zero) does not confuse recovery: it goes, nothing is lost."""
    j = Journal.open(str(tmp_path), 1, segment_size=SMALL)
    bodies = _fill_past_half(j, 0, SMALL)
    s = j._shards[0]
    with s.spare_lock:
        pass
    spare = os.path.join(str(tmp_path), "shard-0", f"{s.spare_number}.seg")
    assert s.spare_fd >= 0 and os.path.exists(spare)
    j.abandon()  # as a crash: the spare stays on disk
    assert os.path.exists(spare)
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        got = [b for _, b in j.recovered(0)]
        lsn = j.append(0, b"after")
        assert j.wait_durable(0, lsn, timeout=10)
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        again = [b for _, b in j.recovered(0)]
    assert got == bodies and again == bodies + [b"after"]


def test_a_clean_close_deletes_an_unused_spare(tmp_path):
    with Journal.open(str(tmp_path), 1, segment_size=SMALL) as j:
        _fill_past_half(j, 0, SMALL)
        with j._shards[0].spare_lock:
            pass
        number = j._shards[0].spare_number
    assert f"{number}.seg" not in seg_files(str(tmp_path))


# ---------------------------------------------------------------------- the journal's modules


JOURNAL_MODULES = ["journal", "journal_shard", "segment_files", "group_commit", "journal_metrics", "crc32c"]


@pytest.mark.parametrize("name", JOURNAL_MODULES)
def test_the_journal_uses_only_ensembles_public_api(name):
    """No gevent, greenlet or _thread of its own, and nothing private of ensemble: ensemble.threads
    (native lock, thread id), ensemble.dispatcher (yield_, call_soon) and ensemble.native instead."""
    import ast

    import fusee

    path = os.path.join(os.path.dirname(fusee.__file__), f"{name}.py")
    imported = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported += [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
    bad = [m for m in imported
           if m.split(".")[0] in ("gevent", "greenlet", "_thread", "threading")
           or (m.startswith("ensemble.") and any(part.startswith("_") for part in m.split(".")[1:]))]
    assert bad == []


def test_journal_and_default_segment_size_stay_in_fusee_journal():
    import fusee.journal as journal

    assert journal.__all__ == ["Journal", "DEFAULT_SEGMENT_SIZE"]
    assert DEFAULT_SEGMENT_SIZE == 16 << 20
    for method in ["open", "home", "recovered", "where", "append", "last_lsn", "delete_before", "durable_lsn",
                   "wait_durable", "resume", "on_durable", "metrics", "close", "unlock", "abandon"]:
        assert (getattr(Journal, method).__doc__ or "").strip(), method
