"""The file operations fusee's storage makes, one method each: the seam where tests inject faults.

The journal, the checkpoint store and the data directory's files go through a
:class:`Disk` (``Engine.open(..., disk=)``; by default :data:`DISK`, plain
``os`` calls).  :class:`fusee.testing.FaultyDisk` fails the Nth call of an
operation with ``ENOSPC`` or ``EIO``, so every failure point of a scenario can
be tried deterministically.  Every method raises ``OSError`` as ``os`` does.
"""

from __future__ import annotations

import errno
import os

from .direct_io import DirectAppender

__all__ = ["Disk", "DISK", "OPS", "RWF_DSYNC", "DIRECT_IO"]

#: The operations a :class:`Disk` makes that can fail with a full or failing disk.
OPS = ("write", "fdatasync", "fsync", "allocate", "rename", "mkdir")

# posix_fallocate errors that mean "not supported here" (then ftruncate), not a full or failing disk
_UNSUPPORTED = (errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EINVAL, errno.ENOSYS)

#: The flag of ``os.pwritev`` that makes one write durable as ``write`` + ``fdatasync`` would (Linux >= 4.7:
#: ``pwritev2(..., RWF_DSYNC)``), used by :meth:`Disk.write_durable`; None where Python or the OS lacks
#: it.  A test that emulates a slow ``os.fdatasync`` sets it to None, so every flush calls ``os.fdatasync``.
RWF_DSYNC: int | None = getattr(os, "RWF_DSYNC", None) if hasattr(os, "pwritev") else None

#: Whether :meth:`Disk.direct_appender` gives the journal ``O_DIRECT`` appends (:mod:`fusee.direct_io`) where
#: the file system takes them; with False every flush goes through :meth:`Disk.write_durable`.
DIRECT_IO = True


class Disk:
    """Plain ``os`` file operations (subclass to inject faults; see :data:`OPS`)."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        """``os.open``."""
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def close(self, fd: int) -> None:
        """``os.close``."""
        os.close(fd)

    def write(self, fd: int, data: bytes | memoryview) -> None:
        """Write all of ``data`` at the file position (short writes continue)."""
        n = os.write(fd, data)
        if n < len(data):
            view = memoryview(data)[n:]
            while view:
                view = view[os.write(fd, view) :]

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        """Write all of ``data`` at ``offset``."""
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            view = view[n:]
            offset += n

    def fdatasync(self, fd: int) -> None:
        """``os.fdatasync``."""
        os.fdatasync(fd)

    def write_durable(self, fd: int, data: bytes, offset: int) -> None:
        """Write all of ``data`` at ``offset`` and make it durable: on return it survives a crash, as after
        :meth:`pwrite` then :meth:`fdatasync` (what a subclass overriding those gets: this falls back to
        them).  One ``pwritev2(RWF_DSYNC)`` system call where the OS has it (:data:`RWF_DSYNC`): the
        kernel writes and syncs the range in one call, and the caller gives up the GIL once, not twice.
        A file system that refuses the flag (``EOPNOTSUPP``/``EINVAL``) gets the two calls from then on."""
        flag = RWF_DSYNC
        if flag is None or type(self).pwrite is not Disk.pwrite or type(self).fdatasync is not Disk.fdatasync or fd in _NO_DSYNC:
            self.pwrite(fd, data, offset)
            self.fdatasync(fd)
            return
        try:
            n = os.pwritev(fd, [data], offset, flag)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EINVAL):
                raise
            _NO_DSYNC.add(fd)  # this file system does not take the flag: write, then fdatasync
            self.pwrite(fd, data, offset)
            self.fdatasync(fd)
            return
        if n < len(data):  # a short write (rare): the rest, then a sync covering all of it
            self.pwrite(fd, memoryview(data)[n:], offset + n)  # type: ignore[arg-type]
            self.fdatasync(fd)

    def direct_appender(self, path: str, end: int, size: int) -> DirectAppender | None:
        """An ``O_DIRECT`` appender for the segment at ``path`` (``size`` bytes) whose log ends at ``end``
        (a block boundary), or None where flushes go through :meth:`write_durable`: :data:`DIRECT_IO` or
        :data:`RWF_DSYNC` is off, the file system has no ``O_DIRECT``, or a subclass overrides the write
        path (so a fault-injecting disk sees every write)."""
        cls = type(self)
        if (
            not DIRECT_IO
            or cls.write_durable is not Disk.write_durable
            or cls.pwrite is not Disk.pwrite
            or cls.fdatasync is not Disk.fdatasync
        ):
            return None
        return DirectAppender.open(path, end, size, RWF_DSYNC)

    def fsync(self, fd: int) -> None:
        """``os.fsync``."""
        os.fsync(fd)

    def allocate(self, fd: int, size: int) -> None:
        """Give the file ``size`` bytes of allocated space (``posix_fallocate``, else ``ftruncate``)."""
        if hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(fd, 0, size)
                return
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED:
                    raise
        os.ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        """``os.replace``: atomically put ``src`` at ``dst``."""
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        """``os.unlink``; a file already gone is fine."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def mkdir(self, path: str) -> None:
        """``os.makedirs(path, exist_ok=True)``."""
        os.makedirs(path, exist_ok=True)

    def fsync_dir(self, path: str) -> None:
        """Make ``path``'s entries (files created, renamed, deleted) durable."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    def write_whole(self, path: str, data: bytes) -> None:
        """Replace file ``path`` by ``data`` all or nothing, its content synced: a ``.tmp`` file written
        and synced, then renamed (durable once the caller syncs the directory).  On any failure the
        ``.tmp`` file is removed and the old file is untouched."""
        tmp = path + ".tmp"
        try:
            fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                self.write(fd, data)
                self.fsync(fd)
            finally:
                self.close(fd)
            self.rename(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def write_atomically(self, path: str, data: bytes) -> None:
        """:meth:`write_whole`, then its directory synced: durable on return."""
        self.write_whole(path, data)
        self.fsync_dir(os.path.dirname(path) or ".")


# File descriptors whose file system refused RWF_DSYNC (a descriptor number reused by another file only
# costs that file the two-call path).
_NO_DSYNC: set[int] = set()

#: The plain disk.
DISK = Disk()
