"""The native (C) modules of ensemble: one native_module(...) call each.

Each entry becomes ``<package>._native_<name>`` (default package: ensemble),
compiled with cffi at install time, loaded with ``ensemble._native.load(name)``
and always paired with a pure-Python fallback.  See docs/native.md: a module
is added only once a benchmark in bench/ shows that it pays.

Example (native/mailbox.c must exist)::

    MODULES = [
        native_module("mailbox", cdef='''
            int mbx_push(void *q, void *item);
        '''),
    ]

After editing this list, re-run ``pip install -e .`` to build it.
"""

from native_build import native_module  # noqa: F401  (used by the entries)

MODULES = [
    # Empty: nothing has been shown to pay yet, so the build is pure Python.
]
