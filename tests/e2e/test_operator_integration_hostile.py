"""The installer in a hostile home: a link planted at every path it writes or removes, and a
second command racing the first. Nothing outside the home and the state is ever written or
removed; every answer is a typed refusal or a success; a racing command is told it is busy."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_cli.operator.lifecycle import JOURNAL
from hermes_cli.operator.target import Target, policy_path
from shared.faults import ENV as PAUSE_ENV
from tests.e2e.test_operator_integration import MANAGE
from tests.e2e.test_operator_integration_gate import fake_hermes
from tests.support.cli import HERMES
from tests.support.processes import ROOT, python_env
from tests.support.runtime_package import SOURCE, PackageKit

ASSETS = sorted(
    p.relative_to(SOURCE / "operator" / "pohunek").as_posix()
    for p in (SOURCE / "operator" / "pohunek").rglob("*")
    if p.is_file() and "__pycache__" not in p.parts
)
# Typed refusals a planted link may meet (a linked policy is not read, so update has nothing to
# inherit); anything else, an internal error above all, fails.
REFUSALS = {
    "hermes_invalid_policy",
    "integration_path_unsafe",
    "plugin_root_unmanaged",
    "ownership_marker_invalid",
    "integration_journal_invalid",
}
BAIT = {"pohunek/SKILL.md": b"the owner's own skill\n", "__init__.py": b"# the owner's own code\n"}


@dataclass
class Scene:
    kit: PackageKit
    root: Path
    outside: Path  # where every planted link points
    hermes: str

    @property
    def work(self) -> Path:
        return self.root / "profiles" / "work"

    @property
    def policy(self) -> Path:
        return policy_path(self.kit.state, Target("profile", "work", self.work))

    def operator(self, *args: str) -> tuple[int, dict]:
        return self.kit.cli_json(
            "operator", *args, "--hermes-profile", "work", "--hermes-bin", self.hermes, home=self.root
        )


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Iterator[tuple[Path, Scene]]:
    """A package installed, and the plugin installed in the work profile: saved to be put back
    for each test, at the same paths (the marker and the policy name them)."""
    base = tmp_path_factory.mktemp("hostile")
    kit = PackageKit(base)
    kit.install_package()
    fake = fake_hermes(base, "Hermes Agent v0.20.0 (2026.8.1)", kit.state / "fake-hermes-enabled")
    scene = Scene(kit, base / "home", base / "outside", str(fake))
    scene.work.mkdir(parents=True)
    saved = base / "saved"
    shutil.copytree(base / "home", saved / "fresh" / "home", symlinks=True)
    shutil.copytree(kit.state, saved / "fresh" / "state", symlinks=True)
    code, data = scene.operator("install", *MANAGE)
    assert code == 0, data
    shutil.copytree(base / "home", saved / "installed" / "home", symlinks=True)
    shutil.copytree(kit.state, saved / "installed" / "state", symlinks=True)
    yield saved, scene


def restored(template: tuple[Path, Scene], which: str) -> Scene:
    saved, scene = template
    for path in (scene.root, scene.kit.state, scene.outside):
        if path.exists():
            shutil.rmtree(path)
    shutil.copytree(saved / which / "home", scene.root, symlinks=True)
    shutil.copytree(saved / which / "state", scene.kit.state, symlinks=True)
    scene.outside.mkdir()
    return scene


def tree(path: Path) -> dict[str, tuple[str, int, bytes | str | None]]:
    """Every entry below ``path``: its type and mode, its inode (a file replaced by an equal one
    is still a write), and its bytes (a link: its target)."""
    seen: dict[str, tuple[str, int, bytes | str | None]] = {}
    for entry in sorted(path.rglob("*")):
        info = entry.lstat()
        if stat.S_ISLNK(info.st_mode):
            content: bytes | str | None = str(entry.readlink())
        else:
            content = entry.read_bytes() if stat.S_ISREG(info.st_mode) else None
        seen[str(entry.relative_to(path))] = (stat.filemode(info.st_mode), info.st_ino, content)
    return seen


def plant(path: Path, outside: Path, *, directory: bool) -> None:
    """A link at ``path`` to a place outside: what was at ``path`` moved there, or bait."""
    there = outside / path.name
    if path.exists() or path.is_symlink():
        shutil.move(path, there)
    elif directory:
        for rel, data in BAIT.items():
            (there / rel).parent.mkdir(parents=True, exist_ok=True)
            (there / rel).write_bytes(data)
    else:
        there.write_bytes(b'{"the owner": "file"}\n')
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.symlink_to(there, target_is_directory=directory)


def journal_naming(scene: Scene, sibling: str, phase: str, *, installed: bool, earlier: bool = False) -> Path:
    """A journal a killed install left (its owner long gone), naming ``sibling`` as its stage
    or backup (its holder in the category directory; ``earlier``: the plugin itself, beside
    ``plugins/pohunek``, as an installer before categories wrote it); returns the sibling's
    path, for a link to be planted there."""
    plugins = scene.work / "plugins"
    plugins.mkdir(exist_ok=True, mode=0o700)
    journal: dict[str, object] = {
        "action": "install",
        "phase": phase,
        "owner": {"pid": 4_000_000, "start_time": 1},
        "stage": ".pohunek-stage-0a0b0c0d0e0f",
        "backup": ".pohunek-backup-0a0b0c0d0e0f",
        "had_plugin": installed,
        "had_policy": installed,
        "was_enabled": installed,
        "policy_path": str(scene.policy),
    }
    if earlier:
        (plugins / JOURNAL).write_text(json.dumps(journal))
        return plugins / str(journal[sibling])
    journal["from"] = "operators/pohunek" if installed else None
    (plugins / JOURNAL).write_text(json.dumps(journal))
    return plugins / "operators" / str(journal[sibling])


def _in_plugin(*rels: str, directory: bool) -> Callable[[Scene, bool], list[tuple[Path, bool]]]:
    return lambda scene, installed: [
        (scene.work / "plugins" / "operators" / "pohunek" / rel, directory) for rel in rels
    ]


def _one(locate: Callable[[Scene, bool], Path], *, directory: bool) -> Callable[[Scene, bool], list[tuple[Path, bool]]]:
    return lambda scene, installed: [(locate(scene, installed), directory)]


# Where a link is planted: each a list of (path, whether a directory is expected there).
PLACES: dict[str, Callable[[Scene, bool], list[tuple[Path, bool]]]] = {
    "plugins_dir": _one(lambda scene, installed: scene.work / "plugins", directory=True),
    "category_dir": _one(lambda scene, installed: scene.work / "plugins" / "operators", directory=True),
    "plugin_root": _one(lambda scene, installed: scene.work / "plugins" / "operators" / "pohunek", directory=True),
    "earlier_plugin_root": _one(lambda scene, installed: scene.work / "plugins" / "pohunek", directory=True),
    "skills_dir": _in_plugin("skills", directory=True),
    "skill_dir": _in_plugin("skills/pohunek", directory=True),
    "every_asset": _in_plugin(*ASSETS, directory=False),  # each one a link of its own
    "marker": _in_plugin(".pohunek-owned.json", directory=False),
    "stage": _one(
        lambda scene, installed: journal_naming(scene, "stage", "prepared", installed=installed), directory=True
    ),
    "backup": _one(
        lambda scene, installed: journal_naming(scene, "backup", "prepared", installed=installed), directory=True
    ),
    "committed_backup": _one(
        lambda scene, installed: journal_naming(scene, "backup", "committed", installed=installed), directory=True
    ),
    "earlier_stage": _one(
        lambda scene, installed: journal_naming(scene, "stage", "prepared", installed=installed, earlier=True),
        directory=True,
    ),
    "earlier_backup": _one(
        lambda scene, installed: journal_naming(scene, "backup", "prepared", installed=installed, earlier=True),
        directory=True,
    ),
    "journal": _one(lambda scene, installed: scene.work / "plugins" / JOURNAL, directory=False),
    "policy": _one(lambda scene, installed: scene.policy, directory=False),
    "policy_backup": _one(
        lambda scene, installed: scene.policy.with_name("policy.json.pohunek-backup"), directory=False
    ),
    "policy_dir": _one(lambda scene, installed: scene.policy.parent, directory=True),
    "integration_dir": _one(lambda scene, installed: scene.policy.parent.parent, directory=True),
    "lock": _one(
        lambda scene, installed: scene.policy.parent.parent / f"{scene.policy.parent.name}.lock", directory=False
    ),
}
INSIDE_THE_PLUGIN = {"skills_dir", "skill_dir", "every_asset", "marker"}
COMMANDS = {
    "install": ("install", *MANAGE),
    "update": ("update", "--confirm-modified"),
    "uninstall": ("uninstall", "--confirm-modified"),
}
CASES = [
    (command, place)
    for command in COMMANDS
    for place in PLACES
    if not (command == "install" and place in INSIDE_THE_PLUGIN)  # a first install has no plugin to plant in
]


@pytest.mark.parametrize(("command", "place"), CASES)
def test_a_link_planted_where_the_installer_works_is_never_followed(template, command, place):
    installed = command != "install"
    scene = restored(template, "installed" if installed else "fresh")
    for path, directory in PLACES[place](scene, installed):
        plant(path, scene.outside, directory=directory)
    outside = tree(scene.outside)
    code, data = scene.operator(*COMMANDS[command])
    assert code == 0 or (code == 2 and data["error"]["code"] in REFUSALS), data
    assert tree(scene.outside) == outside
    if code == 0:
        assert data["stale"] == {"stage": [], "backup": [], "journal": []}, data


def test_a_linked_plugins_directory_is_refused_and_doctor_fails_target_safety(template):
    scene = restored(template, "fresh")
    (scene.outside / "plugins").mkdir()
    (scene.work / "plugins").symlink_to(scene.outside / "plugins")
    outside = tree(scene.outside)
    code, data = scene.operator("install", *MANAGE)
    assert code == 2 and data["error"]["code"] == "integration_path_unsafe", data
    assert data["error"]["detail"]["path"] == str(scene.work / "plugins")
    assert tree(scene.outside) == outside
    _, doctor = scene.operator("doctor")
    assert {c["code"]: c["status"] for c in doctor["checks"]}["target_safety"] == "fail", doctor


def test_uninstall_through_a_linked_skills_directory_removes_the_link_not_the_files_behind_it(template):
    scene = restored(template, "installed")
    plant(scene.work / "plugins" / "operators" / "pohunek" / "skills", scene.outside, directory=True)
    skill = scene.outside / "skills" / "pohunek" / "SKILL.md"
    kept = skill.read_bytes()
    code, data = scene.operator("uninstall", "--confirm-modified")
    assert code == 0 and data["removed"], data
    assert skill.read_bytes() == kept
    assert not (scene.work / "plugins" / "operators" / "pohunek").exists()


def test_every_directory_the_installer_makes_is_owner_private(template):
    scene = restored(template, "fresh")
    code, data = scene.operator("install", *MANAGE)
    assert code == 0, data
    made = [scene.work / "plugins", *[p for p in (scene.work / "plugins").rglob("*") if p.is_dir()]]
    made += [scene.policy.parent, scene.policy.parent.parent]
    assert {str(p): stat.S_IMODE(p.stat().st_mode) for p in made} == {str(p): 0o700 for p in made}


def paused(scene: Scene, at: str, *command: str) -> subprocess.Popen[str]:
    """``command`` run until it stops at the pause point ``at``, inside its transaction."""
    env = python_env(HERMES_HOME=str(scene.root), **{PAUSE_ENV: at}, **scene.kit.env)
    args = [*HERMES, "operator", *command, "--hermes-profile", "work", "--hermes-bin", scene.hermes, "--json"]
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.strip() == f"paused {at}", line
    return proc


@pytest.mark.parametrize("second", ["install", "update", "uninstall"])
def test_a_second_command_on_the_target_is_busy_at_once_and_the_first_completes(template, second):
    scene = restored(template, "fresh")
    first = paused(scene, "operator:swapped", "install", *MANAGE)
    try:
        code, data = scene.operator(*COMMANDS[second])
        assert code == 2 and data["error"]["code"] == "integration_busy", data
        assert data["error"]["detail"]["holder_pid"] == first.pid
        assert (scene.work / "plugins" / JOURNAL).exists()  # the first's journal, not rolled back
        os.kill(first.pid, signal.SIGUSR1)
        out, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
    assert first.returncode == 0, out
    code, data = scene.operator("status")
    assert data["installed"] and data["enabled"] and not data["modified"], data
    assert data["stale"] == {"stage": [], "backup": [], "journal": []}, data
