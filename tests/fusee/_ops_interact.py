"""Workflows the HTTP and web UI tests of updates, streams, async completions and pause share
(``fusee serve --workflows tests.fusee._ops_workflows --workflows tests.fusee._ops_interact``)."""

from __future__ import annotations

from typing import Any

import fusee

go = fusee.signal("go")
TOKENS: dict[str, str] = {}  # the async step's token of each "external" run, by its input


@fusee.workflow("chat")
def chat(ctx: Any, words: list[str]) -> Any:
    """Streams ``words`` to ``tokens`` (the first from workflow code, the rest from the body of the step
    ``generate``), answers the update ``add`` (the running total; its validator refuses ``null``, its
    handler fails on anything but an int) until the signal ``go``, then closes the stream.  The update
    ``slow`` is answered an hour later at the earliest (its step's first attempt fails, the retry waits)."""
    total = {"n": 0}

    def add(v: Any) -> int:
        if type(v) is not int:
            raise ValueError(f"add takes an int, not {v!r}")
        total["n"] += v
        return total["n"]

    def check(v: Any) -> None:
        if v is None:
            raise ValueError("no value to add")

    ctx.on_update("add", add, validator=check)
    ctx.on_update("slow", lambda v: ctx.step("later", _fragile, retry=fusee.Retry(attempts=2, initial="1h")))
    out = ctx.stream("tokens")
    out.write(words[0])

    def generate(s: Any) -> int:
        rest = words[1:]
        for w in rest[out.resume():]:
            out.write(w)
        return len(rest)

    ctx.step("generate", generate)
    ctx.wait_for(go)
    out.close()
    return total["n"]


def _fragile(s: Any) -> int:
    if s.attempt == 1:
        raise RuntimeError("the service is down")
    return s.attempt


@fusee.workflow("stuck")
def stuck(ctx: Any, _: Any) -> Any:
    """A step that fails its one attempt: with ``on_exhausted="pause"`` the run pauses; resumed, it succeeds."""
    return ctx.step("fragile", _fragile, retry=fusee.Retry(attempts=1))


@fusee.workflow("external")
def external(ctx: Any, key: str) -> Any:
    """An async step an outside system settles: its token is kept in :data:`TOKENS` under ``key``."""
    return ctx.step_async("vendor", lambda token: TOKENS.__setitem__(key, token))


ALL = [chat, stuck, external]
