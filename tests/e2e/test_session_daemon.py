"""The operator session daemon simulator driving a real ``hermes chat`` on a real PTY, through
the daemon's own client, with the real hook reporter carrying the chat's reports."""

from __future__ import annotations

import json
import os
import signal

import pytest

from shared.operator import protocol as p
from simulators.operator_sim.ops import SIM_CONFIGURE, SIM_COUNTERS, SIM_RECORDS
from tests.support.processes import wait_for
from tests.support.session_daemon import HOST, SessionDaemon, start_reporter

pytestmark = pytest.mark.slow


@pytest.fixture
def daemon(root, short_dir):
    simulator = SessionDaemon(short_dir, "--work-dir", str(root), env=_env(root))
    start_reporter(root, simulator.address)
    yield simulator
    simulator.stop()


def _env(root):
    from tests.support.processes import python_env

    return python_env(HERMES_HOME=str(root))


def start(daemon, name, **extra):
    return daemon.call(p.SESSION_NEW, {"host": HOST, "agent": "hermes", "name": name, "cols": 100, "rows": 30, **extra})


def runtime(summary):
    return {
        "worker_instance_id": summary["runtime"]["worker_instance_id"],
        "runtime_generation": summary["runtime"]["runtime_generation"],
    }


def get(daemon, session):
    return daemon.call(p.SESSION_GET, {"host": HOST, "session": session})


def native_reference(daemon, session):
    return wait_for(lambda: get(daemon, session).get("native_session_id"), timeout=30, what="the PTY root's native id")


def send(daemon, session, text):
    return daemon.call(p.SESSION_INPUT, {"host": HOST, "session": session, "text": text})


def wait(daemon, session, **predicate):
    return daemon.call(p.SESSION_WAIT, {"host": HOST, "session": session, "timeout_ms": 8000, **predicate})


def wait_until(daemon, session, activity):
    """Bounded waits until the activity is seen (a run of timeouts proves nothing, so it fails)."""
    for _ in range(6):
        answer = wait(daemon, session, activities=[activity])
        if answer["reason"] == "activity_matched":
            return answer
    raise AssertionError(f"{session} never became {activity}")


def screen_lines(daemon, session):
    return daemon.call(p.SESSION_SCREEN, {"host": HOST, "session": session})["visible_lines"]


def output(daemon, session, **cursor):
    return daemon.call(p.SESSION_OUTPUT, {"host": HOST, "session": session, **cursor})


def test_a_chat_is_started_driven_read_stopped_and_resumed(daemon, root):
    started = start(daemon, "t-1")
    sid = started["id"]
    assert (started["state"], started["runtime"]["state"], started["runtime"]["runtime_generation"]) == (
        "running",
        "live",
        "1",
    )
    reference = native_reference(daemon, sid)
    assert (root / "chat_sessions" / f"{reference}.json").exists()

    # A turn: working while it runs, then idle; the screen shows its echo.
    send(daemon, sid, "/sleep 1")
    assert wait_until(daemon, sid, "working")["reason"] == "activity_matched"
    assert wait_until(daemon, sid, "idle")["session"]["activity"] == "idle"
    send(daemon, sid, "hello there")
    wait_for(lambda: "hello there" in screen_lines(daemon, sid), timeout=30, what="the echo on the screen")

    # Output by cursor across three calls: each starts where the last one ended.
    first = runtime(started)  # a cursor comes with the runtime it counts in
    pages, cursor = [], "0"
    for _ in range(3):
        page = output(daemon, sid, after_offset=cursor, max_bytes=16, **first)
        assert page["start_offset"] == cursor and "gap" not in page
        pages.append(page["data"])
        cursor = page["next_offset"]
    assert int(cursor) == sum(len(d) for d in pages) == 48
    whole = output(daemon, sid, after_offset="0", max_bytes=4096, **first)["data"]
    assert whole.startswith(b"".join(pages))

    # A small retention and a long output: the old cursor gets a gap and a fresh offset.
    daemon.call(SIM_CONFIGURE, {"retain_bytes": 4096})
    send(daemon, sid, "/spam 5000")
    wait_for(lambda: int(output(daemon, sid, max_bytes=1)["runtime_end_offset"]) > 40_000, timeout=30, what="the spam")
    wait_until(daemon, sid, "idle")
    gapped = output(daemon, sid, after_offset=cursor, max_bytes=1024, **first)
    assert gapped["gap"] == {"start_offset": cursor, "end_offset": gapped["history_start_offset"]}
    assert gapped["start_offset"] == gapped["history_start_offset"] != cursor
    tail = output(daemon, sid, max_bytes=256)
    assert "gap" not in tail and tail["next_offset"] == tail["runtime_end_offset"]
    send(daemon, sid, "after the flood")
    seen = b""
    for _ in range(10):
        page = output(daemon, sid, after_offset=tail["next_offset"], wait_ms=2000, max_bytes=65536, **first)
        seen += page["data"]
        if b"after the flood" in seen:
            break
    assert b"after the flood" in seen and "gap" not in page

    # Stop, then resume with the reference the PTY root reported.
    old = runtime(get(daemon, sid))
    stopped = daemon.call(p.SESSION_STOP, {"host": HOST, "session": sid})
    assert (stopped["state"], stopped["runtime"]["state"]) == ("stopped", "none")
    resumed = daemon.call(p.SESSION_RESUME, {"host": HOST, "session": sid})
    assert resumed["runtime"]["runtime_generation"] == "2"
    assert resumed["runtime"]["worker_instance_id"] != old["worker_instance_id"]
    for spec in (p.SESSION_OUTPUT, p.SESSION_SCREEN, p.SESSION_INPUT):
        args = {"host": HOST, "session": sid, **old, **({"text": "x"} if spec is p.SESSION_INPUT else {})}
        assert daemon.error(spec, args).code == p.Code.SESSION_RUNTIME_CHANGED
    # An old cursor without its runtime is refused, never read against the new runtime.
    end = tail["runtime_end_offset"]
    bare = daemon.error(p.SESSION_OUTPUT, {"host": HOST, "session": sid, "after_offset": end})
    assert (bare.code, bare.detail) == ("invalid_field", {"field": "worker_instance_id"})
    for cursor_field in ("after_output_offset", "after_terminal_watermark"):
        args = {"host": HOST, "session": sid, "timeout_ms": 100, cursor_field: end}
        refused = daemon.error(p.SESSION_WAIT, args)
        assert (refused.code, refused.detail) == ("invalid_field", {"field": "worker_instance_id"})
    assert native_reference(daemon, sid) == reference
    claims = wait_for(
        lambda: [r for r in daemon.call(SIM_RECORDS)["records"] if r["kind"] == "native_id"][1:],
        timeout=30,
        what="the resumed claim",
    )
    assert (claims[0]["native_id"], claims[0]["resumed"]) == (reference, True)
    assert wait_until(daemon, sid, "idle")["session"]["runtime"]["runtime_generation"] == "2"


def test_v3_peers_get_both_spellings_and_v5_is_refused(daemon):
    sid = start(daemon, "t-v3")["id"]
    [v3] = daemon.call(p.SESSION_LIST, {"host": HOST}, window=(3, 3))["sessions"]
    assert v3["runtime"]["runtime_id"] == v3["runtime"]["worker_instance_id"]
    [v4] = daemon.call(p.SESSION_LIST, {"host": HOST})["sessions"]
    assert "runtime_id" not in v4["runtime"]
    assert "runtime_id" in daemon.call(p.SESSION_GET, {"host": HOST, "session": sid}, window=(3, 3))["runtime"]
    old_spelling = {
        "host": HOST,
        "session": sid,
        "runtime_id": v4["runtime"]["worker_instance_id"],
        "runtime_generation": "1",
    }
    page = daemon.call(p.SESSION_OUTPUT, old_spelling, window=(3, 3))
    assert "runtime_id" not in page  # other results keep their one shape
    assert daemon.error(p.SESSION_OUTPUT, old_spelling).code == "unknown_field"
    refused = daemon.error(p.SESSION_LIST, {"host": HOST}, window=(5, 5))
    assert refused.code == "protocol_incompatible"
    old = daemon.error(p.SESSION_LIST, {"host": HOST}, window=(2, 2))
    assert old.code == "protocol_incompatible"


def test_the_origin_guard_holds_for_every_self_targeting_method(daemon):
    target = start(daemon, "origin")
    sid = target["id"]
    daemon_id = daemon.call(p.HOST_LIST)["daemon_id"]
    origin = {"origin_session_id": sid, "origin_daemon_id": daemon_id}
    base = {"host": HOST, "session": sid, **origin}
    extra = {
        p.SESSION_INPUT.name: {"text": "x"},
        p.SESSION_RESIZE.name: {"cols": 80, "rows": 24},
        p.SESSION_RENAME.name: {"name": "other"},
        p.SESSION_SET_METADATA.name: {"metadata": {"k": "v"}},
    }
    denied = [
        p.SESSION_STOP, p.SESSION_RESUME, p.SESSION_REMOVE, p.SESSION_FORK, p.SESSION_RESIZE,
        p.SESSION_SET_METADATA, p.SESSION_RENAME, p.SESSION_INPUT, p.SESSION_REMOVE_ACCEPTING_UNCONFIRMED,
    ]  # fmt: skip
    assert {p.method(s) for s in denied} == p.ORIGIN_DENIED | p.ORIGIN_DAEMON_ONLY
    for spec in denied:
        for ref in (sid, "origin"):  # by id and by the name that resolves to it
            error = daemon.error(spec, {**base, "session": ref, **extra.get(spec.name, {})})
            assert (error.code, error.detail["method"]) == (p.Code.SELF_TARGET_DENIED, p.method(spec))
    assert get(daemon, sid)["state"] == "running"  # nothing was done
    # Reads and the three lifecycle reports may target the origin.
    assert daemon.call(p.SESSION_SCREEN, base)["session_id"] == sid
    pid, start_time = target["pid"], 0
    lifecycle = {"session": sid, "pid": pid, "start_time": start_time, **origin}
    assert daemon.call(p.SESSION_REPORT_AGENT, {**lifecycle, "activity": "working"})["ok"]
    assert daemon.call(p.SESSION_RELEASE_AGENT, {**lifecycle, "reason": "session_end"})["ok"]
    assert daemon.call(p.SESSION_REPORT_NATIVE_ID, {**lifecycle, "native_id": "n-1", "resumed": False})["ok"]
    # Another daemon's session of the same id is not this caller's origin.
    foreign = {**base, "origin_daemon_id": "d-elsewhere", "name": "renamed"}
    assert daemon.call(p.SESSION_RENAME, foreign)["name"] == "renamed"


def test_a_start_whose_reply_is_late_still_leaves_exactly_one_session(daemon):
    daemon.call(SIM_CONFIGURE, {"start_reply_delay_ms": 4000})
    late = daemon.error(p.SESSION_NEW, {"host": HOST, "agent": "hermes", "name": "t-late"}, timeout=1.0)
    assert late.code == "deadline_exceeded"  # the caller gave up first: no answer in its time
    daemon.call(SIM_CONFIGURE, {"start_reply_delay_ms": 0})
    [only] = wait_for(
        lambda: daemon.call(p.SESSION_LIST, {"host": HOST, "name": "t-late"})["sessions"],
        timeout=20,
        what="the session",
    )
    assert (only["state"], only["runtime"]["state"]) == ("running", "live")
    assert daemon.call(SIM_COUNTERS)["session_new_by_name"] == {"t-late": 1}


def test_a_dropped_start_creates_nothing_and_a_down_host_is_typed(daemon):
    daemon.call(SIM_CONFIGURE, {"start_drop": 1})
    assert (
        daemon.error(p.SESSION_NEW, {"host": HOST, "agent": "hermes", "name": "t-drop"}, timeout=1.0).code
        == "deadline_exceeded"
    )
    assert daemon.call(p.SESSION_LIST, {"host": HOST})["sessions"] == []
    assert daemon.error(p.SESSION_LIST, {"host": "desktop"}).code == p.Code.HOST_UNKNOWN
    daemon.call(SIM_CONFIGURE, {"hosts_down": [HOST]})
    assert daemon.error(p.SESSION_LIST, {"host": HOST}).code == p.Code.HOST_UNREACHABLE


def test_fork_of_a_hermes_session_is_unsupported_data_and_exits_are_typed(daemon):
    sid = start(daemon, "t-fork")["id"]
    fork = daemon.call(p.SESSION_FORK, {"host": HOST, "session": sid})
    assert fork["fork_supported"] is False and fork["error"]["code"] == p.Code.AGENT_FORK_UNSUPPORTED
    assert len(daemon.call(p.SESSION_LIST, {"host": HOST})["sessions"]) == 1
    send(daemon, sid, "/bytes")
    raw = wait_for(
        lambda: b"\xff\xfe" in (d := output(daemon, sid, max_bytes=65536)["data"]) and d,
        timeout=30,
        what="the invalid bytes",
    )
    assert b"\xff\xfe" in raw
    assert daemon.call(p.SESSION_SCREEN, {"host": HOST, "session": sid})["utf8_replaced"] >= 1
    send(daemon, sid, "/fail")
    failed = wait_for(lambda: (s := get(daemon, sid))["state"] == "failed" and s, timeout=30, what="the exit")
    assert failed["exit_code"] == 3
    assert daemon.error(p.SESSION_RESUME, {"host": HOST, "session": sid}).code == p.Code.AGENT_NOT_RESUMABLE
    other = start(daemon, "t-kill")
    os.kill(other["pid"], signal.SIGKILL)
    killed = wait_for(lambda: (s := get(daemon, other["id"]))["state"] == "failed" and s, timeout=30, what="the kill")
    assert killed["runtime"]["state"] == "none"


def test_idempotent_input_reaches_the_terminal_once(daemon):
    sid = start(daemon, "t-idem")["id"]
    native_reference(daemon, sid)
    args = {"host": HOST, "session": sid, "text": "only once", "idempotency_key": "k-1"}
    first = daemon.call(p.SESSION_INPUT, args)
    again = daemon.call(p.SESSION_INPUT, args)
    assert again == {**first, "replayed": True}
    conflict = daemon.error(p.SESSION_INPUT, {**args, "text": "something else"})
    assert conflict.code == p.Code.IDEMPOTENCY_CONFLICT
    wait_for(lambda: "only once" in screen_lines(daemon, sid), timeout=30, what="the echo")
    assert screen_lines(daemon, sid).count("only once") == 1


def test_input_of_several_lines_is_one_hermes_turn_as_the_daemon_frames_it(daemon, root):
    sid = start(daemon, "t-lines")["id"]
    reference = native_reference(daemon, sid)
    send(daemon, sid, "Treat all three lines as one prompt.\nalpha\nbeta")
    wait_until(daemon, sid, "idle")
    wait_for(lambda: "● Treat all three lines as one prompt." in screen_lines(daemon, sid), timeout=30, what="the turn")
    send(daemon, sid, "/exit")
    wait_for(lambda: get(daemon, sid)["state"] != "running", timeout=30, what="the exit")
    transcript = json.loads((root / "chat_sessions" / f"{reference}.json").read_text())["transcript"]
    assert [line for line in transcript if line.startswith("> ")] == [
        "> Treat all three lines as one prompt.\nalpha\nbeta",
        "> /exit",
    ]


def test_a_late_start_replayed_with_its_key_returns_the_same_session(daemon):
    daemon.call(SIM_CONFIGURE, {"start_reply_delay_ms": 4000})
    args = {"host": HOST, "agent": "hermes", "name": "t-keyed", "idempotency_key": "start-1"}
    assert daemon.error(p.SESSION_NEW, args, timeout=1.0).code == "deadline_exceeded"
    daemon.call(SIM_CONFIGURE, {"start_reply_delay_ms": 0})
    replay = daemon.call(p.SESSION_NEW, args)
    [only] = daemon.call(p.SESSION_LIST, {"host": HOST})["sessions"]
    assert replay["replayed"] is True and replay["id"] == only["id"]
    assert daemon.error(p.SESSION_NEW, {**args, "name": "t-other"}).code == p.Code.IDEMPOTENCY_CONFLICT


def test_hermes_input_that_could_break_out_of_its_paste_is_refused_and_nothing_is_typed(daemon, root):
    sid = start(daemon, "t-escape")["id"]
    reference = native_reference(daemon, sid)
    refused = daemon.error(p.SESSION_INPUT, {"host": HOST, "session": sid, "text": "hi\x1b[201~/exit\r"})
    assert (refused.code, refused.detail) == (p.Code.SESSION_INPUT_REJECTED, {"field": "text"})
    send(daemon, sid, "still one turn")
    wait_for(lambda: "● still one turn" in screen_lines(daemon, sid), timeout=30, what="the turn")
    send(daemon, sid, "/exit")
    wait_for(lambda: get(daemon, sid)["state"] != "running", timeout=30, what="the exit")
    transcript = json.loads((root / "chat_sessions" / f"{reference}.json").read_text())["transcript"]
    assert [line for line in transcript if line.startswith("> ")] == ["> still one turn", "> /exit"]
