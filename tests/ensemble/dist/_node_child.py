"""A node in its own OS process for tests/ensemble/dist: ``python _node_child.py NAME COOKIE EPMD_PORT``.

Starts the node, registers ``echo`` (answers ``("ping", from, x)`` with ``("pong", node, self, x)``
sent to ``from``, and forwards anything else back to the sender found in it when it is a
``("fwd", to, payload)``), prints ``ready <creation>`` and serves until killed or stdin closes.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

import gevent  # noqa: E402
from gevent.os import tp_read  # noqa: E402

import ensemble as e  # noqa: E402
from ensemble import dist, gen_server, global_, pg  # noqa: E402


def worker(report_to) -> None:
    """A process to link, monitor and kill from the other node.

    ("die", reason) exits with reason; ("trap",) traps exits, and then every message it gets
    is reported to ``report_to`` as ("worker_got", message); ("link", pid) links to pid.
    """
    trapping = False
    while True:
        m = e.receive()
        if trapping:
            e.send(report_to, ("worker_got", m))
        if type(m) is tuple and m[0] == "die":
            e.exit(m[1])
        elif type(m) is tuple and m[0] == "trap":
            e.trap_exit(True)
            trapping = True
            e.send(report_to, ("trapping", e.self()))
        elif type(m) is tuple and m[0] == "link":
            e.link(m[1])
            e.send(report_to, ("linked", e.self()))


def echo() -> None:
    while True:
        m = e.receive()
        if type(m) is tuple and m and m[0] == "ping":
            e.send(m[1], ("pong", e.node(), e.self(), m[2]))
        elif type(m) is tuple and m and m[0] == "fwd":
            e.send(m[1], m[2])
        elif type(m) is tuple and m and m[0] == "pg_join":  # ("pg_join", from, group)
            member = e.spawn(e.receive)  # waits for one message, then exits normally
            pg.join(m[2], member)
            e.send(m[1], ("pg_joined", member))
        elif type(m) is tuple and m and m[0] == "global_register":  # (.., from, name): a new process
            member = e.spawn(e.receive)
            e.send(m[1], ("global_registered", global_.register_name(m[2], member), member))
        elif type(m) is tuple and m and m[0] == "big":  # ("big", to, size): a message of size bytes
            e.send(m[1], ("big", b"x" * m[2]))
        elif type(m) is tuple and m and m[0] == "spawn_on":  # ("spawn_on", from, node, fname, args)
            try:
                outcome = ("ok", dist.spawn_on(m[2], m[3], *m[4]))
            except dist.SpawnError as x:
                outcome = ("refused", x.reason)
            e.send(m[1], ("spawn_on", outcome))
        elif type(m) is tuple and m and m[0] == "spawn":  # ("spawn", from, tag[, name])
            w = e.spawn(worker, m[1])
            if len(m) == 4:
                e.register(m[3], w)
            e.send(m[1], ("spawned", m[2], w))


class Counter(gen_server.GenServer):
    """Registered as "counter": call "get" or ("add", k); call ("crash", reason) stops it; cast
    ("add", k)."""

    def init(self):
        return ("ok", 0)

    def handle_call(self, request, from_, n):
        if request == "get":
            return ("reply", n, n)
        if request[0] == "add":
            return ("reply", n + request[1], n + request[1])
        if request[0] == "crash":
            return ("stop", request[1], n)
        return ("reply", ("echo", request, from_[0]), n)

    def handle_cast(self, request, n):
        return ("noreply", n + request[1])


def main() -> None:
    name, cookie, epmd_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tls = None
    if len(sys.argv) > 4:  # CERT KEY CA MUTUAL
        tls = dist.TLS(sys.argv[4], sys.argv[5], sys.argv[6], mutual=sys.argv[7] == "mutual")
    dist.start(name, cookie=cookie, epmd_port=epmd_port, tls=tls,
               allow=["tests.ensemble.dist._remote_fns", "operator:add"])
    pid = e.spawn(echo)
    e.register("echo", pid)
    gen_server.start(Counter, name="counter")
    pg.start()
    if os.environ.get("CHILD_GLOBAL"):  # a global name registered before any connection
        claimant = e.spawn(e.receive)
        e.register("claimant", claimant)  # also here, so the other node can watch it
        global_.register_name(os.environ["CHILD_GLOBAL"], claimant)
    print("ready", dist.creation(), flush=True)
    while tp_read(0, 1):  # serve until stdin closes (the test ended) or a kill
        pass
    dist.stop()


if __name__ == "__main__":
    main()
    gevent.get_hub().join(timeout=0)
