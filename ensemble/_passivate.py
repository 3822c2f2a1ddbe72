"""Passivation: hibernate to disk.

``passivate(fn, *args)`` is :func:`ensemble.hibernate` that also sets the
process's function, arguments and state cell aside in a file, so only its
identity (pid, name, links, monitors, aliases, trap flag) and its mailbox stay
in memory.  The next message or signal reads the file back, deletes it and runs
``fn(*args)`` in a new greenlet.

The image is the process's own, written and read by this interpreter run only.
The project's rule is that bytes from a socket or a data file are never
unpickled; an image is neither, and that is made checkable:

* it lives in a private directory (mode 0700, made lazily with
  ``tempfile.mkdtemp``, or the one given to :func:`set_directory`), in a file
  created exclusively with mode 0600;
* its content is authenticated with HMAC-SHA256 under a random key made once
  per run and kept only in memory, and the MAC (which also binds the pid and
  the file name) is verified *before* anything is unpickled: a tampered image,
  one from another run or another process, or a missing one is never unpickled
  and the process exits with ``("passivation_failed", why)``.

State that cannot be written safely (locks, queues, events, sockets,
greenlets, open files, generators, or anything pickle cannot pickle) refuses
passivation: the process hibernates in memory instead, and
:func:`passivation_refused` says why.

Pids are written by id (pickle's ``persistent_id``) and read back as the same
``Pid`` objects; a pid whose process has exited and whose handle is gone comes
back as a dead handle with reason ``"noproc"``.  Everything else comes back as
a copy: a mutable object the process shared with another one is no longer
shared after the wake.

The file I/O happens in the process's own greenlet (when it passivates) and in
its new greenlet (before ``fn`` runs), never under the runtime's lock.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import io
import os
import pickle
import queue as _queue
import secrets
import sys
import _socket
import socket as _socket_mod
import tempfile
import threading
import time
import types
import weakref
from typing import Any, Callable, NoReturn

import greenlet as _greenlet
import gevent.event
import gevent.lock
import gevent.queue
import gevent.socket
from gevent import monkey

from . import _process as P
from ._exceptions import Badarg, ExitSignal, Hibernate
from ._threads import allocate_lock

__all__ = ["passivate", "passivation_refused", "set_directory", "directory"]

#: The key images are authenticated with: made once per run, never written anywhere.
_KEY = secrets.token_bytes(32)
_MAC_SIZE = hashlib.sha256().digest_size
_DOMAIN = b"ensemble-passivate-image-1\0"

_dir_lock = allocate_lock()
_directory: str | None = None  # set_directory's, or the private one once made
_default_directory: str | None = None  # the one mkdtemp made for this run, if any
#: Image files written and not yet removed (removed at interpreter exit at the latest).
_written: set[str] = set()

#: Every pid written to an image, by id, while something else holds it; so a pid
#: read back is the same object whenever that object still exists.
_pids: "weakref.WeakValueDictionary[int, P.Pid]" = weakref.WeakValueDictionary()


class Passivate(Hibernate):
    """Internal: unwinds a process that called :func:`passivate`."""

    to_disk = True


# --------------------------------------------------------------------------
# What refuses passivation
# --------------------------------------------------------------------------


def _lock_types() -> list[type]:
    """The lock types of ``_thread``/``threading``: the original ones and the current ones."""
    found = []
    for make in (
        monkey.get_original("_thread", "allocate_lock"),
        monkey.get_original("threading", "Lock"),
        monkey.get_original("threading", "RLock"),
        threading.Lock,
        threading.RLock,
    ):
        found.append(type(make()))
    rlock = getattr(threading, "_PyRLock", None)  # the pure-Python RLock
    if isinstance(rlock, type):
        found.append(rlock)
    return found


_UNSAFE: tuple[type, ...] = tuple(
    dict.fromkeys(  # ordered and without repeats
        [
            *_lock_types(),
            threading.Condition,
            threading.Semaphore,  # BoundedSemaphore is a subclass
            threading.Event,
            threading.Barrier,
            gevent.lock.Semaphore,  # BoundedSemaphore is a subclass
            gevent.lock.DummySemaphore,
            gevent.lock.RLock,
            gevent.queue.SimpleQueue,  # Queue, JoinableQueue, PriorityQueue, LifoQueue
            gevent.queue.Channel,
            gevent.event.Event,
            gevent.event.AsyncResult,
            _queue.Queue,  # LifoQueue, PriorityQueue
            _queue.SimpleQueue,
            type(monkey.get_original("queue", "SimpleQueue")()),
            _socket.socket,  # socket.socket and ssl.SSLSocket are subclasses
            _socket_mod.socket,
            monkey.get_original("socket", "socket"),
            gevent.socket.socket,
            _greenlet.greenlet,  # gevent.Greenlet and every process's greenlet
            io.IOBase,  # open files (and every other stream)
            types.GeneratorType,
            types.CoroutineType,
            types.AsyncGeneratorType,
        ]
    )
)


class _Refused(Exception):
    """Internal: the state holds something that must not be written."""


def _type_name(t: type) -> str:
    module = t.__module__
    return t.__qualname__ if module == "builtins" else f"{module}.{t.__qualname__}"


class _Pickler(pickle.Pickler):
    """Writes pids by id and refuses shared references (locks, sockets, ...)."""

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is P.Pid:
            _pids[obj.id] = obj
            return ("pid", obj.id)
        return None

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _UNSAFE):
            raise _Refused(f"cannot passivate a shared reference: {_type_name(type(obj))}")
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    """Reads pids back as the same Pid objects (or as dead handles)."""

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is tuple and len(pid) == 2 and pid[0] == "pid" and type(pid[1]) is int:
            return _pid_of(pid[1])
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def _pid_of(ident: int) -> P.Pid:
    """The Pid object with id ``ident``: the live one, the same dead one, or a new dead handle."""
    p = P.TABLE.get(ident)
    if p is not None:
        return p
    p = _pids.get(ident)
    if p is not None:
        return p
    p = P.new_pid(None, (), None, "default", False, None, (), None)  # type: ignore[arg-type]
    p.id = ident
    p.reason = p.dying = "noproc"
    p.life = P.DEAD
    p.links = None
    return _pids.setdefault(ident, p)


# --------------------------------------------------------------------------
# The directory and the file
# --------------------------------------------------------------------------


def set_directory(path: str | os.PathLike | None) -> None:
    """Write images to ``path`` from now on (made with mode 0700 if missing); None: the private default.

    Images already written stay where they are and are read back from there.
    """
    global _directory
    if path is None:
        with _dir_lock:
            _directory = _default_directory
        return
    path = os.fspath(path)
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)  # whatever the umask
    with _dir_lock:
        _directory = path


def directory() -> str:
    """The directory images are written to, made (private, mode 0700) on first use."""
    global _directory, _default_directory
    d = _directory
    if d is not None:
        return d
    with _dir_lock:
        if _directory is None:
            if _default_directory is None:
                _default_directory = tempfile.mkdtemp(prefix="ensemble-passivate-")  # mode 0700
                atexit.register(_cleanup)
            _directory = _default_directory
        return _directory


def _cleanup() -> None:
    """At interpreter exit: images are unreadable without this run's key; remove them."""
    for path in list(_written):
        _unlink(path)
    if _default_directory is not None:
        try:
            os.rmdir(_default_directory)
        except OSError:
            pass


def _mac(p: P.Pid, name: str, payload: bytes) -> bytes:
    m = hmac.new(_KEY, _DOMAIN, hashlib.sha256)
    m.update(f"{p.id}\0{name}\0".encode())
    m.update(payload)
    return m.digest()


def _unlink(path: str) -> None:
    _written.discard(path)
    try:
        os.unlink(path)
    except OSError:
        pass


def _write(p: P.Pid, payload: bytes) -> str:
    """Write ``payload`` to a new image file of ``p``; its path.  Raises OSError."""
    name = f"ensemble-{p.id}-{time.monotonic_ns()}.img"
    path = os.path.join(directory(), name)
    data = _mac(p, name, payload) + payload
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    _written.add(path)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        # No fsync: the image is only ever read back by this run, through the
        # page cache; after a crash or a reboot it is unreadable anyway (the key
        # is gone), so durability buys nothing.
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    os.close(fd)
    return path


def _read(p: P.Pid, path: str) -> bytes:
    """The verified payload of ``p``'s image at ``path``.  Raises _Unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _Unreadable(f"cannot read the image: {e}") from None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as e:
        raise _Unreadable(f"cannot read the image: {e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    mac, payload = data[:_MAC_SIZE], data[_MAC_SIZE:]
    # verify before anything is unpickled
    if len(mac) != _MAC_SIZE or not hmac.compare_digest(mac, _mac(p, os.path.basename(path), payload)):
        raise _Unreadable("the image does not verify (tampered with, or not written by this run for this process)")
    return payload


class _Unreadable(Exception):
    """Internal: an image that must not (or cannot) be unpickled."""


# --------------------------------------------------------------------------
# The runtime's side (called by ensemble._process)
# --------------------------------------------------------------------------


def write_image(p: P.Pid) -> str | None:
    """In ``p``'s greenlet, outside LOCK: write ``p.fn``, ``p.args`` and ``p.state``; the path.

    None if passivation is refused; ``p.refusal`` then says why.
    """
    buf = io.BytesIO()
    try:
        _Pickler(buf, pickle.HIGHEST_PROTOCOL).dump((p.fn, p.args, p.state))
    except _Refused as e:
        p.refusal = str(e)
        return None
    except (Exception, ExitSignal) as e:  # pickle's own refusal (a lambda, a local function, ...)
        p.refusal = f"cannot passivate: {type(e).__name__}: {e}"
        return None
    try:
        return _write(p, buf.getbuffer().tobytes())
    except OSError as e:
        p.refusal = f"cannot write the image: {e}"
        return None


def restore(p: P.Pid) -> Any:
    """In ``p``'s new greenlet, outside LOCK: read ``p``'s image back and delete it.

    Sets ``p.fn``, ``p.args`` and ``p.state`` and answers None; or answers the
    exit reason ``("passivation_failed", why)``.  A doomed process's image is
    only deleted.
    """
    path = p.image
    if p.dying is not P.ALIVE:
        p.image = None
        _unlink(path)
        return None
    try:
        payload = _read(p, path)
        fn, args, state = _Unpickler(io.BytesIO(payload)).load()
    except _Unreadable as e:
        why = str(e)
    except Exception as e:
        why = f"cannot unpickle the image: {type(e).__name__}: {e}"
    else:
        p.fn, p.args, p.state = fn, args, state
        p.image = None  # after the state is back: see peek_state
        _unlink(path)
        return None
    p.image = None
    _unlink(path)
    return ("passivation_failed", why)


def drop_file(path: str) -> None:
    """Outside LOCK: delete an image written but not kept (mail or a doom came meanwhile)."""
    _unlink(path)


def discard(p: P.Pid) -> None:
    """Outside LOCK: ``p`` ended while passivated; delete its image."""
    path = p.image
    if path is not None:
        p.image = None
        _unlink(path)


def peek_state(p: P.Pid) -> Any:
    """A copy of the state cell of passivated ``p``, read from its image (which stays)."""
    path = p.image
    if path is None:
        return p.state
    try:
        payload = _read(p, path)
    except _Unreadable as e:
        if p.image is not path:  # woken meanwhile: the state is back in memory
            return p.state
        raise Badarg(f"the state of {p!r} cannot be read: {e}") from None
    return _Unpickler(io.BytesIO(payload)).load()[2]


# --------------------------------------------------------------------------
# The public face
# --------------------------------------------------------------------------


def passivate(fn: Callable[..., Any], *args: Any) -> NoReturn:
    """Never returns: hibernate to disk; the next message or signal runs ``fn(*args)``.

    Like :func:`hibernate`, but ``fn``, ``args`` and the state cell are written
    to a file private to this run, and only the process's identity and
    mailbox stay in memory.  The wake reads them back (pids as the same
    objects, everything else as copies), deletes the file and runs
    ``fn(*args)`` in a new greenlet.  ``fn`` and ``args`` must be picklable (a
    module-level function, not a lambda); state holding a lock, a queue, an
    event, a socket, a greenlet, an open file or a generator refuses: the
    process then hibernates in memory and :func:`passivation_refused` says
    why.  Mail already waiting wakes it at once, without touching the disk.
    An image that does not verify is never unpickled: the process exits with
    ``("passivation_failed", why)``.
    """
    p = P.current()
    if p is None or p.shell:
        raise Badarg("passivate is only for a spawned process")
    if not callable(fn):
        raise Badarg(f"passivate needs a callable, not {fn!r}")
    p.refusal = None
    raise Passivate(fn, args)


def passivation_refused(pid: P.Pid) -> str | None:
    """Why ``pid``'s latest :func:`passivate` hibernated in memory instead of on disk, or None.

    None too for a process that never passivated, whose latest passivate
    went to disk, or that has exited.
    """
    if type(pid) is not P.Pid:
        raise Badarg(f"passivation_refused needs a pid, not {pid!r}")
    if pid.reason is not P.ALIVE:
        return None
    return pid.refusal


P.IMAGES = sys.modules[__name__]  # the process runtime writes, restores and drops images through this module
