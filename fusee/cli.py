"""The ``fusee`` command: inspect a data directory, check it, measure the disk, serve an engine.

::

    fusee runs ls DIR [--status S] [--type T] [--limit N] [--internal] [--json]
    fusee runs show DIR ID [--json] [--journal]
    fusee verify DIR [--progress | --no-progress] [--json]
    fusee disk-check [DIR] [--count N] [--json]
    fusee serve DIR --workflows MODULE [--workflows MODULE ...] [--http ADDR] [--shards N] [--insecure]

``runs`` and ``verify`` read the directory without opening an engine (:mod:`fusee.inspection`), so
they work while an engine holds it, and say so on stderr (with its HTTP address).  Exit codes: 0
fine, 1 damage found or the thing asked for is not there, 2 bad usage.  ``serve`` reads its bearer
token from the environment variable ``FUSEE_HTTP_TOKEN`` (if set) and stops on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Sequence

from . import cli_text as text
from . import http_api as api
from . import inspection
from .errors import Corrupt, Error, NotFound
from .timeline import view

__all__ = ["main"]

TOKEN_ENV = "FUSEE_HTTP_TOKEN"
BAR_FROM = 64 << 20  # a progress bar for directories of at least this many bytes (on a tty)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fusee", description="Inspect and serve fusee data directories.")
    sub = p.add_subparsers(dest="command", required=True)

    runs = sub.add_parser("runs", help="the runs in a data directory (read-only)")
    rsub = runs.add_subparsers(dest="runs_command", required=True)
    ls = rsub.add_parser("ls", help="list runs, newest first")
    ls.add_argument("dir")
    ls.add_argument("--status", choices=api.LIST_STATUSES[:7])
    ls.add_argument("--type", dest="wtype", metavar="TYPE")
    ls.add_argument("--limit", type=int, default=None, help="at most this many (default: all)")
    ls.add_argument("--internal", action="store_true", help="fusee's own fusee.* runs too")
    ls.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    show = rsub.add_parser("show", help="one run and its timeline")
    show.add_argument("dir")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    show.add_argument("--journal", action="store_true", help="with --json: the raw records too")

    v = sub.add_parser("verify", help="check every segment and checkpoint; exit 1 on damage")
    v.add_argument("dir")
    bar = v.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None, help="show a progress bar on stderr")
    bar.add_argument("--no-progress", dest="progress", action="store_false")
    v.add_argument("--json", action="store_true")

    d = sub.add_parser("disk-check", help="the disk's fdatasync floor and what it means for step latency")
    d.add_argument("dir", nargs="?", default=".")
    d.add_argument("--count", type=int, default=1000, help="writes to time (default 1000)")
    d.add_argument("--json", action="store_true")

    s = sub.add_parser("serve", help="open an engine on DIR and serve its HTTP API and web UI")
    s.add_argument("dir")
    s.add_argument("--workflows", action="append", required=True, metavar="MODULE",
                   help="a module whose @fusee.workflow functions the engine runs (repeatable)")
    s.add_argument("--http", default="127.0.0.1:8080", metavar="ADDR", help="host:port (default 127.0.0.1:8080)")
    s.add_argument("--shards", type=int, default=None)
    s.add_argument("--insecure", action="store_true", help="serve beyond loopback without a token")
    s.add_argument("--on-exhausted", choices=("fail", "pause"), default="fail",
                   help="a step out of retries fails its run (default) or pauses it until resumed")
    return p


def _note_holder(path: str) -> None:
    h = inspection.holder(path)
    if h is not None:
        who = "an engine" if h.pid is None else f"the engine of process {h.pid}"
        where = f"; its HTTP API: {h.url}" if h.url else " (not serving HTTP)"
        print(f"fusee: {path} is in use by {who}{where}. Showing what is on disk (read-only).", file=sys.stderr)


def _runs_ls(a: argparse.Namespace) -> int:
    _note_holder(a.dir)
    all_runs = inspection.runs(a.dir)
    q = api.ListQuery(a.status, a.wtype, max(1, len(all_runs)) if a.limit is None else max(1, a.limit), None, a.internal)
    got, _, total = api.page(all_runs, q)
    if a.json:
        for d in got:
            print(json.dumps(d))
    else:
        print(text.runs_table(got))
        if len(got) < total:
            print(f"({len(got)} of {total} runs; --limit to see more)")
    return 0


def _runs_show(a: argparse.Namespace) -> int:
    _note_holder(a.dir)
    try:
        v = view(inspection.describe(a.dir, a.id), journal=a.journal)
    except NotFound:
        print(f"fusee: no run with workflow ID {a.id!r} in {a.dir}", file=sys.stderr)
        return 1
    print(json.dumps(v, indent=1) if a.json else text.run_text(v))
    return 0


def _verify(a: argparse.Namespace) -> int:
    _note_holder(a.dir)
    total = inspection.files_size(a.dir)
    show = a.progress if a.progress is not None else (sys.stderr.isatty() and total >= BAR_FROM)
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        if show:
            sys.stderr.write("\r" + text.progress_bar(done[0], total))
            sys.stderr.flush()

    problems = inspection.verify(a.dir, progress)
    if show:
        sys.stderr.write("\n")
    damage = [p for p in problems if p.damage]
    if a.json:
        print(json.dumps({"ok": not damage, "bytes": total, "problems": [p.__dict__ for p in problems]}))
    else:
        for p in problems:
            print(f"{'DAMAGE' if p.damage else 'note'}: {p.path} at offset {p.offset}: {p.why}")
        print(f"{a.dir}: {'damaged' if damage else 'ok'} ({total:,} bytes of segments and checkpoints checked, "
              f"{len(damage)} damaged, {len(problems) - len(damage)} notes)")
    return 1 if damage else 0


def _disk_check(a: argparse.Namespace) -> int:
    from . import diskcheck

    if a.count < 1:
        print("fusee: --count is at least 1", file=sys.stderr)
        return 2
    s = diskcheck.summarize(diskcheck.measure(a.dir, a.count))
    if a.json:
        print(json.dumps({"dir": os.path.abspath(a.dir), **s}))
    else:
        print(f"disk-check of {os.path.abspath(a.dir)}:")
        print("\n".join(diskcheck.explain(s)))
    return 0


def _workflows(modules: Sequence[str]) -> list[Any]:
    from .workflow import Workflow

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as python -m does: the current directory's modules
    found: dict[int, Any] = {}
    for name in modules:
        mod = importlib.import_module(name)
        for v in vars(mod).values():
            if type(v) is Workflow:
                found[id(v)] = v
    return list(found.values())


def _serve(a: argparse.Namespace) -> int:
    import signal

    import gevent
    from gevent.event import Event

    from .engine import Engine

    try:
        wfs = _workflows(a.workflows)
    except ImportError as exc:
        print(f"fusee: cannot import {exc.name or a.workflows}: {exc}", file=sys.stderr)
        return 2
    if not wfs:
        print(f"fusee: no @fusee.workflow in {', '.join(a.workflows)}", file=sys.stderr)
        return 2
    from .http import serve

    engine = Engine.open(a.dir, workflows=wfs, shards=a.shards, on_exhausted=a.on_exhausted)
    try:
        engine._http = serve(engine, a.http, token=os.environ.get(TOKEN_ENV) or None, insecure=a.insecure)
        stop = Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            gevent.signal_handler(sig, stop.set)
        names = ", ".join(sorted(w.name for w in wfs))
        print(f"fusee: serving {a.dir} ({engine.shards} shards; workflows: {names})", flush=True)
        print(f"fusee: web UI and HTTP API at {engine.http_url}  (Ctrl-C to stop)", flush=True)
        stop.wait()
        print("fusee: stopping", flush=True)
    finally:
        engine.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fusee`` command with ``argv`` (default: the process's); its exit code."""
    a = _parser().parse_args(argv)
    try:
        if a.command == "runs":
            return _runs_ls(a) if a.runs_command == "ls" else _runs_show(a)
        if a.command == "verify":
            return _verify(a)
        if a.command == "disk-check":
            return _disk_check(a)
        return _serve(a)
    except Corrupt as exc:
        print(f"fusee: {exc} (run `fusee verify {getattr(a, 'dir', '')}` for every problem)", file=sys.stderr)
        return 1
    except (Error, OSError, ValueError) as exc:
        print(f"fusee: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
