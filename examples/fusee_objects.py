"""Virtual objects on fusee: a bank account per key, with exclusive ``deposit`` / ``withdraw`` (one at a time
per account, state committed with the answer), a shared ``balance`` (reads the last commit, never waits),
a workflow paying a salary through ``ctx.object``, a withdrawal re-sent with the same call ID (answered
once, the money leaves once), an outside edit with a version check, and a reopen that keeps it all.

    python examples/fusee_objects.py
"""

from __future__ import annotations

import tempfile

import gevent

import fusee

LEDGER: list[str] = []  # what the "bank's core system" was asked to do (a step's side effect)


def deposit(ctx, amount):
    ctx.state.set("balance", ctx.state.get("balance", 0) + amount)
    return ctx.state.get("balance")


def withdraw(ctx, amount):
    balance = ctx.state.get("balance", 0)
    if ctx.state.get("frozen"):
        raise PermissionError("the account is frozen")
    if amount > balance:
        raise ValueError(f"insufficient funds: {balance} < {amount}")
    ctx.step("payout", lambda s: LEDGER.append(f"pay {amount} (key {s.key})"))  # recorded: not paid twice
    ctx.state.set("balance", balance - amount)
    return balance - amount


def balance(ctx, _):
    return ctx.state.get("balance", 0)


def define(engine: fusee.Engine) -> None:
    engine.object_type("account").exclusive("deposit", deposit).exclusive("withdraw", withdraw).shared("balance", balance)


@fusee.workflow("payday")
def payday(ctx, pay):
    account = ctx.object("account", pay["to"])  # each call: a step of this run, recorded and replayed
    account.call("deposit", pay["amount"])
    return account.call("balance")


def main() -> None:
    with tempfile.TemporaryDirectory() as path:
        engine = fusee.Engine.open(path, workflows=[payday])
        define(engine)
        alice = engine.object("account", "alice")

        # ten deposits at once: they take turns on the key, none is lost
        calls = [gevent.spawn(alice.call, "deposit", 10) for _ in range(10)]
        gevent.joinall(calls, raise_error=True)
        print("after 10 concurrent deposits of 10:", alice.call("balance"))

        print("payday workflow result:", engine.start(payday, "pay-1", {"to": "alice", "amount": 1000}).result(timeout=30))

        # a withdrawal whose answer got lost on the way is sent again with the same call ID
        first = alice.call("withdraw", 300, call_id="atm-7")
        again = alice.call("withdraw", 300, call_id="atm-7")
        print(f"withdraw 300 as atm-7 twice: {first}, {again}; paid out {len(LEDGER)} time(s)")

        try:
            alice.call("withdraw", 10_000)
        except fusee.CallFailed as exc:
            print("withdraw 10000 refused:", exc.failure["message"], "- balance still", alice.call("balance"))

        # an operator freezes the account from outside, with the version they saw
        seen = alice.state()
        print("state:", seen.values, "version", seen.version)
        print("frozen at version", alice.set("frozen", True, version=seen.version))
        try:
            alice.set("frozen", False, version=seen.version)  # someone else's stale view
        except fusee.VersionMismatch as exc:
            print(f"stale edit refused: expected version {exc.expected}, the state is at {exc.actual}")
        try:
            alice.call("withdraw", 5)
        except fusee.CallFailed as exc:
            print("withdraw while frozen:", exc.failure["message"])
        engine.shutdown()

        with fusee.Engine.open(path, workflows=[payday]) as engine:  # the state outlives the process
            define(engine)
            alice = engine.object("account", "alice")
            print("after reopen:", alice.state())
            print("unfrozen at version", alice.clear("frozen"), "- withdraw 50 leaves", alice.call("withdraw", 50))


if __name__ == "__main__":
    main()
