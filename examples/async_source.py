"""A pool fed by an asynchronous source that supplies one grant in two parts
(constellation's ``examples/async_source``).

    python examples/async_source.py

The pool (2 workers, prefetch 4) grants its source the 8 events of capacity
nobody holds yet.  The source supplies them by offset: 2 events at offset 0
(``Accepted(next_offset=2, remaining=6)``), then 6 at offset 2
(``Accepted(next_offset=8, remaining=0)``).  The source callback runs in a
notifier process of its own; here it just forwards each event to main.
Prints ``source delivered 8 events``.
"""

from __future__ import annotations

import ensemble as e
from constellation import source, worker_pool


def main() -> None:
    me = e.self()

    def handle_event(total: int, event: int) -> int:
        e.send(me, ("handled", event))
        return total + event

    config = worker_pool.each(size=2, prefetch=4, initial_state=lambda slot: 0, handle_event=handle_event)
    pool, attached = worker_pool.start_with_source(config, lambda event: e.send(me, ("source", event)))

    granted = e.receive(lambda m: m[1] if m[0] == "source" else e.NOMATCH, timeout=1)
    assert type(granted) is source.DemandGranted, granted
    grant = granted.grant
    print(f"granted {source.grant_amount(grant)} events")

    print(source.supply(attached, grant, 0, [1, 2]))
    print(source.supply(attached, grant, 2, [3, 4, 5, 6, 7, 8]))
    worker_pool.stop(pool)  # revokes what is left of the grants, drains, then answers

    delivered = 0
    while e.receive(lambda m: m if m[0] == "handled" else e.NOMATCH, timeout=0) is not e.TIMEOUT:
        delivered += 1
    print(f"source delivered {delivered} events")


if __name__ == "__main__":
    main()
