"""The child program of tests/fusee/test_stream_crash.py: a run writes stream chunks (from workflow code,
then from a step's body, then from workflow code again) in lockstep with the parent, until the parent
SIGKILLs it.

``python tests/fusee/_stream_child.py <dir>``: opens an engine on ``<dir>``, starts ``t`` of :func:`talker`
and reads its stream ``tokens`` with ``engine.read_stream`` (a reader gets a chunk only once it is
durable), printing a line per chunk read::

    chunk <offset> <chunk as JSON>

The writer, having written a chunk, waits for a permit (a byte ``+`` on its stdin, :data:`GATE`) before
the next one: a cooperative wait on the shard's own hub, so the journal's flusher goes on meanwhile.
The parent sends a permit for each line it reads but the ``k``-th, so at the kill the run has written
exactly ``k`` chunks, all of them read, and waits for the next permit: the parent chooses where the
kill lands (in the first code part, inside the step's body, in the last code part) by ``k``.  The test
imports :func:`talker` (no gate there: reopened, the run goes on at full speed).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

if __name__ == "__main__":  # run as a script: the repository root is on PYTHONPATH
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fusee  # noqa: E402

ENGINE_OPTIONS: dict[str, Any] = {"segment_size": 1 << 20, "shards": 2}
CODE_BEFORE, STEP, CODE_AFTER = 10, 30, 10  # chunks written by each part, in this order
GATE: dict[str, int] = {}  # "fd": where the permits come from (the child's stdin; only in the child)


def expected() -> list[Any]:
    """Every chunk of the stream, in order, as a complete run writes it."""
    return ([{"by": "code", "i": i} for i in range(CODE_BEFORE)]
            + [{"by": "step", "i": i} for i in range(STEP)]
            + [{"by": "code", "i": CODE_BEFORE + i} for i in range(CODE_AFTER)])


def _permit() -> None:
    """In the child: wait (cooperatively, on this hub) for the parent's permit to write the next chunk."""
    fd = GATE.get("fd")
    if fd is None:
        return
    from gevent.socket import wait_read

    wait_read(fd)
    got = os.read(fd, 1)
    if got != b"+":  # the parent is gone (EOF): stop here
        os._exit(3)


@fusee.workflow("crash.stream")
def talker(ctx: Any, _: Any) -> Any:
    """Writes :func:`expected`'s chunks; returns where the step's last body run resumed (``Stream.resume()``:
    the chunks its earlier runs recorded)."""
    out = ctx.stream("tokens")
    for i in range(CODE_BEFORE):
        out.write({"by": "code", "i": i})
        _permit()

    def gen(s: Any) -> int:
        start = out.resume()  # a body run again goes on after the chunks recorded before
        for i in range(start, STEP):
            out.write({"by": "step", "i": i})
            _permit()
        return start

    resumed = ctx.step("gen", gen)
    for i in range(CODE_AFTER):
        out.write({"by": "code", "i": CODE_BEFORE + i})
        _permit()
    out.close()
    return resumed


def main(path: str) -> int:
    fd = sys.stdin.fileno()
    os.set_blocking(fd, False)
    GATE["fd"] = fd
    engine = fusee.Engine.open(path, workflows=[talker], **ENGINE_OPTIONS)
    engine.start(talker, "t", None)
    for offset, chunk in enumerate(engine.read_stream("t", "tokens", timeout=30)):
        sys.stdout.write(f"chunk {offset} {json.dumps(chunk, sort_keys=True)}\n")
        sys.stdout.flush()
    sys.stdout.write("done\n")
    sys.stdout.flush()
    engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
