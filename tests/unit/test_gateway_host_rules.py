"""The gateway host's rules without its processes: what it does when a gateway exits, the
frames on its fork server's pipe, when a fork is refused, and where it refuses to run."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from fleet.cli_grammar import build_top_level_parser
from fleet.supervisors import supervisord as sv
from fleet.supervisors.host import HostUnsupported
from hermes_cli.commands import mesh as mesh_command
from services.gateway_host import frames, main
from services.gateway_host.forkserver import die_with_parent, fork_hazards
from services.gateway_host.supervision import START, STAY_DOWN, after_exit
from shared import restart_storm

NOW = 1000.0


def test_a_planned_restart_starts_again_at_once_and_a_clean_stop_or_broken_config_stays_down():
    crashes = (NOW - 10.0,)
    planned = after_exit(75, crashes, NOW)
    assert (planned.action, planned.delay, planned.crashes) == (START, 0.0, crashes)
    for code in (0, 78):
        decision = after_exit(code, crashes, NOW)
        assert (decision.action, decision.delay, decision.crashes) == (STAY_DOWN, 0.0, crashes), code
    assert "78" in after_exit(78, (), NOW).reason


def test_a_crash_starts_again_with_the_storm_rules_bounded_backoff():
    crashes: tuple[float, ...] = ()
    delays = []
    for second in range(restart_storm.MAX_STARTS + 3):
        decision = after_exit(-9 if second % 2 else 1, crashes, NOW + second)
        assert decision.action == START
        crashes = decision.crashes
        delays.append(decision.delay)
    assert delays == [0, 0, 0, 0, 0, 1, 2, 4]
    assert "signal 9" in after_exit(-9, (), NOW).reason and "exit 1" in after_exit(1, (), NOW).reason
    many = tuple(NOW - i for i in range(60))
    assert after_exit(1, many, NOW).delay == restart_storm.MAX_DELAY  # bounded
    # Crashes out of the window are forgotten: the next one starts at once.
    calm = after_exit(1, tuple(NOW - restart_storm.WINDOW - i for i in range(1, 20)), NOW)
    assert (calm.delay, calm.crashes) == (0.0, (NOW,))


def test_frames_split_on_newlines_and_a_line_too_long_is_one_refusal_that_shifts_nothing():
    lines = frames.Lines()
    assert lines.feed(b'{"op":"fork",') == []
    assert lines.feed(b'"profile":"a"}\n{"x"') == [b'{"op":"fork","profile":"a"}']
    assert lines.feed(b":1}\n") == [b'{"x":1}']
    out = lines.feed(b"y" * (frames.MAX_FRAME + 10))
    assert len(out) == 1 and isinstance(out[0], frames.FrameInvalid)
    assert lines.feed(b"y" * 5000) == []  # still the same line: refused once
    assert lines.feed(b'yyy\n{"op":"fork","profile":"b"}\n') == [b'{"op":"fork","profile":"b"}']
    [long_in_one] = lines.feed(b"z" * (frames.MAX_FRAME + 1) + b"\n")
    assert isinstance(long_in_one, frames.FrameInvalid) and long_in_one.detail == {"field": "frame"}


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (b"\xff\xfe", "frame"),
        (b"not json", "frame"),
        (b"[1, 2]", "frame"),
        (b'{"op": "exec", "profile": "a"}', "op"),
        (b'{"profile": "a"}', "op"),
        (b'{"op": "fork", "profile": "../etc"}', "profile"),
        (b'{"op": "fork", "profile": 7}', "profile"),
        (b'{"op": "fork", "profile": "a", "argv": ["sh"]}', "argv"),
    ],
)
def test_a_malformed_request_is_refused_naming_its_field(line, field):
    with pytest.raises(frames.FrameInvalid) as refused:
        frames.parse_request(line)
    assert refused.value.code == "fork_frame_invalid" and refused.value.detail == {"field": field}


def test_requests_and_events_round_trip_and_a_wrong_event_is_refused():
    assert frames.parse_request(frames.encode({"op": "fork", "profile": "a-1"}).rstrip(b"\n")) == "a-1"
    exited = {"event": "exited", "profile": "a", "pid": 12, "code": -9}
    assert frames.parse_event(frames.encode(exited).rstrip(b"\n")) == exited
    for bad in ({"event": "exited", "profile": "a", "pid": True, "code": 0}, {"event": "boom"}, {"pid": 1}):
        with pytest.raises(frames.FrameInvalid):
            frames.parse_event(json.dumps(bad).encode())
    with pytest.raises(ValueError):
        frames.encode({"op": "fork", "profile": "a" * frames.MAX_FRAME})


def test_a_fork_is_refused_while_another_thread_runs():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert any(h.endswith("threads") for h in fork_hazards())
    finally:
        stop.set()
        thread.join()


def test_the_host_and_its_gateways_refuse_a_platform_without_pdeathsig(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    with pytest.raises(HostUnsupported):
        die_with_parent(15)
    assert main.main(["--profiles", "a"]) == 78
    assert "Linux only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("platform", "flags", "hosted"),
    [
        ("linux", [], True),
        ("linux", ["--host"], True),
        ("linux", ["--programs"], False),
        ("darwin", [], False),
        ("darwin", ["--programs"], False),
    ],
)
def test_the_mesh_forks_from_the_host_by_default_where_it_runs(monkeypatch, platform, flags, hosted):
    monkeypatch.setattr(sys, "platform", platform)
    args = build_top_level_parser().parse_args(["mesh", "up", *flags])
    assert mesh_command._hosted(args) is hosted


def test_asking_for_the_host_and_for_programs_at_once_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as refused:
        build_top_level_parser().parse_args(["mesh", "up", "--host", "--programs"])
    assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_the_mesh_refuses_the_host_where_it_cannot_run(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(HostUnsupported):
        sv.up(tmp_path, ["a"], host=True)
    assert not (tmp_path / "mesh").exists()  # refused before anything was written
