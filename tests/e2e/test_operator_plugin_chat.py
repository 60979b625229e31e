"""The operator plugin end to end: the session daemon simulator starts a real ``hermes chat``
with the plugin installed and enabled, and each ``/tool`` line in that managed terminal calls a
typed tool the way an agent turn would, against a peer session of the same daemon."""

from __future__ import annotations

import json
import re

import pytest

from shared.operator import protocol as p
from shared.operator.policy import FULL_TOOLS, MANAGE_TOOLS, READ_TOOLS
from simulators.operator_sim.ops import SIM_COUNTERS
from tests.support.operator_plugin import install, policy_fields, write_policy
from tests.support.operator_tools import make_repo
from tests.support.processes import python_env
from tests.support.session_daemon import HOST, SessionDaemon, start_reporter

pytestmark = pytest.mark.slow

READ = set(READ_TOOLS)
MANAGE = set(MANAGE_TOOLS)
FULL = set(FULL_TOOLS)
RESULT = re.compile(rb"tool-result (\S+) (\{.*?\})\r\n")
TOOLS = re.compile(rb"tools: ([^\r\n]*)\r\n")


@pytest.fixture
def daemon(root, short_dir):
    repo = make_repo(short_dir / "repo")
    simulator = SessionDaemon(
        short_dir, "--work-dir", str(root), "--project", f"web={repo}", env=python_env(HERMES_HOME=str(root))
    )
    start_reporter(root, simulator.address)
    yield simulator
    simulator.stop()


def managed_chat(daemon, root, short_dir, mode, **policy):
    """The origin: a chat the daemon started, with the plugin under ``mode``."""
    path = write_policy(short_dir / "state" / "policy.json", policy_fields(daemon.address, access_mode=mode, **policy))
    install(root, path)
    return start(daemon, "origin")


def start(daemon, name):
    return daemon.call(p.SESSION_NEW, {"host": HOST, "agent": "hermes", "name": name, "cols": 160, "rows": 40})["id"]


class Terminal:
    """What the chat prints, read by cursor; ``expect`` waits (bounded) for a pattern after it."""

    def __init__(self, daemon, session):
        self.daemon, self.session, self.offset = daemon, session, "0"
        self.seen = b""
        runtime = daemon.call(p.SESSION_GET, {"host": HOST, "session": session})["runtime"]
        self.runtime = {k: runtime[k] for k in ("worker_instance_id", "runtime_generation")}

    def expect(self, pattern: re.Pattern[bytes]) -> re.Match[bytes]:
        for _ in range(40):  # 40 bounded waits of at most 1.5 s: a chat that never answers fails
            found = pattern.search(self.seen)
            if found:
                self.seen = self.seen[found.end() :]
                return found
            page = self.daemon.call(
                p.SESSION_OUTPUT,
                {"host": HOST, "session": self.session, **self.runtime, "after_offset": self.offset, "wait_ms": 1500},
            )
            self.offset = page["next_offset"]
            self.seen += page["data"]
        raise AssertionError(f"{pattern.pattern!r} never came; the tail was {self.seen[-400:]!r}")

    def type(self, line: str) -> None:
        self.daemon.call(p.SESSION_INPUT, {"host": HOST, "session": self.session, "text": line})

    def tools(self) -> set[str]:
        self.type("/tools")
        names = self.expect(TOOLS).group(1).decode().split()
        return set() if names == ["(none)"] else set(names)

    def tool(self, name: str, args: dict | None = None) -> dict:
        self.type(f"/tool {name} {json.dumps(args or {})}")
        while True:
            found = self.expect(RESULT)
            if found.group(1).decode() == name:
                return json.loads(found.group(2))


def mutating_calls(daemon) -> int:
    """Mutations the daemon received, but input: the test types every ``/tool`` line itself."""
    ops = daemon.call(SIM_COUNTERS)["ops"]
    return sum(n for op, n in ops.items() if op in p.MUTATIONS and op != p.SESSION_INPUT.name)


@pytest.mark.parametrize(("mode", "expected"), [("read_only", READ), ("manage", MANAGE), ("full", FULL)])
def test_each_access_mode_exposes_exactly_its_tools(daemon, root, short_dir, mode, expected):
    origin = Terminal(daemon, managed_chat(daemon, root, short_dir, mode))
    assert origin.tools() == expected
    missing = sorted(FULL - expected)
    if missing:
        answer = origin.tool(missing[0], {"session": "origin"})
        assert answer["error"]["code"] == "tool_not_found"


def test_read_only_observes_a_peer_and_cannot_touch_it(daemon, root, short_dir):
    origin = Terminal(daemon, managed_chat(daemon, root, short_dir, "read_only"))
    peer = start(daemon, "peer")
    listed = origin.tool("pohunek_sessions")
    assert listed["ok"] and {s["name"] for s in listed["result"]["sessions"]} == {"origin", "peer"}
    got = origin.tool("pohunek_session_get", {"session": "peer"})
    assert got["result"]["id"] == peer
    before = mutating_calls(daemon)
    answer = origin.tool("pohunek_session_send", {"session": "peer", "input": "hello"})
    assert answer["error"]["code"] == "tool_not_found"
    stop = origin.tool("pohunek_session_stop", {"session": "peer"})
    assert stop["error"]["code"] == "tool_not_found"
    assert mutating_calls(daemon) == before
    peer_output = daemon.call(p.SESSION_OUTPUT, {"host": HOST, "session": peer})["data"]
    assert b"hello" not in peer_output

    # A chat whose tools kept their daemon connection still ends at once when it is done.
    origin.type("/exit")
    ended = daemon.call(
        p.SESSION_WAIT, {"host": HOST, "session": origin.session, "states": ["done"], "timeout_ms": 8000}
    )
    assert ended["reason"] == "state_matched" and ended["session"]["exit_code"] == 0


@pytest.mark.parametrize("mode", ["manage", "full"])
def test_the_safe_loop_drives_a_peer_the_plugin_started(daemon, root, short_dir, mode):
    origin = Terminal(daemon, managed_chat(daemon, root, short_dir, mode))
    started = origin.tool(
        "pohunek_session_start", {"agent_profile": "hermes", "name": "peer-1", "project": {"label": "web"}}
    )
    assert started["ok"], started
    peer = started["result"]["session_id"]
    assert started["result"]["worker_instance_id"] and started["result"]["runtime_generation"] == "1"

    # list, inspect the unique target, read, send, wait, re-read
    names = [s["name"] for s in origin.tool("pohunek_sessions")["result"]["sessions"]]
    assert names.count("peer-1") == 1
    got = origin.tool("pohunek_session_get", {"session": "peer-1"})
    assert got["result"]["id"] == peer
    first = origin.tool("pohunek_session_output", {"session": peer})["result"]
    sent = origin.tool("pohunek_session_send", {"session": peer, "input": "marco polo"})
    assert sent["ok"] and sent["result"]["session_id"] == peer
    cursor = {k: first[k] for k in ("worker_instance_id", "runtime_generation")}  # its runtime, as returned
    waited = origin.tool(
        "pohunek_session_wait",
        {"session": peer, "timeout_ms": 8000, **cursor, "after_output_offset": first["next_offset"]},
    )
    assert waited["result"]["outcome"] in ("changed", "matched"), waited
    reread = origin.tool("pohunek_session_output", {"session": peer, **cursor, "after_offset": first["next_offset"]})[
        "result"
    ]
    assert reread["start_offset"] == first["next_offset"]
    assert reread["content_trust"] == "untrusted"
    screen = origin.tool("pohunek_session_screen", {"session": peer})["result"]
    assert "marco polo" in screen["text"]

    # The session hosting the plugin is never a target of a mutation.
    before = mutating_calls(daemon)
    denied = origin.tool("pohunek_session_rename", {"session": "origin", "name": "x"})
    assert denied["error"]["code"] == "plugin_self_target_denied"
    assert mutating_calls(daemon) == before

    stop = origin.tool("pohunek_session_stop", {"session": peer})
    if mode == "manage":
        assert stop["error"]["code"] == "tool_not_found"
    else:
        assert stop["ok"] and stop["result"]["session"]["state"] == "stopped", stop
        assert origin.tool("pohunek_session_remove", {"session": peer})["ok"]


def test_a_policy_written_for_protocol_3_works_and_one_outside_the_window_registers_nothing(daemon, root, short_dir):
    origin = Terminal(daemon, managed_chat(daemon, root, short_dir, "read_only", protocol_min=3, protocol_max=3))
    assert origin.tools() == READ
    listed = origin.tool("pohunek_sessions")["result"]["sessions"]
    runtime = listed[0]["runtime"]
    assert runtime["runtime_id"] == runtime["worker_instance_id"]  # the v3 spelling beside the new one

    path = write_policy(
        short_dir / "state" / "policy.json",
        policy_fields(daemon.address, access_mode="full", protocol_min=5, protocol_max=6),
    )
    install(root, path)
    assert Terminal(daemon, start(daemon, "later")).tools() == set()


def test_a_float_or_a_lone_surrogate_is_refused_by_name_and_the_chat_goes_on(daemon, root, short_dir):
    origin = Terminal(daemon, managed_chat(daemon, root, short_dir, "manage"))
    peer = start(daemon, "peer")
    for name, args, field in (
        ("pohunek_session_resize", {"session": peer, "cols": 80.0, "rows": 24}, "cols"),
        ("pohunek_session_send", {"session": peer, "input": "a\ud800"}, "input"),
        ("pohunek_session_rename", {"session": peer, "name": "\udfff"}, "name"),
        ("pohunek_session_get", {"session": peer, "\ud800": 1}, "\\ud800"),
    ):
        answer = origin.tool(name, args)  # typed as the JSON escape: the chat parses a lone surrogate
        assert (answer["error"]["code"], answer["error"]["detail"]) == ("plugin_invalid_request", {"field": field})
    assert origin.tool("pohunek_session_get", {"session": peer})["result"]["name"] == "peer"
    everything = daemon.call(
        p.SESSION_OUTPUT, {"host": HOST, "session": origin.session, **origin.runtime, "after_offset": "0"}
    )["data"]
    assert b"Traceback" not in everything and b"failed unexpectedly" not in everything
    assert daemon.call(p.SESSION_GET, {"host": HOST, "session": origin.session})["state"] == "running"
    assert not (root / "logs" / "cli-errors.log").exists()
