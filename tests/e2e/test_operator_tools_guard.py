"""The operator tools' guards over a real simulator: schema refusals and denied hosts cost no
daemon call, the origin session is never changed (by id or by name) while reads of it work,
the wildcard, the protocol window and its v3 bridge, and what a missing, odd or broken
daemon or policy gives the model."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
import zmq

from shared import protocol
from shared.operator import protocol as p
from tests.support.operator_tools import Tools, changes, code, ops, result, simulator

pytestmark = pytest.mark.slow

# The smallest valid arguments of each guarded tool, beyond the session.
GUARDED = {
    "pohunek_session_send": {"input": "x"},
    "pohunek_session_resume": {},
    "pohunek_session_fork": {},
    "pohunek_session_resize": {"cols": 80, "rows": 24},
    "pohunek_session_rename": {"name": "renamed"},
    "pohunek_session_set_metadata": {"metadata": {"label": "x"}},
    "pohunek_session_stop": {},
    "pohunek_session_remove": {},
}
GUARDED_METHODS = {
    "pohunek_session_send": "input",
    "pohunek_session_resume": "resume",
    "pohunek_session_fork": "fork",
    "pohunek_session_resize": "resize",
    "pohunek_session_rename": "rename",
    "pohunek_session_set_metadata": "set_metadata",
    "pohunek_session_stop": "stop",
    "pohunek_session_remove": "remove",
}


@pytest.fixture(scope="module")
def daemon_sim():
    with simulator("--hosts", "local,desktop", reporter=False) as sim:
        yield sim


@pytest.fixture(scope="module")
def origin(daemon_sim):
    """A session this plugin runs inside, as the daemon's environment would say."""
    session = daemon_sim.start("origin")
    daemon_id = daemon_sim.daemon.call(p.HOST_LIST)["daemon_id"]
    return session["id"], {"POHUNEK_SESSION_ID": session["id"], "POHUNEK_DAEMON_ID": daemon_id}


def total(daemon_sim):
    return sum(ops(daemon_sim.daemon).values())


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("pohunek_sessions", {"filters": {"colour": "red"}}, "filters.colour"),
        ("pohunek_session_get", {"session": "s", "force": True}, "force"),
        ("pohunek_session_screen", {"session": 3}, "session"),
        ("pohunek_session_output", {"session": "s", "after_offset": "0"}, "worker_instance_id"),
        ("pohunek_session_wait", {"session": "s", "timeout_ms": 8001}, "timeout_ms"),
        ("pohunek_session_diff", {"session": "a/b"}, "session"),
        (
            "pohunek_session_start",
            {"agent_profile": "shell", "name": "n", "project": {"id": "a", "label": "b"}},
            "project",
        ),
        ("pohunek_session_send", {"session": "s", "input": "\x1b[2J"}, "input"),
        ("pohunek_session_resume", {"session": "s", "rows": 201}, "rows"),
        ("pohunek_session_fork", {"session": "s", "name": "x" * 129}, "name"),
        ("pohunek_session_resize", {"session": "s", "cols": "80", "rows": 24}, "cols"),
        ("pohunek_session_rename", {"session": "s"}, "name"),
        ("pohunek_session_set_metadata", {"session": "s", "metadata": {}}, "metadata"),
        ("pohunek_session_stop", {"session": "s", "signal": 9}, "signal"),
        ("pohunek_session_remove", {"session": "s", "accept_unconfirmed": True}, "accept_unconfirmed"),
        ("pohunek_hosts", {"discover": True}, "discover"),
    ],
)
def test_schema_refusals_name_the_field_and_cost_no_daemon_call(daemon_sim, name, args, field):
    tools = Tools(daemon_sim.address, access_mode="full")
    before = total(daemon_sim)
    refused = tools(name, args)
    assert (code(refused), refused["error"]["detail"]) == ("plugin_invalid_request", {"field": field})
    assert total(daemon_sim) == before


def test_hosts_outside_the_policy_are_denied_before_any_call(daemon_sim):
    before = total(daemon_sim)
    local_only = Tools(daemon_sim.address, allowed_hosts=["local"])
    assert code(local_only("pohunek_sessions", {"host": "desktop"})) == "plugin_host_denied"
    assert code(local_only("pohunek_session_get", {"host": "desktop", "session": "origin"})) == "plugin_host_denied"
    desktop_only = Tools(daemon_sim.address, allowed_hosts=["desktop"])
    assert code(desktop_only("pohunek_sessions")) == "plugin_host_denied"  # no local by default
    assert result(desktop_only("pohunek_hosts")) == {
        "hosts": ["desktop"],
        "wildcard": False,
        "discovery_performed": False,
    }
    assert total(daemon_sim) == before
    assert result(desktop_only("pohunek_sessions", {"host": "desktop"}))["sessions"] == []


def test_the_wildcard_takes_any_name_but_no_ip_literal(daemon_sim, origin):
    wild = Tools(daemon_sim.address, allowed_hosts=["*"])
    assert result(wild("pohunek_hosts"))["wildcard"] is True
    assert result(wild("pohunek_sessions", {"host": "desktop"}))["host"] == "desktop"
    assert "origin" in [s.get("name") for s in result(wild("pohunek_sessions"))["sessions"]]
    before = total(daemon_sim)
    assert code(wild("pohunek_sessions", {"host": "10.0.0.1"})) == "plugin_host_denied"
    assert total(daemon_sim) == before
    assert code(wild("pohunek_sessions", {"host": "elsewhere.example"})) == "host_unknown"


def test_the_eight_changes_never_reach_the_origin(daemon_sim, origin):
    sid, env = origin
    tools = Tools(daemon_sim.address, access_mode="full", env=env)
    before = changes(daemon_sim.daemon)
    for name, extra in GUARDED.items():
        for ref in (sid, "origin"):  # by id, and by the name that resolves to it
            denied = tools(name, {"session": ref, **extra})
            assert code(denied) == "plugin_self_target_denied", (name, ref)
            assert denied["error"]["detail"] == {"method": GUARDED_METHODS[name]}
    assert changes(daemon_sim.daemon) == before
    assert result(tools("pohunek_session_get", {"session": sid}))["state"] == "running"


def test_reads_of_the_origin_work_and_other_sessions_can_be_changed(daemon_sim, origin):
    sid, env = origin
    tools = Tools(daemon_sim.address, access_mode="full", env=env)
    assert result(tools("pohunek_session_get", {"session": "origin"}))["id"] == sid
    assert result(tools("pohunek_session_screen", {"session": sid}))["session_id"] == sid
    assert result(tools("pohunek_session_output", {"session": sid}))["session_id"] == sid
    assert (
        result(tools("pohunek_session_wait", {"session": sid, "states": ["running"], "timeout_ms": 100}))["outcome"]
        == "matched"
    )
    other = daemon_sim.start("other")["id"]
    renamed = result(tools("pohunek_session_rename", {"session": other, "name": "other-renamed"}))
    assert renamed["session_id"] == other and renamed["session"]["name"] == "other-renamed"


def test_a_v3_policy_keeps_the_old_runtime_spelling(daemon_sim):
    v3 = Tools(daemon_sim.address, window=(3, 3), protocol_min=3, protocol_max=3)
    listed = result(v3("pohunek_sessions"))["sessions"]
    assert listed and all(s["runtime"]["runtime_id"] == s["runtime"]["worker_instance_id"] for s in listed)
    resized = result(v3("pohunek_session_resize", {"session": "origin", "cols": 100, "rows": 30}))
    assert resized["session"]["runtime"]["runtime_id"] == resized["worker_instance_id"]
    v4 = Tools(daemon_sim.address)
    assert all("runtime_id" not in s["runtime"] for s in result(v4("pohunek_sessions"))["sessions"])


def test_a_daemon_outside_the_window_is_incompatible(daemon_sim):
    with simulator("--window", "4..4", projects=(), reporter=False) as newer:
        v3 = Tools(newer.address, window=(3, 3), protocol_min=3, protocol_max=3)
        assert code(v3("pohunek_sessions")) == "pohunek_cli_incompatible"
        assert result(Tools(newer.address)("pohunek_sessions"))["sessions"] == []


def test_no_daemon_is_unreachable():
    directory = Path(tempfile.mkdtemp(prefix="hm-"))
    try:
        gone = Tools(f"ipc://{directory}/nothing.ctl")
        assert code(gone("pohunek_sessions")) == "daemon_unreachable"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_an_answer_of_the_wrong_shape_is_an_invalid_envelope():
    """A peer that speaks the protocol but answers a list where a map belongs."""
    directory = Path(tempfile.mkdtemp(prefix="hm-"))
    address = f"ipc://{directory}/odd.ctl"
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(address)
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            if not sock.poll(100):
                continue
            peer, raw = sock.recv_multipart()
            request = protocol.unpack(raw)
            sock.send_multipart([peer, protocol.encode_reply(request["id"], "result", ["odd"], version=request["v"])])

    server = threading.Thread(target=answer)
    server.start()
    try:
        assert code(Tools(address)("pohunek_sessions")) == "pohunek_cli_invalid_envelope"
    finally:
        done.set()
        server.join(timeout=5)
        sock.close(linger=0)
        shutil.rmtree(directory, ignore_errors=True)


def test_an_unexpected_failure_is_an_internal_error_without_its_text(daemon_sim, caplog):
    broken = Tools(daemon_sim.address, tool_timeout_ms="not a number")  # a policy no loader would pass
    answer = broken("pohunek_sessions", {"host": "local"})
    assert code(answer) == "internal_error"
    assert "not a number" not in json.dumps(answer) and "not a number" not in caplog.text
    assert "TypeError" in caplog.text


def test_a_full_host_and_an_unsupported_runtime_are_typed(tmp_path):
    fake = tmp_path / "hermes"
    fake.write_text("#!/bin/sh\necho 'Hermes Agent v0.1.0'\n")
    fake.chmod(0o755)
    with simulator("--max-sessions", "1", "--hermes-bin", str(fake), reporter=False) as small:
        tools = Tools(small.address)
        hermes = {"agent_profile": "hermes", "name": "old", "project": {"label": "web"}}
        assert code(tools("pohunek_session_start", hermes)) == "agent_runtime_unsupported"
        result(tools("pohunek_session_start", {**hermes, "agent_profile": "shell", "name": "one"}))
        assert code(tools("pohunek_session_start", {**hermes, "agent_profile": "shell", "name": "two"})) == (
            "session_limit_reached"
        )
