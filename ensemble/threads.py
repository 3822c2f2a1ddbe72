"""Native OS threads under gevent: a real lock and the calling thread's id.

Carriers (see :mod:`ensemble.dispatcher`) are real OS threads.  Code whose
state is shared between carriers must exclude real threads, and code that
asks "am I on that carrier?" must compare real thread ids, also when the
application has monkey-patched ``threading`` and ``_thread`` (after
``gevent.monkey.patch_all()`` those give greenlet-level locks and greenlet
ids).  These two are the originals, whatever the patching::

    from ensemble import threads

    lock = threads.allocate_lock()   # excludes OS threads (every carrier)
    if home_ident == threads.get_ident():
        ...                          # running on that carrier's thread
"""

from __future__ import annotations

from ._threads import allocate_lock as _allocate_lock
from ._threads import get_ident as _get_ident

__all__ = ["allocate_lock", "get_ident"]


def allocate_lock():  # type: ignore[no-untyped-def]
    """A new native lock (``_thread.LockType``, unlocked), never gevent's.

    It excludes OS threads, so it guards state shared between carriers, also
    when the application has monkey-patched ``threading``.  Blocking on it
    blocks the whole carrier thread (its hub and every process on it), not
    just the calling process: hold it only for short critical sections that
    neither block nor switch greenlets.
    """
    return _allocate_lock()


#: The calling OS thread's id: ``_thread.get_ident`` as it was before any
#: monkey-patching (a patched one answers the greenlet's id).  Each carrier is
#: one thread, so equal ids mean "on the same carrier".  Non-zero; an id may be
#: reused by a later thread once its thread has ended.
get_ident = _get_ident
