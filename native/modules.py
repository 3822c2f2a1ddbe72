"""The native (C) modules of ensemble: one native_module(...) call each.

Each entry becomes ``<package>._native_<name>`` (default package: ensemble),
compiled with cffi at install time, loaded with ``ensemble.native.load(name)``
and always paired with a pure-Python fallback.  See docs/native.md: a module
is added only once a benchmark in bench/ shows that it pays.

Example (native/mailbox.c must exist)::

    MODULES = [
        native_module("mailbox", used_by="ensemble.mailbox", cdef='''
            int mbx_push(void *q, void *item);
        '''),
    ]

After editing this list, re-run ``pip install -e .`` to build it.
"""

from native_build import native_module  # noqa: F401  (used by the entries)

MODULES = [
    # CRC32C for fusee's journal (fusee/crc32c.py; bench/crc32c.py shows it pays)
    native_module("crc32c", used_by="fusee.crc32c", cdef="""
        uint32_t crc32c_update(uint32_t value, const char *buf, size_t len);
        uint32_t crc32c_portable(uint32_t value, const char *buf, size_t len);
        int crc32c_hw(void);
        long crc32c_fill_frames(char *buf, size_t size);
    """),
]
