"""The reporter's boundary without another process: report frames, and the start identity
of this one."""

from __future__ import annotations

import time

import msgpack
import pytest

from services.hook_reporter.checks import identity_refusal
from shared.hook_reports import Launch, ReportRefused, parse_report
from shared.identity import current_identity
from tests.support.hook_reports import report_for

ME = current_identity()


def frame(kind="activity", **fields):
    base = {"v": 1, "kind": kind, "session": "sess-1", "pid": ME.pid, "start_time": ME.start_time, "at": time.time()}
    return msgpack.packb({**base, **(fields or {"state": "working"})})


def test_every_kind_parses_to_exactly_its_fields():
    launch = {"exe": "/usr/bin/python3", "script": "/opt/hermes/bin/hermes", "root_pid": ME.pid}
    cases = {
        "native_id": {"native_id": "conv_123", "resumed": True, "launch": launch},
        "continuation": {"continuation_ids": ["c1", "c2"]},
        "activity": {"state": "idle"},
        "attention": {"reason": "owner_approval"},
        "release": {"reason": "session_end"},
    }
    for kind, fields in cases.items():
        report = parse_report(frame(kind, **fields))
        assert (report.kind, report.session, report.pid) == (kind, "sess-1", ME.pid)
        wire = report.to_wire()
        assert "launch" not in wire and "v" not in wire
    assert parse_report(frame("native_id", **cases["native_id"])).launch == Launch(**launch)


# Named by position: the frames hold this process's pid and clock, and every process that
# collects the suite (each parallel worker) must name its tests alike.
MALFORMED = [
    b"\xc1",
    msgpack.packb([1, 2]),
    msgpack.packb({"v": 2, "kind": "activity"}),
    frame("activity", state="typing"),
    frame("activity", state="working", text="the user's prompt"),  # a payload field: refused
    frame("native_id", native_id="rm -rf /", resumed=False, launch={"exe": None, "script": None, "root_pid": None}),
    frame("native_id", native_id="x", resumed=False, launch={"exe": "relative/py", "script": None, "root_pid": None}),
    frame("continuation", continuation_ids=[]),
    frame("continuation", continuation_ids=["a b"]),
    frame("continuation", continuation_ids=[f"c{i}" for i in range(17)]),
    frame("release", reason="crashed"),
    frame("nonsense", x=1),
    msgpack.packb(
        {"v": 1, "kind": "activity", "session": "s", "pid": True, "start_time": 1, "at": 1.0, "state": "idle"}
    ),
    msgpack.packb(
        {"v": 1, "kind": "activity", "session": "has space", "pid": 1, "start_time": 1, "at": 1.0, "state": "idle"}
    ),
    b"\x81" + b"\xa1a" * 2000,
    # An id is an id whole: a trailing newline (which `$` would let through) is not one.
    msgpack.packb(
        {"v": 1, "kind": "activity", "session": "sess-1\n", "pid": 1, "start_time": 1, "at": 1.0, "state": "idle"}
    ),
    frame("native_id", native_id="conv_1\n", resumed=False, launch={"exe": None, "script": None, "root_pid": None}),
    frame("continuation", continuation_ids=["c1", "c2\n"]),
    # Values that cannot even be looked up in a set of words.
    frame("activity", state=["working"]),
    frame("release", reason={"session_end": 1}),
    # Over what a client ever sends, though every field is well-formed.
    frame("native_id", native_id="x", resumed=False, launch={"exe": "/x" * 600, "script": None, "root_pid": None}),
]


@pytest.mark.parametrize("raw", MALFORMED, ids=[f"malformed{i}" for i in range(len(MALFORMED))])
def test_anything_else_is_refused_as_malformed(raw):
    with pytest.raises(ReportRefused) as info:
        parse_report(raw)
    assert info.value.reason == "malformed"


def test_a_live_reporter_passes_and_a_forged_start_time_does_not():
    assert identity_refusal(report_for(ME.pid, ME.start_time)) is None
    assert identity_refusal(report_for(ME.pid, ME.start_time + 1)) == "identity_mismatch"
