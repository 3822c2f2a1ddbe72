"""Native thread primitives, untouched by gevent's monkey-patching.

Carriers are real OS threads and the runtime's locks must exclude real threads,
also when the application has monkey-patched ``threading``; so every module of
the runtime takes these from here, never from ``threading`` or ``_thread``.
"""

from gevent import monkey

allocate_lock = monkey.get_original("_thread", "allocate_lock")
start_new_thread = monkey.get_original("_thread", "start_new_thread")
get_ident = monkey.get_original("_thread", "get_ident")

__all__ = ["allocate_lock", "start_new_thread", "get_ident"]
