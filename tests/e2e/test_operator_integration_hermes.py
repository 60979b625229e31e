"""The installer against the Hermes it is given: the lock's lifecycle with a Hermes that speaks
the real shapes and with this checkout's own, a Hermes that misbehaves in each of the ways the
installer must survive (a typed error, the home and the policy as they were), and an install
where an earlier installer put it (``plugins/pohunek``) moved to the category directory under
the lock and the journal, kill -9 at any step included."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_operator_integration import tree_bytes
from tests.support.cli import HERMES
from tests.support.hermes_wrappers import speaking
from tests.support.operator_lifecycle import contract, expected, run_lifecycle, state
from tests.support.processes import ROOT, python_env
from tests.support.runtime_package import PackageKit

VENV = Path(sys.executable).parent.parent  # whose Python has the payload's imports
PROFILE = contract()["target_value"]
TARGET = ("--hermes-profile", PROFILE)
READ_ONLY = ("--access-mode", "read_only", "--allow-host", "local")
MIGRATION_STEPS = ("operator:staged", "operator:backed_up", "operator:swapped", "operator:enabled")


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


def fake(tmp_path: Path, **pieces: str) -> Path:
    return speaking(tmp_path / "hermes", VENV, tmp_path / "enabled", **pieces)


def operator(kit: PackageKit, root: Path, hermes_bin: Path | None, *args: str) -> tuple[int, dict]:
    chosen = ("--hermes-bin", str(hermes_bin)) if hermes_bin is not None else ()
    return kit.cli_json("operator", *args, *TARGET, *chosen, home=root)


def test_the_locked_lifecycle_with_a_hermes_speaking_the_real_shapes(kit, root, home, tmp_path):
    hermes_bin = fake(tmp_path)
    assert run_lifecycle(lambda *a: kit.cli_json(*a, home=root), hermes_bin, home) == expected()
    assert (tmp_path / "enabled").read_text() == "disabled\n"
    assert sorted(p.name for p in (home / "plugins").rglob("*")) == ["operators"]


def test_the_locked_lifecycle_with_this_checkouts_own_hermes(kit, root, home):
    assert run_lifecycle(lambda *a: kit.cli_json(*a, home=root), None, home) == expected()


TWO = """printf '[{"name":"pohunek","status":"enabled","source":"user"},{"name":"pohunek","status":"enabled","source":"user"}]'"""
BUNDLED = """printf '[{"name":"pohunek","status":"enabled","source":"bundled"}]'"""
TRAILING = """printf '[{"name":"pohunek","status":"enabled","source":"user"}] and more'"""


@pytest.mark.parametrize(
    ("pieces", "code", "exit_code"),
    [
        ({"version": "echo 'Hermes Agent v0.19.0 (2026.7.20)'"}, "hermes_version_unsupported", 2),
        ({"version": "echo 'Hermes Agent v0.20.0'"}, "hermes_version_unreadable", 2),
        ({"list": TWO}, "hermes_plugin_state_invalid", 1),
        ({"list": BUNDLED}, "hermes_plugin_state_invalid", 1),
        ({"list": TRAILING}, "hermes_plugin_state_invalid", 1),
        ({"enable": ":"}, "plugin_switch_failed", 1),
        ({"enable": "exec sleep 600"}, "hermes_timeout", 1),
        ({"list": "head -c 70000 /dev/zero"}, "hermes_output_limit", 1),
    ],
)
def test_a_misbehaving_hermes_is_a_typed_error_and_nothing_is_half_installed(
    kit, root, home, tmp_path, pieces, code, exit_code
):
    hermes_bin = fake(tmp_path, **pieces)
    before = tree_bytes(root, kit.state / "integrations")
    answer, data = operator(kit, root, hermes_bin, "install", *READ_ONLY)
    assert (answer, data["error"]["code"]) == (exit_code, code), data
    assert tree_bytes(root, kit.state / "integrations") == before
    _, status = operator(kit, root, fake(tmp_path / "good"), "status")
    assert not status["installed"] and status["stale"] == {"stage": [], "backup": [], "journal": []}


def test_an_update_through_a_hermes_whose_list_is_garbage_changes_nothing(kit, root, home, tmp_path):
    assert operator(kit, root, fake(tmp_path), "install", *READ_ONLY)[0] == 0
    before = tree_bytes(root, kit.state / "integrations")
    answer, data = operator(kit, root, fake(tmp_path / "bad", list=TRAILING), "update", "--access-mode", "full")
    assert (answer, data["error"]["code"]) == (1, "hermes_plugin_state_invalid"), data
    assert tree_bytes(root, kit.state / "integrations") == before


def an_earlier_install(kit: PackageKit, root: Path, home: Path, hermes_bin: Path) -> None:
    """The plugin where an earlier installer put it: ``plugins/pohunek``."""
    assert operator(kit, root, hermes_bin, "install", *READ_ONLY)[0] == 0
    (home / "plugins" / "operators" / "pohunek").rename(home / "plugins" / "pohunek")
    (home / "plugins" / "operators").rmdir()


def test_an_earlier_install_is_found_then_moved_by_the_next_update(kit, root, home, tmp_path):
    hermes_bin = fake(tmp_path)
    an_earlier_install(kit, root, home, hermes_bin)
    code, status = operator(kit, root, hermes_bin, "status")
    assert code == 0 and status["installed"] and status["enabled"] and not status["modified"], status
    assert status["plugin_root"] == str(home / "plugins" / "pohunek")
    _, doctor = operator(kit, root, hermes_bin, "doctor")
    assert state("doctor", doctor) == "healthy", doctor
    code, data = operator(kit, root, hermes_bin, "update")
    assert code == 0 and data["enabled"] and not data["modified"], data
    assert data["plugin_root"] == str(home / "plugins" / "operators" / "pohunek")
    assert sorted(p.name for p in (home / "plugins").iterdir()) == ["operators"]
    assert sorted(p.name for p in (home / "plugins" / "operators").iterdir()) == ["pohunek"]


def test_an_earlier_install_is_uninstalled_where_it_is(kit, root, home, tmp_path):
    hermes_bin = fake(tmp_path)
    an_earlier_install(kit, root, home, hermes_bin)
    code, data = operator(kit, root, hermes_bin, "uninstall")
    assert code == 0 and data["removed"] and not data["installed"], data
    assert list((home / "plugins").iterdir()) == []
    assert (tmp_path / "enabled").read_text() == "disabled\n"


def killed_at(kit: PackageKit, root: Path, step: str, *args: str) -> None:
    env = python_env(HERMES_HOME=str(root), HERMES_FAULT_PAUSE_AT=step, **kit.env)
    proc = subprocess.Popen(
        [*HERMES, "operator", *args, "--json"],
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


@pytest.mark.parametrize("step", MIGRATION_STEPS)
def test_kill_9_while_an_earlier_install_is_moved_is_recovered_by_the_next_update(kit, root, home, tmp_path, step):
    hermes_bin = fake(tmp_path)
    an_earlier_install(kit, root, home, hermes_bin)
    killed_at(kit, root, step, "update", *TARGET, "--hermes-bin", str(hermes_bin))
    code, status = operator(kit, root, hermes_bin, "status")
    assert code == 0 and status["stale"]["journal"], status
    code, data = operator(kit, root, hermes_bin, "update")
    assert code == 0 and data["recovered"]["action"] == "install", data
    assert data["recovered"]["outcome"] == "rolled_back"  # every step is before the point of no return
    assert data["enabled"] and not data["modified"] and data["stale"] == {"stage": [], "backup": [], "journal": []}
    assert data["plugin_root"] == str(home / "plugins" / "operators" / "pohunek")
    assert sorted(str(p.relative_to(home)) for p in (home / "plugins").glob("*/*")) == ["plugins/operators/pohunek"]
    assert not (home / "plugins" / "pohunek").exists()
