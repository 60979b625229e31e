"""The target Hermes as the installer drives it, as real processes: its four fixed commands with
exactly their argv, environment and directory, each bounded in time and output, and the switch
that counts only when the list that follows it says so."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from hermes_cli.operator import hermes_bin
from hermes_cli.operator.hermes_bin import HermesUnusable
from runtime_package.manifests import DEFAULT_PROBE
from tests.support.processes import wait_for
from tests.unit.test_operator_hermes_runner import SECRET, fake


def seen(directory: Path) -> str:
    """Shell that writes what it was run with (argv, its initial environment, its directory)."""
    return f'printf "%s\\n" "$@" >> {directory}/argv; cat /proc/$$/environ > {directory}/env; pwd > {directory}/cwd'


def environ(directory: Path) -> dict[str, str]:
    raw = (directory / "env").read_text()
    return dict(item.split("=", 1) for item in raw.split("\0") if item)


def test_each_fixed_command_has_exactly_its_argv_its_environment_and_root_as_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    home = tmp_path / "home"
    body = (
        f"{seen(tmp_path)}\n"
        'case "$1 $2" in "--version ") echo "Hermes Agent v0.20.0 (2026.8.3)";;\n'
        f'"plugins list") printf \'[{{"name":"pohunek","status":"%s","source":"user"}}]\' "$(cat {tmp_path}/state)";;\n'
        f'"plugins enable") echo enabled > {tmp_path}/state;;\n'
        f'"plugins disable") echo disabled > {tmp_path}/state;; esac'
    )
    path = fake(tmp_path / "bin", body)
    (tmp_path / "state").write_text("not enabled\n")
    assert hermes_bin.version(path, DEFAULT_PROBE, home) == {"bin": path, "version": "0.20.0", "accepted": True}
    hermes_bin.switch_plugin(path, home, True)
    hermes_bin.switch_plugin(path, home, False)
    argv = (tmp_path / "argv").read_text().split("\n")
    assert argv == [
        "--version",
        *("plugins", "enable", "pohunek", "--no-allow-tool-override"),
        *("plugins", "list", "--json"),
        *("plugins", "disable", "pohunek"),
        *("plugins", "list", "--json"),
        "",
    ]
    expected = {"NO_COLOR": "1", "TERM": "dumb", "LANG": "C", "PYTHONDONTWRITEBYTECODE": "1", "HERMES_HOME": str(home)}
    assert environ(tmp_path) == expected
    assert (tmp_path / "cwd").read_text() == "/\n"


def test_an_enable_the_list_does_not_confirm_is_the_typed_switch_error(tmp_path):
    body = """case "$2" in list) echo '[{"name":"pohunek","status":"not enabled","source":"user"}]';; esac"""
    path = fake(tmp_path / "bin", body)
    with pytest.raises(HermesUnusable) as refused:
        hermes_bin.switch_plugin(path, tmp_path, True)
    assert refused.value.code == "plugin_switch_failed"
    assert refused.value.detail == {"verb": "enable", "state": "not enabled"}


def test_a_hung_hermes_times_out_and_its_whole_group_is_killed(tmp_path):
    path = fake(tmp_path / "bin", f"sleep 600 & echo $! > {tmp_path}/child; echo $$ > {tmp_path}/parent; wait")
    with pytest.raises(HermesUnusable) as refused:
        hermes_bin.run([path, "plugins", "list", "--json"], hermes_bin.child_env(tmp_path), what="list", timeout=2.0)
    assert refused.value.code == "hermes_timeout" and refused.value.detail == {"command": "list"}
    pids = [int((tmp_path / name).read_text()) for name in ("child", "parent")]
    assert wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pids), timeout=10, what="the group to go")


@pytest.mark.parametrize("stream", ["", " >&2"])
def test_a_flood_of_output_on_either_stream_is_cut_at_the_cap(tmp_path, stream):
    path = fake(tmp_path / "bin", f"head -c {hermes_bin.OUTPUT_CAP + 1} /dev/zero{stream}")
    with pytest.raises(HermesUnusable) as refused:
        hermes_bin.run([path], hermes_bin.child_env(tmp_path), what="list")
    assert refused.value.code == "hermes_output_limit"


def test_output_at_the_cap_is_read_whole_and_a_failing_exit_is_typed(tmp_path):
    path = fake(tmp_path / "bin", f"head -c {hermes_bin.OUTPUT_CAP} /dev/zero; exit $1")
    assert len(hermes_bin.run([path, "0"], hermes_bin.child_env(tmp_path), what="x")) == hermes_bin.OUTPUT_CAP
    with pytest.raises(HermesUnusable) as refused:
        hermes_bin.run([path, "4"], hermes_bin.child_env(tmp_path), what="x")
    assert refused.value.code == "hermes_command_failed" and refused.value.detail == {"command": "x", "exit": 4}


@pytest.mark.parametrize(
    ("printed", "code"),
    [
        ("Hermes Agent v0.19.0 (2026.7.20)", "hermes_version_unsupported"),
        ("Hermes Agent v0.20.0 (2026.8.3) · upstream 1a2b3c", None),
        ("Hermes Agent v0.20.0 (2026.8.3)trailing", "hermes_version_unreadable"),
        ("Hermes Agent v0.20.0 (2026.8.3) (again)", "hermes_version_unreadable"),
        (SECRET, "hermes_version_unreadable"),
    ],
)
def test_the_version_line_is_the_launch_gates_with_the_source_a_git_install_appends(tmp_path, printed, code):
    path = fake(tmp_path / "bin", f"printf '%s\\n' '{printed}'")
    if code is None:
        assert hermes_bin.version(path, DEFAULT_PROBE, tmp_path)["version"] == "0.20.0"
        return
    with pytest.raises(HermesUnusable) as refused:
        hermes_bin.version(path, DEFAULT_PROBE, tmp_path)
    assert refused.value.code == code and SECRET not in refused.value.message
