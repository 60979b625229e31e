"""The reporter's boundary: report frames, start identity and the launch identity rule,
checked against real processes (a really recycled pid where this machine allows it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import msgpack
import pytest

from services.hook_reporter.checks import identity_refusal, launch_refusal
from shared.hook_reports import Launch, Report, ReportRefused, parse_report
from shared.identity import current_identity, process_identity

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


@pytest.mark.parametrize(
    "raw",
    [
        b"\xc1",
        msgpack.packb([1, 2]),
        msgpack.packb({"v": 2, "kind": "activity"}),
        frame("activity", state="typing"),
        frame("activity", state="working", text="the user's prompt"),  # a payload field: refused
        frame("native_id", native_id="rm -rf /", resumed=False, launch={"exe": None, "script": None, "root_pid": None}),
        frame(
            "native_id", native_id="x", resumed=False, launch={"exe": "relative/py", "script": None, "root_pid": None}
        ),
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
    ],
)
def test_anything_else_is_refused_as_malformed(raw):
    with pytest.raises(ReportRefused) as info:
        parse_report(raw)
    assert info.value.reason == "malformed"


def report_for(pid, start_time, launch=None):
    return Report("native_id" if launch else "activity", "s", pid, start_time, time.time(), {}, launch)


def test_a_live_reporter_passes_and_a_forged_start_time_does_not():
    assert identity_refusal(report_for(ME.pid, ME.start_time)) is None
    assert identity_refusal(report_for(ME.pid, ME.start_time + 1)) == "identity_mismatch"


def test_a_reporter_that_is_gone_is_refused():
    child = subprocess.Popen(["true"])
    ident = process_identity(child.pid)
    child.wait()
    assert identity_refusal(report_for(ident.pid, ident.start_time)) == "process_gone"


def _spawn_with_pid(pid: int) -> subprocess.Popen | None:
    """A new process holding ``pid``, by setting the kernel's last-pid (root, Linux only)."""
    for _ in range(20):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
        except OSError:
            return None
        child = subprocess.Popen(["sleep", "30"])
        if child.pid == pid:
            return child
        child.kill()
        child.wait()
    return None


def test_a_really_recycled_pid_is_not_taken_for_the_reporter():
    first = subprocess.Popen(["sleep", "30"])
    reported = process_identity(first.pid)
    first.kill()
    first.wait()
    # Start times count clock ticks (10 ms): a pid reused within the same tick cannot be told
    # apart by anyone, the daemon included. Real reuse waits for the pid space to wrap.
    time.sleep(0.05)
    second = _spawn_with_pid(reported.pid)
    if second is None:
        pytest.skip(
            "this machine does not let a test choose the next pid (needs root and /proc/sys/kernel/ns_last_pid)"
        )
    try:
        assert process_identity(second.pid).start_time != reported.start_time
        assert identity_refusal(report_for(reported.pid, reported.start_time)) == "identity_mismatch"
    finally:
        second.kill()
        second.wait()


@pytest.fixture
def entrypoint(tmp_path):
    """A ``hermes``-like entry script whose shebang interpreter runs it itself."""
    script = tmp_path / "hermes"
    script.write_text(f"#!{os.path.realpath(sys.executable)}\nimport time\nprint('up', flush=True)\ntime.sleep(30)\n")
    script.chmod(0o755)
    return script


def started(argv, **kwargs):
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, **kwargs)
    assert process.stdout.readline().strip() == b"up"
    return process


def test_the_pty_root_on_its_launch_image_and_script_may_set_the_native_reference(entrypoint, tmp_path):
    root = started([str(entrypoint)])
    try:
        frozen = Launch(os.path.realpath(sys.executable), str(entrypoint), root.pid)
        ident = process_identity(root.pid)
        assert launch_refusal(report_for(root.pid, ident.start_time, frozen)) is None
        # The same script started as a relative path from its own directory is the same script.
        relative = started([sys.executable, "hermes"], cwd=tmp_path)
        try:
            again = Launch(os.path.realpath(sys.executable), str(entrypoint), relative.pid)
            assert launch_refusal(report_for(relative.pid, 0, again)) is None
        finally:
            relative.kill()
        # Another process of the session may not set it, even running the same script.
        assert launch_refusal(report_for(relative.pid, 0, frozen)) == "not_pty_root"
    finally:
        root.kill()


def test_an_interpreter_that_re_executes_another_image_is_refused(tmp_path):
    # The launcher froze /bin/sh as the shebang interpreter; the script exec's Python instead.
    shim = tmp_path / "hermes"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"print('up', flush=True); import time; time.sleep(30)\"\n")
    shim.chmod(0o755)
    process = started([str(shim)])
    try:
        frozen = Launch(os.path.realpath("/bin/sh"), str(shim), process.pid)
        assert launch_refusal(report_for(process.pid, 0, frozen)) == "image_mismatch"
    finally:
        process.kill()


def test_another_script_on_the_same_interpreter_is_refused(entrypoint, tmp_path):
    other = tmp_path / "other.py"
    other.write_text("import time\nprint('up', flush=True)\ntime.sleep(30)\n")
    process = started([sys.executable, str(other)])
    try:
        frozen = Launch(os.path.realpath(sys.executable), str(entrypoint), process.pid)
        assert launch_refusal(report_for(process.pid, 0, frozen)) == "cmdline_mismatch"
        missing = Launch(None, None, process.pid)  # a session left without a launch identity
        assert launch_refusal(report_for(process.pid, 0, missing)) == "image_mismatch"
    finally:
        process.kill()
