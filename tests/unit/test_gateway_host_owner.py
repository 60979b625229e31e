"""Which gateways the gateway host owns, read from the mesh config alone (no process)."""

from __future__ import annotations

from pathlib import Path

from fleet.supervisors import HOST_KIND, SUPERVISING_KINDS, kind_module
from fleet.supervisors import gateway_host as hosted
from fleet.supervisors import supervisord as sv
from fleet.supervisors.supervisord import config
from fleet.supervisors.supervisord.paths import prepare
from hermes_cli.commands import gateway_manage
from shared import homes
from tests.support.homes import make_profile


def _mesh(root: Path, programs: config.MeshPrograms) -> Path:
    paths = sv.mesh_paths(root)
    prepare(paths)
    config.write_config(paths, programs)
    return paths.config


def test_the_host_owns_the_profiles_its_program_runs_and_no_other(short_dir):
    root = short_dir / "r"
    for profile in ("a", "b", "c"):
        make_profile(root, profile)
    mesh = _mesh(root, config.mesh_programs(["default", "a"], ["b", "c"], host=True))
    for profile in ("default", "a"):
        home = homes.profile_home(profile, root)
        owner = gateway_manage.find_owner(profile, home)
        assert owner is not None
        assert (owner.kind, owner.name, owner.profile, owner.home, owner.path) == (
            HOST_KIND,
            f"{sv.HOST_PROGRAM}:{profile}",
            profile,
            home,
            mesh,
        )
    served = gateway_manage.find_owner("b", homes.profile_home("b", root))
    assert served is not None and (served.kind, served.name) == ("supervisord", sv.MULTIPLEX_PROGRAM)
    assert hosted.find("b", homes.profile_home("b", root)) is None  # the multiplex program's
    elsewhere = short_dir / "other"
    make_profile(elsewhere, "a")
    assert hosted.find("a", homes.profile_home("a", elsewhere)) is None  # another install's home
    assert hosted.find("a", homes.profile_home("b", root)) is None  # not a's home

    _mesh(root, config.mesh_programs(["a"]))  # the same profile as a program of its own
    owner = gateway_manage.find_owner("a", homes.profile_home("a", root))
    assert owner is not None and (owner.kind, owner.name) == ("supervisord", sv.unit_name("a"))
    assert hosted.find("a", homes.profile_home("a", root)) is None


def test_every_supervising_kind_is_looked_for_and_the_host_drives_as_the_others_do():
    assert sorted(gateway_manage.OWNER_ORDER) == sorted(SUPERVISING_KINDS)
    assert gateway_manage.OWNER_ORDER[:2] == ("supervisord", HOST_KIND)  # the embedded mesh first
    module = kind_module(HOST_KIND)
    assert module is hosted
    for name in ("find", "start", "stop", "restart"):
        assert callable(getattr(module, name)), name
