"""The child program of tests/fusee/test_objects_crash.py: object calls from outside and from a workflow until
the child is SIGKILLed.

``python tests/fusee/_objects_child.py <dir>``: opens an engine on ``<dir>``, defines object type ``acct``
(:func:`define`), starts run ``p`` of :func:`payer` (30 deposits into key ``w`` through ``ctx.object``),
then deposits ``k`` into key ``main`` with call ID ``c<k>`` for k = 0, 1, ... and prints, after each
acknowledged call::

    ack call c<k> <total>

until it is killed.  A key's run continues as new every :data:`ROLL` calls, so the kill also lands
around those.  The test imports :func:`define`, :func:`payer` and the options.
"""

from __future__ import annotations

import os
import sys
from typing import Any

if __name__ == "__main__":  # run as a script: the repository root is on PYTHONPATH
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fusee  # noqa: E402
from fusee import object_core  # noqa: E402

ENGINE_OPTIONS: dict[str, Any] = {"segment_size": 1 << 20, "shards": 2}
ROLL = 7
DEPOSITS = 30


def deposit(ctx: Any, amount: int) -> int:
    total = ctx.state.get("total", 0) + ctx.step("amount", lambda s: amount)
    ctx.state.set("total", total)
    return total


def define(engine: Any) -> Any:
    object_core.ROLL_AFTER = ROLL
    return engine.object_type("acct").exclusive("deposit", deposit).shared("balance", lambda ctx, _: ctx.state.get("total", 0))


@fusee.workflow("obj.payer")
def payer(ctx: Any, _: Any) -> Any:
    w = ctx.object("acct", "w")
    got = [w.call("deposit", i) for i in range(1, DEPOSITS + 1)]
    got.append(w.call("balance"))
    ctx.wait_for("stop")
    return got


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(path: str) -> int:
    engine = fusee.Engine.open(path, workflows=[payer], **ENGINE_OPTIONS)
    define(engine)
    engine.start(payer, "p", None)
    main_key = engine.object("acct", "main")
    k = 0
    while True:
        v = main_key.call("deposit", k, call_id=f"c{k}")
        say(f"ack call c{k} {v}")
        k += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
