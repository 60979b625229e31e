"""kill -9 before every change an install, an update and an uninstall make, the commit's
clean-up included: the next run of the same command reports what it found, repairs it and
ends with the home exactly as a clean run leaves it; nothing is ever wedged."""

from __future__ import annotations

import shutil
import signal
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import plugin_host
from hermes_cli.operator.lifecycle import JOURNAL
from hermes_cli.operator.target import Target, policy_path
from runtime_package import manifests
from shared.faults import KILL_ENV
from tests.e2e.test_operator_integration import MANAGE
from tests.e2e.test_operator_integration_gate import fake_hermes
from tests.support.runtime_package import PackageKit

WORK = ("--hermes-profile", "work")
MAX_STEPS = 100  # a bound on the loop, far above any transaction's count
LANES = 2


def home_state(work: Path, policy_dir: Path) -> dict[str, Any]:
    """Every entry of the plugins directory and of the policy's directory, with its type, mode
    and bytes (a link with its target), and the enabled plugins: what "exactly" compares."""
    seen: dict[str, Any] = {"enabled": plugin_host.enabled_names(work)}
    for base in (work / "plugins", policy_dir):
        for path in sorted(base.rglob("*")) if base.exists() else []:
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                content: Any = str(path.readlink())
            else:
                content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
            seen[str(path)] = (stat.filemode(info.st_mode), content)
    return seen


class Snapshot:
    """Paths as they are now (a directory, a file or nothing), to put back before each run."""

    def __init__(self, places: list[Path], into: Path) -> None:
        self.places = places
        self.into = into
        into.mkdir()
        for index, path in enumerate(places):
            if path.is_dir():
                shutil.copytree(path, into / str(index), symlinks=True)
            elif path.exists():
                shutil.copy2(path, into / str(index))

    def restore(self) -> None:
        for index, path in enumerate(self.places):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            kept = self.into / str(index)
            if kept.is_dir():
                shutil.copytree(kept, path, symlinks=True)
            elif kept.exists():
                shutil.copy2(kept, path)


@dataclass
class Lane:
    """One Hermes profile the steps run in; lanes run side by side, each its share of the steps."""

    kit: PackageKit
    root: Path
    profile: str
    hermes: str  # a Hermes whose --version answers at once (the real one for everything else)

    @property
    def work(self) -> Path:
        return self.root / "profiles" / self.profile

    def cli(self, *args: str, **options: Any):
        return self.kit.cli("operator", *args, "--hermes-profile", self.profile, "--hermes-bin", self.hermes, **options)

    def cli_json(self, *args: str) -> tuple[int, Any]:
        return self.kit.cli_json(
            "operator", *args, "--hermes-profile", self.profile, "--hermes-bin", self.hermes, home=self.root
        )

    @property
    def policy_dir(self) -> Path:
        return policy_path(self.kit.state, Target("profile", self.profile, self.work)).parent

    def state(self) -> dict[str, Any]:
        return home_state(self.work, self.policy_dir)


def killed_before_each_step(lane: Lane, command: tuple[str, ...], before: Snapshot, after: dict, first: int) -> int:
    """Crash ``command`` before step ``first``, ``first + LANES``, … and repair each; the first
    step that a run outlives (the run then is a clean one)."""
    step = first
    while step < MAX_STEPS:
        before.restore()
        killed = lane.cli(*command, home=lane.root, env_extra={KILL_ENV: str(step)})
        if killed.returncode == 0:
            assert lane.state() == after
            return step
        assert killed.returncode == -signal.SIGKILL, (step, killed.stdout, killed.stderr)
        left_journal = (lane.work / "plugins" / JOURNAL).exists()
        code, data = lane.cli_json(*command)
        assert code == 0, (step, data)
        assert (data["recovered"] is not None) == left_journal, (step, data)
        assert data["stale"] == {"stage": [], "backup": [], "journal": []}, (step, data)
        assert lane.state() == after, step
        step += LANES
    raise AssertionError(f"{command[0]} was still killed at step {step}")


@pytest.mark.parametrize("command", [("install", *MANAGE), ("update",), ("uninstall",)], ids=lambda c: c[0])
def test_a_kill_9_before_any_step_is_reported_and_repaired_by_the_next_run(tmp_path, root, command):
    kit = PackageKit(tmp_path)
    kit.install_package()
    # A Hermes per lane: the fake keeps the plugin's enablement in one file, which two lanes
    # writing at once would tear.
    lanes = [
        Lane(kit, root, f"work{index}", str(fake_hermes(tmp_path / f"lane{index}", "Hermes Agent v0.20.0 (2026.8.1)")))
        for index in range(LANES)
    ]
    for lane in lanes:
        lane.work.mkdir(parents=True)
        # An install to update or uninstall; before a first install, an uninstall that finds
        # nothing makes the integration state (and the lock) as any earlier command would, so
        # every run starts from the same place and counts the same steps.
        first = ("uninstall",) if command[0] == "install" else ("install", *MANAGE)
        assert lane.cli(*first, home=root).returncode == 0
    if command[0] == "update":
        select_newer(kit)
    plans = []
    for index, lane in enumerate(lanes):
        places = [lane.work / "plugins", lane.policy_dir, lane.work / "config.yaml"]
        before = Snapshot(places, tmp_path / f"before-{index}")
        assert lane.cli(*command, home=root).returncode == 0
        after = lane.state()
        before.restore()
        assert lane.state() != after
        plans.append((lane, command, before, after, index + 1))
    with ThreadPoolExecutor(LANES) as pool:
        outlived = list(pool.map(lambda plan: killed_before_each_step(*plan), plans))
    # Every step below the first one a run outlived was crashed at, in some lane; and the fault
    # variable took effect: a transaction has more steps than the few pause points.
    assert outlived[0] - outlived[1] in (-1, 1) and min(outlived) > 10
    code, doctor = lanes[0].cli_json("doctor")
    checks = {c["code"]: c["status"] for c in doctor["checks"]}
    assert checks["target_safety"] == checks["stale_stage"] == checks["stale_backup"] == "pass", doctor
    if command[0] != "uninstall":
        assert checks["asset_integrity"] == checks["plugin_ownership"] == checks["plugin_enabled"] == "pass"


def select_newer(kit: PackageKit) -> None:
    newer = kit.build(kit.tree(version="1.0.1"))
    code, data = kit.cli_json(
        "operator", "package", "install", str(newer), "--catalog", str(kit.sign([newer], sequence=2))
    )
    assert code == 0, data
    assert kit.cli("operator", "package", "select", manifests.PACKAGE_ID, "--digest", data["digest"]).returncode == 0


def test_the_temporary_files_a_crash_inside_a_write_leaves_are_swept_by_the_next_command(tmp_path, root):
    # A kill between writing a journal or a policy to its temporary file and renaming it leaves
    # that file; the next command, holding the lock, removes it, and nothing that is not one.
    kit = PackageKit(tmp_path)
    kit.install_package()
    lane = Lane(kit, root, "work", str(fake_hermes(tmp_path, "Hermes Agent v0.20.0 (2026.8.1)")))
    lane.work.mkdir(parents=True)
    assert lane.cli("install", *MANAGE, home=root).returncode == 0
    left = [
        lane.work / "plugins" / f".{JOURNAL}.0123456789abcdef.tmp",
        lane.policy_dir / ".policy.json.fedcba9876543210.tmp",
    ]
    kept = [lane.work / "plugins" / ".notes.tmp", lane.policy_dir / ".policy.json.tmp"]
    for path in left + kept:
        path.write_bytes(b"{")
    code, data = lane.cli_json("update")
    assert code == 0, data
    assert [path.exists() for path in left + kept] == [False, False, True, True]
