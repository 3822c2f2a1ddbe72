"""The smallest push-driven worker pool (constellation's ``examples/worker_pool``).

    python examples/worker_pool.py

Four workers, each asking for up to 8 events at a time, count the events of
every batch they handle; eight events are pushed, then the pool is stopped,
which drains everything it accepted before it answers.  Prints
``processed 8 events``.
"""

from __future__ import annotations

import ensemble as e
from constellation import worker_pool


def main() -> None:
    me = e.self()

    def handle_batch(processed: int, events: tuple) -> int:
        e.send(me, ("processed", len(events)))  # tell main how many this batch held
        return processed + len(events)

    config = worker_pool.new(size=4, prefetch=8, initial_state=lambda slot: 0, handle_batch=handle_batch)
    pool = worker_pool.start(config)
    worker_pool.push(pool, [1, 2, 3, 4, 5, 6, 7, 8])
    worker_pool.stop(pool)  # answers once every accepted event was handled

    processed = 0
    while (msg := e.receive(timeout=0)) is not e.TIMEOUT:
        processed += msg[1]
    print(f"processed {processed} events")


if __name__ == "__main__":
    main()
