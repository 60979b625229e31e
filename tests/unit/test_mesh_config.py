"""The embedded supervisor's names and config, without a process: program names and their
inverse, homes supervisord would misread, the written config read back."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from supervisor.datatypes import RestartWhenExitUnexpected
from supervisor.options import ServerOptions

from shared import homes
from shared.supervisors import gateway_command, working_directory
from shared.supervisors import supervisord as sv
from tests.support.homes import make_profile

# --- names and config, no processes -------------------------------------------------------------


def test_program_names_and_their_exact_inverse():
    assert sv.unit_name("default") == "hermes-gateway"
    assert sv.unit_name("foo") == "hermes-gateway-foo"
    for profile in ("default", "foo", "foobar", "a-b_c", "0"):
        assert sv.profile_of(sv.unit_name(profile)) == profile
    assert sv.profile_of("hermes-gateway-foobar") == "foobar" != "foo"
    for foreign in (
        "hermes-gateway-",
        "hermes-gatewayfoo",
        "hermes-gateway-default",
        "hermes-gateway-Foo",
        "hermes-gateway-foo:1",
        "xhermes-gateway",
        "hermes-gateway-foo\n",
        "hermes",
    ):
        assert sv.profile_of(foreign) is None, foreign
    with pytest.raises(homes.InvalidProfileName):
        sv.unit_name("Foo")


def test_config_survives_a_home_with_space_and_percent(short_dir):
    root = short_dir / "100% %(here)s a b"
    make_profile(root, "a")
    sv.install("a", root / "profiles" / "a")
    sv.install("default", root)
    config = root / "mesh" / "supervisord.conf"
    # Read the way supervisord reads it: its own config reader, %-expansion and all.
    read = ServerOptions().read_config(str(config))
    programs = {pc.name: pc for group in read.process_group_configs for pc in group.process_configs}
    assert sorted(programs) == ["hermes-gateway", "hermes-gateway-a"]
    a = programs["hermes-gateway-a"]
    assert shlex.split(a.command) == gateway_command()
    assert a.environment == {
        "HERMES_HOME": str(root / "profiles" / "a"),
        "HERMES_SUPERVISOR": "supervisord",
        "PYTHONUNBUFFERED": "1",
    }
    assert programs["hermes-gateway"].environment["HERMES_HOME"] == str(root)
    assert a.directory == str(working_directory())
    assert a.stdout_logfile == str(root / "logs" / "mesh" / "hermes-gateway-a.log")
    assert (a.exitcodes, a.autorestart, a.startsecs, a.stopwaitsecs) == ([0, 78], RestartWhenExitUnexpected, 1, 30)
    assert a.stopasgroup and a.killasgroup and a.redirect_stderr and a.stopsignal == signal.SIGTERM
    assert read.pidfile == str(root / "mesh" / "supervisord.pid")
    assert [c["file"] for c in read.server_configs] == [str(root / "mesh" / "supervisord.sock")]
    assert [c["chmod"] for c in read.server_configs] == [0o700]
    assert {p.profile: p.home for p in sv.configured_programs(sv.mesh_paths(root)).values()} == {
        "default": root,
        "a": root / "profiles" / "a",
    }


@pytest.mark.parametrize("bad", ['quote"d', "semi ;colon", "hash #tag", "new\nline"])
def test_a_home_supervisord_would_misread_is_refused(short_dir, bad):
    root = short_dir / bad
    home = make_profile(root, "a")
    with pytest.raises(sv.ConfigUnrepresentable):
        sv.install("a", home)
    assert not (root / "mesh" / "supervisord.conf").exists()


def test_install_and_find_read_the_written_config_back():
    base = Path(tempfile.mkdtemp(prefix="hm-"))
    try:
        root = base / "a b%c"
        home = make_profile(root, "foo")
        make_profile(root, "foobar")
        unit = sv.install("foo", home, scope="user")
        assert (unit.kind, unit.name, unit.profile, unit.home) == ("supervisord", "hermes-gateway-foo", "foo", home)
        assert unit.path == root / "mesh" / "supervisord.conf"
        assert sv.find("foo", home) == unit
        assert sv.find("foobar", root / "profiles" / "foobar") is None  # not installed, never claimed by foo
        assert sv.find("foo", make_profile(base / "other", "foo")) is None  # another install's home
        sv.install("default", root)
        assert sv.find("default", root) is not None and sv.find("foo", home) == unit  # foo kept
        assert sorted(p.profile for p in sv.configured_programs(sv.mesh_paths(root)).values()) == ["default", "foo"]
        with pytest.raises(sv.UnsupportedScope):
            sv.install("foo", home, scope="system")
        with pytest.raises(homes.ProfileNotFound):
            sv.install("nope", root / "profiles" / "nope")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_socket_path_falls_back_to_a_short_private_dir():
    root = Path("/tmp/hm-" + "x" * 120)
    paths = sv.mesh_paths(root)
    assert paths.socket.parent.parent == Path(f"/tmp/hermes-{os.geteuid()}")
    assert paths.socket.parent.name.endswith("-mesh")
    assert len(os.fsencode(paths.socket)) <= homes.IPC_PATH_MAX
    assert sv.mesh_paths(Path("/tmp/hm-short")).socket == Path("/tmp/hm-short/mesh/supervisord.sock")
