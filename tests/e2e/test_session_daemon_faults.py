"""The session daemon simulator under faults: junk frames, a narrowed window, restarts with
its state kept, kill -9 of the daemon, screen-only detection, projects in real worktrees."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import msgpack
import psutil
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import protocol
from shared.operator import protocol as p
from shared.protocol import RemoteError
from simulators.operator_sim.ops import SIM_RECORDS
from tests.support.processes import python_env, wait_for
from tests.support.session_daemon import HOST, SessionDaemon

pytestmark = pytest.mark.slow

DAEMON_OPS = sorted(
    name
    for name, spec in vars(p).items()
    if isinstance(spec, protocol.OpSpec) and spec is not p.SESSION_NEW  # a start would only test spawning
)
FIELDS = sorted({f for spec in vars(p).values() if isinstance(spec, protocol.OpSpec) for f in spec.fields})
values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.text(max_size=24),
        st.binary(max_size=24),
        st.sampled_from(["local", "s-0", "0", "01", "18446744073709551616", "-1", "wi-x"]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
near_valid = st.fixed_dictionaries(
    {
        "v": st.integers(2, 5),
        "id": st.text(min_size=1, max_size=8, alphabet="abc123"),
        "op": st.sampled_from([getattr(p, n).name for n in DAEMON_OPS] + ["session.nope"]),
        "args": st.dictionaries(st.sampled_from(FIELDS), values, max_size=5),
    }
)
junk = st.one_of(st.binary(max_size=64), near_valid.map(lambda v: msgpack.packb(v, use_bin_type=True)))


@pytest.fixture(scope="module")
def junk_target():
    directory = Path(tempfile.mkdtemp(prefix="hm-sdj-"))
    daemon = SessionDaemon(directory, "--work-dir", str(directory))
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(daemon.address)
    yield daemon, sock
    sock.close(linger=0)
    daemon.stop()
    shutil.rmtree(directory, ignore_errors=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=junk)
def test_junk_gets_a_typed_answer_and_never_an_internal_error(junk_target, raw):
    daemon, sock = junk_target
    sock.send(raw)
    assert sock.poll(10_000, zmq.POLLIN), "the daemon did not answer"
    reply = protocol.decode_reply(sock.recv(), window=(1, 5))
    if reply.kind == "error":
        assert reply.payload["code"] != "internal_error", reply.payload
    assert daemon.peer.proc.poll() is None
    assert daemon.call(p.HOST_LIST)["hosts"] == [{"host": HOST, "state": "up"}]


@pytest.mark.parametrize("seconds, nanoseconds", [(1_700_000_000, 0), (1_700_000_000, 5), (-1, 0)])
def test_a_timestamp_deep_in_a_report_is_a_malformed_frame_and_the_daemon_keeps_serving(
    junk_target, seconds, nanoseconds
):
    daemon, sock = junk_target
    report = {"kind": "activity", "session": "s-1", "pid": 1, "at": {"when": [msgpack.Timestamp(seconds, nanoseconds)]}}
    sock.send(protocol.encode_request("ts-1", p.REPORT.name, {"report": report}, version=4))
    assert sock.poll(10_000, zmq.POLLIN), "the daemon did not answer"
    reply = protocol.decode_reply(sock.recv(), window=p.CLIENT_WINDOW)
    assert (reply.id, reply.kind, reply.payload["code"]) == ("", "error", "malformed_frame")  # no id: undecoded
    assert daemon.peer.proc.poll() is None
    assert daemon.call(p.HOST_LIST)["hosts"] == [{"host": HOST, "state": "up"}]


def test_a_window_without_3_refuses_v3_and_keeps_v4(short_dir):
    daemon = SessionDaemon(short_dir, "--window", "4..4")
    try:
        refused = daemon.error(p.HOST_LIST, window=(3, 3))
        assert refused.code == "protocol_incompatible"
        assert daemon.call(p.HOST_LIST)["hosts"][0]["host"] == HOST
    finally:
        daemon.stop()


def _chat_daemon(short_dir, root, *extra):
    return SessionDaemon(short_dir, "--work-dir", str(root), *extra, env=python_env(HERMES_HOME=str(root)))


def _start(daemon, name, agent="hermes", **extra):
    return daemon.call(p.SESSION_NEW, {"host": HOST, "agent": agent, "name": name, **extra})


def _get(daemon, session):
    return daemon.call(p.SESSION_GET, {"host": HOST, "session": session})


def test_without_hook_reports_the_screen_says_what_the_chat_is_doing(root, short_dir):
    # No reporter: every hook report is dropped, so activity comes from the screen alone.
    daemon = _chat_daemon(short_dir, root)
    try:
        sid = _start(daemon, "t-screen", cols=80, rows=24)["id"]
        idle = wait_for(lambda: (s := _get(daemon, sid)).get("activity") == "idle" and s, timeout=30, what="idle")
        assert idle["state_source"] == "screen"
        daemon.call(p.SESSION_INPUT, {"host": HOST, "session": sid, "text": "/approve"})
        blocked = daemon.call(
            p.SESSION_WAIT, {"host": HOST, "session": sid, "activities": ["blocked"], "timeout_ms": 8000}
        )
        assert (blocked["reason"], blocked["session"]["state_source"]) == ("activity_matched", "screen")
        daemon.call(p.SESSION_INPUT, {"host": HOST, "session": sid, "text": "y", "submit": False})
        wait_for(lambda: _get(daemon, sid).get("activity") == "idle", timeout=30, what="idle after the approval")
        screen = daemon.call(p.SESSION_SCREEN, {"host": HOST, "session": sid})
        assert "⚠ Approval: rm -rf ./build → approved" in screen["visible_lines"]
        resized = daemon.call(p.SESSION_RESIZE, {"host": HOST, "session": sid, "cols": 60, "rows": 20})
        assert (resized["cols"], resized["rows"]) == (60, 20)
        after = daemon.call(p.SESSION_SCREEN, {"host": HOST, "session": sid})
        assert after["dimensions"] == {"cols": 60, "rows": 20} and int(after["watermark"]) > int(screen["watermark"])
        # Without a reported native id the session cannot be resumed.
        daemon.call(p.SESSION_STOP, {"host": HOST, "session": sid})
        assert daemon.error(p.SESSION_RESUME, {"host": HOST, "session": sid}).code == p.Code.AGENT_NOT_RESUMABLE
    finally:
        daemon.stop()


def test_a_restarted_daemon_keeps_its_sessions_and_resumes_them(root, short_dir):
    from tests.support.session_daemon import start_reporter

    state = short_dir / "state"
    daemon = _chat_daemon(short_dir, root, "--state", str(state), "--daemon-id", "d-kept")
    start_reporter(root, daemon.address)
    sid = _start(daemon, "t-kept")["id"]
    reference = wait_for(lambda: _get(daemon, sid).get("native_session_id"), timeout=30, what="the native id")
    pid = _get(daemon, sid)["pid"]
    assert daemon.stop() == 0
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert oct(os.stat(state / "sessions.json").st_mode & 0o777) == "0o600"
    daemon.restart()
    try:
        kept = _get(daemon, sid)
        assert (kept["name"], kept["native_session_id"], kept["runtime"]["state"]) == ("t-kept", reference, "lost")
        assert kept["runtime"]["loss_reason"] == "daemon_stopped"
        resumed = daemon.call(p.SESSION_RESUME, {"host": HOST, "session": sid})
        assert (resumed["runtime"]["state"], resumed["runtime"]["runtime_generation"]) == ("live", "2")
    finally:
        daemon.stop()


def test_kill_9_of_the_daemon_hangs_up_its_children_and_resets_its_callers(root, short_dir):
    daemon = _chat_daemon(short_dir, root)
    child = _start(daemon, "t-orphan")["pid"]
    daemon.call(p.SESSION_INPUT, {"host": HOST, "session": "t-orphan", "text": "/sleep 30"})
    daemon.kill()
    wait_for(
        lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE,
        timeout=30,
        what="the hang-up",
    )
    with pytest.raises(RemoteError) as gone:
        daemon.call(p.HOST_LIST, timeout=2.0)
    assert gone.value.code in ("unavailable", "connection_reset")


def test_a_native_id_claim_counts_only_from_the_current_pty_root(root, short_dir):
    daemon = _chat_daemon(short_dir, root)
    try:
        started = _start(daemon, "t-claim")
        claim = {"session": started["id"], "start_time": 0, "native_id": "forged", "resumed": False}
        wrong = daemon.call(p.SESSION_REPORT_NATIVE_ID, {**claim, "pid": os.getpid()})
        assert wrong == {"ok": True, "applied": False}
        assert "native_session_id" not in _get(daemon, started["id"])
        right = daemon.call(p.SESSION_REPORT_NATIVE_ID, {**claim, "pid": started["pid"]})
        assert right["applied"] and _get(daemon, started["id"])["native_session_id"] == "forged"
        records = daemon.call(SIM_RECORDS)["records"]
        assert records == []  # the direct ops are not the reporter's forward
    finally:
        daemon.stop()


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=_git_env())


def _git_env():
    return {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def test_a_project_session_runs_in_its_own_worktree_and_keeps_unconfirmed_work(root, short_dir):
    repo = short_dir / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "first")
    daemon = _chat_daemon(short_dir, root, "--project", f"app={repo}", "--state", str(short_dir / "state"))
    try:
        [project] = daemon.call(p.PROJECT_LIST, {"host": HOST})["projects"]
        started = _start(daemon, "t-work", project="app", branch="feature-1", base_branch="main")
        assert (started["project_id"], started["branch"], started["is_linked_worktree"]) == (
            project["id"],
            "feature-1",
            True,
        )
        worktree = Path(started["worktree_path"])
        assert started["cwd"] == str(worktree) and (worktree / "a.txt").read_text() == "one\n"
        (worktree / "a.txt").write_text("two\n")
        diff = daemon.call(p.SESSION_DIFF, {"host": HOST, "session": "t-work"})
        assert "+two" in diff["diff"] and diff["files"] == ["a.txt"]
        assert daemon.error(p.SESSION_REMOVE, {"host": HOST, "session": "t-work"}).code == p.Code.SESSION_LIVE
        daemon.call(p.SESSION_STOP, {"host": HOST, "session": "t-work"})
        kept = daemon.error(p.SESSION_REMOVE, {"host": HOST, "session": "t-work"})
        assert kept.code == p.Code.SESSION_REMOVE_UNCONFIRMED and "uncommitted_changes" in kept.detail["reasons"]
        assert worktree.exists()
        removed = daemon.call(p.SESSION_REMOVE_ACCEPTING_UNCONFIRMED, {"host": HOST, "session": "t-work"})
        assert removed == {"session_id": started["id"], "removed": True}
        assert not worktree.exists() and daemon.call(p.SESSION_LIST, {"host": HOST})["sessions"] == []
        # A shell session forks: a second session, live, in the same place.
        shell = _start(daemon, "t-shell", agent="shell")
        fork = daemon.call(p.SESSION_FORK, {"host": HOST, "session": shell["id"], "name": "t-shell-2"})
        assert fork["fork_supported"] is True and fork["session"]["runtime"]["state"] == "live"
        assert fork["session"]["cwd"] == shell["cwd"]
    finally:
        daemon.stop()


def test_an_agent_outside_the_supported_releases_is_refused_at_launch(root, short_dir, tmp_path):
    old = tmp_path / "hermes"
    old.write_text("#!/bin/sh\necho 'Hermes Agent v0.19.9 (2026.1.1)'\n")
    old.chmod(0o755)
    daemon = _chat_daemon(short_dir, root, "--hermes-bin", str(old))
    try:
        refused = daemon.error(p.SESSION_NEW, {"host": HOST, "agent": "hermes", "name": "t-old"})
        assert (refused.code, refused.detail["version"]) == (p.Code.AGENT_RUNTIME_UNSUPPORTED, "0.19.9")
        assert daemon.call(p.SESSION_LIST, {"host": HOST})["sessions"] == []
        assert daemon.error(p.SESSION_NEW, {"host": HOST, "agent": "codex"}).code == p.Code.AGENT_UNKNOWN
        inventory = daemon.call(p.HOST_INSPECT, {"host": HOST})
        assert inventory["supported_agents"] == ["hermes", "shell"]
    finally:
        daemon.stop()


def test_a_host_holds_a_bounded_number_of_sessions(root, short_dir):
    daemon = _chat_daemon(short_dir, root, "--max-sessions", "2")
    try:
        first = _start(daemon, "a")  # a chat: it ends on the stop's SIGTERM, where an interactive sh waits for SIGKILL
        _start(daemon, "b", agent="shell")
        full = daemon.error(p.SESSION_NEW, {"host": HOST, "agent": "shell", "name": "c"})
        assert (full.code, full.detail["limit"]) == (p.Code.SESSION_LIMIT, 2)
        assert daemon.error(p.SESSION_FORK, {"host": HOST, "session": "b"}).code == p.Code.SESSION_LIMIT
        assert daemon.call(p.SESSION_STOP, {"host": HOST, "session": first["id"]})["state"] == "stopped"
        daemon.call(p.SESSION_REMOVE, {"host": HOST, "session": first["id"]})
        assert _start(daemon, "c", agent="shell")["state"] == "running"
    finally:
        daemon.stop()
