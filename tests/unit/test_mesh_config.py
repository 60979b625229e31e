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

from fleet.supervisors import gateway_command, working_directory
from fleet.supervisors import supervisord as sv
from shared import homes
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
    assert sorted(programs) == ["hermes-confirm-timer", "hermes-gateway", "hermes-gateway-a"]
    timer = programs["hermes-confirm-timer"]  # the confirm's timer: supervisord's tick, on the root
    assert shlex.split(timer.command)[2:] == ["services.updater.confirm_timer", "listen", "--root", str(root)]
    assert timer.environment["HERMES_HOME"] == str(root)
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


# --- the multiplex program ------------------------------------------------------------------------


def test_the_multiplex_program_is_nobodys_profile_program():
    assert sv.MULTIPLEX_PROGRAM == "hermes-multiplex" and sv.profile_of(sv.MULTIPLEX_PROGRAM) is None


def test_a_served_set_is_written_as_one_program_and_read_back_by_supervisord(short_dir):
    from fleet.supervisors.supervisord import config
    from fleet.supervisors.supervisord.paths import prepare

    root = short_dir / "100% a"
    for profile in ("a", "b", "c", "d"):
        make_profile(root, profile)
    paths = sv.mesh_paths(root)
    prepare(paths)
    programs = config.mesh_programs(["d", "a"], ["c", "default", "b"])
    assert programs == config.MeshPrograms(("a", "d"), ("default", "b", "c"))
    config.write_config(paths, programs)
    read = ServerOptions().read_config(str(paths.config))
    found = {pc.name: pc for group in read.process_group_configs for pc in group.process_configs}
    assert sorted(found) == ["hermes-confirm-timer", "hermes-gateway-a", "hermes-gateway-d", "hermes-multiplex"]
    mx = found["hermes-multiplex"]
    assert shlex.split(mx.command) == [*gateway_command(), "--serve", "default,b,c"]
    assert mx.environment["HERMES_HOME"] == str(root)  # launched on the root home: the default profile
    assert mx.stdout_logfile == str(root / "logs" / "mesh" / "hermes-multiplex.log")
    a = found["hermes-gateway-a"]
    for setting in (
        "exitcodes",
        "autorestart",
        "startsecs",
        "startretries",
        "stopwaitsecs",
        "stopasgroup",
        "directory",
    ):
        assert getattr(mx, setting) == getattr(a, setting), setting
    configured = sv.configured_programs(paths)
    assert configured["hermes-multiplex"] == config.ConfiguredProgram(
        "hermes-multiplex", None, root, ("default", "b", "c")
    )
    assert configured["hermes-multiplex"].profiles == ("default", "b", "c")
    assert config.mesh_of(paths) == programs  # the config is the mesh's record: it round-trips
    # A served profile's program is the multiplex one, found through the set it serves.
    unit = sv.find("b", root / "profiles" / "b")
    assert (unit.name, unit.profile, unit.home) == ("hermes-multiplex", "b", root / "profiles" / "b")
    assert sv.find("a", root / "profiles" / "a").name == "hermes-gateway-a"
    with pytest.raises(sv.MeshUsage):  # b is served: it gets no program of its own
        sv.install("b", root / "profiles" / "b")
    sv.install("d", root / "profiles" / "d")  # the set survives a rewrite by another command
    assert config.mesh_of(paths) == programs


@pytest.mark.parametrize(
    ("profiles", "served", "error"),
    [
        (["a", "b"], ["b", "c"], sv.MeshUsage),  # b in both
        ([], ["a"], sv.MeshUsage),  # a set of one is a per-profile gateway
        ([], ["a", "a", "b"], homes.InvalidServedSet),
        ([], ["a", "Bad"], homes.InvalidProfileName),
    ],
)
def test_a_mesh_that_names_a_profile_twice_or_a_set_of_one_is_refused(profiles, served, error):
    from fleet.supervisors.supervisord import config

    with pytest.raises(error):
        config.mesh_programs(profiles, served)


def test_a_multiplex_command_line_that_is_not_a_set_is_no_program_of_ours(short_dir):
    from fleet.supervisors.supervisord.paths import prepare

    root = short_dir / "r"
    paths = sv.mesh_paths(root)
    prepare(paths)
    env = f'environment = HERMES_HOME="{root}"'
    for command in ("python -m services.gateway", "python -m services.gateway --serve a,a", "x --serve"):
        paths.config.write_text(f"[program:hermes-multiplex]\ncommand = {command}\n{env}\n")
        assert sv.configured_programs(paths) == {}, command


# --- the gateway host program ---------------------------------------------------------------------


def test_a_hosted_set_is_one_program_read_back_by_its_command_not_its_name(short_dir):
    from fleet.supervisors.host import host_command
    from fleet.supervisors.supervisord import config
    from fleet.supervisors.supervisord.paths import prepare

    root = short_dir / "100% h"
    for profile in ("a", "b", "host"):
        make_profile(root, profile)
    paths = sv.mesh_paths(root)
    prepare(paths)
    programs = config.mesh_programs(["host", "b", "default"], ["a", "x"], host=True)
    assert programs == config.MeshPrograms((), ("a", "x"), ("default", "b", "host"))
    config.write_config(paths, programs)
    read = ServerOptions().read_config(str(paths.config))
    found = {pc.name: pc for group in read.process_group_configs for pc in group.process_configs}
    assert sorted(found) == ["hermes-confirm-timer", "hermes-gateway-host", "hermes-multiplex"]
    host = found[sv.HOST_PROGRAM]
    assert shlex.split(host.command) == host_command(("default", "b", "host"))
    assert host.environment["HERMES_HOME"] == str(root) and host.stopasgroup
    configured = sv.configured_programs(paths)
    assert configured[sv.HOST_PROGRAM] == config.ConfiguredProgram(
        sv.HOST_PROGRAM, None, root, ("default", "b", "host"), host=True
    )
    assert config.mesh_of(paths) == programs  # the config is the mesh's record: it round-trips
    assert sv.find("host", root / "profiles" / "host") is None  # the host's program is no profile's own
    sv.install("host", root / "profiles" / "host")  # hosted already: nothing changes
    assert config.mesh_of(paths) == programs
    # Without the host, a profile called host has a program of that very name: its own.
    config.write_config(paths, config.mesh_programs(["host"]))
    assert sv.configured_programs(paths)[sv.HOST_PROGRAM] == config.ConfiguredProgram(
        sv.HOST_PROGRAM, "host", root / "profiles" / "host"
    )
    with pytest.raises(sv.MeshUsage):  # a profile hosted and served both
        config.mesh_programs(["a"], ["a", "b"], host=True)
