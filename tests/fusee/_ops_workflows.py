"""Workflows the HTTP, CLI and web UI tests share (``fusee serve --workflows tests.fusee._ops_workflows``)."""

from __future__ import annotations

import fusee

go = fusee.signal("go")
FLAKY: dict[str, int] = {}


@fusee.workflow("waiter", version=2)
def waiter(ctx, x):
    """Waits for the signal ``go``, then adds its value to the input in a step; answers the query ``seen``."""
    ctx.on_query("seen", lambda arg: {"x": x, "arg": arg})
    v = ctx.wait_for(go)
    return ctx.step("finish", lambda: x + v)


@fusee.workflow("flaky")
def flaky(ctx, key):
    """A step that fails on its first attempt and succeeds on its second, then a short sleep."""

    def body():
        FLAKY[key] = FLAKY.get(key, 0) + 1
        if FLAKY[key] == 1:
            raise ValueError("first attempt fails")
        return "ok"

    out = ctx.step("shaky", body, retry=fusee.Retry(attempts=3, initial=0.001))
    ctx.sleep("nap", 0.001)
    return out


@fusee.workflow("kid")
def kid(ctx, n):
    return ctx.step("double", lambda: n * 2)


@fusee.workflow("parent")
def parent(ctx, n):
    """A child run, then a continue-as-new once (input 0 -> 1)."""
    got = ctx.child(kid, f"{ctx.workflow_id}/kid", n)
    if n == 0:
        ctx.continue_as_new(1)
    return got


@fusee.workflow("boom")
def boom(ctx, _):
    ctx.step("explode", lambda: (_ for _ in ()).throw(RuntimeError("kaboom")))


ALL = [waiter, flaky, kid, parent, boom]
