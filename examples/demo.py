"""The whole stack in one run: orders flow through a supervised pipeline into durable workflows.

    python examples/demo.py                  # about 5 s in a temporary directory, then exits
    python examples/demo.py --data DIR       # keep fusee's journal in DIR
    python examples/demo.py --serve          # stay up with both web UIs until Ctrl-C

An ensemble supervisor runs a constellation pipeline: a feeder process takes orders from a
stage and pushes them into a worker pool, whose workers start one fusee workflow per order
(reserve, charge, ship: each step durable in the journal).  fusee's web UI and ensemble's
observer are served on loopback.  One worker crashes on purpose: the pool replaces it, but
the pool is at-most-once (a dead worker's batch is not retried), so the demo re-pushes what
that batch held; starting a workflow under the order's ID attaches to a run that already
exists, so nothing runs twice, and the end checks every accepted order completed.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
import urllib.request

import gevent
import gevent.event

import ensemble as e
import ensemble.observer
import constellation
import fusee
from constellation import worker_pool
from ensemble import supervisor, timer

WAVE, EVERY, CRASH_AT, PROGRESS = 10, 0.05, 42, 100  # orders per wave, seconds between waves
MAIN = e.self()  # this script's main greenlet is a shell process: the pipeline reports to it
crashed = []


@fusee.workflow("order", version=1)
def process_order(ctx, order):
    ctx.step("reserve", lambda: {"sku": order["sku"], "qty": order["qty"]})
    receipt = ctx.step("charge", lambda s: {"amount": order["qty"] * 3, "key": s.key})
    ctx.step("ship", lambda: e.send(MAIN, ("done", order["id"])))
    return {"order": order["id"], "charged": receipt["amount"]}


def handle_batch(engine):
    def handle(slot, orders):
        """A worker's handler: start each order's workflow; crash once, halfway through a batch."""
        e.send(MAIN, ("held", e.self(), orders))  # what this worker holds, in case it dies
        for order in orders:
            if order["n"] == CRASH_AT and not crashed:
                crashed.append(order["id"])
                raise RuntimeError(f"worker crashed on purpose on {order['id']}")
            engine.start(process_order, order["id"], order, id_policy=fusee.IdPolicy.ATTACH)
        e.send(MAIN, ("started", e.self()))
        return slot
    return handle


def feeder(stage, pool):
    """The pipeline's middle: take what the stage releases, push it into the pool, ask again."""
    stage.subscribe("orders", "feeder")
    stage.ask("orders", 4 * WAVE)
    while True:
        _, _, events = e.receive(lambda m: m if m[:2] == ("events", "orders") else e.NOMATCH)
        pool.push(events)
        stage.ask("orders", len(events))


def answers(url):
    """GET ``url`` from an OS thread (urllib blocks; the servers run on this thread's hub)."""
    def get():
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    return gevent.get_hub().threadpool.apply(get)


def main(data: str, seconds: float, serve: bool) -> None:
    engine = fusee.Engine.open(data, workflows=[process_order], http="127.0.0.1:0")
    observer = ensemble.observer.serve("127.0.0.1:0", log=None)
    observer_url = f"http://127.0.0.1:{observer.address[1]}/"
    print(f"fusee UI:          {engine.http_url}  (runs, steps, in {data})")
    print(f"ensemble observer: {observer_url}  (processes, the supervision tree)")
    print(f"both answer: fusee {answers(engine.http_url)}, observer {answers(observer_url)}")
    print("(the crash report below is the logger's, for the worker that crashes on purpose)")

    config = worker_pool.new(size=4, prefetch=WAVE, initial_state=lambda slot: slot,
                             handle_batch=handle_batch(engine))
    stage = constellation.start()
    pool_spec = worker_pool.supervised(config, id="pool")
    pool = pool_spec["pool"]
    sup = supervisor.start({"strategy": "one_for_one"}, [
        pool_spec, {"id": "feeder", "start": lambda: e.spawn_link(feeder, stage, pool)}])

    accepted, done, held = [], set(), {}
    first = len(engine.list())  # with --data DIR of an earlier run: new order IDs after its own
    ticker = timer.send_interval(EVERY, MAIN, "tick")
    deadline = time.monotonic() + seconds
    while len(done) < len(accepted) or time.monotonic() < deadline:
        msg = e.receive(timeout=10)
        match msg:
            case "tick" if time.monotonic() < deadline:
                wave = [{"id": f"order-{first + n:05d}", "n": n, "sku": "tea", "qty": 1 + n % 3}
                        for n in range(len(accepted), len(accepted) + WAVE)]
                accepted += [o["id"] for o in wave]
                stage.push(wave)
            case ("held", worker, orders):
                if worker not in held:
                    e.monitor(worker)  # its death comes as a DOWN message, after what it held
                held[worker] = orders
            case ("started", worker):
                held[worker] = []
            case ("DOWN", _, "process", worker, reason) if held.get(worker):
                lost = held.pop(worker)
                print(f"  a worker crashed ({reason}) holding {len(lost)} orders; the pool replaces it, "
                      "but is at-most-once: re-pushing them")
                stage.push(lost)
            case ("done", order_id) if order_id not in done:
                done.add(order_id)
                if len(done) % PROGRESS == 0:
                    print(f"  {len(done)} workflows done")
            case e.TIMEOUT:
                raise SystemExit(f"stalled: {len(done)} of {len(accepted)} orders done")
    timer.cancel(ticker)

    workers = [worker_pool.worker_id_to_int(w) for w in worker_pool.snapshot(pool).workers]
    completed = {d["id"] for d in engine.list(status="completed")}  # read back from the journal
    assert crashed and completed >= set(accepted), "an accepted order was lost"
    print(f"pool workers now: {workers} (the crashed one was replaced)")
    print(f"{len(accepted)} orders accepted, every one's workflow completed "
          f"({len(completed)} completed runs in the journal), the crash on {crashed[0]} survived")
    if serve:
        stop = gevent.event.Event()
        gevent.signal_handler(signal.SIGINT, stop.set)
        print("serving; Ctrl-C to stop", flush=True)
        stop.wait()
    supervisor.stop(sup)
    stage.stop()
    observer.stop()
    engine.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="fusee's data directory (default: a new temporary one)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long orders keep coming")
    parser.add_argument("--serve", action="store_true", help="stay up after the run, until Ctrl-C")
    args = parser.parse_args()
    main(args.data or tempfile.mkdtemp(prefix="ensemble-demo-"), args.seconds, args.serve)
