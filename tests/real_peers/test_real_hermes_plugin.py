"""The operator plugin inside the REAL Hermes Agent: the payload of the built package, rendered
where the operator installs it (``plugins/operators/pohunek``), loaded by the real
``PluginManager`` in the real Hermes's own interpreter, which has none of this project's
packages; its tools called through the real ``tools.registry`` reach a running daemon simulator
through the operator CLI, and their schemas survive the real sanitizer a model's view goes
through."""

from __future__ import annotations

import json
import subprocess

import pytest

from hermes_cli.operator.registration import EXPECTED_HOOKS
from shared.operator import protocol as p
from shared.operator.policy import FULL_TOOLS, MANAGE_TOOLS, READ_TOOLS
from tests.support import real_hermes
from tests.support.operator_plugin import OPERATOR_CLI, package_payload, policy_fields, render, write_policy
from tests.support.operator_tools import simulator
from tests.support.processes import ROOT
from tests.support.runtime_package import PackageKit

DRIVER = ROOT / "tests" / "support" / "real_hermes_plugin_run.py"
READ = set(READ_TOOLS)
MANAGE = set(MANAGE_TOOLS)
FULL = set(FULL_TOOLS)
HOOKS = sorted(EXPECTED_HOOKS)


@pytest.fixture(scope="module")
def daemon_sim():
    with simulator() as sim:
        yield sim


@pytest.fixture(scope="module")
def payload_files(tmp_path_factory):
    """The operator payload of the Hermes package as a release builds it."""
    kit = PackageKit(tmp_path_factory.mktemp("package"))
    return package_payload(kit.build().read_bytes())


def run_in_real_hermes(agent, tmp_path, daemon_sim, files, mode, calls):
    home = tmp_path / "hermes-home"
    policy = write_policy(
        tmp_path / "policy" / "policy.json",
        policy_fields(daemon_sim.address, access_mode=mode, operator_cli=str(OPERATOR_CLI)),
    )
    render(files, home / "plugins" / "operators" / "pohunek", policy)
    (home / "config.yaml").write_text("plugins:\n  enabled:\n    - pohunek\n")
    env = real_hermes.isolated_env(tmp_path, home)
    argv = [*real_hermes.offline_prefix(), str(agent.python), "-I", "-B", str(DRIVER), json.dumps(calls)]
    done = subprocess.run(argv, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("mode", "tools"), [("read_only", READ), ("manage", MANAGE)])
def test_the_access_mode_registers_its_tools_and_all_hooks(
    real_hermes_agent, tmp_path, daemon_sim, payload_files, mode, tools
):
    seen = run_in_real_hermes(real_hermes_agent, tmp_path, daemon_sim, payload_files, mode, [])
    assert seen["plugins"] == {
        "operators/pohunek": {"enabled": True, "error": None, "tools": sorted(tools), "hooks": HOOKS}
    }
    assert set(seen["definitions"]) == tools


def test_in_full_mode_the_real_registry_drives_a_session_through_the_operator_cli(
    real_hermes_agent, tmp_path, daemon_sim, payload_files
):
    start = {"agent_profile": "shell", "name": "from-real-hermes", "project": {"label": "web"}}
    calls = [
        ["pohunek_hosts", {}, None],
        ["pohunek_session_start", start, None],
        ["pohunek_session_send", {"session": "from-real-hermes", "input": "echo real-peer-$((6*7))"}, None],
        ["pohunek_session_screen", {"session": "from-real-hermes"}, "real-peer-42"],
        ["pohunek_sessions", {"filters": {"agent": "shell"}}, None],
        ["pohunek_session_get", {"session": "nobody"}, None],
        ["pohunek_session_resize", {"session": "from-real-hermes", "cols": 0, "rows": 1}, None],
    ]
    seen = run_in_real_hermes(real_hermes_agent, tmp_path, daemon_sim, payload_files, "full", calls)
    assert seen["plugins"] == {
        "operators/pohunek": {"enabled": True, "error": None, "tools": sorted(FULL), "hooks": HOOKS}
    }
    hosts, started, sent, screen, listed, missing, refused = seen["answers"]
    assert hosts == {"ok": True, "result": {"hosts": ["local"], "wildcard": False, "discovery_performed": False}}
    assert started["ok"] and started["result"]["recovered"] is False
    session_id = started["result"]["session_id"]
    assert daemon_sim.daemon.call(p.SESSION_GET, {"host": "local", "session": session_id})["name"] == start["name"]
    assert sent["ok"] and sent["result"]["session_id"] == session_id
    assert screen["ok"] and "real-peer-42" in screen["result"]["text"]
    assert screen["result"]["content_trust"] == "untrusted"
    assert session_id in [s["id"] for s in listed["result"]["sessions"]]
    assert missing["error"]["code"] == "plugin_session_not_found"
    assert (refused["error"]["code"], refused["error"]["detail"]) == ("plugin_invalid_request", {"field": "cols"})
    # What a model sees, after the real sanitizer: every tool, each schema still an object
    # schema with its properties, none of them rewritten into something else.
    definitions = seen["definitions"]
    assert set(definitions) == FULL
    for name, function in definitions.items():
        parameters = function["parameters"]
        assert parameters["type"] == "object" and isinstance(parameters.get("properties"), dict), name
        assert "dependencies" not in json.dumps(parameters), name
    cursor = definitions["pohunek_session_output"]["parameters"]["properties"]
    assert {"after_offset", "worker_instance_id", "runtime_generation"} <= set(cursor)
