"""systemd units without systemd: names, the rendered unit file and its escapes, drop-ins,
``systemctl show`` parsing against real systemd 252 output, and a client that finds no manager."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.supervisors import (
    errors,
    gateway_command,
    gateway_environment,
    launchd,
    scopes,
    systemd,
    working_directory,
)
from fleet.supervisors.systemd import units as systemd_units
from tests.support.supervisors import SYSTEMD_RUNNING
from tests.support.systemd_captures import transcript

# --- names --------------------------------------------------------------------------------------

SYSTEMD_NAMES = [
    ("default", "hermes-gateway.service"),
    ("work", "hermes-gateway-work.service"),
    ("foo", "hermes-gateway-foo.service"),
    ("foobar", "hermes-gateway-foobar.service"),
    ("a_b-9", "hermes-gateway-a_b-9.service"),
    ("x" * 64, f"hermes-gateway-{'x' * 64}.service"),
]
NOT_SYSTEMD_GATEWAYS = [
    "hermes-gatewayd.service",
    "hermes-gateway-.service",
    "hermes-gateway-Foo.service",
    "hermes-gateway-foo.socket",
    "hermes-gateway.socket",
    "hermes-gateway@x.service",
    "hermes-gateway-default.service",  # the default profile is spelled without a suffix
    "hermes-gateway-_x.service",
    "hermes-gateway-a.b.service",
    f"hermes-gateway-{'x' * 65}.service",
    "hermes-gateway-foo.service.bak",
    "hermes-gateway-foo.service\n",
    "xhermes-gateway.service",
    "hermes-serve.service",
    "",
]


@pytest.mark.parametrize(("profile_name", "name"), SYSTEMD_NAMES)
def test_systemd_names_map_both_ways(profile_name, name):
    assert systemd.unit_name(profile_name) == name
    assert systemd.profile_of(name) == profile_name


@pytest.mark.parametrize("name", NOT_SYSTEMD_GATEWAYS)
def test_systemd_names_of_no_profile(name):
    assert systemd.profile_of(name) is None


# --- systemd unit files -------------------------------------------------------------------------


def unit_lines(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for every assignment, repeated keys kept: an independent reader."""
    section, found = "", []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.append((section, key, value))
    return found


def values(text: str, section: str, key: str) -> list[str]:
    return [v for s, k, v in unit_lines(text) if (s, k) == (section, key)]


def test_rendered_unit_has_the_restart_contract(tmp_path):
    home = tmp_path / "my home %h 100%" / "profiles" / "work"
    text = systemd.render("work", home, scope="user")
    one = {k: values(text, s, k) for s, k, _ in unit_lines(text)}
    assert one["Type"] == ["notify"]
    assert one["NotifyAccess"] == ["main"]
    assert one["Restart"] == ["on-failure"]
    assert one["RestartForceExitStatus"] == ["75"]
    # Without it systemd logs every planned restart as "Failed with result 'exit-code'".
    assert one["SuccessExitStatus"] == ["75"]
    assert one["RestartPreventExitStatus"] == ["78"]
    assert one["TimeoutStopSec"] == ["90"]
    assert one["RestartSec"] == ["1"]
    assert one["WatchdogSec"] == ["30"]  # on-failure restarts a unit its watchdog killed
    assert one["KillSignal"] == ["SIGTERM"]
    assert one["After"] == ["network-online.target"]
    assert one["WantedBy"] == ["default.target"]
    assert one["WorkingDirectory"] == [str(working_directory()).replace("%", "%%")]
    # Quoted, with % doubled so systemd does not expand %h into a home directory.
    escaped_home = str(home).replace("%", "%%")
    assert f'Environment="HERMES_HOME={escaped_home}"' in text.splitlines()
    assert values(text, "Service", "Environment") == [
        f'"{key}={value}"'.replace("%", "%%") for key, value in gateway_environment(home, "systemd").items()
    ]


def test_system_scope_is_wanted_by_multi_user():
    text = systemd.render("work", Path("/srv/hermes"), scope="system")
    assert values(text, "Install", "WantedBy") == ["multi-user.target"]


@pytest.mark.parametrize(
    "home",
    [
        "/srv/with space/.hermes",
        "/srv/100%/x%%y %h",
        '/srv/q"uote/b\\ack',
        "/srv/semi;colon/'single'",
        "/srv/dollar$HOME",
    ],
)
def test_environment_reads_back_exactly(tmp_path, home):
    path = tmp_path / "hermes-gateway.service"
    path.write_text(systemd.render("default", Path(home), scope="user"))
    assert systemd.unit_file_environment(path) == gateway_environment(Path(home), "systemd")


def test_exec_start_quotes_paths_for_systemd(tmp_path):
    python = "/opt/py thon 100%/bin/python3"
    text = systemd.render("default", tmp_path, scope="user", python=python)
    (exec_start,) = values(text, "Service", "ExecStart")
    assert exec_start == '"/opt/py thon 100%%/bin/python3" -m services.gateway'
    # Double quotes with backslash escapes read as POSIX shell words; %% and $$ are systemd's.
    words = [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(exec_start)]
    assert words == gateway_command(python)


@pytest.mark.parametrize("python", ["python3", '/opt/q"uote/python', "/opt/back\\slash/python", "/opt/$HOME/python"])
def test_executables_systemd_cannot_run_are_refused(tmp_path, python):
    with pytest.raises(errors.UnitValueInvalid):
        systemd.render("default", tmp_path, scope="user", python=python)


def test_relative_home_is_refused():
    with pytest.raises(errors.UnitValueInvalid):
        systemd.render("default", Path("relative/home"), scope="user")
    with pytest.raises(errors.UnitValueInvalid):
        launchd.render("default", Path("relative/home"), scope="user")


def test_unit_paths_per_scope(user_dirs, monkeypatch):
    assert systemd.unit_path("work", scope="user") == user_dirs / "xdg/systemd/user/hermes-gateway-work.service"
    assert systemd.unit_path("default", scope="system") == Path("/etc/systemd/system/hermes-gateway.service")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    default = user_dirs / "home/.config/systemd/user/hermes-gateway-work.service"
    assert systemd.unit_path("work", scope="user") == default
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/xdg")  # invalid per the XDG spec: ignored
    assert systemd.unit_path("work", scope="user") == default


def test_system_scope_needs_root(profile):
    with pytest.raises(errors.ScopePermissionDenied) as raised:
        scopes.require_scope_permission("system", euid=1000)
    assert raised.value.code == "permission_denied"
    scopes.require_scope_permission("system", euid=0)
    scopes.require_scope_permission("user", euid=1000)
    for module in (systemd, launchd):
        with pytest.raises(errors.ScopePermissionDenied):
            module.install(profile, Path("/srv/hermes"), scope="system", euid=1000)
        assert not module.unit_path(profile, scope="system").exists()


def test_unreadable_unit_is_not_ours(user_dirs, profile, tmp_path):
    path = systemd.unit_path(profile, scope="user")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'[Service]\nEnvironment="HERMES_HOME=/x\xff"\n')
    assert systemd.find(profile, Path("/x")) is None


def test_unit_file_words_follow_systemd_escapes(tmp_path):
    path = tmp_path / "hermes-gateway.service"
    path.write_text(
        "[Unit]\nEnvironment=HERMES_HOME=/not/service/section\n"
        "[Service]\n"
        "Environment=A=1 'B=two words' \"C=\\x41\\t\\101\\\\\" D=%%h\n"
        "Environment=A=replaced \\\n"
        "  E=continued\n"
        'Environment=H=kept "F=bad \\q escape" G=skipped-with-its-line\n'
        "Environment=not-an-assignment 9X=bad-name\n"
    )
    assert systemd.unit_file_environment(path) == {
        "A": "replaced",
        "B": "two words",
        "C": "A\tA\\",
        "D": "%h",
        "E": "continued",
        "H": "kept",
    }


def test_drop_ins_apply_in_order_and_an_empty_assignment_resets():
    unit = '[Unit]\nEnvironment=X=unit-section\n[Service]\nEnvironment="HERMES_HOME=/a" KEEP=1\n'
    assert systemd_units.service_environment([unit]) == {"HERMES_HOME": "/a", "KEEP": "1"}
    later = "[Service]\nEnvironment=HERMES_HOME=/b\n"
    assert systemd_units.service_environment([unit, later]) == {"HERMES_HOME": "/b", "KEEP": "1"}
    reset = "[Service]\nEnvironment=\nEnvironment=ONLY=this\n"
    assert systemd_units.service_environment([unit, reset]) == {"ONLY": "this"}
    assert systemd_units.service_environment([reset, unit]) == {"ONLY": "this", "HERMES_HOME": "/a", "KEEP": "1"}


@given(value=st.text(st.characters(blacklist_characters="\x00"), max_size=40))
def test_a_quoted_environment_word_reads_back_as_written(value):
    line = "Environment=" + systemd_units.quote_word(f"KEY={value}", always=True)
    assert systemd_units.service_environment([f"[Service]\n{line}\n"]) == {"KEY": value}


def test_a_nul_cannot_be_written_into_a_unit():
    with pytest.raises(errors.UnitValueInvalid):
        systemd_units.quote_word("A=\x00")


def test_systemctl_command_lines():
    assert systemd.systemctl_argv("user", "start", "hermes-gateway.service") == [
        "systemctl",
        "--user",
        "--no-ask-password",
        "start",
        "hermes-gateway.service",
    ]
    assert systemd.systemctl_argv("system", "daemon-reload") == ["systemctl", "--no-ask-password", "daemon-reload"]


@pytest.mark.skipif(SYSTEMD_RUNNING, reason="systemd runs here; this must not act on a real manager")
def test_start_stop_restart_without_systemd_are_unavailable(user_dirs, profile, tmp_path):
    unit = systemd.install(profile, tmp_path / "home", scope="user")
    for action in (systemd.start, systemd.stop, systemd.restart):
        with pytest.raises(errors.SupervisorUnavailable):
            action(unit)


# --- systemctl show, against real systemd 252 output --------------------------------------------


def shows(name: str) -> dict[str, dict[str, str]]:
    """unit -> parsed properties, for every ``systemctl show -p ...`` in a capture."""
    parsed = {}
    for block in transcript(name):
        words = block.command.split("#")[0].split()
        if words[:2] == ["systemctl", "show"] and "--value" not in words:
            parsed[words[-1]] = systemd.parse_show("\n".join(block.output))
    return parsed


README_HOMES = {
    "hermes-gateway.service": "/home/op/.hermes",
    "hermes-gateway-work.service": "/home/op/.hermes/profiles/work",
    "hermes-gateway-workbench.service": "/home/op/.hermes/profiles/workbench",
    "hermes-gateway-ops.service": "/srv/other/.hermes/profiles/ops",
    "hermes-gateway-slow.service": "/home/op/.hermes/profiles/slow",
}


def test_parse_show_keeps_systemds_order_and_values():
    parsed = shows("systemd-252-capture.txt")
    work = parsed["hermes-gateway-work.service"]
    assert list(work.items()) == [
        ("Type", "notify"),
        ("TimeoutStartUSec", "1min 30s"),
        ("TimeoutStopUSec", "1min 10s"),
        ("MainPID", "62"),
        ("NRestarts", "0"),
        ("ExecMainStatus", "0"),
        ("Environment", 'HERMES_HOME=/home/op/.hermes/profiles/work "HERMES_LABEL=a b"'),
        ("ActiveState", "active"),
        ("SubState", "running"),
    ]
    assert systemd.parse_environment(work["Environment"]) == {
        "HERMES_HOME": "/home/op/.hermes/profiles/work",
        "HERMES_LABEL": "a b",
    }
    assert parsed["hermes-gateway-workbench.service"]["TimeoutStopUSec"] == "infinity"
    assert parsed["hermes-gateway-ops.service"]["TimeoutStopUSec"] == "1d 6h"
    assert parsed["hermes-gateway-ops.service"]["TimeoutStartUSec"] == "infinity"
    assert parsed["hermes-gateway-slow.service"]["TimeoutStartUSec"] == "2.500000s"
    assert parsed["hermes-gateway-slow.service"]["TimeoutStopUSec"] == "1w"
    assert parsed["hermes-gateway-nope.service"] == {
        "TimeoutStopUSec": "1min 30s",
        "MainPID": "0",
        "LoadState": "not-found",
    }


def test_every_captured_unit_has_the_home_the_readme_says():
    parsed = shows("systemd-252-capture.txt")
    homes_seen = {
        unit: systemd.parse_environment(props["Environment"])["HERMES_HOME"]
        for unit, props in parsed.items()
        if "Environment" in props
    }
    assert homes_seen == README_HOMES
    assert {systemd.profile_of(unit) for unit in homes_seen} == {"default", "work", "workbench", "ops", "slow"}


def test_captured_unit_list_maps_to_profiles_exactly():
    listed = [b for b in transcript("systemd-252-capture.txt") if b.command.startswith("systemctl list-units")]
    names = {line.split()[0] for block in listed for line in block.output}
    assert {name: systemd.profile_of(name) for name in names} == {
        "hermes-gateway.service": "default",
        "hermes-gateway-work.service": "work",
        "hermes-gateway-workbench.service": "workbench",
        "hermes-gateway-ops.service": "ops",
        "hermes-gateway-slow.service": "slow",
        "hermes-gatewayd.service": None,
        "hermes-serve.service": None,
    }


def test_parse_show_reads_the_lifecycle_capture():
    blocks = transcript("systemd-252-lifecycle.txt")
    after_usr1 = systemd.parse_show("\n".join(blocks[1].output))
    assert after_usr1 == {
        "MainPID": "83",
        "Result": "success",
        "NRestarts": "1",
        "ExecMainStatus": "0",
        "ActiveState": "active",
        "SubState": "running",
    }
    # Every block whose output is properties parses; the others are messages.
    for block in blocks:
        if block.output and all("=" in line for line in block.output):
            assert systemd.parse_show("\n".join(block.output))
    failed = [b for b in blocks if b.exit_code not in (None, 0)]
    assert [b.exit_code for b in failed] == [3, 1, 5]


def test_parse_show_refuses_what_is_not_show_output():
    (value_only,) = [b for b in transcript("systemd-252-capture.txt") if "--value" in b.command]
    with pytest.raises(systemd.ShowOutputInvalid):
        systemd.parse_show("\n".join(value_only.output))
    with pytest.raises(systemd.ShowOutputInvalid):
        systemd.parse_show("MainPID=1\n\nMainPID=2\n")  # two units' output run together


def test_parse_environment_undoes_systemctls_quoting():
    shown = r'A=1 "B=two words" "C=q\"uote \\ \$HOME \`x\`" D='
    assert systemd.parse_environment(shown) == {"A": "1", "B": "two words", "C": 'q"uote \\ $HOME `x`', "D": ""}
    assert systemd.parse_environment("") == {}


# --- the watchdog and the sandbox ---------------------------------------------------------------


@pytest.mark.parametrize(("value", "seconds"), [("0", 0), ("2", 2), (" 45 ", 45), ("3600", 3600), (7, 7)])
def test_watchdog_takes_off_or_whole_seconds_in_range(value, seconds):
    assert systemd.watchdog_seconds(value) == seconds
    text = systemd.render("work", Path("/srv/hermes"), scope="user", watchdog=value)
    assert values(text, "Service", "WatchdogSec") == [str(seconds)]


@pytest.mark.parametrize("value", ["1", "3601", "-1", "1.5", "2s", "", "ten", "+5", "5_0", "３"])
def test_a_bad_watchdog_is_a_typed_error_naming_the_field(value):
    with pytest.raises(errors.UnitValueInvalid) as raised:
        systemd.watchdog_seconds(value)
    assert raised.value.detail == {"field": "watchdog", "value": value}
    assert "--watchdog" in raised.value.message
    with pytest.raises(errors.UnitValueInvalid):
        systemd.render("work", Path("/srv/hermes"), scope="user", watchdog=value)


@pytest.mark.parametrize("watchdog", [0, 2, 30, 600])
def test_a_rewrite_keeps_the_units_watchdog(watchdog):
    text = systemd.render("work", Path("/srv/hermes"), scope="system", watchdog=watchdog)
    assert systemd_units.watchdog_of(text) == watchdog


@pytest.mark.parametrize("text", ["", "[Service]\nWatchdogSec=2min\n", "[Unit]\nWatchdogSec=5\n"])
def test_a_unit_without_a_watchdog_of_ours_gets_the_default_on_rewrite(text):
    assert systemd_units.watchdog_of(text) == systemd.WATCHDOG_DEFAULT


@pytest.mark.parametrize("scope", ["user", "system"])
def test_only_the_home_is_writable(scope):
    home = Path("/srv/100% home/profiles/work")
    text = systemd.render("work", home, scope=scope)
    assert values(text, "Service", "ProtectSystem") == ["strict"]
    assert values(text, "Service", "ProtectHome") == ["read-only"]
    assert values(text, "Service", "ReadWritePaths") == [f'"{home}"'.replace("%", "%%")]  # a list of one
    assert values(text, "Service", "RuntimeDirectory") == []
    # The CLI must see a fallback socket dir under /tmp: never a private one.
    assert values(text, "Service", "PrivateTmp") == []
    assert values(text, "Service", "LimitCORE") == ["0"]
    assert values(text, "Service", "CapabilityBoundingSet") == [""]


def test_a_home_too_deep_for_its_sockets_may_write_their_fallback_dir():
    deep = Path("/srv") / ("x" * 100) / "profiles" / "work"
    user = systemd.render("work", deep, scope="user")
    assert values(user, "Service", "ReadWritePaths") == [f'"{deep}"']
    assert values(user, "Service", "RuntimeDirectory") == ["hermes"]  # $XDG_RUNTIME_DIR/hermes
    assert values(user, "Service", "RuntimeDirectoryPreserve") == ["yes"]  # other gateways' sockets stay
    system = systemd.render("work", deep, scope="system")
    assert values(system, "Service", "ReadWritePaths") == [f'"{deep}"', "/tmp"]  # /tmp/hermes-<uid>
    assert values(system, "Service", "RuntimeDirectory") == []
