"""A real SIGKILL while a run writes a stream: no chunk a reader took is lost or changed.

The child (``tests/fusee/_stream_child.py``) writes chunks from workflow code, from a step's body, then
from workflow code again; a reader in the same process prints each chunk it reads (a reader gets a
chunk only once it is durable).  The writer waits for the parent's permit (a byte on its stdin) after
each chunk; the parent gives one per chunk printed but the ``k``-th, then SIGKILLs the child: exactly
``k`` chunks were written and read, the kill landing in the first code part, inside the step's body,
or in the last code part.  Reopened here, the stream
begins with every chunk the reader printed, unchanged and in order, the run goes on (a step body run
again resumes after its recorded chunks: ``Stream.resume()``) and completes, and the whole stream is
exactly what an uninterrupted run writes: nothing twice, nothing missing.
"""

from __future__ import annotations

import json
import os
import selectors
import signal as _signal
import subprocess
import sys

import pytest

import fusee
from fusee import records as r

from . import _stream_child as child
from .test_concurrency import REPO

CHILD = os.path.join(REPO, "tests", "fusee", "_stream_child.py")


def _read_chunks(proc: subprocess.Popen, k: int, deadline: float = 30.0) -> list[tuple[int, object]]:
    """The ``k`` chunks the child prints, a permit sent after each but the last (so it writes no more)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
    got: list[tuple[int, object]] = []
    try:
        while len(got) < k:
            assert sel.select(deadline), f"the child printed nothing for {deadline} s after {got}"
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the child ended after {got}; stderr: {proc.stderr.read()!r}"  # type: ignore[union-attr]
            tag, offset, chunk = line.decode().rstrip("\n").split(" ", 2)
            assert tag == "chunk"
            got.append((int(offset), json.loads(chunk)))
            if len(got) < k:
                proc.stdin.write(b"+")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
    finally:
        sel.close()
    return got


@pytest.mark.parametrize("k", [4, 10 + 13, 10 + 30 + 5], ids=["in-code", "in-step", "after-step"])
def test_sigkill_while_streaming_keeps_every_chunk_read(tmp_path, k):
    path = str(tmp_path / "data")
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, CHILD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        read = _read_chunks(proc, k)
    finally:
        proc.send_signal(_signal.SIGKILL)  # the writer waits for a permit after its k-th chunk
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    want = child.expected()
    assert read == list(enumerate(want[:k]))  # the reader got them in order, each once

    with fusee.Engine.open(path, workflows=[child.talker], **child.ENGINE_OPTIONS) as eng:
        # a reader that reconnects at its offset goes on; one from 0 sees the chunks read, unchanged
        rest = list(eng.read_stream("t", "tokens", offset=k, timeout=30))
        whole = list(eng.read_stream("t", "tokens", timeout=30))
        resumed = eng.result("t", timeout=30)
        journal = [rec for _, rec in eng.describe("t")["journal"]]
    assert whole[:k] == [c for _, c in read]
    assert whole == want and rest == want[k:]
    chunks = [rec for rec in journal if type(rec) is r.Chunk]
    assert [c.index for c in chunks] == list(range(len(want)))  # each recorded once, at its index
    assert [c.step for c in chunks] == [None] * child.CODE_BEFORE + ["gen"] * child.STEP + [None] * child.CODE_AFTER
    assert sum(type(rec) is r.StreamClose for rec in journal) == 1
    steps = [rec for rec in journal if type(rec) is r.Step and rec.name == "gen"]
    assert len(steps) == 1
    in_step = k - child.CODE_BEFORE
    if 0 < in_step < child.STEP:  # killed inside the body: run again, it resumed after what was recorded
        assert resumed == in_step
    else:  # the body ran once: in the reopened engine (killed before it) or in the child (killed after it)
        assert resumed == 0
