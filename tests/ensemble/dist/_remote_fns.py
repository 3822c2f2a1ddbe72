"""Functions the test nodes let other nodes run (their ``allow`` names this module)."""

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
