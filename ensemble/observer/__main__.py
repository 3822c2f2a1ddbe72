"""``python -m ensemble.observer [--http ADDR] [--demo]``: serve the observer for this node until interrupted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import DEFAULT_HOST, DEFAULT_PORT, BadAddress, format_address, serve


def _demo() -> None:
    """Start a small application (a supervisor with a worker and a nested supervisor) to look at."""
    import ensemble as e
    from ensemble import application, gen_server, supervisor

    class Counter(gen_server.GenServer):
        """A gen_server counting casts."""

        def init(self) -> tuple:
            return ("ok", 0)

        def handle_cast(self, n: int, total: int) -> tuple:
            return ("noreply", total + n)

    def tree() -> e.Pid:
        inner = {"id": "workers", "type": "supervisor", "start": lambda: supervisor.start_link(
            {"strategy": "one_for_all"},
            [{"id": f"worker-{i}", "start": lambda: gen_server.start_link(Counter())} for i in range(2)],
        )}
        return supervisor.start_link(
            {"strategy": "one_for_one"},
            [{"id": "counter", "start": lambda: gen_server.start_link(Counter(), name="counter")}, inner],
            name="demo_sup",
        )

    application.load({"name": "demo", "start": tree})
    application.ensure_all_started("demo")
    e.spawn_actor(lambda total, n: total + n, 0, name="adder", dispatcher="blocking")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, start serving, and wait until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m ensemble.observer", description=__doc__)
    parser.add_argument("--http", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}", metavar="ADDR",
                        help=f"host:port to listen on (default {DEFAULT_HOST}:{DEFAULT_PORT}; port 0: any free one)")
    parser.add_argument("--demo", action="store_true", help="start a small supervised application to look at")
    args = parser.parse_args(argv)
    try:
        server = serve(args.http)
    except BadAddress as err:
        parser.error(str(err))
    except OSError as err:
        print(f"cannot listen on {args.http}: {err}", file=sys.stderr)
        return 1
    if args.demo:
        _demo()
    host, port = server.address[:2]
    print(f"observer: http://{format_address(host, port)}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
