"""A small supervised application: a tree with a crashing worker that is restarted.

    python examples/supervised.py

The application ``"shop"`` starts a supervision tree::

    shop_sup (one_for_one)
    ├── "orders"  a gen_server counting orders
    └── "payments" a worker that crashes on every third payment

Each crash is printed as the supervisor reports it, then the restarted
worker carries on; the order count, held by a sibling, is not disturbed.
"""

from __future__ import annotations

import ensemble as e
from ensemble import NOMATCH, application, gen_server, supervisor


class Orders(gen_server.GenServer):
    """Counts orders (the sibling that must not be disturbed by the crashes)."""

    def init(self):
        return ("ok", 0)

    def handle_call(self, request, from_, n):
        match request:
            case "place":
                return ("reply", n + 1, n + 1)
            case "count":
                return ("reply", n, n)


def payments(reporter):
    """Take payments; the third one in a row is 'declined' and crashes the worker."""
    e.register("payments", e.self())
    e.send(reporter, ("started", e.self()))
    taken = 0
    while True:
        amount = e.receive()
        taken += 1
        if taken == 3:
            raise RuntimeError(f"card declined for {amount}")
        e.send(reporter, ("paid", amount))


def print_supervisor_reports(report):
    """A logger handler: print supervisor reports as one line each, drop the rest."""
    if report["kind"] == "supervisor_report":
        child = report["child"]
        print(f"  [supervisor] {report['context']}: child {child['id']!r} "
              f"ended with {report['reason']!r}; restarting it")


def main() -> None:
    print("ensemble supervised application: a tree with a crashing worker")
    me = e.self()
    previous = e.logger.set_handler(print_supervisor_reports)
    try:
        application.load({
            "name": "shop",
            "start": lambda: supervisor.start_link(
                {"strategy": "one_for_one", "intensity": 5, "period": 10},
                [
                    {"id": "orders", "start": lambda: gen_server.start_link(Orders(), name="orders")},
                    {"id": "payments", "start": lambda: e.spawn_link(payments, me)},
                ],
                name="shop_sup",
            ),
        })
        application.start("shop")
        print(f"  running applications: {application.which_applications()}")

        def started():
            return e.receive(lambda m: m[1] if m[0] == "started" else NOMATCH, timeout=5)

        worker = started()
        for amount in range(1, 8):
            gen_server.call("orders", "place")
            e.send("payments", amount)
            if amount % 3 == 0:  # the third payment crashes the worker: wait for its successor
                new = started()
                print(f"  payments worker {worker} was replaced by {new}")
                worker = new
            else:
                paid = e.receive(lambda m: m[1] if m[0] == "paid" else NOMATCH, timeout=5)
                print(f"  paid {paid}")
        print(f"  orders placed, counted by the undisturbed sibling: {gen_server.call('orders', 'count')}")
        print(f"  children: {[(c[0], c[1]) for c in supervisor.which_children('shop_sup')]}")
        application.stop("shop")
        print(f"  after stop: {application.which_applications()}")
    finally:
        e.logger.set_handler(previous)


if __name__ == "__main__":
    main()
