"""Small processes shared by the tests, also by scripts the tests run in a subprocess.

Imports only ensemble, so a script may import it after monkey-patching.
"""

from __future__ import annotations

import ensemble


def ponger():
    """Answer (from, n) with n until "stop"."""
    while True:
        m = ensemble.receive()
        if m == "stop":
            return
        frm, n = m
        ensemble.send(frm, n)


def pinger(peer, rounds, report_to, timeout=5.0):
    """Ping ``peer`` ``rounds`` times, then report ("done", rounds answered) to ``report_to``."""
    me = ensemble.self()
    answered = 0
    for i in range(rounds):
        ensemble.send(peer, (me, i))
        if ensemble.receive(timeout=timeout) != i:
            break
        answered += 1
    ensemble.send(peer, "stop")
    ensemble.send(report_to, ("done", answered))
