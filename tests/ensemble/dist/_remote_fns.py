"""Functions the test nodes let other nodes run (their ``allow`` names this module)."""

from operator import mul  # noqa: F401 - imported, not defined here: a module entry of allow keeps it out

import ensemble as e


def add(a, b):
    return a + b


def boom(message):
    raise ValueError(message)


def leave(reason):
    e.exit(reason)


def wait_forever(parent):
    e.send(parent, ("waiting", e.self()))
    e.receive()


def whoami():
    return (e.node(), e.self())


def linked_then_wait():
    e.receive()


def pg_members(group):
    from ensemble import pg

    return pg.get_members(group)


def global_whereis(name):
    from ensemble import global_

    return global_.whereis_name(name)


def consume(stage_pid, sub_id, n, report_to):
    """Subscribe this process to the stage ``stage_pid`` (on another node), ask for ``n`` events,
    report them to ``report_to`` as ("consumed", events), then stay subscribed until a message."""
    import constellation

    stage = constellation.Stage(stage_pid, 5.0)
    stage.subscribe(sub_id, sub_id)
    stage.ask(sub_id, n)
    got = []
    while len(got) < n:
        m = e.receive(timeout=10)
        if m is e.TIMEOUT:
            break
        if type(m) is tuple and m[0] == "events":
            got.extend(m[2])
    e.send(report_to, ("consumed", got))
    e.receive()
