"""The child program of the SIGKILL tests of tests/fusee/test_concurrency.py and test_delay.py.

``python tests/fusee/_limit_child.py <dir> <n>``: opens an engine on ``<dir>``, starts ``L0 .. L<n-1>``
of :func:`limited` (a limit of 2), printing ``ack start <id>`` after each, then waits to be killed.
Each run prints ``begin <id>`` in its first step and ``durable <id>`` in its second (whose body runs
only once the first's record is durable), then waits for the signal "go".

``python tests/fusee/_limit_child.py <dir> delay <id> <at>``: starts ``<id>`` of :func:`later` due at
unix time ``<at>``, prints ``ack delay <id>``, then waits to be killed.

The test imports :func:`limited`, :func:`later` and :data:`ENGINE_OPTIONS`, and points
:data:`REPORT` at its own reporter (ensemble messages) instead of stdout.
"""

from __future__ import annotations

import os
import sys
from typing import Any

if __name__ == "__main__":  # run as a script: the repository root is on PYTHONPATH
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fusee  # noqa: E402

ENGINE_OPTIONS: dict[str, Any] = {"segment_size": 1 << 20}


def print_line(what: str, id: str) -> None:
    sys.stdout.write(f"{what} {id}\n")
    sys.stdout.flush()


#: Where runs report ``(what, id)``: stdout in the child, the test's process in the test.
REPORT = [print_line]


@fusee.workflow("limited", concurrency=2)
def limited(ctx: Any, inp: dict[str, Any]) -> int:
    id = ctx.workflow_id
    ctx.step("begin", lambda: REPORT[0]("start", id))
    ctx.step("mark", lambda: REPORT[0]("durable", id))
    ctx.wait_for("go")
    ctx.step("end", lambda: REPORT[0]("end", id))
    return inp["n"]


@fusee.workflow("later")
def later(ctx: Any, inp: Any) -> Any:
    ctx.step("ran", lambda: REPORT[0]("ran", ctx.workflow_id))
    return inp


def main(argv: list[str]) -> int:
    path = argv[0]
    engine = fusee.Engine.open(path, workflows=[limited, later], shards=2, **ENGINE_OPTIONS)
    if argv[1] == "delay":
        engine.start(later, argv[2], {"v": argv[2]}, at=float(argv[3]))
        print_line("ack delay", argv[2])
    else:
        for i in range(int(argv[1])):
            engine.start(limited, f"L{i}", {"n": i})
            print_line("ack start", f"L{i}")
    import ensemble

    ensemble.receive(lambda m: ensemble.NOMATCH, timeout=3600)  # wait to be killed
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
