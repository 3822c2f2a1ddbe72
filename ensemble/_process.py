"""The process table and the runtime's effects: delivery, parking, signals, exit.

This is the imperative shell of the process model.  It decides nothing itself:
what an exit signal does is :func:`ensemble.decide.signal.on_signal`'s answer, which
message a receive takes is :func:`ensemble.decide.receive.scan`'s, and how a process's
life moves is :func:`ensemble.decide.life.step`'s.  Here those answers are carried out
across greenlets and carrier threads.

Concurrency contract
--------------------
* ``LOCK`` is one native lock guarding the process graph: the table, names,
  links, monitors, aliases, exit settlement and every park/wake claim.  It is
  never held across a greenlet switch, so a greenlet can never block on it
  while another greenlet of the same thread holds it.
* A mailbox is appended to by anyone (``deque.append`` is atomic under the
  GIL) and consumed only by its owner's greenlet.  Until its first message a
  process's mailbox is the shared, empty :data:`NO_MAIL`; the first sender
  swaps in a deque of its own (:func:`mailbox_of`), which then never changes.
* A parked process is woken exactly once: the waker pops the park token
  ``_wait`` (atomic, no lock) and schedules ``_resume`` on the process's
  carrier, which checks that the process is still in the park that token
  names (``_wait`` is that very token) before switching, so a stale wake is
  harmless.
* An exit signal the process must die of settles its exit at once, under LOCK
  (links and monitors fire, the name is released, the process leaves the
  table), then throws :class:`ExitSignal` into the greenlet from its own hub,
  wherever it is parked.  From then on the process is DEAD and never runs
  ensemble again: its calls into ensemble go through
  :func:`ensemble.decide.life.on_call` (see :func:`doomed_call`), and a body that
  swallowed the signal is parked for good in :data:`LIMBO` at its next call.
* A dead process whose greenlet still runs (stuck in a native call, CPU-bound,
  or swallowing the signal in a raw gevent wait) is a straggler: see
  :func:`is_straggler`.
"""

from __future__ import annotations

import itertools
import sys
from collections import deque
from heapq import heappush as _heappush
from sys import getrefcount as _getrefcount
from time import monotonic
from typing import Any, Callable
from weakref import getweakrefcount as _getweakrefcount

from greenlet import getcurrent, greenlet

_switch = greenlet.switch  # the base switch, without gevent's Hub.switch (its switch_out look-up)

from ._carrier import Carrier, carrier_of_this_thread
from ._exceptions import Badarg, Exit, ExitSignal, Hibernate
from . import _terms
from ._terms import TIMEOUT, Alias
from ._threads import allocate_lock, get_ident
from .decide import deadlines as _deadlines
from .decide import life as _life
from .decide import receive as _select
from .decide import signal as _signal
from .decide.values import Singleton

_NOMATCH = _select.NOMATCH

__all__ = ["Pid"]

LOCK = allocate_lock()

#: Live processes by id.  Mutated under LOCK; read anywhere.
TABLE: dict[int, "Pid"] = {}
#: Registered names.  Mutated under LOCK.
NAMES: dict[str, "Pid"] = {}

_ids = itertools.count(1)
_next_seq = itertools.count(1).__next__  # deadline sequence numbers: the tie-break of equal deadlines

ALIVE = object()  # ``dying`` while no signal has doomed the process
#: ``Pid.links`` of a process that has never linked: shared and empty (a set is made on the
#: first link, see :func:`link_locked`), so an unlinked process carries no set of its own.
NO_LINKS: frozenset = frozenset()


class NoState(Singleton):
    """The state cell of a process that is not an actor (see :data:`NO_STATE`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_STATE"


#: ``Pid.state`` of a process spawned without ``state=`` that never called
#: ``set_state``: ``state(pid)`` of it raises.  A singleton also after pickling.
NO_STATE = NoState()
RUNNING = _life.RUNNING
HIBERNATED = _life.HIBERNATED
PASSIVATED = _life.PASSIVATED
DEAD = _life.DEAD
_WAKE = object()  # what a message wake switches into a parked receive


class NoMailYet(Exception):
    """What appending to :data:`NO_MAIL` raises: append to :func:`mailbox_of` instead.

    Senders append as ``p.mailbox.append(msg)`` and make the mailbox only when this is
    raised (a ``try`` costs nothing in CPython 3.11 until something is raised).
    """


class _NoMail(deque):
    """The type of :data:`NO_MAIL`: an empty deque that refuses to grow."""

    __slots__ = ()

    def append(self, msg: Any) -> None:
        raise NoMailYet()

    appendleft = extend = extendleft = insert = append


#: ``Pid.mailbox`` of a process no message has reached yet: one shared, empty deque (with
#: ``maxlen=0``, so nothing can ever stay in it), read like any mailbox.  The first message
#: gives the process a deque of its own (:func:`mailbox_of`), which it keeps: a parked process
#: that never had mail carries no deque.
NO_MAIL: deque = _NoMail((), 0)
#: Guards only the swap of :data:`NO_MAIL` for a process's own deque (:func:`mailbox_of`);
#: taken with or without LOCK held, never takes anything else.
_MAILBOX_LOCK = allocate_lock()
_NOT_WAITING: tuple = ()  # ``_wait`` while not parked in receive
#: How many parks in a row may hand the carrier straight to the process they woke.
HANDOFF_BURST = 32

#: Called as ``hook(pid)`` after a process that had timers settled (ensemble.timer).
exit_hooks: list[Callable[["Pid"], None]] = []
#: Called as ``hook(pid, reason)`` for a crash (ensemble._logger installs it).
crash_hooks: list[Callable[["Pid", BaseException], None]] = []

#: The passivation image store: :mod:`ensemble._passivate` puts itself here when
#: it is imported (it answers ``write_image(p)``, ``drop_file(path)``,
#: ``restore(p)`` and ``discard(p)``), so that this module need not import it.
#: None until then, and then no process has or asks for an image: only its
#: ``Passivate`` (a :class:`Hibernate` with ``to_disk``) writes one.
IMAGES: Any = None
#: The greenlets of dead processes that swallowed their exit signal and called
#: ensemble again: parked for good, never switched into again.  Held here so
#: that they are never collected: greenlet would unwind a collected one by
#: throwing GreenletExit into it, which runs the very handlers that swallowed
#: the signal.  Each keeps its stack in memory (see :func:`_limbo`).
LIMBO: set = set()


class ProcessGreenlet(greenlet):
    """The greenlet running a process's function; ``ensemble_pid`` names its process."""

    __slots__ = ("ensemble_pid",)


class _Rare:
    """The fields of a process that most processes never set, kept out of :class:`Pid`.

    A process reads them from the one shared record of defaults, :data:`_NO_RARE`, until
    its first write to any of them gives it a record of its own (see :func:`_rare_field`):
    so a parked process carries six fewer slots.
    """

    __slots__ = (
        "raised", "link_exits", "image", "refusal", "timers", "value", "name", "trap", "dispatcher",
    )

    def __init__(self) -> None:
        self.value: Any = None  # the function's return value after a normal exit
        self.name: str | None = None  # registered name or None
        self.trap = False  # trap_exit flag
        self.dispatcher = "default"  # the dispatcher the process runs on
        self.raised = 0  # how many times ExitSignal has been raised in the process
        self.link_exits: dict | None = None  # {Pid: its link's ("EXIT", pid, reason) message}
        self.image: str | None = None  # passivation image path while fn, args, state are on disk
        self.refusal: str | None = None  # why the latest passivate stayed in memory
        self.timers = False  # True once a timer names this process (then timers end with it)


#: The defaults every :class:`Pid` reads until it writes one of its rare fields; never written.
_NO_RARE = _Rare()
#: Guards only the swap of :data:`_NO_RARE` for a process's own record; takes nothing else.
_RARE_LOCK = allocate_lock()


def _rare_field(name: str, doc: str) -> Any:
    """A :class:`Pid` property for the rare field ``name``: read from its record, or the
    shared defaults; the first write (from any thread) gives the process its own record."""
    slot = _Rare.__dict__[name]
    read, write = slot.__get__, slot.__set__

    def get(p: "Pid") -> Any:
        return read(p._rare)

    def set_(p: "Pid", value: Any) -> None:
        rare = p._rare
        if rare is _NO_RARE:
            with _RARE_LOCK:
                rare = p._rare
                if rare is _NO_RARE:
                    rare = p._rare = _Rare()
        write(rare, value)

    return property(get, set_, doc=doc)


class Pid:
    """The handle of a local process (Erlang's pid): print it, send to it, link it.

    Two handles are equal only if they are the same process.  All fields are
    private to the runtime.
    """

    __slots__ = (
        "id",
        "mailbox",  # deque (NO_MAIL until the first message); appended by anyone, consumed by the owner only
        "carrier",  # Carrier; never changes while the greenlet runs
        "_glet",  # the greenlet running the process, or None (hibernated, not yet started)
        "_wait",  # park token (a list, emptied once claimed) while parked in receive, else _NOT_WAITING
        "dying",  # ALIVE, or the reason a signal doomed the process with
        "reason",  # ALIVE while alive, then the exit reason
        "life",  # ensemble.decide.life state
        "links",  # set of Pid; NO_LINKS until the first link; None once closed
        "monitors",  # {ref int: (target Pid, shown target, ref)} held by this process, or None
        "watchers",  # {ref int: (watcher Pid, shown target, ref)} monitoring this process, or None
        "aliases",  # set of the ints of its active aliases, or None
        "state",  # the state cell (spawn_actor, state(), set_state()), or NO_STATE
        "fn",
        "args",
        "initial_call",
        "ancestors",
        "shell",  # True for the process of a greenlet that is not a process
        "_rare",  # _Rare: the fields below, _NO_RARE until one is written
        "__weakref__",
    )

    # The rare fields (see _Rare): read and written as attributes, kept in p._rare.
    _raised = _rare_field("raised", "How many times ExitSignal has been raised in the process.")
    link_exits = _rare_field(
        "link_exits", "{Pid: its link's ('EXIT', pid, reason) message}, or None: see unlink."
    )
    image = _rare_field(
        "image", "Path of the passivation image while fn, args and state are on disk, else None."
    )
    refusal = _rare_field(
        "refusal", "Why the latest passivate stayed in memory, or None (ensemble._passivate)."
    )
    timers = _rare_field("timers", "True once a timer names this process (then timers end with it).")
    value = _rare_field("value", "The function's return value after a normal exit.")
    name = _rare_field("name", "Registered name or None.")
    trap = _rare_field("trap", "The trap_exit flag.")
    dispatcher = _rare_field("dispatcher", "The dispatcher the process runs on.")

    def __repr__(self) -> str:
        return f"<0.{self.id}.0>"

    def __lt__(self, other: Any) -> bool:
        if isinstance(other, Pid):
            return self.id < other.id
        return NotImplemented

    def __reduce__(self) -> Any:
        raise TypeError("a pid cannot be pickled")

    @property
    def node(self) -> str:
        """The node this process lives on."""
        return _terms.NODE


class RemotePid(Pid):
    """The handle of a process on another node (or of an earlier run of this one).

    ``node`` is its node's name, ``id`` its number there and ``creation`` the run of that
    node it belongs to.  Handles are made by the distribution layer (one per process, so
    equal handles are the same object) and compare equal by those three.  None of the local
    fields is used.
    """

    __slots__ = ("_node", "creation")

    def __repr__(self) -> str:
        return f"<{self._node}.{self.id}.{self.creation}>"

    def __eq__(self, other: Any) -> bool:
        return (
            type(other) is RemotePid
            and self.id == other.id
            and self._node == other._node
            and self.creation == other.creation
        )

    def __hash__(self) -> int:
        return hash((self._node, self.id, self.creation))

    @property
    def node(self) -> str:
        """The node this process lives on."""
        return self._node


class RemoteName:
    """A registered name on another node, as the target of a monitor by ``(name, node)``."""

    __slots__ = ("name", "node")

    def __init__(self, name: str, node: str) -> None:
        self.name = name
        self.node = node

    def __repr__(self) -> str:
        return f"RemoteName({self.name!r}, {self.node!r})"


def new_remote_pid(node: str, id: int, creation: int) -> RemotePid:
    """A handle of process ``id`` of run ``creation`` of ``node`` (the distribution layer interns them)."""
    p = RemotePid.__new__(RemotePid)
    p.id = id
    p._node = node
    p.creation = creation
    p.reason = ALIVE  # as far as this node knows; a send goes through REMOTE, never a mailbox
    p._rare = _NO_RARE  # its rare fields (unused) read as the defaults
    return p


#: The distribution layer while this node is distributed (:mod:`ensemble.dist.node` puts itself
#: here at ``start`` and takes itself away at ``stop``), else None.  It answers
#: ``send(pid, msg)`` for a :class:`RemotePid`, ``send_named(name, node, msg)``, and, called
#: under LOCK without ever blocking, ``link``, ``unlink``, ``exit_signal``, ``monitor``,
#: ``demonitor`` and ``down``; with None, a message to another node is dropped, as Erlang drops
#: a send it cannot deliver.
REMOTE: Any = None

#: ``whereis(name)`` of :mod:`ensemble.global_` once it is imported (it puts it here), else None:
#: how ``("global", name)`` resolves wherever a name is taken (send, monitor, gen_server calls).
GLOBAL: Any = None


def new_pid(
    fn: Any,
    args: tuple,
    carrier: Carrier,
    dispatcher: str,
    trap: bool,
    state: Any,
    ancestors: tuple,
    initial_call: Any,
    shell: bool = False,
) -> Pid:
    p = Pid.__new__(Pid)
    p.id = next(_ids)
    p.mailbox = NO_MAIL
    p.carrier = carrier
    p._glet = None
    p._wait = _NOT_WAITING
    p.dying = ALIVE
    p.reason = ALIVE
    p.life = RUNNING
    p.links = NO_LINKS
    p.monitors = None
    p.watchers = None
    p.aliases = None
    p.state = state
    p.fn = fn
    p.args = args
    p.initial_call = initial_call
    p.ancestors = ancestors
    p.shell = shell
    p._rare = _NO_RARE
    if trap:
        p.trap = True
    if dispatcher != "default":
        p.dispatcher = dispatcher
    return p


# --------------------------------------------------------------------------
# Who is running
# --------------------------------------------------------------------------

#: The shell process of each greenlet that is not a process.
SHELLS: dict[Any, Pid] = {}


def current() -> Pid | None:
    """The process of the running greenlet, or None (no shell is made).

    The call of a dead process goes through :func:`doomed_call` first.
    """
    g = getcurrent()
    p = getattr(g, "ensemble_pid", None)
    if p is None:
        p = SHELLS.get(g)
        if p is None or p.reason is not ALIVE:
            return None
    elif p.dying is not ALIVE and p._glet is not None:
        doomed_call(p)
    return p


def me() -> Pid:
    """The running process, giving a shell process to a greenlet that is not one.

    The call of a dead process goes through :func:`doomed_call` first.
    """
    g = getcurrent()
    p = getattr(g, "ensemble_pid", None)
    if p is None:
        p = SHELLS.get(g)
        if p is None or p.reason is not ALIVE:
            return _new_shell(g)
    elif p.dying is not ALIVE and p._glet is not None:
        doomed_call(p)
    return p


#: The greenlets of doomed processes whose code may still run, by greenlet:
#: from the doom until the greenlet ends or is parked in :data:`LIMBO`.
#: Empty nearly always, so :func:`check_caller` costs one truth test.
DOOMED: dict[Any, "Pid"] = {}


def check_caller() -> None:
    """At an entry of ensemble that does not otherwise ask who calls (send, register, timers...).

    A dead process's call goes through :func:`doomed_call`.  Costs one truth
    test while no doomed process's code runs anywhere.
    """
    if DOOMED:
        p = DOOMED.get(getcurrent())
        if p is not None and p._glet is not None:
            doomed_call(p)


def doomed_call(p: Pid) -> None:
    """In ``p``'s own greenlet, ``p`` being dead: carry out :func:`ensemble.decide.life.on_call`.

    Raises ``p``'s :class:`ExitSignal`, or parks the greenlet for good
    (:func:`_limbo`); returns only if ``on_call`` answers PROCEED, or while
    the runtime's own exit hooks run in this greenlet (:func:`flush_settled`).
    """
    if _HOOKING and getcurrent() in _HOOKING:
        return
    verdict = _life.on_call(p.life, p._raised, sys.exc_info()[1] is not None)
    if verdict == _life.RAISE:
        raise_doom(p)
    if verdict == _life.PARK:
        _limbo(p)


def _limbo(p: Pid) -> None:
    """Never returns: park dead ``p``'s greenlet (the running one) for good and release it.

    The runtime lets go of it: the carrier no longer counts it (a dispatcher's
    thread may end), nothing keeps the hub's loop alive for it, its mailbox is
    emptied, and no wake, timeout or doom ever switches into it again.  It is
    kept in :data:`LIMBO`, never collected (see there).
    """
    g = getcurrent()
    LIMBO.add(g)
    DOOMED.pop(g, None)
    p._glet = None
    p._wait = _NOT_WAITING
    p.mailbox.clear()
    c = p.carrier
    c.process_ended()
    hub = c.hub
    while True:
        try:
            hub.switch()
        except BaseException:  # noqa: BLE001 - nothing may run this body again
            pass


def is_straggler(p: Pid) -> bool:
    """True while dead ``p``'s code still runs: its exit has settled but its greenlet goes on.

    That is a process doomed while not parked in receive -- stuck in a native
    call, computing, or in a raw gevent wait -- or one that swallowed its
    :class:`ExitSignal` and has not called ensemble since.  It stops at its
    next call into ensemble (or when its function returns).
    """
    return p.reason is not ALIVE and not p.shell and p._glet is not None and p._wait is _NOT_WAITING


#: The processes parked in ``join`` or ``exit_reason`` (see ``ensemble._spawn``): their park
#: waits for an exit, not a message.  Touched by each one's own greenlet only.
JOINING: set = set()


def in_receive(p: Pid) -> bool:
    """True while ``p`` is parked in ``receive`` (read from any thread: a moment's answer)."""
    return p._wait is not _NOT_WAITING and p not in JOINING


def _new_shell(g: Any) -> Pid:
    p = new_pid(None, (), carrier_of_this_thread(), "default", False, NO_STATE, (), None, True)
    p._glet = g
    with LOCK:
        TABLE[p.id] = p
        SHELLS[g] = p
    link = getattr(g, "rawlink", None)  # a gevent Greenlet: settle its shell when it ends
    if link is not None:
        link(lambda _g, p=p: settle(p, _signal.NORMAL, None))
    return p


def is_local_pid(x: Any) -> bool:
    return type(x) is Pid


# --------------------------------------------------------------------------
# Delivery and waking
# --------------------------------------------------------------------------


def mailbox_of(p: Pid) -> deque:
    """``p``'s own mailbox deque, to append to: made on first use, in place of :data:`NO_MAIL`.

    Safe from any thread: of two first senders racing, both append to the one deque that
    the lock lets one of them make.  Once made it is never replaced, so a reader that
    found it may keep it; one that found :data:`NO_MAIL` must read ``p.mailbox`` again
    after it parks.
    """
    mailbox = p.mailbox
    if mailbox is NO_MAIL:
        with _MAILBOX_LOCK:
            mailbox = p.mailbox
            if mailbox is NO_MAIL:
                mailbox = p.mailbox = deque()
    return mailbox


def deliver(p: Pid, msg: Any) -> None:
    """Put ``msg`` at the end of ``p``'s mailbox and wake ``p`` if it waits.

    A message to a process that has exited is dropped.  Safe from any thread.
    """
    if p.reason is ALIVE:
        try:
            p.mailbox.append(msg)
        except NoMailYet:
            mailbox_of(p).append(msg)
        token = p._wait
        if token:  # wake(p), inlined: claim the park (see there), then resume it
            try:
                token.pop()
            except IndexError:
                return
            c = p.carrier
            if c.handoff is None and c.resuming and get_ident() == c.ident:
                # the commonest wake: the hint for the next park on this carrier, a
                # resume already scheduled (resume_claimed's first case)
                c.handoff = p
                c.handoff_token = token
                c.handoff_at = len(c.woken)
            else:
                resume_claimed(p, token)
        elif p.life is not RUNNING:
            wake_hibernating(p)


def deliver_many(p: Pid, msgs: list) -> None:
    """:func:`deliver` of each of ``msgs`` in order, as one append and at most one wake.

    The messages join ``p``'s mailbox together (``deque.extend`` of a list runs no Python
    code: no other thread's message comes between them).  Dropped if ``p`` has exited.
    Safe from any thread.
    """
    if p.reason is ALIVE:
        try:
            p.mailbox.extend(msgs)
        except NoMailYet:
            mailbox_of(p).extend(msgs)
        token = p._wait
        if token:
            wake(p)
        elif p.life is not RUNNING:
            wake_hibernating(p)


def wake_hibernating(p: Pid) -> None:
    """After new mail for ``p``, which is not running: start it again if it hibernates."""
    with LOCK:
        _wake_locked(p, _life.MAIL)


def wake(p: Pid) -> None:
    """After new mail for ``p``: claim ``p``'s park, if any, and resume it soon.

    Lock-free: the park token is a one-element list and ``list.pop`` is atomic,
    so of every waker (senders on any thread, the timeout, a doom) exactly one
    empties it: that one owns the wake of the park the token names.  The append
    happened before this read of ``_wait`` and ``park`` publishes ``_wait``
    before it looks at the mailbox, so either this sees the token or the
    parking process sees the mail.
    """
    token = p._wait
    if token:
        try:
            token.pop()
        except IndexError:
            return
        resume_claimed(p, token)


def resume_claimed(p: Pid, token: list) -> None:
    """The rest of :func:`wake`, once its caller has claimed (emptied) ``p``'s park ``token``.

    :mod:`ensemble._names` inlines the commonest case (the hint, a resume already scheduled).
    """
    c = p.carrier
    if get_ident() == c.ident:
        # One hub callback resumes every process woken on this carrier since it was
        # scheduled (see ``_resume_woken``), rather than one callback per wake.  The
        # first one woken since the last handoff is instead the hint for the next park
        # on this carrier (see ``park``), which switches straight into it; the callback
        # resumes it, in its place in the wake order, if no park took the hint.
        if c.handoff is None:
            c.handoff = p
            c.handoff_token = token
            c.handoff_at = len(c.woken)
        else:
            c.woken.append(p)
            c.woken.append(token)
        if not c.resuming:
            c.resuming = True
            c.loop.run_callback(_resume_woken, c)
    else:
        c.loop.run_callback_threadsafe(_resume, p, token)


def _wake_locked(p: Pid, event: str) -> None:
    """Under LOCK: wake ``p`` for ``event`` if it is parked or hibernating."""
    if p._wait:
        wake(p)
    elif _life.wakes(p.life, event) and p.reason is ALIVE:
        p.life = _life.step(p.life, event)
        _start_locked(p)


def _resume_woken(c: Carrier) -> None:
    """In ``c``'s hub: switch into each process woken on ``c`` (in wake order) still in its park.

    Wakes that come while this runs go to the next batch (and its own callback,
    behind the hub's other callbacks).  If a switch raises, the rest of the batch
    is put back in front of the next one before the exception goes on to the hub.
    """
    batch = c.woken
    c.woken = []
    c.resuming = False
    q = c.handoff
    if q is not None:  # no park took the hint: q's turn is at its place in the wake order
        c.handoff = None
        at = c.handoff_at
        batch[at:at] = (q, c.handoff_token)
    n = len(batch)
    i = 0
    try:
        while i < n:
            p = batch[i]
            token = batch[i + 1]
            i += 2
            if p._wait is token:
                p._glet.switch(_WAKE)
    except BaseException:
        if i < n:
            rest = batch[i:]
            c.woken[:0] = rest
            if c.handoff is not None:
                c.handoff_at += len(rest)
            if not c.resuming:
                c.resuming = True
                c.loop.run_callback(_resume_woken, c)
        raise


def _resume(p: Pid, token: list) -> None:
    """In ``p``'s hub: switch into ``p`` if it is still in the park ``token`` names."""
    if p._wait is token:
        p._glet.switch(_WAKE)


def _on_timeout(p: Pid, token: list) -> None:
    """In ``p``'s hub: a receive's timer fired; claim the park unless a waker has."""
    try:
        token.pop()
    except IndexError:
        return
    if p._wait is token:
        p._glet.switch(TIMEOUT)


def park(p: Pid, seen: int, deadline: float | None) -> Any:
    """Suspend ``p`` (the running process) until mail beyond ``seen``, a doom or ``deadline``.

    ``deadline`` is a ``time.monotonic()`` time, or None to wait without end.
    Returns ``_WAKE`` or ``TIMEOUT``; returns ``_WAKE`` at once if mail beyond
    ``seen`` or a doom arrived meanwhile.  Never swallows an exception thrown in.
    A deadline is one push on the carrier's heap under its one hub timer (see
    :mod:`ensemble.decide.deadlines`), not a hub timer of its own.
    """
    token = [True]  # this park's token: its identity names the park, its element is the claim
    p._wait = token  # publish first, then look: see ``wake``
    if len(p.mailbox) > seen or p.dying is not ALIVE:
        p._wait = _NOT_WAITING  # a wake already claimed is now stale
        return _WAKE
    c = p.carrier
    c.parked += 1  # Carrier.hold, inlined: this runs on every park (no local: it would keep
    if c.parked == 1 and c._hold is not None:  # an int alive in every parked frame)
        c._hold.ref = True
    try:
        if deadline is not None:
            heap = c.deadlines
            _heappush(heap, (deadline, _next_seq(), token, p))
            armed = c.armed_at
            if armed is None or deadline < armed:
                _arm_deadlines(c, deadline)
            elif len(heap) > c.deadlines_limit:
                c.deadlines_limit = _deadlines.compact(heap)
        q = c.handoff
        if q is not None:
            # Direct handoff: the process woken first on this carrier since the last
            # handoff runs next, without a trip through the hub.  Bounded, so the hub's
            # other greenlets, timers and I/O get their turn: past the bound the hint
            # stays, and ``_resume_woken`` resumes q in its place in the wake order.
            # (q is not p: p's park token is the one just made.)
            if q._wait is c.handoff_token:
                if c.burst < HANDOFF_BURST:
                    c.handoff = None
                    c.burst += 1
                    return q._glet.switch(_WAKE)
            else:
                c.handoff = None  # its park ended some other way (a doom)
        c.burst = 0
        if p.shell:
            return c.hub.switch()  # gevent's switch: it runs a gevent greenlet's switch_out
        return _to_hub(c.hub)
    finally:
        c.parked -= 1  # Carrier.unhold, inlined
        if c.parked == 0 and c._hold is not None:
            c._hold.ref = False
        p._wait = _NOT_WAITING
        if deadline is not None:
            token.clear()  # the park is over: its deadline entry is stale


#: What a hub watcher's callback switches into :func:`wait_handing_off`'s greenlet.
_FIRED = object()


def wait_handing_off(c: Carrier, watcher: Any) -> None:
    """In a greenlet of ``c``'s that is not a process (a connection's reader): wait until
    ``watcher`` (a hub I/O watcher, not started) fires.

    As :func:`park` does, the process woken first on ``c`` since the last handoff runs next,
    switched into straight from here rather than through the hub (bounded the same way);
    otherwise this is the hub's own ``wait``.  The watcher is stopped when this returns or
    raises (a kill thrown in).
    """
    q = c.handoff
    if q is None or q._wait is not c.handoff_token or c.burst >= HANDOFF_BURST:
        c.hub.wait(watcher)
        return
    c.handoff = None
    c.burst += 1
    watcher.start(getcurrent().switch, _FIRED)
    try:
        _switch(q._glet, _WAKE)
        # Only the watcher's callback switches back in here: a process parks into the hub
        # or into another process, and a kill arrives as an exception.
    finally:
        watcher.stop()


def _to_hub(hub: Any) -> Any:
    """Switch to ``hub`` from a process's greenlet; what the switch back brings.

    A frame of its own so that the frame object greenlet makes for the top frame of
    a parked greenlet is this small one (about 160 bytes), not :func:`park`'s.
    """
    return _switch(hub)


def _arm_deadlines(c: Carrier, at: float) -> None:
    """On ``c``'s thread: (re)arm ``c``'s one deadline timer to fire at monotonic time ``at``.

    The timer does not keep the hub alive by itself: a process parked with a
    deadline already does (see :meth:`Carrier.hold`).
    """
    timer = c.deadline_timer
    if timer is not None:
        timer.close()
    timer = c.loop.timer(max(0.0, at - monotonic()))
    timer.ref = False
    timer.start(_deadlines_due, c)
    c.deadline_timer = timer
    c.armed_at = at


def _deadlines_due(c: Carrier) -> None:
    """In ``c``'s hub, when its deadline timer fires: time out every receive whose deadline passed.

    The timer is armed again for the next deadline, if any, before any process
    runs.  If a switch raises, the receives not yet timed out get their turn from
    callbacks before the exception goes on to the hub.
    """
    c.armed_at = None
    heap = c.deadlines
    due = _deadlines.due(heap, monotonic())
    nxt = _deadlines.next_at(heap)
    if nxt is not None:
        _arm_deadlines(c, nxt)
    else:
        timer, c.deadline_timer = c.deadline_timer, None
        if timer is not None:
            timer.close()
    for k, entry in enumerate(due):
        try:
            _on_timeout(entry[3], entry[2])
        except BaseException:
            for later in due[k + 1 :]:
                c.loop.run_callback(_on_timeout, later[3], later[2])
            raise


# --------------------------------------------------------------------------
# Receive
# --------------------------------------------------------------------------


def receive(matcher: Callable[[Any], Any] | None = None, *, timeout: float | None = None) -> Any:
    """Take a message from the running process's mailbox (Erlang's selective receive).

    ``matcher(msg)`` is called on each message, oldest first; it answers
    ``NOMATCH`` to leave the message in place, or any other value, which takes
    that message and becomes receive's result.  With no matcher the oldest
    message is taken.  Messages already rejected are not tried again when new
    ones arrive.  ``timeout`` is in seconds, fixed when receive starts
    (``None`` waits forever, ``0`` polls once); when it passes receive answers
    ``TIMEOUT``.  Pending exit signals are acted on before each look at the
    mailbox.  A greenlet that is not a process receives as its shell process.
    A ``matcher`` that is neither callable nor None raises ``TypeError`` at
    once, before any wait.
    """
    try:  # me(), inlined for a live process (an attribute read is cheaper than getattr())
        p = getcurrent().ensemble_pid
    except AttributeError:  # a greenlet that is not a process: its shell
        p = None
    else:
        if matcher is None and p.dying is ALIVE:
            # The commonest receives: any message, no doom.  scan(mailbox, None, 0) answers
            # (0, mailbox[0]): take the oldest message, without the general loop.
            mailbox = p.mailbox
            if mailbox:
                return mailbox.popleft()
            if timeout is None:  # receive_as(p, None, None), inlined: the commonest wait
                while True:
                    park(p, 0, None)
                    if p.dying is not ALIVE:
                        raise_doom(p)
                    mailbox = p.mailbox  # read again after each park: NO_MAIL gives way to a deque
                    if mailbox:
                        return mailbox.popleft()
    if p is None or p.dying is not ALIVE:
        p = me()
    if matcher is None:
        if timeout is None:  # receive_as(p, None, None), inlined
            while True:
                if p.dying is not ALIVE:
                    raise_doom(p)
                mailbox = p.mailbox  # read again after each park: NO_MAIL gives way to a deque
                if mailbox:
                    return mailbox.popleft()
                park(p, 0, None)
    elif not callable(matcher):
        raise TypeError(f"a receive matcher must be callable or None, not {matcher!r}")
    if timeout == 0 and (type(timeout) is int or type(timeout) is float):
        return poll(p, matcher)  # timeout 0: one look, no deadline arithmetic
    deadline = None
    if timeout is not None:
        timeout = check_timeout(timeout)
        if timeout is not None:
            deadline = monotonic() + timeout
    return receive_as(p, matcher, deadline)


def poll(p: Pid, matcher: Callable[[Any], Any] | None) -> Any:
    """``receive(matcher, timeout=0)`` in the running process ``p`` (a checked matcher):
    a pending doom is raised, then the mailbox is looked at once; ``TIMEOUT`` if no
    message is taken.  What :func:`receive_as` does with a deadline already passed."""
    if p.dying is not ALIVE:
        raise_doom(p)
    mailbox = p.mailbox
    if not mailbox:
        return TIMEOUT
    if matcher is None:
        return mailbox.popleft()
    if len(mailbox) == 1:  # scan's commonest case, asked here
        v = matcher(mailbox[0])
        if v is _NOMATCH:
            # appended to meanwhile (another thread): the general scan looks at those too
            if len(mailbox) == 1:
                return TIMEOUT
        else:
            mailbox.popleft()
            return v
        i, v = _select.scan(mailbox, matcher, 1)
    else:
        i, v = _select.scan(mailbox, matcher, 0)
    if i is None:
        return TIMEOUT
    if i == 0:
        mailbox.popleft()
    else:
        del mailbox[i]
    return v


def receive_as(p: Pid, matcher: Callable[[Any], Any] | None, deadline: float | None) -> Any:
    """:func:`receive` in the running process ``p``, with a checked matcher and a monotonic
    ``deadline`` (or None): for the runtime's own loops, which know both already."""
    start = 0
    while True:
        if p.dying is not ALIVE:
            raise_doom(p)
        mailbox = p.mailbox  # read again after each park: NO_MAIL gives way to a deque
        if matcher is None:
            if mailbox:  # scan(mailbox, None, 0) answers (0, mailbox[0]): the oldest
                return mailbox.popleft()
        else:
            n = len(mailbox)
            if n == start + 1:  # one new message, scan's commonest case: ask the matcher here
                v = matcher(mailbox[start])
                if v is not _NOMATCH:
                    if start == 0:
                        mailbox.popleft()
                    else:
                        del mailbox[start]
                    return v
                start = n
            elif n > start:  # scanning no new message cannot take one
                i, v = _select.scan(mailbox, matcher, start)
                if i is not None:
                    if i == 0:
                        mailbox.popleft()
                    else:
                        del mailbox[i]
                    return v
                start = v
        if deadline is None:
            park(p, start, None)
        else:
            if deadline <= monotonic():
                return TIMEOUT
            if park(p, start, deadline) is TIMEOUT:
                if p.dying is not ALIVE:
                    raise_doom(p)
                return TIMEOUT


#: A timeout at least this long (about 31 years) is a wait without end.
FOREVER = 1e9


def check_timeout(timeout: Any) -> float | None:
    """A timeout in seconds as given, None for one of :data:`FOREVER` or more.

    Raises :class:`Badarg` for a negative or non-number timeout.
    """
    t = type(timeout)
    if t is float and 0.0 <= timeout < FOREVER:  # the usual case, first
        return timeout
    if t is not float and t is not int:
        if t is bool or not isinstance(timeout, (int, float)):
            raise Badarg(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")
        timeout = float(timeout)
    if timeout >= 0:
        return timeout if timeout < FOREVER else None
    raise Badarg(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")


def deadline_of(timeout: Any) -> float | None:
    """The ``time.monotonic()`` time ``timeout`` seconds from now (checked as :func:`check_timeout`
    checks it); None for no limit."""
    if timeout is None:
        return None
    timeout = check_timeout(timeout)
    return None if timeout is None else monotonic() + timeout


def time_left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (a :func:`deadline_of` answer), never below 0; None for no limit."""
    return None if deadline is None else max(0.0, deadline - monotonic())


def raise_doom(p: Pid) -> None:
    """Raise the exit signal ``p`` was doomed by, in ``p``'s own greenlet."""
    p._raised += 1
    raise ExitSignal(p.dying)


# --------------------------------------------------------------------------
# Exit signals
# --------------------------------------------------------------------------


def signal_locked(
    target: Pid, kind: str, reason: Any, sender: Pid | None, via_link: bool = False
) -> None:
    """Under LOCK: carry out :func:`ensemble.decide.signal.on_signal` for one signal.

    An ``("EXIT", sender, reason)`` message that a link produced (a
    :data:`~ensemble.decide.signal.LINK` signal, or ``via_link``: linking to a dead
    process) is remembered, for :func:`ensemble.unlink` to take back.
    """
    if target.reason is not ALIVE:
        return
    links = target.links
    linked = sender is not None and links is not None and sender in links
    outcome = _signal.on_signal(
        kind, reason, trapping=target.trap, self_sent=sender is target, linked=linked
    )
    if outcome is _signal.IGNORE:
        return
    if kind == _signal.LINK and links:
        links.discard(sender)  # an acted-on link signal removes the link
    if type(outcome) is _signal.Deliver:
        if target.dying is ALIVE:
            msg = ("EXIT", sender, outcome.reason)
            mailbox_of(target).append(msg)
            if kind == _signal.LINK or via_link:
                _remember_link_exit(target, sender, msg)
            _wake_locked(target, _life.SIGNAL)
    else:
        doom_locked(target, outcome.reason)


#: A process remembers at least this many link EXIT messages before it forgets
#: the ones it has received.
_LINK_EXITS_KEPT = 32


def _remember_link_exit(p: Pid, sender: Any, msg: tuple) -> None:
    """Under LOCK: ``msg`` in ``p``'s mailbox came from its link with ``sender``.

    The table holds the message itself, so identity finds it again.  Entries
    for messages already received are dropped once the table outgrows twice
    the mailbox (amortised: each drop pays for the inserts since the last).
    """
    kept = p.link_exits
    if kept is None:
        kept = p.link_exits = {}
    kept[sender] = msg
    if len(kept) > _LINK_EXITS_KEPT:
        waiting = list(p.mailbox)  # a C-level copy: no other thread runs meanwhile
        if len(kept) > 2 * len(waiting):
            present = {id(m) for m in waiting}
            p.link_exits = {s: m for s, m in kept.items() if id(m) in present}


def take_link_exit(p: Pid, sender: Any) -> None:
    """In ``p``'s own greenlet: remove the EXIT message ``p``'s link with ``sender`` produced, if still waiting."""
    with LOCK:
        kept = p.link_exits
        msg = kept.pop(sender, None) if kept else None
    if msg is None:
        return
    mailbox = p.mailbox
    for i, m in enumerate(list(mailbox)):  # only the owner removes: indices hold
        if m is msg:
            del mailbox[i]
            return


def doom_locked(p: Pid, reason: Any) -> None:
    """Under LOCK: ``p`` must die of ``reason``: settle its exit now, then unwind its greenlet.

    The exit settles at once and for good (as Erlang's kill): links and
    monitors fire, the name is released, ``is_alive`` answers False.  A
    greenlet still to unwind gets :class:`ExitSignal` thrown in from its own
    hub; a hibernating or not yet started process has none.
    """
    if p.dying is not ALIVE or p.reason is not ALIVE:
        return
    p.dying = reason
    p.life = _life.step(p.life, _life.EXIT)  # DEAD already, though a cascade may settle it later
    token = p._wait
    if token:
        try:
            token.pop()  # claimed: no message wake will land on the doomed park
        except IndexError:
            pass
    _settle_locked(p, reason, None)
    g = p._glet
    if g is not None:
        if not p.shell:
            DOOMED[g] = p
        p.carrier.call_soon(_throw_doom, p)


def _throw_doom(p: Pid) -> None:
    """In ``p``'s hub: throw the doom into ``p``'s greenlet unless it has had it already."""
    g = p._glet
    if g is None or p._raised or g.dead or not g:
        return
    if p.shell and SHELLS.get(g) is not p:
        return  # that greenlet has a new shell process by now
    if g is getcurrent():
        return
    p._raised += 1
    p._wait = _NOT_WAITING  # no stale wake switches into it once the doom is thrown
    p.mailbox.clear()  # here, in its own thread, nothing is scanning it
    g.throw(ExitSignal(p.dying))


# --------------------------------------------------------------------------
# Running a process
# --------------------------------------------------------------------------


def start(p: Pid) -> None:
    """Start ``p``'s greenlet on its carrier (any thread)."""
    c = p.carrier
    if get_ident() == c.ident:
        _start_here(p)
    else:
        c.loop.run_callback_threadsafe(_start_here, p)


def _start_locked(p: Pid) -> None:
    """Under LOCK: (re)start a hibernated process on its carrier, or on default."""
    c = p.carrier
    if c.closing:
        from ._pools import default_carrier

        p.carrier = default_carrier()
        p.dispatcher = "default"
    start(p)


def _start_here(p: Pid) -> None:
    """In the carrier's thread: give ``p`` a greenlet (a free one of this carrier's, else a new one)
    and schedule its first run."""
    c = p.carrier
    free = c.free
    if free:
        g = free.pop()
        g.gr_context = None  # a fresh, empty context, as a new greenlet's
    else:
        g = ProcessGreenlet(_run, c.hub)
    g.ensemble_pid = p
    p._glet = g
    c.live += 1
    c.loop.run_callback(g.switch)  # no arguments: a tuple passed here would live as long as g


#: Free greenlets kept per carrier (see :func:`_run`): about 2 KiB each (a saved C stack).
FREE_MAX = 128
#: ``sys.getrefcount`` of a process greenlet in :func:`_run` when nothing but the running thread
#: and ``_run`` itself refers to it (measured once, see :func:`_free_refs`).
_FREE_REFS: list = []


def _run() -> None:
    """A process greenlet's life: run a process (:func:`_body`), then, if nothing else can reach
    this greenlet, wait in its carrier's free list to run the next process spawned there.

    A new greenlet that runs Python code costs a fresh frame stack (CPython 3.11 maps one per
    greenlet, and unmaps it when the greenlet ends): about 7 us a spawn.  Reused, it costs
    nothing.  A greenlet is reused only when no reference to it is left but this frame's and the
    thread's (``sys.getrefcount``), and no weak reference (``gevent.local`` keys on those): so no
    stray switch, throw or greenlet-local value of the ended process can reach the next one.
    Its context variables start empty, as a new greenlet's (:func:`_start_here`).
    """
    g = getcurrent()
    while True:
        c = _body()
        if c is None or c.closing or len(c.free) >= FREE_MAX or _getweakrefcount(g):
            return
        refs = _FREE_REFS[0] if _FREE_REFS else _free_refs()
        if _getrefcount(g) != refs:
            return
        g.ensemble_pid = None
        c.free.append(g)
        while g.ensemble_pid is None:  # _start_here sets it, then switches in from a hub callback
            _switch(c.hub)


def _free_refs() -> int:
    """What ``sys.getrefcount`` answers for a greenlet held as :func:`_run` holds its own (measured
    on a greenlet of this interpreter: the count differs between Python versions)."""
    def probe() -> int:
        g = getcurrent()
        return _getrefcount(g)

    _FREE_REFS.append(greenlet(probe).switch())
    return _FREE_REFS[0]


def _body() -> Carrier | None:
    """A process's greenlet: run its function, then settle its exit; answer the carrier it ran on
    (None: it hibernated).

    It runs ``fn`` with its arguments spelled out, not as ``fn(*args)``: for a Python function
    that call stays in this interpreter loop, where ``fn(*args)`` nests a second one in C,
    whose C frame every parked process would keep in its saved stack (about 370 bytes).
    """
    p = getcurrent().ensemble_pid
    value = None
    try:
        failed = None if p._rare.image is None else _restore(p)  # p.image, read directly
        if p.dying is not ALIVE:
            reason = p.dying
        elif failed is not None:
            reason = failed
        else:
            fn = p.fn
            args = p.args
            n = len(args)
            if n == 0:
                value = fn()
            elif n == 1:
                value = fn(args[0])
            elif n == 2:
                value = fn(args[0], args[1])
            elif n == 3:
                value = fn(args[0], args[1], args[2])
            else:
                value = fn(*args)
            del fn, args
            reason = _signal.NORMAL if p.dying is ALIVE else p.dying
    except Hibernate as h:
        if p.dying is ALIVE and _hibernate(p, h):
            return None
        reason = p.dying
    except ExitSignal:
        reason = p.dying
    except BaseException as e:  # Exit, or a crash: the reason is the exception
        if p.dying is not ALIVE:
            reason = p.dying
        elif type(e) is Exit or isinstance(e, Exit):
            reason = e.reason
        else:
            reason = e
            for hook in crash_hooks:
                hook(p, e)
    finally:
        c = p.carrier  # Carrier.process_ended, inlined
        c.live -= 1
        if c.closing and c.live == 0:
            c._stop_if_idle()
    g, p._glet = p._glet, None  # its code has stopped: no straggler, hooks below may call ensemble
    if DOOMED:
        DOOMED.pop(g, None)
    with LOCK:  # settle(p, reason, value), inlined
        _settle_locked(p, reason, value)
    if _SETTLED:
        flush_settled()
    return c


def _hibernate(p: Pid, h: Hibernate) -> bool:
    """The greenlet ends; the process waits for mail or a signal to run ``h.fn``.

    For passivate (``h.to_disk``) with no mail waiting, fn, args and the state
    are first written to an image file, here in the process's own greenlet and
    outside LOCK; refused, the process hibernates in memory.  Answers False,
    changing nothing, if an exit signal doomed the process meanwhile (the caller
    settles it).
    """
    p.fn = h.fn
    p.args = h.args_
    image = None
    if getattr(h, "to_disk", False) and not p.mailbox:
        image = IMAGES.write_image(p)
    with LOCK:
        hibernated = p.dying is ALIVE
        if hibernated:
            p._glet = None
            p.life = _life.step(p.life, _life.HIBERNATE)
            if image is not None and not p.mailbox:
                p.life = _life.step(p.life, _life.PASSIVATE)
                p.image, image = image, None
                p.fn = p.args = p.state = None
            if p.mailbox:
                _wake_locked(p, _life.MAIL)
    if image is not None:  # written but not kept: mail or a doom came meanwhile
        IMAGES.drop_file(image)
    return hibernated


def _restore(p: Pid) -> Any:
    """In the woken greenlet, outside LOCK: read a passivated process's fn, args and state back."""
    return IMAGES.restore(p)


# --------------------------------------------------------------------------
# Exit: settle in Erlang's order
# --------------------------------------------------------------------------


def settle(p: Pid, reason: Any, value: Any) -> None:
    """Record ``p``'s exit and tell its links, monitors and joiners (any thread)."""
    with LOCK:
        _settle_locked(p, reason, value)
    if _SETTLED:
        flush_settled()


#: Processes settled under LOCK whose joiners and exit hooks still have to run.
#: Appended under LOCK; drained after LOCK is released by whoever gets there.
_SETTLED: deque = deque()


#: Greenlets running :func:`flush_settled`: the hooks are the runtime's, so a
#: dead process that runs them (``exit(self(), r)``) may call ensemble there.
_HOOKING: set = set()


def flush_settled() -> None:
    """Outside LOCK: run the joiners and exit hooks of every newly settled process."""
    if not _SETTLED:
        return
    g = getcurrent()
    nested = g in _HOOKING
    _HOOKING.add(g)
    try:
        while _SETTLED:
            try:
                p, waiters = _SETTLED.popleft()
            except IndexError:
                return
            if waiters:
                for w in waiters:
                    if type(w) is Pid:  # a process waiting in join: wake its park
                        wake(w)
                    else:
                        w()
            rare = p._rare
            if rare.timers:
                for hook in exit_hooks:
                    hook(p)
            if rare.image is not None:  # it ended while passivated
                IMAGES.discard(p)
    finally:
        if not nested:
            _HOOKING.discard(g)


#: Exits to settle in this LOCK section: a settle's link signals doom more
#: processes, and those settle in turn.  A queue instead of recursion, so a
#: long chain of links cannot overflow the stack.  Touched under LOCK only.
_CASCADE: deque = deque()
_cascading = [False]


def _settle_locked(p: Pid, reason: Any, value: Any) -> None:
    """Under LOCK: close, release the name, leave the table, then links, then monitors.

    The exits this one causes through links settle before this returns.
    The caller must call :func:`flush_settled` once it has released LOCK.
    """
    if p.reason is not ALIVE:
        return
    if _cascading[0]:
        _CASCADE.append((p, reason, value))
        return  # the outermost call settles it
    _cascading[0] = True
    try:
        _settle_one_locked(p, reason, value)
        while _CASCADE:
            _settle_one_locked(*_CASCADE.popleft())
    finally:
        _cascading[0] = False


def _settle_one_locked(p: Pid, reason: Any, value: Any) -> None:
    if p.reason is not ALIVE:
        return
    p.reason = reason
    if value is not None:
        p.value = value
    p.life = DEAD
    if p.dying is ALIVE:
        p.dying = reason
    # 1. links and monitors close: later link/monitor calls see it dead
    links, p.links = p.links, None
    watchers, p.watchers = p.watchers, None
    held, p.monitors = p.monitors, None
    p.aliases = None
    # 2. the name is released
    rare = p._rare
    name = rare.name
    if name is not None and NAMES.get(name) is p:
        del NAMES[name]
    # 3. the monitors it held are dropped
    if held:
        for n, (target, _shown, _ref) in held.items():
            if type(target) is Pid:
                if target.watchers is not None:
                    target.watchers.pop(n, None)
            elif REMOTE is not None:  # on another node: it forgets this watcher
                REMOTE.demonitor(target, n)
    # 4. it leaves the process table
    TABLE.pop(p.id, None)
    # 5. every linked process gets a link signal with the reason, normal included;
    #    the link is gone from its side too, whether the signal was acted on or not
    if links:
        for q in links:
            if type(q) is RemotePid:  # the signal crosses to its node
                if REMOTE is not None:
                    REMOTE.exit_signal(q, p, reason, True)
                continue
            signal_locked(q, _signal.LINK, reason, p)
            if q.links:
                q.links.discard(p)
    # 6. every monitor is notified
    if watchers:
        for n, (w, shown, ref) in watchers.items():
            if type(w) is RemotePid:  # a watcher on another node: keyed (its node, its ref's int)
                if REMOTE is not None:
                    REMOTE.down(w, n[1], reason)
                continue
            if w.monitors is not None:
                w.monitors.pop(n, None)
            deliver_locked(w, ("DOWN", ref, "process", shown, reason))
    if p._glet is None:  # else its greenlet may be scanning it: cleared in its own thread
        p.mailbox.clear()
    waiters = _WAITERS.pop(p, None) if _WAITERS else None
    if rare is not _NO_RARE:
        rare.link_exits = None
        if waiters or rare.timers or rare.image is not None:
            _SETTLED.append((p, waiters))
    elif waiters:
        _SETTLED.append((p, waiters))


def deliver_locked(p: Pid, msg: Any) -> None:
    """Under LOCK: :func:`deliver`."""
    if p.reason is not ALIVE:
        return
    try:
        p.mailbox.append(msg)
    except NoMailYet:
        mailbox_of(p).append(msg)
    token = p._wait
    if token:  # wake(p), inlined: claim the park, then resume it
        try:
            token.pop()
        except IndexError:
            return
        resume_claimed(p, token)
    elif p.life is not RUNNING:
        _wake_locked(p, _life.MAIL)


#: The joiners of each live process that has any: ``{Pid: [callable or waiting Pid, ...]}``.
#: Mutated under LOCK; a process's entry goes when it settles (the process, not its record,
#: holds none: most processes are never joined).
_WAITERS: dict = {}


def on_exit(p: Pid, callback: Any) -> bool:
    """Run ``callback()`` once ``p`` has settled; False (and no call) if it already has.

    ``callback`` may instead be a :class:`Pid` (a process waiting in ``join``): its park is
    woken (:func:`wake`), as a message wakes it.  Callbacks run outside LOCK, on the thread
    that settled ``p``, in the order they were added.
    """
    with LOCK:
        if p.reason is not ALIVE:
            return False
        waiters = _WAITERS.get(p)
        if waiters is None:
            _WAITERS[p] = [callback]
        else:
            waiters.append(callback)
        return True


def cancel_on_exit(p: Pid, callback: Any) -> None:
    """Withdraw ``callback`` (one added with :func:`on_exit`), if still waiting."""
    with LOCK:
        waiters = _WAITERS.get(p)
        if waiters is not None:
            try:
                waiters.remove(callback)
            except ValueError:
                return
            if not waiters:
                del _WAITERS[p]


# --------------------------------------------------------------------------
# Aliases (send side)
# --------------------------------------------------------------------------


def deliver_alias(a: Alias, msg: Any) -> None:
    """Deliver through an alias while its owner keeps it active; else drop."""
    owner = a._owner
    aliases = owner.aliases
    if aliases is not None and a._n in aliases:
        deliver(owner, msg)


# --------------------------------------------------------------------------
# Monitors (the tables are keyed by a ref's int: C-speed hashing on hot paths)
# --------------------------------------------------------------------------


def link_locked(a: Pid, b: Pid) -> None:
    """Under LOCK: link the live processes ``a`` and ``b`` (each gets its set on its first link)."""
    if a.links is NO_LINKS:
        a.links = set()
    a.links.add(b)
    if b.links is NO_LINKS:
        b.links = set()
    b.links.add(a)


def add_monitor_locked(watcher: Pid, target: Pid, shown: Any, ref: Any) -> None:
    """Under LOCK: ``watcher`` monitors the live ``target`` under ``ref``."""
    n = ref._n
    if target.watchers is None:
        target.watchers = {}
    target.watchers[n] = (watcher, shown, ref)
    if watcher.monitors is None:
        watcher.monitors = {}
    watcher.monitors[n] = (target, shown, ref)


def drop_monitor_locked(watcher: Pid, ref: Any) -> None:
    """Under LOCK: remove ``watcher``'s monitor ``ref``, if it holds it."""
    monitors = watcher.monitors
    if not monitors:
        return
    held = monitors.get(ref._n)
    if held is not None and held[2] == ref:
        del monitors[ref._n]
        target = held[0]
        if type(target) is not Pid:  # on another node: it forgets the watcher
            if REMOTE is not None:
                REMOTE.demonitor(target, ref._n)
        elif target.watchers is not None:
            target.watchers.pop(ref._n, None)
