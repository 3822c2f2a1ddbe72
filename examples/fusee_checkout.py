"""A checkout workflow on fusee: durable steps, a retried payment, a human review with a timeout.

The run finishes, the engine is closed and opened again on the same directory: the
result is read back from the journal and nothing is charged again.  Kill it during the
review wait and run it again with the same DIR: the run resumes where it was.

    python examples/fusee_checkout.py            # a fresh temporary directory
    python examples/fusee_checkout.py DIR        # keep the journal in DIR
"""

from __future__ import annotations

import sys
import tempfile

import fusee

CHARGES: list[str] = []  # what the "payment provider" saw, by idempotency key
review = fusee.signal("review")


def charge(s, amount):
    CHARGES.append(s.key)
    if s.attempt < 2:
        raise ConnectionError("the provider timed out")  # retried after a recorded backoff
    return {"charged": amount, "key": s.key}


@fusee.workflow("checkout", version=1)
def checkout(ctx, order):
    ctx.on_query("status", lambda _: {"order": order["id"], "charged": bool(CHARGES)})
    total = ctx.step("price", lambda: sum(i["price"] * i["qty"] for i in order["items"]), read_only=True)
    receipt = ctx.step(
        "charge", lambda s: charge(s, total), retry=fusee.Retry(attempts=3, initial="10ms", factor=2, maximum="1s")
    )
    try:
        approved = ctx.wait_for(review, timeout="200ms")  # None when nobody answers in time
        if approved is False:
            ctx.step("refund", lambda s: {"refunded": total, "key": s.key})
            return {"status": "refused", "total": total}
        ctx.sleep("settle", "10ms")
        return {"status": "shipped", "total": total, "receipt": receipt, "reviewed": approved is not None}
    except fusee.Cancelled:
        ctx.step("refund", lambda s: {"refunded": total, "key": s.key})
        raise


def main(path: str) -> None:
    order = {"id": "o-1", "items": [{"sku": "tea", "price": 4, "qty": 3}, {"sku": "cup", "price": 9, "qty": 1}]}
    with fusee.Engine.open(path, workflows=[checkout], shards=2, segment_size=1 << 20) as engine:
        run = engine.start(checkout, "order-1", order, id_policy=fusee.IdPolicy.ATTACH)
        print("status query:", engine.query("order-1", "status"))
        engine.signal("order-1", review, True)
        print("result:", run.result(timeout=10))
        d = engine.describe("order-1")
        print("journal:", ", ".join(type(rec).__name__ for _, rec in d["journal"]))
        print("charge attempts seen by the provider:", len(CHARGES))
    # Reopen: the run is finished, its result is read back from the journal; nothing runs again.
    CHARGES.clear()
    with fusee.Engine.open(path, workflows=[checkout], shards=2, segment_size=1 << 20) as engine:
        print("after reopen:", engine.result("order-1"), "- charges made again:", len(CHARGES))
    with fusee.Engine.open(None, workflows=[checkout]) as engine:  # the same code, nothing on disk
        print("in memory:", engine.execute(checkout, "order-2", order)["status"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="fusee-checkout-"))
