"""The child program of tests/fusee/test_interact_crash.py: a run paused, resumed, an async step settled,
then updates applied one after another until the child is SIGKILLed.

``python tests/fusee/_interact_child.py <dir>``: opens an engine (``on_exhausted="pause"``) on ``<dir>``,
starts ``i`` of :func:`inter`, and prints a line after each acknowledged action:

    ack resume                   engine.resume returned
    ack complete                 engine.complete returned
    ack update <uid> <result>    engine.update returned <result> for update ID <uid>

then goes on with updates ``u0, u1, ...`` until it is killed.  The test imports :func:`inter`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

if __name__ == "__main__":  # run as a script: the repository root is on PYTHONPATH
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fusee  # noqa: E402

ENGINE_OPTIONS: dict[str, Any] = {"segment_size": 1 << 20, "on_exhausted": "pause", "shards": 2}
TOKEN: dict[str, str] = {}


def _flaky(s: Any) -> int:
    if s.attempt == 1:
        raise RuntimeError("first attempt fails")
    return s.attempt


@fusee.workflow("interact")
def inter(ctx: Any, _: Any) -> Any:
    total = {"n": 0}

    def add(v: int) -> int:
        total["n"] += ctx.step("add", lambda: v)
        return total["n"]

    ctx.on_update("add", add)
    ctx.step("flaky", _flaky)
    got = ctx.step_async("ext", lambda token: TOKEN.__setitem__("t", token))
    ctx.wait_for("stop")
    return [total["n"], got]


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(path: str) -> int:
    from fusee.testing import wait_until

    engine = fusee.Engine.open(path, workflows=[inter], **ENGINE_OPTIONS)
    engine.start(inter, "i", None)
    wait_until(lambda: engine.describe("i")["status"] == "paused", 30)
    engine.resume("i")
    say("ack resume")
    wait_until(lambda: "t" in TOKEN, 30)
    engine.complete(TOKEN["t"], 1000)
    say("ack complete")
    k = 0
    while True:
        v = engine.update("i", "add", k, update_id=f"u{k}")
        say(f"ack update u{k} {v}")
        k += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
