"""fusee.direct_io: O_DIRECT appends (block arithmetic, the appender, the journal's use of it)."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusee.disk
from fusee import segment as seg
from fusee.direct_io import BLOCK, DirectAppender, block_span
from fusee.journal import Journal
from fusee.testing import FaultyDisk

from .test_journal import seg_files, write


# ---------------------------------------------------------------------- block_span, a pure function


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 1 << 40), st.integers(0, 1 << 24), st.sampled_from([512, 4096, 65536]))
def test_block_span_covers_the_append_in_whole_blocks(pos, size, block):
    start, head, total = block_span(pos, size, block)
    assert start % block == 0 and total % block == 0  # aligned offset and length
    assert start <= pos < start + block  # the block holding pos
    assert head == pos - start  # the bytes kept from before pos
    assert start + total >= pos + size  # every byte of the append is written
    assert total - (head + size) < block  # and less than one block of padding after it
    if head + size == 0:
        assert total == 0


@pytest.mark.parametrize("args", [(-1, 1, 4096), (0, -1, 4096), (0, 1, 0)])
def test_block_span_refuses_nonsense(args):
    with pytest.raises(ValueError):
        block_span(*args)


# ---------------------------------------------------------------------- the appender on a real file


def _zero_file(path: str, size: int) -> None:
    with open(path, "wb") as f:
        f.write(bytes(size))


def _appender(path: str, end: int, limit: int) -> DirectAppender:
    a = DirectAppender.open(path, end, limit, fusee.disk.RWF_DSYNC)
    if a is None:
        pytest.skip("no O_DIRECT on this file system")
    return a


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=3 * BLOCK), min_size=1, max_size=12))
def test_appends_land_where_a_plain_write_would(tmp_path_factory, chunks):
    """Each append, written in whole blocks with the last block's earlier bytes kept, leaves the file
    exactly as plain writes at consecutive offsets would: the data, then the zeros that were there."""
    path = str(tmp_path_factory.mktemp("direct") / "seg")
    size = BLOCK + 40 * BLOCK
    _zero_file(path, size)
    a = _appender(path, BLOCK, size)
    try:
        for c in chunks:
            assert a.write(c)
    finally:
        a.close()
    data = b"".join(chunks)
    with open(path, "rb") as f:
        got = f.read()
    assert len(got) == size  # no write passed the file's end
    assert got == bytes(BLOCK) + data + bytes(size - BLOCK - len(data))
    assert a.end == BLOCK + len(data)


def test_an_append_past_the_limit_writes_nothing(tmp_path):
    path = str(tmp_path / "seg")
    size = BLOCK + 1024  # not a whole number of blocks: the last block cannot be written directly
    _zero_file(path, size)
    a = _appender(path, BLOCK, size)
    try:
        assert a.write(b"x" * 10) is False
        assert a.end == BLOCK  # behind nothing: the caller writes the buffered way
    finally:
        a.close()
    with open(path, "rb") as f:
        assert f.read() == bytes(size)


def test_a_buffer_grown_for_a_big_batch_keeps_the_tail(tmp_path):
    """A batch larger than the buffer grows it (and a huge one gives it back after): the partly
    written last block is carried over either way."""
    path = str(tmp_path / "seg")
    size = 2 << 20
    _zero_file(path, size)
    a = _appender(path, BLOCK, size)
    chunks = [b"a" * 100, b"b" * (1 << 20) + b"c" * 7, b"d" * 5]  # the middle one passes the kept size
    try:
        for c in chunks:
            assert a.write(c)
    finally:
        a.close()
    with open(path, "rb") as f:
        got = f.read()
    data = b"".join(chunks)
    assert got[BLOCK : BLOCK + len(data)] == data and got[BLOCK + len(data) :] == bytes(size - BLOCK - len(data))


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSPC])
def test_a_refused_first_write_gets_false_and_any_other_error_is_raised(tmp_path, monkeypatch, code):
    """EINVAL on the very first write (an alignment this device does not take): False, nothing written,
    the appender still at its start.  Any other error (a full disk) is raised, for the flush to void."""
    path = str(tmp_path / "seg")
    _zero_file(path, 4 * BLOCK)
    a = _appender(path, BLOCK, 4 * BLOCK)

    def fail(*args):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "pwritev", fail)
    try:
        if code == errno.EINVAL:
            assert a.write(b"frame") is False
        else:
            with pytest.raises(OSError) as info:
                a.write(b"frame")
            assert info.value.errno == code
        assert a.end == BLOCK
    finally:
        a.close()


def test_a_start_off_a_block_boundary_is_refused(tmp_path):
    path = str(tmp_path / "seg")
    _zero_file(path, 4 * BLOCK)
    fd = os.open(path, os.O_WRONLY)
    with pytest.raises(ValueError):
        DirectAppender(fd, 100, 4 * BLOCK, 0)
    os.close(fd)


# ---------------------------------------------------------------------- the journal


def _segments(path: str) -> dict[str, bytes]:
    d = os.path.join(path, "shard-0")
    return {f: open(os.path.join(d, f), "rb").read() for f in seg_files(path)}


@pytest.mark.parametrize("zero_fill", [True, False])
def test_direct_and_buffered_journals_write_the_same_bytes(tmp_path, monkeypatch, zero_fill):
    """The same appends, with O_DIRECT and through the page cache: byte-identical segments, rollovers
    included (and a segment size that is not whole blocks, whose last block goes the buffered way), on
    zero-filled segments and on merely allocated ones (whose unwritten blocks read as zeros too)."""
    bodies = [bytes([i % 251]) * (1 + (i * 97) % 700) for i in range(60)]
    out = {}
    for direct in (True, False):
        monkeypatch.setattr(fusee.disk, "DIRECT_IO", direct)
        path = str(tmp_path / f"d{direct}")
        with Journal.open(path, 1, segment_size=seg.HEADER_SIZE + BLOCK + 512, zero_fill=zero_fill) as j:
            used = j._shards[0].direct is not None
            for i in range(0, len(bodies), 3):
                write(j, 0, bodies[i : i + 3])
        if direct and not used:
            pytest.skip("no O_DIRECT on this file system")
        out[direct] = _segments(path)
        with Journal.open(path, 1, segment_size=seg.HEADER_SIZE + BLOCK + 512, zero_fill=zero_fill) as j:
            assert [b for _, b in j.recovered(0)] == bodies
    assert len(out[True]) > 2  # it rolled over
    # both opened and closed alike, so even the fresh segment each open starts matches
    assert out[True] == out[False]


def test_a_disk_that_injects_faults_gets_no_direct_appender(tmp_path):
    """A Disk subclass overriding the write path sees every write: no O_DIRECT behind its back."""
    path = str(tmp_path / "seg")
    _zero_file(path, 4 * BLOCK)
    assert FaultyDisk().direct_appender(path, BLOCK, 4 * BLOCK) is None


def test_direct_io_off_gives_no_appender(tmp_path, monkeypatch):
    path = str(tmp_path / "seg")
    _zero_file(path, 4 * BLOCK)
    monkeypatch.setattr(fusee.disk, "DIRECT_IO", False)
    assert fusee.disk.DISK.direct_appender(path, BLOCK, 4 * BLOCK) is None
    monkeypatch.setattr(fusee.disk, "DIRECT_IO", True)
    monkeypatch.setattr(fusee.disk, "RWF_DSYNC", None)  # a test emulating a slow fdatasync turns this off
    assert fusee.disk.DISK.direct_appender(path, BLOCK, 4 * BLOCK) is None


def test_a_failed_direct_write_voids_its_batch_and_the_next_flush_goes_on(tmp_path, monkeypatch):
    """An EIO from the O_DIRECT write: the batch's waiter gets a StorageError, the next flush starts a
    new segment (written directly again), and a reopen finds exactly the records that were durable."""
    from fusee.errors import StorageError

    path = str(tmp_path / "j")
    with Journal.open(path, 1, segment_size=64 << 10) as j:
        s = j._shards[0]
        if s.direct is None:
            pytest.skip("no O_DIRECT on this file system")
        write(j, 0, [b"one"])
        first = s.direct
        real = os.pwritev
        failing = [True]

        def flaky(fd, buffers, offset, *flags):
            if failing and s.direct is not None and fd == s.direct.fd:
                failing.pop()
                raise OSError(errno.EIO, "Input/output error")
            return real(fd, buffers, offset, *flags)

        monkeypatch.setattr(os, "pwritev", flaky)
        lsn = j.append(0, b"two")
        with pytest.raises(StorageError):
            j.wait_durable(0, lsn, timeout=10)
        assert not failing  # the direct write is what failed
        write(j, 0, [b"three"])
        assert s.direct is not None and s.direct is not first  # a new segment, written directly
    with Journal.open(path, 1, segment_size=64 << 10) as j:
        assert [b for _, b in j.recovered(0)] == [b"one", b"three"]
