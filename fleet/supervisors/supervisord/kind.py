"""The kind API of the mesh supervisor, as ``hermes gateway install|start|stop|restart`` use
it: a profile's gateway is a program in the install's mesh config, found by its
``HERMES_HOME`` (or the multiplex program whose served set names it) and driven through the
running supervisord."""

from __future__ import annotations

import os
import xmlrpc.client
from dataclasses import replace
from pathlib import Path

from fleet.supervisors import Unit
from fleet.supervisors.errors import SupervisorError, SupervisorFailed, SupervisorUnavailable
from fleet.supervisors.supervisord.config import configured_programs, mesh_of, mesh_programs, ordered, write_config
from fleet.supervisors.supervisord.daemon import LOCK_TIMEOUT, live_daemon, require_supervisor
from fleet.supervisors.supervisord.names import KIND, MULTIPLEX_PROGRAM, unit_name
from fleet.supervisors.supervisord.paths import MeshPaths, mesh_paths, prepare
from fleet.supervisors.supervisord.programs import START_TIMEOUT, start_program, stop_program, wait_running
from fleet.supervisors.supervisord.rpc import call, failure, fault_code
from shared import homes
from shared.files import locked


class UnsupportedScope(SupervisorError):
    code = "unsupported_scope"


def root_of(profile: str, home: Path) -> Path | None:
    """The install root ``home`` belongs to as ``profile``'s home, or None if it is not one."""
    homes.validate_profile_name(profile)
    home = Path(os.path.normpath(Path(home).absolute()))
    if profile == homes.DEFAULT_PROFILE:
        return home
    if home.name == profile and home.parent.name == "profiles":
        return home.parent.parent
    return None


def install(profile: str, home: Path, *, scope: str = "user") -> Unit:
    """Add ``profile``'s gateway to the mesh config. Starts nothing and needs nothing running;
    a running mesh picks it up on ``start`` or the next ``hermes mesh up``."""
    require_supervisor()
    if scope != "user":
        raise UnsupportedScope(
            "the supervisord kind is the install's own mesh supervisor; it has no system scope",
            detail={"scope": scope},
        )
    root = root_of(profile, home)
    if root is None:
        raise homes.ProfileNotFound(f"{home} is not the home of profile {profile!r}", detail={"name": profile})
    homes.profile_home(profile, root, must_exist=True)
    paths = mesh_paths(root)
    prepare(paths)
    with locked(paths.state, timeout=LOCK_TIMEOUT):
        present = mesh_of(paths)
        if profile not in present.hosted:  # a gateway of the host has its program already
            programs = mesh_programs([*present.profiles, profile], present.served)
            write_config(paths, replace(programs, hosted=present.hosted))
    return _unit(paths, profile)


def find(profile: str, home: Path) -> Unit | None:
    """The mesh program of ``profile`` if this install's mesh config runs it with HERMES_HOME =
    ``home``, or runs the multiplex program on this install's root home with ``profile`` in its set."""
    root = root_of(profile, home)
    if root is None:
        return None
    paths = mesh_paths(root)
    if not paths.config.exists():
        return None  # no mesh here: asking needs no supervisor package
    require_supervisor()
    configured = configured_programs(paths)
    program = configured.get(unit_name(profile))
    if program is not None and program.host:
        program = None  # the gateway host's program, never one profile's (not even one called host)
    launched_on = home
    if program is None and profile in getattr(configured.get(MULTIPLEX_PROGRAM), "served", ()):
        program, launched_on = configured[MULTIPLEX_PROGRAM], paths.root
    if program is None or program.home is None:
        return None
    if os.path.normpath(program.home) != os.path.normpath(Path(launched_on).absolute()):
        return None
    return _unit(paths, profile, program.name)


def _unit(paths: MeshPaths, profile: str, name: str | None = None) -> Unit:
    return Unit(
        kind=KIND,
        name=name or unit_name(profile),
        profile=profile,
        home=homes.profile_home(profile, paths.root),
        path=paths.config,
    )


def _unit_paths(unit: Unit) -> MeshPaths:
    require_supervisor()
    root = root_of(unit.profile, unit.home)
    if root is None or unit.kind != KIND:
        raise ValueError(f"{unit} is not a unit of the mesh supervisor")
    paths = mesh_paths(root)
    if live_daemon(paths, adopt=False) is None:
        raise SupervisorUnavailable(
            f"the mesh supervisor of {root} is not running; start it with `hermes mesh up`",
            detail={"root": str(root)},
        )
    return paths


def start(unit: Unit) -> None:
    """Start the unit's program (loading it first if it was installed after supervisord started)
    and wait, bounded, until it is RUNNING."""
    paths = _unit_paths(unit)
    try:
        call(paths, "supervisor.getProcessInfo", unit.name)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode != fault_code("BAD_NAME"):
            raise failure(f"supervisord could not report {unit.name}", fault, program=unit.name) from None
        _load(paths, unit.name)
    start_program(paths, unit.name)
    wait_running(paths, [unit.name], START_TIMEOUT, None)


def _load(paths: MeshPaths, name: str) -> None:
    try:
        call(paths, "supervisor.reloadConfig")
        call(paths, "supervisor.addProcessGroup", name)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode == fault_code("BAD_NAME"):
            raise SupervisorFailed(
                f"{name} is not in the mesh config {paths.config}; "
                "run `hermes gateway install --supervisor supervisord` first",
                detail={"program": name},
            ) from None
        if fault.faultCode != fault_code("ALREADY_ADDED"):
            raise failure(f"supervisord could not load {name}", fault, program=name) from None


def stop(unit: Unit) -> None:
    """Stop the unit's program (the gateway drains on SIGTERM) and wait, bounded, until it is down."""
    stop_program(_unit_paths(unit), unit.name)


def rename_in(names: list[str], old: str, new: str) -> list[str]:
    """``names`` with ``old`` replaced by ``new`` (once, keeping neither twice): how a list of
    profiles, such as a mesh's programs, follows a rename."""
    if old not in names:
        return names
    return [new if n == old else n for n in names if n != new]


def rename(profile: str, new: str, root: Path) -> Unit:
    """``profile``'s program renamed ``new`` in the mesh config of ``root`` (whose home has moved
    already), and a running supervisord told to drop the old program; the new one is loaded when
    it is started. Taken again, it changes nothing more."""
    require_supervisor()
    paths = mesh_paths(root)
    if paths.config.exists():
        with locked(paths.state, timeout=LOCK_TIMEOUT):
            present = mesh_of(paths)
            if profile in present.profiles:
                programs = mesh_programs(rename_in(list(present.profiles), profile, new), present.served)
                write_config(paths, replace(programs, hosted=present.hosted))
            elif profile in present.hosted:
                write_config(
                    paths, replace(present, hosted=tuple(ordered(rename_in(list(present.hosted), profile, new))))
                )
            if live_daemon(paths, adopt=False) is not None:
                _drop(paths, unit_name(profile))
    return _unit(paths, new)


def _drop(paths: MeshPaths, name: str) -> None:
    """supervisord forgets program ``name``, which the config no longer has (stopped first)."""
    try:
        call(paths, "supervisor.reloadConfig")
        stop_program(paths, name)
        call(paths, "supervisor.removeProcessGroup", name)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode != fault_code("BAD_NAME"):
            raise failure(f"supervisord could not drop {name}", fault, program=name) from None


def restart(unit: Unit) -> None:
    """Stop, then start: supervisord has no restart call, and a stop waits for the drain."""
    stop(unit)
    start(unit)
