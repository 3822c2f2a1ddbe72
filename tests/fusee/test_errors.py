"""Laws and examples for fusee.errors: stable codes, kept arguments, clear messages."""

from __future__ import annotations

import pickle

import pytest

from fusee import errors
from fusee.errors import (
    CODES,
    AlreadyExists,
    Busy,
    Cancelled,
    ChildFailed,
    Corrupt,
    DeterminismError,
    Error,
    Failed,
    NotFound,
    NotSerializable,
    StepFailed,
    Terminated,
    TimedOut,
    UnknownWorkflow,
    Locked,
    WrongLayout,
    StorageFull,
    StorageFailed,
    ShardCrashed,
    EngineFailed,
    NotRunning,
    UpdateRejected,
    UpdateFailed,
    InvalidToken,
    AlreadySettled,
    NotPaused,
    StreamClosed,
    UnknownObjectType,
    UnknownHandler,
    CallFailed,
    VersionMismatch,
    ReadOnlyState,
    failure_of,
)

# (class, constructor args, attribute names in order, code)
CASES = [
    (Busy, (3,), ("shard",), "busy"),
    (NotFound, ("order-1",), ("id",), "not_found"),
    (AlreadyExists, ("order-1", "running"), ("id", "holder"), "already_exists"),
    (UnknownWorkflow, ("checkout", ["greet", "refund"]), ("name", "registered"), "unknown_workflow"),
    (StepFailed, ("charge", {"type": "ValueError", "message": "no funds"}), ("name", "failure"), "step_failed"),
    (Failed, ({"type": "KeyError", "message": "'x'"},), ("failure",), "failed"),
    (Cancelled, ("customer asked",), ("reason",), "cancelled"),
    (Terminated, ("operator",), ("reason",), "terminated"),
    (DeterminismError, (4, ("step", "charge"), ("sleep", "pause")), ("position", "expected", "got"), "determinism"),
    (Corrupt, ("/data/shard-0/00000001.seg", 8192, "crc mismatch"), ("path", "offset", "why"), "corrupt"),
    (NotSerializable, ({1, 2}, "a set", "input['items'][2]"), ("value", "why", "path"), "not_serializable"),
    (ChildFailed, ("pay-1", {"type": "KeyError", "message": "'x'"}, "failed"), ("id", "failure", "status"), "child_failed"),
    (TimedOut, (1700000000.0,), ("deadline",), "timed_out"),
    (Locked, ("/data", 4242), ("path", "pid"), "locked"),
    (WrongLayout, ("/data", "it was made with shards=4"), ("path", "why"), "wrong_layout"),
    (StorageFull, ("writing", "/data/shard-0/3.seg", 28, "No space left on device"), ("op", "path", "errno", "why"), "storage_full"),
    (StorageFailed, ("writing", "/data/shard-0/3.seg", 5, "Input/output error"), ("op", "path", "errno", "why"), "storage_failed"),
    (ShardCrashed, (2, "RuntimeError('bug')"), ("shard", "reason"), "shard_crashed"),
    (EngineFailed, ("3 restarts in 5 s",), ("why",), "engine_failed"),
    (NotRunning, ("order-1", "completed", "update 'add'"), ("id", "status", "what"), "not_running"),
    (UpdateRejected, ("order-1", "add", "u-1", {"type": "ValueError", "message": "negative"}), ("id", "name", "update_id", "failure"), "update_rejected"),
    (UpdateFailed, ("order-1", "add", "u-1", {"type": "KeyError", "message": "'x'"}), ("id", "name", "update_id", "failure"), "update_failed"),
    (InvalidToken, ("fz1.0.0.x.y", "malformed"), ("token", "why"), "invalid_token"),
    (AlreadySettled, ("fz1.0.0.x.y", "ok"), ("token", "status"), "already_settled"),
    (NotPaused, ("order-1", "running"), ("id", "status"), "not_paused"),
    (StreamClosed, ("chat-1", "tokens"), ("id", "stream"), "stream_closed"),
    (UnknownObjectType, ("cart", ["user"]), ("name", "registered"), "unknown_object_type"),
    (UnknownHandler, ("cart", "pay", ["add", "total"]), ("type", "handler", "handlers"), "unknown_handler"),
    (CallFailed, ("cart", "alice", "add", "c-1", {"type": "ValueError", "message": "no sku"}), ("type", "key", "handler", "call_id", "failure"), "call_failed"),
    (VersionMismatch, ("cart", "alice", 3, 4), ("type", "key", "expected", "actual"), "version_mismatch"),
    (ReadOnlyState, ("cart", "total"), ("type", "handler"), "read_only_state"),
]


@pytest.mark.parametrize(("cls", "args", "names", "code"), CASES, ids=[c[0].__name__ for c in CASES])
def test_each_error_has_its_stable_code(cls, args, names, code):
    """Each class's code is the binding string, on the class and on instances."""
    assert (code, code) == (cls.code, cls(*args).code)


@pytest.mark.parametrize(("cls", "args", "names", "code"), CASES, ids=[c[0].__name__ for c in CASES])
def test_each_error_keeps_its_args_as_attributes(cls, args, names, code):
    """The constructor's arguments come back as ``args`` and as named attributes."""
    e = cls(*args)
    assert args == e.args
    assert args == tuple(getattr(e, n) for n in names)


@pytest.mark.parametrize(("cls", "args", "names", "code"), CASES, ids=[c[0].__name__ for c in CASES])
def test_each_error_is_a_fusee_error_and_pickles(cls, args, names, code):
    """Every error is an ``Error`` and survives pickling with its args and message."""
    e = cls(*args)
    back = pickle.loads(pickle.dumps(e))
    assert isinstance(e, Error)
    assert (cls, args, str(e)) == (type(back), back.args, str(back))


@pytest.mark.parametrize(("cls", "args", "names", "code"), CASES, ids=[c[0].__name__ for c in CASES])
def test_each_message_is_one_nonempty_line(cls, args, names, code):
    """``str(err)`` is a single non-empty line."""
    text = str(cls(*args))
    assert text and "\n" not in text


def test_codes_map_each_code_to_its_class():
    """CODES lists every subclass once under its code."""
    expected = {code: cls for cls, _, _, code in CASES}
    assert expected == CODES


def test_unknown_workflow_lists_what_is_registered():
    """The message names the missing type and each registered one."""
    text = str(UnknownWorkflow("checkout", ["greet", "refund"]))
    assert ("'checkout'" in text, "'greet'" in text, "'refund'" in text) == (True, True, True)


def test_unknown_workflow_with_nothing_registered_says_none():
    """With nothing registered the message says so."""
    assert "registered: none" in str(UnknownWorkflow("checkout", []))


def test_corrupt_says_where():
    """A Corrupt message names the file, the offset and the reason."""
    expected = "corrupt journal: /d/s0.seg at offset 4096: crc mismatch"
    assert expected == str(Corrupt("/d/s0.seg", 4096, "crc mismatch"))


def test_not_serializable_names_the_path():
    """A NotSerializable message starts from the path to the bad value."""
    expected = "not serializable: input['items'][2]: a set"
    assert expected == str(NotSerializable({1}, "a set", "input['items'][2]"))


def test_not_serializable_path_is_optional():
    """Without a path the message is the reason alone."""
    e = NotSerializable(b"x", "bytes")
    assert (None, "not serializable: bytes") == (e.path, str(e))


def test_step_failed_shows_the_usual_failure_as_type_and_message():
    """A {type, message} failure reads ``Type: message`` in the message."""
    expected = "step 'charge' failed: ValueError: no funds"
    assert expected == str(StepFailed("charge", {"type": "ValueError", "message": "no funds"}))


def test_other_failures_show_as_repr():
    """A failure of another shape is shown by its repr."""
    assert "the workflow failed: 'boom'" == str(Failed("boom"))


def test_defaults_of_optional_args():
    """Busy, AlreadyExists, Failed, Cancelled and Terminated have defaults for their optional args."""
    expected = ((None,), ("x", None), (None,), (None,), (None,))
    actual = (Busy().args, AlreadyExists("x").args, Failed().args, Cancelled().args, Terminated().args)
    assert expected == actual


def test_failure_of_describes_an_exception():
    """failure_of gives the exception's class name and message."""
    assert {"type": "ValueError", "message": "bad"} == failure_of(ValueError("bad"))


def test_failure_of_survives_a_broken_str():
    """An exception whose __str__ raises still gets a failure."""

    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert "Broken" in failure_of(Broken())["message"]


def test_all_lists_public_names():
    """Every name in __all__ exists."""
    assert [] == [n for n in errors.__all__ if not hasattr(errors, n)]


def test_a_failure_with_lone_surrogates_is_recordable():
    """An exception whose message holds a lone surrogate (a surrogateescape'd file name) still gives a
    failure the journal can hold: the surrogate is written as an escape."""
    from fusee import records

    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    failure = errors.failure_of(FileNotFoundError(f"no {name}"))
    assert failure == {"type": "FileNotFoundError", "message": "no caf\\udce9.txt"}
    records.encode_record(records.Done(1, "failed", 0.0, failure))  # would raise NotSerializable before
