"""Installing a gateway's unit: systemd's install (which reloads a running manager through
``systemctl``), finding it again, and ``hermes gateway install`` as a real process."""

from __future__ import annotations

import json
import plistlib
import stat
from pathlib import Path

from fleet.supervisors import (
    Unit,
    launchd,
    systemd,
)
from hermes_cli.commands import gateway_manage
from tests.support.cli import hermes
from tests.support.supervisors import KINDS_HERE, SYSTEMD_RUNNING


def test_install_writes_the_unit_and_find_knows_it_by_home(user_dirs, profile, tmp_path):
    home = tmp_path / "root" / "profiles" / profile
    unit = systemd.install(profile, home, scope="user")
    path = user_dirs / "xdg" / "systemd" / "user" / f"hermes-gateway-{profile}.service"
    assert (unit.kind, unit.name, unit.path, unit.home, unit.scope) == ("systemd", path.name, path, home, "user")
    assert path.read_text() == systemd.render(profile, home, scope="user")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    if not SYSTEMD_RUNNING:
        assert unit.reloaded is False and "not running" in unit.note

    found = systemd.find(profile, home)
    assert found == Unit(kind="systemd", name=path.name, profile=profile, home=home, path=path, scope="user")
    # Same name, another install's home: not ours.
    assert systemd.find(profile, tmp_path / "other" / "profiles" / profile) is None


def test_find_matches_names_exactly(user_dirs, tmp_path):
    home = tmp_path / "root" / "profiles" / "foobar"
    systemd.install("foobar", home, scope="user")
    assert systemd.find("foo", home) is None
    assert systemd.find("foobar", home) is not None


def test_find_reads_drop_ins_like_systemd(user_dirs, profile, tmp_path):
    home, other = tmp_path / "mine", tmp_path / "theirs"
    unit = systemd.install(profile, home, scope="user")
    drop_ins = Path(f"{unit.path}.d")
    drop_ins.mkdir()
    (drop_ins / "override.conf").write_text(f'[Service]\nEnvironment="HERMES_HOME={other}"\n')
    assert systemd.find(profile, home) is None
    assert systemd.find(profile, other) is not None
    # An empty Environment= resets the list: no HERMES_HOME at all is nobody's.
    (drop_ins / "override.conf").write_text("[Service]\nEnvironment=\n")
    assert systemd.find(profile, home) is None and systemd.find(profile, other) is None


# --- which kind owns a gateway ------------------------------------------------------------------


def test_owner_is_found_by_home(user_dirs, profile, tmp_path):
    home = tmp_path / "root" / "profiles" / profile
    assert gateway_manage.find_owner(profile, home, kinds=KINDS_HERE) is None
    launchd.install(profile, home, scope="user")
    assert gateway_manage.find_owner(profile, home, kinds=KINDS_HERE).kind == "launchd"
    systemd.install(profile, home, scope="user")
    assert gateway_manage.find_owner(profile, home, kinds=KINDS_HERE).kind == "systemd"
    assert gateway_manage.find_owner(profile, tmp_path / "elsewhere", kinds=KINDS_HERE) is None


# --- hermes gateway install, as a real process --------------------------------------------------


def in_user_dirs(tmp_path: Path) -> dict[str, str]:
    """A child's HOME and XDG_CONFIG_HOME under ``tmp_path``, where ``user_dirs`` points this process's."""
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def test_cli_installs_a_systemd_unit(tmp_path):
    root = tmp_path / "root with space"
    result = hermes(
        "gateway", "install", "--supervisor", "systemd", "--json", home=root, env_extra=in_user_dirs(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "xdg" / "systemd" / "user" / "hermes-gateway.service"
    report = json.loads(result.stdout)
    assert {k: report[k] for k in ("supervisor", "unit", "path", "profile", "home", "scope")} == {
        "supervisor": "systemd",
        "unit": "hermes-gateway.service",
        "path": str(path),
        "profile": "default",
        "home": str(root),
        "scope": "user",
    }
    if not SYSTEMD_RUNNING:
        assert report["reloaded"] is False and report["note"]
    # Same interpreter and install as this test, so the same text.
    assert path.read_text() == systemd.render("default", root, scope="user")


def test_cli_installs_for_the_chosen_profile(tmp_path):
    root = tmp_path / "root"
    (root / "profiles" / "work").mkdir(parents=True)
    result = hermes(
        "-p", "work", "gateway", "install", "--supervisor", "systemd", home=root, env_extra=in_user_dirs(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert "hermes-gateway-work.service" in result.stdout
    path = tmp_path / "xdg" / "systemd" / "user" / "hermes-gateway-work.service"
    assert f'Environment="HERMES_HOME={root / "profiles" / "work"}"' in path.read_text().splitlines()


def test_cli_sets_the_units_watchdog_and_names_a_bad_one(tmp_path):
    root = tmp_path / "root"
    env = in_user_dirs(tmp_path)
    path = tmp_path / "xdg" / "systemd" / "user" / "hermes-gateway.service"
    done = hermes("gateway", "install", "--supervisor", "systemd", "--watchdog", "5", home=root, env_extra=env)
    assert done.returncode == 0, done.stderr
    assert "WatchdogSec=5" in path.read_text().splitlines()
    for supervisor, value in (("systemd", "1"), ("systemd", "soon"), ("supervisord", "5"), ("launchd", "5")):
        refused = hermes(
            "gateway", "install", "--supervisor", supervisor, "--watchdog", value, "--json", home=root, env_extra=env
        )
        assert refused.returncode != 0, (supervisor, value)
        error = json.loads(refused.stdout)["error"]
        assert (error["code"], error["detail"]) == ("unit_value_invalid", {"field": "watchdog", "value": value})
        assert "Traceback" not in refused.stderr
    assert "WatchdogSec=5" in path.read_text().splitlines()  # a refused install wrote nothing


def test_cli_installs_a_launchd_plist(tmp_path):
    root = tmp_path / "root"
    result = hermes(
        "gateway", "install", "--supervisor", "launchd", "--json", home=root, env_extra=in_user_dirs(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "home" / "Library" / "LaunchAgents" / "ai.hermes.gateway.plist"
    assert json.loads(result.stdout)["path"] == str(path)
    assert plistlib.loads(path.read_bytes())["EnvironmentVariables"]["HERMES_HOME"] == str(root)


def test_cli_refuses_a_missing_profile(tmp_path):
    root = tmp_path / "root"
    result = hermes(
        "gateway",
        "install",
        "--supervisor",
        "systemd",
        "--json",
        home=root / "profiles" / "ghost",
        env_extra=in_user_dirs(tmp_path),
    )
    assert result.returncode == 2
    assert json.loads(result.stdout)["error"]["code"] == "profile_not_found"
    assert not (tmp_path / "xdg").exists()
