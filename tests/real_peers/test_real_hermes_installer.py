"""The installer against the real Hermes Agent: the lock's lifecycle (install, status, doctor,
uninstall on the named profile, read-only), the real ``plugins`` verbs enabling the plugin at
its key ``operators/pohunek``, and the real Hermes loading it as the operator's harness checks.

The real release says 0.19.0, below the package's range, so ``--hermes-bin`` names a wrapper (a
real file) that answers ``--version`` with 0.20.0's line and runs the real ``hermes`` for the
rest, each run in a network namespace of its own. The probe runs in the Python beside the
wrapper: this checkout's in the first test (the steps around the probe, proven against the real
commands), the real Hermes's own in the second (the plugin as it must run inside Hermes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shared.operator.policy import READ_TOOLS
from tests.support.hermes_wrappers import answering_version
from tests.support.operator_lifecycle import contract, expected, run_lifecycle
from tests.support.runtime_package import PackageKit

VENV = Path(sys.executable).parent.parent
PROFILE = contract()["target_value"]
# The real Hermes discovering and loading the installed plugin as a chat would (not -I: the
# environment's PYTHONDONTWRITEBYTECODE keeps compiled files out of the checked plugin).
LOADED = """
import json
from hermes_cli.plugins import PluginManager
manager = PluginManager()
manager.discover_and_load(force=True)
loaded = manager._plugins.get("operators/pohunek")
skill = manager._plugin_skills.get("pohunek:pohunek")
print(json.dumps({
    "found": loaded is not None,
    "enabled": bool(loaded and loaded.enabled),
    "error": None if loaded is None or loaded.error is None else type(loaded.error).__name__,
    "tools": sorted(loaded.tools_registered) if loaded else [],
    "hooks": sorted(loaded.hooks_registered) if loaded else [],
    "skill": bool(skill and skill["path"].is_file()),
}))
"""


@pytest.fixture
def kit(tmp_path):
    kit = PackageKit(tmp_path)
    kit.install_package()
    return kit


@pytest.fixture
def home(root) -> Path:
    path = root / "profiles" / PROFILE
    path.mkdir(parents=True)
    return path


def real_list(real_hermes_agent, tmp_path: Path, home: Path) -> list[dict]:
    done = real_hermes_agent.run(["plugins", "list", "--json"], home=tmp_path, hermes_home=home)
    assert done.returncode == 0, done.stderr
    return [r for r in json.loads(done.stdout) if r["name"] == "pohunek"]


def test_the_locked_lifecycle_drives_the_real_hermes_commands(real_hermes_agent, kit, root, home, tmp_path):
    hermes_bin = answering_version(tmp_path / "wrapper", VENV, real_hermes_agent.bin)
    seen: dict[str, list[dict]] = {}

    def installed() -> None:
        seen["installed"] = real_list(real_hermes_agent, tmp_path, home)

    steps = run_lifecycle(lambda *a: kit.cli_json(*a, home=root), hermes_bin, home, installed=installed)
    assert steps == expected()
    assert [(r["status"], r["source"]) for r in seen["installed"]] == [("enabled", "user")]
    assert real_list(real_hermes_agent, tmp_path, home) == []
    assert "operators/pohunek" in (home / "config.yaml").read_text()


def test_the_locked_lifecycle_with_the_real_hermes_and_its_own_python(real_hermes_agent, kit, root, home, tmp_path):
    hermes_bin = answering_version(tmp_path / "wrapper", real_hermes_agent.venv, real_hermes_agent.bin)

    def installed() -> None:
        done = real_hermes_agent.run(
            ["-c", LOADED], home=tmp_path, hermes_home=home, program=hermes_bin.parent / "python3"
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {
            "found": True,
            "enabled": True,
            "error": None,
            "tools": sorted(READ_TOOLS),
            "hooks": sorted(
                [
                    "on_session_start",
                    "pre_llm_call",
                    "post_llm_call",
                    "pre_approval_request",
                    "post_approval_response",
                    "on_session_end",
                    "on_session_finalize",
                ]
            ),
            "skill": True,
        }

    steps = run_lifecycle(lambda *a: kit.cli_json(*a, home=root), hermes_bin, home, installed=installed)
    assert steps == expected()


def test_the_real_release_line_is_below_the_range_and_nothing_changes(real_hermes_agent, kit, root, home, tmp_path):
    hermes_bin = answering_version(tmp_path / "wrapper", VENV, real_hermes_agent.bin, line=None)
    code, data = kit.cli_json(
        "operator", "install", "--hermes-profile", PROFILE, "--hermes-bin", str(hermes_bin),
        "--access-mode", "read_only", "--allow-host", "local", home=root,
    )  # fmt: skip
    assert (code, data["error"]["code"]) == (2, "hermes_version_unsupported"), data
    assert data["error"]["detail"] == {"version": real_hermes_agent.version}
    # What the real --version writes of its own (an update check, logs) is Hermes's; none is ours.
    assert not (home / "plugins").exists() and not (kit.state / "integrations").exists()


def test_a_second_pohunek_the_real_list_shows_is_refused_and_the_home_is_as_it_was(
    real_hermes_agent, kit, root, home, tmp_path
):
    other = home / "plugins" / "someone-elses"
    other.mkdir(parents=True)
    (other / "plugin.yaml").write_text("name: pohunek\nversion: '9'\n")
    (other / "__init__.py").write_text("def register(ctx):\n    pass\n")
    hermes_bin = answering_version(tmp_path / "wrapper", VENV, real_hermes_agent.bin)
    code, data = kit.cli_json(
        "operator", "install", "--hermes-profile", PROFILE, "--hermes-bin", str(hermes_bin),
        "--access-mode", "read_only", "--allow-host", "local", home=root,
    )  # fmt: skip
    assert (code, data["error"]["code"]) == (1, "hermes_plugin_state_invalid"), data
    assert data["error"]["detail"] == {"reason": "duplicate"}
    assert sorted(p.name for p in (home / "plugins").iterdir()) == ["operators", "someone-elses"]
    assert list((home / "plugins" / "operators").iterdir()) == []
    assert not list((kit.state / "integrations").rglob("policy.json*"))


STANDALONE = {
    "plugin.yaml": "name: pohunek\nversion: '1'\n",
    "__init__.py": """
POLICY_PATH = {policy!r}
from pathlib import Path
from . import hooks

def integration_status():
    return {{"state": "ready", "failure_count": 0}}

def register(ctx):
    for name in hooks.NAMES:
        ctx.register_hook(name, hooks.hook)
    for name in {tools!r}:
        ctx.register_tool(name, "pohunek", {{"name": name}}, lambda args, **kw: "{{}}")
    ctx.register_skill("pohunek", Path(__file__).parent / "SKILL.md")
""",
    "hooks.py": """
import os, socket
NAMES = ("on_session_start", "pre_llm_call", "post_llm_call", "pre_approval_request",
         "post_approval_response", "on_session_end", "on_session_finalize")
_counts = {"calls": 0, "failures": 0}

def counters():
    return dict(_counts)

def hook(**kwargs):
    _counts["calls"] += 1
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(os.environ["POHUNEK_HOOK_ENDPOINT"].removeprefix("ipc://"))
    except Exception:
        _counts["failures"] += 1
""",
    "SKILL.md": "---\nname: pohunek\n---\nthe skill\n",
}


def test_the_probe_runs_in_the_real_hermess_python_with_nothing_of_this_project(real_hermes_agent, tmp_path):
    from hermes_cli.operator.probe_client import run_probe
    from hermes_cli.operator.registration import checks

    policy = tmp_path / "policy.json"
    plugin = tmp_path / "home" / "plugins" / "operators" / ".pohunek-stage-0a0b" / "pohunek"
    plugin.mkdir(parents=True)
    for name, text in STANDALONE.items():
        (plugin / name).write_text(text.format(policy=str(policy), tools=READ_TOOLS) if name == "__init__.py" else text)
    hermes_bin = answering_version(tmp_path / "wrapper", real_hermes_agent.venv, real_hermes_agent.bin)
    bare = subprocess.run([hermes_bin.parent / "python3", "-I", "-c", "import shared"], cwd="/", capture_output=True)
    assert bare.returncode != 0, "that Python has none of this project's packages"
    result = run_probe(str(hermes_bin), plugin, policy)
    assert (result.loaded, result.error, result.policy_bound) == (True, None, True)
    assert result.hook_dry_run.forced_failure_swallowed and result.hook_dry_run.calls == 7
    assert [c["status"] for c in checks(result, "read_only")][:2] == ["pass", "pass"]
    assert not list(plugin.rglob("__pycache__")), "the probe writes no bytecode beside the plugin"
