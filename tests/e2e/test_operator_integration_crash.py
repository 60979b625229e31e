"""The install transaction under faults: kill -9 at each step, and a failing enable, each undone
so the home is as it was, and the next update finishing the job."""

from __future__ import annotations

import signal
import subprocess

import pytest

from hermes_cli import plugin_host
from runtime_package import manifests
from tests.e2e.test_operator_integration import MANAGE, tree_bytes
from tests.support.cli import HERMES
from tests.support.processes import ROOT, python_env
from tests.support.runtime_package import PackageKit

WORK = ("--hermes-profile", "work")
STEPS = ("operator:staged", "operator:backed_up", "operator:swapped", "operator:enabled")


@pytest.fixture
def installed(tmp_path, root):
    """The plugin installed from 1.0.0, and 1.0.1 selected: an update has work to do."""
    work = root / "profiles" / "work"
    work.mkdir(parents=True)
    kit = PackageKit(tmp_path)
    kit.install_package()
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, home=root)
    assert code == 0, data
    newer = kit.build(kit.tree(version="1.0.1"))
    code, data = kit.cli_json(
        "operator", "package", "install", str(newer), "--catalog", str(kit.sign([newer], sequence=2))
    )
    assert code == 0, data
    assert kit.cli("operator", "package", "select", manifests.PACKAGE_ID, "--digest", data["digest"]).returncode == 0
    return kit, root, work, data["digest"]


def killed_at(kit, root, step: str, *command: str) -> None:
    env = python_env(HERMES_HOME=str(root), HERMES_FAULT_PAUSE_AT=step, **kit.env)
    proc = subprocess.Popen(
        [*HERMES, "operator", *(command or ("update",)), *WORK, "--json"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.strip() == f"paused {step}", line
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_at_each_step_is_reported_then_recovered_by_the_next_update(installed, step):
    kit, root, work, newer = installed
    killed_at(kit, root, step)
    code, data = kit.cli_json("operator", "status", *WORK, home=root)
    assert code == 0 and data["stale"]["journal"], data
    _, doctor = kit.cli_json("operator", "doctor", *WORK, home=root)
    assert {c["code"]: c["status"] for c in doctor["checks"]}["stale_stage"] == "fail"
    code, data = kit.cli_json("operator", "update", *WORK, home=root)
    assert code == 0, data
    assert data["provenance"]["package_digest"] == newer
    assert not data["modified"] and not data["outdated"] and data["enabled"]
    assert data["stale"] == {"stage": [], "backup": [], "journal": []}
    assert sorted(p.name for p in (work / "plugins").iterdir()) == ["operators"]
    assert sorted(p.name for p in (work / "plugins" / "operators").iterdir()) == ["pohunek"]
    assert len(plugin_host.PluginHost.load(work).tools) == 14


def test_a_failing_enable_puts_the_old_plugin_and_policy_back_byte_for_byte(installed):
    kit, root, work, _ = installed
    before = tree_bytes(work / "plugins", kit.state / "integrations")
    blocker = work / "config.yaml.lock"
    blocker.unlink(missing_ok=True)
    blocker.mkdir()  # the config still reads, but Hermes cannot take its lock to switch a plugin
    code, data = kit.cli_json("operator", "update", *WORK, home=root)
    assert code == 1 and data["error"]["code"] == "hermes_command_failed", data
    assert data["error"]["detail"]["command"] == "hermes plugins enable"
    assert tree_bytes(work / "plugins", kit.state / "integrations") == before
    blocker.rmdir()
    assert kit.cli_json("operator", "status", *WORK, home=root)[1]["outdated"]


def test_comments_in_the_config_survive_install_and_uninstall(tmp_path, root):
    work = root / "profiles" / "work"
    work.mkdir(parents=True)
    (work / "config.yaml").write_text("# the owner's notes\nmodel: hermes-4  # chosen\n")
    kit = PackageKit(tmp_path)
    kit.install_package()
    assert kit.cli("operator", "install", *WORK, *MANAGE, home=root).returncode == 0
    assert (work / "config.yaml").read_text().startswith("# the owner's notes\nmodel: hermes-4  # chosen\n")
    assert kit.cli("operator", "uninstall", *WORK, home=root).returncode == 0
    assert (work / "config.yaml").read_text().startswith("# the owner's notes\nmodel: hermes-4  # chosen\n")
    assert plugin_host.enabled_names(work) == []


@pytest.mark.parametrize("step", ["operator:staged", "operator:swapped", "operator:enabled"])
def test_kill_9_during_a_first_install_leaves_nothing_half_installed(tmp_path, root, step):
    work = root / "profiles" / "work"
    work.mkdir(parents=True)
    kit = PackageKit(tmp_path)
    kit.install_package()
    killed_at(kit, root, step, "install", *MANAGE)
    code, data = kit.cli_json("operator", "uninstall", *WORK, home=root)  # recovers, then finds nothing
    assert code == 0 and data["removed"] is False and data["provenance"] is None, data
    assert [p for p in (work / "plugins").rglob("*") if not p.is_dir()] == []
    assert plugin_host.enabled_names(work) == []
    assert not list((kit.state / "integrations").rglob("policy.json*"))
    code, data = kit.cli_json("operator", "install", *WORK, *MANAGE, home=root)
    assert code == 0 and data["enabled"] and not data["modified"], data
