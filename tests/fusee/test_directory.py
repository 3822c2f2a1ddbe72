"""fusee's data directory: one engine at a time (the lock), the recorded layout (the manifest), and
external damage (truncated, emptied or deleted segments, a deleted HEAD or checkpoint) never silent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, strategies as st

import fusee
from fusee import Corrupt, Locked, WrongLayout
from fusee import directory as d
from fusee import segment as seg

from ._kit import SEG

SHARDS = 2


@fusee.workflow("dir.echo")
def echo(ctx, x):
    return ctx.step("twice", lambda: x * 2)


def _open(path, **opts):
    opts.setdefault("segment_size", SEG)
    return fusee.Engine.open(path, [echo], **opts)


def _fill(path, n=6, **opts):
    """A directory holding ``n`` completed runs; their results."""
    with _open(path, shards=SHARDS, **opts) as eng:
        return {f"r{i}": eng.execute(echo, f"r{i}", i, timeout=10) for i in range(n)}


def _snapshot(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = fh.read()
    return out


# -- 1. one engine per directory ------------------------------------------------------------


def test_a_second_open_in_this_process_is_locked_and_changes_nothing(tmp_path):
    path = str(tmp_path / "data")
    with _open(path, shards=SHARDS) as eng:
        eng.execute(echo, "a", 1, timeout=10)
        before = _snapshot(path)
        with pytest.raises(Locked) as info:
            _open(path)
        assert info.value.code == "locked" and info.value.pid == os.getpid()
        assert str(os.getpid()) in str(info.value)
        assert _snapshot(path) == before
        assert eng.execute(echo, "b", 2, timeout=10) == 4  # the holder goes on
    with _open(path) as eng:  # released by shutdown
        assert eng.result("a", timeout=10) == 2


def test_a_second_open_from_another_process_is_locked(tmp_path):
    path = str(tmp_path / "data")
    with _open(path, shards=SHARDS):
        code = textwrap.dedent(
            f"""
            import fusee, sys
            try:
                fusee.Engine.open({path!r})
            except fusee.Locked as e:
                print(e.code, e.pid)
                sys.exit(0)
            sys.exit(1)
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.split()) == (0, ["locked", str(os.getpid())]), out.stderr


def test_a_killed_engine_leaves_no_stale_lock(tmp_path):
    path = str(tmp_path / "data")
    code = textwrap.dedent(
        f"""
        import os, fusee
        eng = fusee.Engine.open({path!r}, shards=1, segment_size={SEG})
        print("open", flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "open" and out.returncode == -9
    with _open(path) as eng:
        assert eng.shards == 1


def test_abandon_releases_the_lock_as_a_crash_does(tmp_path):
    from fusee.testing import TestEngine

    path = str(tmp_path / "data")
    t = TestEngine([echo], path=path)
    try:
        t.crash()
        t.reopen()  # would be Locked if the crash kept the lock
    finally:
        t.close()


def test_a_path_that_is_a_file_says_so(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(NotADirectoryError) as info:
        _open(str(f))
    assert "is a file" in str(info.value) and str(f) in str(info.value)
    assert f.read_text() == "x"


# -- 2. the layout is recorded ---------------------------------------------------------------


def test_the_manifest_records_the_layout_and_none_uses_it(tmp_path):
    path = str(tmp_path / "data")
    results = _fill(path)
    with open(os.path.join(path, d.MANIFEST_NAME), "rb") as fh:
        assert d.decode_manifest(fh.read()) == d.Manifest(d.FORMAT, SHARDS, SEG)
    with fusee.Engine.open(path, [echo]) as eng:  # shards=None, segment_size=None: the recorded ones
        assert eng.shards == SHARDS
        assert {k: eng.result(k, timeout=10) for k in results} == results


@pytest.mark.parametrize("opts", [{"shards": 3}, {"shards": 1}, {"segment_size": SEG * 2}])
def test_another_explicit_layout_is_refused_and_hides_nothing(tmp_path, opts):
    path = str(tmp_path / "data")
    results = _fill(path)
    before = _snapshot(path)
    with pytest.raises(WrongLayout) as info:
        fusee.Engine.open(path, [echo], **opts)
    assert info.value.code == "wrong_layout"
    assert f"{next(iter(opts))}=" in str(info.value)
    assert _snapshot(path) == before
    with fusee.Engine.open(path, [echo]) as eng:
        assert {k: eng.result(k, timeout=10) for k in results} == results


def test_a_damaged_manifest_is_corrupt(tmp_path):
    path = str(tmp_path / "data")
    _fill(path)
    p = os.path.join(path, d.MANIFEST_NAME)
    with open(p, "r+b") as fh:
        fh.seek(12)
        fh.write(b"9")
    with pytest.raises(Corrupt) as info:
        fusee.Engine.open(path, [echo])
    assert info.value.path == p and "checksum" in str(info.value)


def test_a_deleted_manifest_is_corrupt_not_a_new_layout(tmp_path):
    path = str(tmp_path / "data")
    _fill(path)
    os.unlink(os.path.join(path, d.MANIFEST_NAME))
    with pytest.raises(Corrupt) as info:
        fusee.Engine.open(path, [echo], shards=3)
    assert "manifest is missing" in str(info.value)


def test_a_manifest_of_an_unknown_format_says_what_to_do(tmp_path):
    path = str(tmp_path / "data")
    _fill(path)
    with open(os.path.join(path, d.MANIFEST_NAME), "wb") as fh:
        fh.write(d.encode_manifest(d.Manifest(99, SHARDS, SEG)))
    with pytest.raises(WrongLayout) as info:
        fusee.Engine.open(path, [echo])
    assert "format 99" in str(info.value) and "open it with the fusee that wrote it" in str(info.value)


def _make_format_2(path, results):
    """Turn a directory into what fusee wrote before format 3: no manifest, no HEAD, format-2 headers."""
    os.unlink(os.path.join(path, d.MANIFEST_NAME))
    for shard in range(SHARDS):
        sd = os.path.join(path, f"shard-{shard}")
        os.unlink(os.path.join(sd, d.HEAD_NAME))
        for f in os.listdir(sd):
            if f.endswith(".seg"):
                p = os.path.join(sd, f)
                with open(p, "r+b") as fh:
                    h = seg.decode_header(fh.read(seg.HEADER_SIZE))
                    fh.seek(0)
                    fh.write(seg.encode_header(seg.Header(h.shard, h.base_lsn, h.number, version=2)))


def test_a_format_2_directory_opens_and_is_brought_to_format_3(tmp_path):
    path = str(tmp_path / "data")
    results = _fill(path, checkpoint_on_shutdown=False)
    _make_format_2(path, results)
    with fusee.Engine.open(path, [echo]) as eng:  # the shard count comes from the shard directories
        assert eng.shards == SHARDS
        assert {k: eng.result(k, timeout=10) for k in results} == results
    with open(os.path.join(path, d.MANIFEST_NAME), "rb") as fh:
        assert d.decode_manifest(fh.read()).shards == SHARDS
    with fusee.Engine.open(path, [echo]) as eng:
        assert {k: eng.result(k, timeout=10) for k in results} == results


@given(st.integers(1, 64), st.integers(1, 1 << 40), st.integers(1, 1 << 40), st.booleans())
def test_manifest_and_head_round_trip(shards, size, n, exists):
    m = d.Manifest(d.FORMAT, shards, size)
    h = d.Head(n, size, exists)
    assert (d.decode_manifest(d.encode_manifest(m)), d.decode_head(d.encode_head(h))) == (m, h)


@given(st.binary(max_size=80), st.data())
def test_damaged_manifest_or_head_bytes_raise_value_error(junk, data):
    """Any byte changed, cut or added is refused (ValueError), never misread."""
    for good, decode in ((d.encode_manifest(d.Manifest(3, 4, 1 << 24)), d.decode_manifest), (d.encode_head(d.Head(7, 99, True)), d.decode_head)):
        i = data.draw(st.integers(0, len(good) - 1))
        flipped = good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255))]) + good[i + 1 :]
        for bad in (flipped, good[:i], good + junk[:1] if junk else good + b"x"):
            with pytest.raises(ValueError):
                decode(bad)


# -- 3. external damage is never silent ------------------------------------------------------


def _segments(path, shard):
    sd = os.path.join(path, f"shard-{shard}")
    return sorted((f for f in os.listdir(sd) if f.endswith(".seg")), key=lambda f: int(f[:-4]))


def _with_records(path, shard):
    """Segment paths of ``shard`` that hold frames."""
    out = []
    for f in _segments(path, shard):
        p = os.path.join(path, f"shard-{shard}", f)
        with open(p, "rb") as fh:
            if seg.scan(fh.read(), p).frames:
                out.append(p)
    return out


def _unclean(tmp_path):
    """A directory left without checkpoints, with two segments per shard holding records (two opens)."""
    path = str(tmp_path / "data")
    results = _fill(path, n=4, checkpoint_on_shutdown=False)
    with _open(path, checkpoint_on_shutdown=False) as eng:
        results.update({f"s{i}": eng.execute(echo, f"s{i}", i, timeout=10) for i in range(4)})
    return path, results


def test_deleting_any_segment_is_corrupt_naming_the_file(tmp_path):
    """Each segment of each shard deleted in turn (first, middle, last, empty or not): the open either
    gives every acknowledged result (a segment without a record) or raises Corrupt naming a file of that
    shard and what is missing."""
    import shutil

    path, results = _unclean(tmp_path)
    with _open(path, checkpoint_on_shutdown=False) as eng:  # a third segment per shard
        results.update({f"t{i}": eng.execute(echo, f"t{i}", i, timeout=10) for i in range(4)})
    tried = corrupt = 0
    for shard in range(SHARDS):
        holding = set(_with_records(path, shard))
        for f in _segments(path, shard):
            copy = str(tmp_path / f"del{tried}")
            shutil.copytree(path, copy)
            os.unlink(os.path.join(copy, d.LOCK_NAME))
            os.unlink(os.path.join(copy, f"shard-{shard}", f))
            tried += 1
            try:
                eng = _open(copy)
            except Corrupt as e:
                corrupt += 1
                assert e.path.startswith(os.path.join(copy, f"shard-{shard}")) and "missing" in str(e), e
                continue
            assert os.path.join(path, f"shard-{shard}", f) not in holding, f"{f} held records, yet it opened"
            with eng:
                assert {k: eng.result(k, timeout=10) for k in results} == results
    assert tried >= 6 and corrupt >= 6


def test_a_deleted_newest_segment_is_corrupt_even_when_it_is_the_only_one(tmp_path):
    """Today's silent case: the one segment holding every record is deleted (HEAD names it)."""
    path = str(tmp_path / "data")
    _fill(path, n=3, checkpoint_on_shutdown=False)
    sd = os.path.join(path, "shard-0")
    for f in _segments(path, 0):
        os.unlink(os.path.join(sd, f))
    with pytest.raises(Corrupt) as info:
        _open(path)
    assert "missing" in str(info.value) and info.value.path.startswith(sd)


def test_an_emptied_segment_is_corrupt(tmp_path):
    path, _ = _unclean(tmp_path)
    victim = _with_records(path, 1)[-1]
    os.truncate(victim, 0)
    with pytest.raises(Corrupt) as info:
        _open(path)
    assert info.value.path == victim and "empty" in str(info.value)


def test_a_deleted_head_is_corrupt(tmp_path):
    path, _ = _unclean(tmp_path)
    p = os.path.join(path, "shard-0", d.HEAD_NAME)
    os.unlink(p)
    with pytest.raises(Corrupt) as info:
        _open(path)
    assert info.value.path == p and "HEAD is missing" in str(info.value)


def test_deleted_checkpoints_after_a_clean_shutdown_are_corrupt(tmp_path):
    """A clean shutdown deletes the segments its checkpoints hold: losing the checkpoints too is seen."""
    path = str(tmp_path / "data")
    _fill(path)
    sd = os.path.join(path, "shard-0")
    assert _segments(path, 0) == []
    for f in os.listdir(sd):
        if f.endswith(".ckpt"):
            os.unlink(os.path.join(sd, f))
    with pytest.raises(Corrupt) as info:
        _open(path)
    assert "checkpoint" in str(info.value)


def test_a_spare_or_half_made_segment_past_head_goes_and_nothing_is_lost(tmp_path):
    """A segment past HEAD (a crash while making it) never held an acknowledged record: it is deleted."""
    path, results = _unclean(tmp_path)
    sd = os.path.join(path, "shard-0")
    last = max(int(f[:-4]) for f in _segments(path, 0))
    for n, data in ((last + 1, b""), (last + 2, b"\1" * 100)):
        with open(os.path.join(sd, f"{n}.seg"), "wb") as fh:
            fh.write(data)
    with _open(path) as eng:
        assert {k: eng.result(k, timeout=10) for k in results} == results
    assert f"{last + 1}.seg" not in _segments(path, 0) and f"{last + 2}.seg" not in _segments(path, 0)


def test_any_truncation_of_any_segment_opens_intact_or_is_corrupt(tmp_path):
    """Every segment of every shard, cut at many offsets: each open either refuses with Corrupt naming the
    file, or gives every acknowledged result."""
    import random
    import shutil

    path, results = _unclean(tmp_path)
    rng = random.Random(7)
    tried = 0
    for shard in range(SHARDS):
        for f in _segments(path, shard):
            size = os.path.getsize(os.path.join(path, f"shard-{shard}", f))
            for cut in sorted({0, 1, seg.HEADER_SIZE, size - 1, *rng.sample(range(seg.HEADER_SIZE, size), 3)}):
                copy = str(tmp_path / f"c{tried}")
                shutil.copytree(path, copy)
                os.unlink(os.path.join(copy, d.LOCK_NAME))
                victim = os.path.join(copy, f"shard-{shard}", f)
                os.truncate(victim, cut)
                tried += 1
                try:
                    eng = _open(copy)
                except Corrupt as e:
                    assert e.path == victim, (f, cut, e)
                    continue
                with eng:
                    assert {k: eng.result(k, timeout=10) for k in results} == results, (f, cut)
    assert tried >= 20
