"""launchd jobs without launchd: labels, the rendered plist, paths, and the launchctl sequences."""

from __future__ import annotations

import os
import plistlib
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from fleet.supervisors import (
    Unit,
    errors,
    gateway_command,
    gateway_environment,
    launchd,
    working_directory,
)

LAUNCHD_NAMES = [
    ("default", "ai.hermes.gateway"),
    ("work", "ai.hermes.gateway-work"),
    ("foo", "ai.hermes.gateway-foo"),
    ("foobar", "ai.hermes.gateway-foobar"),
]
NOT_LAUNCHD_GATEWAYS = [
    "ai.hermes.gatewayd",
    "ai.hermes.gateway-",
    "ai.hermes.gateway-Foo",
    "ai.hermes.gateway.work",
    "ai.hermes.gateway-default",
    "ai.hermes.gateway-work.plist",
    "ai.hermes.gateway-work\n",
    "com.example.ai.hermes.gateway",
]


@pytest.mark.parametrize(("profile_name", "label"), LAUNCHD_NAMES)
def test_launchd_labels_map_both_ways(profile_name, label):
    assert launchd.unit_name(profile_name) == label
    assert launchd.profile_of(label) == profile_name


@pytest.mark.parametrize("label", NOT_LAUNCHD_GATEWAYS)
def test_launchd_labels_of_no_profile(label):
    assert launchd.profile_of(label) is None


# --- launchd ------------------------------------------------------------------------------------


def test_rendered_plist_reads_back(tmp_path):
    home = tmp_path / 'my home %h <&> "q"' / "profiles" / "work"
    job = plistlib.loads(launchd.render("work", home, scope="user"))
    assert job == {
        "Label": "ai.hermes.gateway-work",
        "ProgramArguments": gateway_command(),
        "WorkingDirectory": str(working_directory()),
        "EnvironmentVariables": gateway_environment(home, "launchd"),
        "KeepAlive": {"SuccessfulExit": False},
        "RunAtLoad": True,
        "ExitTimeOut": 90,
        "StandardOutPath": str(home / "logs" / "gateway.launchd.out.log"),
        "StandardErrorPath": str(home / "logs" / "gateway.launchd.err.log"),
    }
    assert job["EnvironmentVariables"]["HERMES_HOME"] == str(home)


def test_launchd_paths_per_scope(user_dirs):
    agents = user_dirs / "home" / "Library" / "LaunchAgents"
    assert launchd.unit_path("work", scope="user") == agents / "ai.hermes.gateway-work.plist"
    assert launchd.unit_path("default", scope="system") == Path("/Library/LaunchDaemons/ai.hermes.gateway.plist")


def test_launchd_install_and_find(user_dirs, profile, tmp_path):
    home = tmp_path / "root" / "profiles" / profile
    old = os.umask(0o022)
    try:
        unit = launchd.install(profile, home, scope="user")
    finally:
        os.umask(old)
    made = [tmp_path / "root", tmp_path / "root" / "profiles", home, home / "logs"]
    assert [stat.S_IMODE(p.stat().st_mode) for p in made] == [0o700] * 4
    assert unit.path == user_dirs / "home" / "Library" / "LaunchAgents" / f"ai.hermes.gateway-{profile}.plist"
    assert unit.path.read_bytes() == launchd.render(profile, home, scope="user")
    assert stat.S_IMODE(unit.path.stat().st_mode) == 0o644
    assert (home / "logs").is_dir()
    assert launchd.find(profile, home) == Unit(
        kind="launchd", name=unit.name, profile=profile, home=home, path=unit.path, scope="user"
    )
    assert launchd.find(profile, tmp_path / "other") is None
    unit.path.write_bytes(b"<plist>not a plist")
    assert launchd.find(profile, home) is None


class RecordingRunner:
    """Records launchctl command lines instead of running them: this machine has no launchd.
    ``loaded`` is what ``launchctl print`` answers; ``fail`` names a subcommand that fails."""

    def __init__(self, *, loaded: bool, fail: str | None = None) -> None:
        self.loaded, self.fail = loaded, fail
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[1] == "print":
            return subprocess.CompletedProcess(argv, 0 if self.loaded else 113, "", "")
        if argv[1] == self.fail:
            return subprocess.CompletedProcess(argv, 5, "", "Bootstrap failed: 5: Input/output error\n")
        return subprocess.CompletedProcess(argv, 0, "", "")


def launchd_unit(scope: str = "user") -> Unit:
    path = Path("/Users/op/Library/LaunchAgents/ai.hermes.gateway-work.plist")
    return Unit(kind="launchd", name="ai.hermes.gateway-work", profile="work", home=Path("/h"), path=path, scope=scope)


@pytest.mark.parametrize(
    ("action", "loaded", "then"),
    [
        ("start", False, [["bootstrap", "gui/501", "/Users/op/Library/LaunchAgents/ai.hermes.gateway-work.plist"]]),
        ("start", True, [["kickstart", "gui/501/ai.hermes.gateway-work"]]),
        ("stop", True, [["bootout", "gui/501/ai.hermes.gateway-work"]]),
        ("stop", False, []),
        ("restart", True, [["kickstart", "-k", "gui/501/ai.hermes.gateway-work"]]),
        ("restart", False, [["bootstrap", "gui/501", "/Users/op/Library/LaunchAgents/ai.hermes.gateway-work.plist"]]),
    ],
)
def test_launchctl_sequences(action, loaded, then):
    runner = RecordingRunner(loaded=loaded)
    getattr(launchd, action)(launchd_unit(), runner=runner, uid=501)
    probe = ["launchctl", "print", "gui/501/ai.hermes.gateway-work"]
    assert runner.calls == [probe, *(["launchctl", *argv] for argv in then)]


def test_launchctl_system_domain():
    runner = RecordingRunner(loaded=True)
    launchd.restart(launchd_unit("system"), runner=runner, uid=501)
    assert runner.calls[-1] == ["launchctl", "kickstart", "-k", "system/ai.hermes.gateway-work"]
    (bootstrap,) = launchd.commands("start", launchd_unit("system"), loaded=False)
    assert bootstrap[:3] == ["launchctl", "bootstrap", "system"]


def test_launchctl_failure_is_typed():
    with pytest.raises(errors.SupervisorFailed) as raised:
        launchd.start(launchd_unit(), runner=RecordingRunner(loaded=False, fail="bootstrap"), uid=501)
    assert raised.value.detail["returncode"] == 5
    assert "Input/output error" in raised.value.detail["stderr"]


@pytest.mark.skipif(shutil.which("launchctl") is not None, reason="launchctl exists here; this must not drive it")
def test_without_launchctl_actions_are_unavailable():
    for action in (launchd.start, launchd.stop, launchd.restart):
        with pytest.raises(errors.SupervisorUnavailable):
            action(launchd_unit())
