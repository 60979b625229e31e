"""The operator plugin's tools through the operator CLI (``hermes-operator``), the way they
reach the daemon inside a Hermes without this project's packages: the same answers and the
same typed errors as in process, and every way the CLI can fail is a typed answer, a hung one
killed with everything it started."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.operator_plugin import PAYLOAD
from tests.support.operator_tools import Tools, code, result, simulator
from tests.support.processes import wait_for

pytestmark = pytest.mark.slow

MODULES = sorted(path.stem for path in PAYLOAD.glob("*.py") if path.stem != "__init__")

# What changes between two reads of one session, whichever way they are made.
VOLATILE = frozenset({"updated_at", "activity", "terminal_watermark", "output_offset", "last_output_at"})


@pytest.fixture(scope="module")
def daemon_sim():
    with simulator("--hosts", "local,desktop") as sim:
        yield sim


@pytest.fixture(scope="module")
def both(daemon_sim, tmp_path_factory):
    fields = {"access_mode": "full", "allowed_hosts": ["local", "desktop"]}
    policy_file = tmp_path_factory.mktemp("cli") / "policy.json"
    return Tools(daemon_sim.address, **fields), Tools(daemon_sim.address, policy_file=policy_file, **fields)


def steady(value):
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def test_the_cli_answers_every_call_as_the_direct_path_does(daemon_sim, both):
    direct, cli = both
    daemon_sim.start("peer", input="echo from-the-peer")
    direct_start = result(
        direct("pohunek_session_start", {"agent_profile": "shell", "name": "by-direct", "project": {"label": "web"}})
    )
    cli_start = result(
        cli("pohunek_session_start", {"agent_profile": "shell", "name": "by-cli", "project": {"label": "web"}})
    )
    assert (direct_start["recovered"], cli_start["recovered"]) == (False, False)
    assert direct_start["session"]["project_id"] == cli_start["session"]["project_id"]
    runtime = pair = {
        k: result(direct("pohunek_session_get", {"session": "peer"}))["runtime"][k]
        for k in ("worker_instance_id", "runtime_generation")
    }
    page = {"session": "peer", **pair, "after_offset": "0", "wait_ms": 2000}
    wait_for(
        lambda: "from-the-peer" in result(direct("pohunek_session_output", page))["text"], timeout=30, what="output"
    )
    calls = [  # each with the code it answers, or None for a result
        ("pohunek_hosts", {}, None),
        ("pohunek_sessions", {"filters": {"agent": "shell"}}, None),
        ("pohunek_session_get", {"session": "peer"}, None),
        ("pohunek_session_output", {**page, "max_bytes": 16}, None),  # bytes once written never change
        ("pohunek_session_diff", {"session": "by-cli"}, None),
        ("pohunek_session_diff", {"session": "peer"}, "session_no_repository"),
        ("pohunek_session_wait", {"session": "peer", "states": ["running"], "timeout_ms": 100}, None),
        ("pohunek_session_rename", {"session": "by-direct", "name": "by-direct"}, None),
        # Refused by the plugin, by its policy, and by the daemon.
        ("pohunek_session_get", {"session": "nobody"}, "plugin_session_not_found"),
        ("pohunek_session_get", {"session": "peer", "host": "elsewhere"}, "plugin_host_denied"),
        ("pohunek_session_resize", {"session": "peer", "cols": 0, "rows": 1}, "plugin_invalid_request"),
        (
            "pohunek_session_output",
            {"session": "peer", "worker_instance_id": "w-old", "runtime_generation": "9"},
            "session_runtime_changed",
        ),
        ("pohunek_session_remove", {"session": "peer"}, "session_live"),
    ]
    for name, args, expected in calls:
        through_cli = cli(name, args)
        assert steady(direct(name, args)) == steady(through_cli), name
        assert (None if through_cli["ok"] else code(through_cli)) == expected, name
    assert runtime == pair


def test_a_cli_that_cannot_run_or_answer_is_a_typed_error(daemon_sim, tmp_path):
    def through(cli: Path, **fields):
        return Tools(daemon_sim.address, policy_file=tmp_path / "policy.json", operator_cli=cli, **fields)

    def script(name: str, body: str) -> Path:
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o700)
        return path

    assert code(through(tmp_path / "missing")("pohunek_sessions")) == "pohunek_cli_unavailable"
    assert code(through(script("crash", "exit 9"))("pohunek_sessions")) == "pohunek_cli_failed"
    assert code(through(script("noise", "echo not-json"))("pohunek_sessions")) == "pohunek_cli_invalid_envelope"
    refused = script("refused", """echo '{"ok":false,"error":{"code":"invalid_request","field":"args"}}'; exit 2""")
    assert code(through(refused)("pohunek_sessions")) == "pohunek_cli_failed"
    # A hung CLI is killed at the tool's deadline, with every process it started.
    child = tmp_path / "child.pid"
    hung = through(script("hung", f"sleep 300 & echo $! > {child}; wait"), tool_timeout_ms=1000, request_timeout_ms=500)
    assert code(hung("pohunek_sessions")) == "plugin_tool_timeout"
    pid = int(child.read_text())
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), timeout=10, what="the CLI's child killed")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_policy_that_stops_loading_or_speaks_no_common_protocol_is_a_typed_error(daemon_sim, tmp_path):
    policy_file = tmp_path / "policy.json"
    tools = Tools(daemon_sim.address, policy_file=policy_file)
    assert result(tools("pohunek_sessions"))["host"] == "local"
    policy_file.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)  # now open to others
    assert code(tools("pohunek_sessions")) == "plugin_policy_invalid"
    old = Tools(daemon_sim.address, policy_file=tmp_path / "old.json", protocol_min=1, protocol_max=2)
    assert code(old("pohunek_sessions")) == "pohunek_cli_incompatible"


def test_the_payload_imports_with_the_standard_library_alone():
    script = f"""
import json, sys
sys.path.insert(0, {str(PAYLOAD.parent)!r})
import pohunek
from pohunek import {", ".join(MODULES)}
foreign = sorted({{m.split(".")[0] for m in sys.modules}} & {{"shared", "zmq", "msgpack", "fastjsonschema", "yaml"}})
print(json.dumps({{"foreign": foreign, "sender": hooks.reports.__name__, "policy": pohunek.POLICY_PATH}}))
"""
    # -S: no site-packages at all; -I: nothing from the environment or the working directory;
    # -B: no byte-code written into the source tree.
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"foreign": [], "sender": "pohunek.hook_wire", "policy": None}
