"""The operator plugin's standard-library report sender against a real zmq PULL socket, the
hook reporter's intake: it speaks ZMTP well enough that zmq takes each frame whole, and the
frame is the one ``shared.hooks`` sends; with nobody listening it counts and raises nothing."""

from __future__ import annotations

import os

import zmq

from shared.hook_reports import parse_report
from shared.identity import current_identity
from shared.protocol import unpack
from tests.support.operator_plugin import payload

hook_wire = payload("hook_wire")


def test_a_report_reaches_a_zmq_pull_socket_as_the_frame_the_reporter_parses(short_dir):
    intake = f"ipc://{short_dir}/hook_reporter.in"
    env = {
        "POHUNEK_SESSION_ID": "s-1",
        "POHUNEK_HOOK_ENDPOINT": intake,
        "POHUNEK_LAUNCH_EXE": "/usr/bin/python3",
        "POHUNEK_PTY_ROOT_PID": "7",
    }
    context = zmq.Context()
    try:
        pull = context.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.bind(intake)
        reporter = hook_wire.Reporter(env)
        assert reporter.report("native_id", lambda: {"native_id": "conv", "resumed": False, "launch": reporter.launch})
        assert reporter.report("activity", lambda: {"state": "working"})
        frames = []
        for _ in range(2):
            assert pull.poll(10_000), "zmq never took the frame"
            frames.append(pull.recv())
        first, second = (parse_report(raw) for raw in frames)
        me = current_identity()
        assert (first.kind, first.session, first.pid, first.start_time) == (
            "native_id",
            "s-1",
            os.getpid(),
            me.start_time,
        )
        assert first.fields == {"native_id": "conv", "resumed": False}
        assert unpack(frames[0])["launch"] == {"exe": "/usr/bin/python3", "script": None, "root_pid": 7}
        assert (second.kind, second.fields) == ("activity", {"state": "working"})
        assert reporter.counters()["sent"] == 2
    finally:
        context.destroy(linger=0)


def test_with_no_reporter_a_report_is_counted_not_accepted_and_nothing_raises(short_dir):
    env = {"POHUNEK_SESSION_ID": "s-1", "POHUNEK_HOOK_ENDPOINT": f"ipc://{short_dir}/nobody.in"}
    reporter = hook_wire.Reporter(env)
    assert reporter.report("activity", lambda: {"state": "working"}) is False
    assert reporter.counters() == {"sent": 0, "unmanaged": 0, "refused": 0, "not_accepted": 1, "error": 0}


def test_a_report_outside_the_vocabulary_is_refused_before_any_socket(short_dir):
    env = {"POHUNEK_SESSION_ID": "s-1", "POHUNEK_HOOK_ENDPOINT": f"ipc://{short_dir}/nobody.in"}
    reporter = hook_wire.Reporter(env)

    def fields():
        raise hook_wire._Refused()

    assert reporter.report("activity", fields) is False
    assert reporter.counters()["refused"] == 1
