"""systemd and launchd units for gateways: names, rendered files read back, ownership by
HERMES_HOME, ``systemctl show`` parsing against real systemd 252 captures, and the
``hermes gateway install`` command run as a real process."""

from __future__ import annotations

import json
import plistlib
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_cli.commands import gateway_manage
from shared import homes
from shared.supervisors import (
    KINDS,
    Unit,
    commands,
    errors,
    gateway_command,
    gateway_environment,
    kind_module,
    launchd,
    scopes,
    systemd,
    working_directory,
)
from shared.supervisors.systemd import manager as systemd_manager
from shared.supervisors.systemd import units as systemd_units
from tests.support.cli import hermes
from tests.support.systemd_captures import transcript

# Real systemd 252 output, copied from the project's shared fixtures (see its README there).
SYSTEMD_RUNNING = systemd_manager.BOOTED_MARKER.is_dir()


@pytest.fixture
def profile() -> str:
    # Unique, so that find() never meets a real unit in the system-scope directories.
    return f"hmtest-{secrets.token_hex(4)}"


@pytest.fixture
def user_dirs(tmp_path, monkeypatch) -> Path:
    """HOME and XDG_CONFIG_HOME of this process pointed at a temporary directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


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


@pytest.mark.parametrize(("profile_name", "name"), SYSTEMD_NAMES)
def test_systemd_names_map_both_ways(profile_name, name):
    assert systemd.unit_name(profile_name) == name
    assert systemd.profile_of(name) == profile_name


@pytest.mark.parametrize("name", NOT_SYSTEMD_GATEWAYS)
def test_systemd_names_of_no_profile(name):
    assert systemd.profile_of(name) is None


@pytest.mark.parametrize(("profile_name", "label"), LAUNCHD_NAMES)
def test_launchd_labels_map_both_ways(profile_name, label):
    assert launchd.unit_name(profile_name) == label
    assert launchd.profile_of(label) == profile_name


@pytest.mark.parametrize("label", NOT_LAUNCHD_GATEWAYS)
def test_launchd_labels_of_no_profile(label):
    assert launchd.profile_of(label) is None


@pytest.mark.parametrize("module", [systemd, launchd])
@pytest.mark.parametrize("bad", ["Foo", "", "-x", "a.b", "x" * 65])
def test_invalid_profile_has_no_unit_name(module, bad):
    with pytest.raises(homes.InvalidProfileName):
        module.unit_name(bad)


def test_foo_never_claims_foobar():
    assert systemd.profile_of(systemd.unit_name("foobar")) != "foo"
    assert launchd.profile_of(launchd.unit_name("foobar")) != "foo"


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
    assert one["RestartPreventExitStatus"] == ["78"]
    assert one["TimeoutStopSec"] == ["90"]
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


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verify_accepts_the_rendered_unit(tmp_path):
    # An interpreter whose path needs quoting and %-escaping; verify checks it is executable.
    bin_dir = tmp_path / "py dir %z"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    home = tmp_path / "home with space %z"  # %z is no specifier: unescaped, verify reports it
    unit = tmp_path / "units" / "hermes-gateway-work.service"
    unit.parent.mkdir()
    text = systemd.render("work", home, scope="system", python=str(python))
    unit.write_text(text)
    result = verify(unit)
    assert result.returncode == 0 and str(unit) not in result.stderr, result.stderr

    # The check has teeth: the same unit with % left unescaped is reported.
    bad = tmp_path / "bad" / "hermes-gateway-work.service"
    bad.parent.mkdir()
    bad.write_text(text.replace("%%", "%"))
    assert str(bad) in verify(bad).stderr


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )


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


@pytest.mark.skipif(
    SYSTEMD_RUNNING or shutil.which("systemctl") is None,
    reason="needs a systemctl client with no systemd running, so that no real manager is reached",
)
@pytest.mark.parametrize("scope", ["user", "system"])
def test_unreachable_manager_is_reported_as_unavailable(tmp_path, monkeypatch, scope):
    """The booted marker is pointed at a directory that exists, so the real systemctl runs
    and fails to reach a manager, as it does on a host whose manager is down."""
    marker = tmp_path / "systemd-system"
    marker.mkdir()
    monkeypatch.setattr(systemd_manager, "BOOTED_MARKER", marker)
    with pytest.raises(errors.SupervisorUnavailable) as raised:
        systemd.systemctl(scope, "daemon-reload", timeout=30)
    assert raised.value.detail["command"][0] == "systemctl"


def test_run_client_types_every_outcome():
    with pytest.raises(errors.SupervisorUnavailable):
        commands.run_client(["/nonexistent/systemctl", "start"], timeout=5)
    with pytest.raises(errors.SupervisorTimeout):
        commands.run_client([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.3)
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('Unit x.service not found.'); sys.exit(5)"]
    error = commands.command_failed(argv, commands.run_client(argv, timeout=30))
    assert error.code == "supervisor_failed"
    assert error.detail["returncode"] == 5 and error.detail["stderr"] == "Unit x.service not found."
    assert "Unit x.service not found." in error.message


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
    unit = launchd.install(profile, home, scope="user")
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


# --- which kind owns a gateway ------------------------------------------------------------------

# The supervisord kind is left out: these tests are about systemd and launchd only.
KINDS_HERE = ("systemd", "launchd")


def test_owner_is_found_by_home(user_dirs, profile, tmp_path):
    home = tmp_path / "root" / "profiles" / profile
    assert gateway_manage.find_owner(profile, home, kinds=KINDS_HERE) is None
    launchd.install(profile, home, scope="user")
    assert gateway_manage.find_owner(profile, home, kinds=KINDS_HERE).kind == "launchd"
    systemd.install(profile, home, scope="user")
    assert gateway_manage.find_owner(profile, home, kinds=KINDS_HERE).kind == "systemd"
    assert gateway_manage.find_owner(profile, tmp_path / "elsewhere", kinds=KINDS_HERE) is None


def test_acting_on_an_unsupervised_gateway_is_refused(user_dirs, profile, tmp_path):
    with pytest.raises(gateway_manage.NotSupervised) as raised:
        gateway_manage.act("restart", profile, tmp_path / "home", kinds=KINDS_HERE)
    assert raised.value.code == "not_supervised"
    assert "hermes gateway install" in raised.value.message and "hermes mesh up" in raised.value.message


@pytest.mark.skipif(SYSTEMD_RUNNING, reason="systemd runs here; this must not act on a real manager")
def test_acting_goes_through_the_owner(user_dirs, profile, tmp_path):
    home = tmp_path / "home"
    systemd.install(profile, home, scope="user")
    with pytest.raises(errors.SupervisorUnavailable):
        gateway_manage.act("start", profile, home, kinds=KINDS_HERE)


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


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_one_module_with_the_one_interface(kind):
    module = kind_module(kind)
    assert module.__name__ == f"shared.supervisors.{kind}"
    for name in ("unit_name", "profile_of", "install", "find", "start", "stop", "restart"):
        assert callable(getattr(module, name)), name
    assert module.profile_of(module.unit_name("work")) == "work"


def test_an_unknown_kind_has_no_module():
    with pytest.raises(ValueError, match="unknown supervisor 'runit'"):
        kind_module("runit")
