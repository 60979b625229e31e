"""The mesh config, ``<root>/mesh/supervisord.conf``: generated from the profile list (and
the set of a multiplex gateway), checked with supervisord's own reader, written atomically,
and read back as the list of gateway programs (the mesh's only record of what it runs).

A multiplex gateway is one program, ``hermes-multiplex``, running ``python -m services.gateway
--serve <set>`` on the root home, with the settings of every gateway program; its served set
is read back from that command line by the canonical matcher (``fleet.command_lines``).

The gateway host is one program, ``hermes-gateway-host``, running ``python -m
services.gateway_host --profiles <set>`` on the root home: every profile of its set is a gateway
forked from its fork server, and has no program of its own. Its set is read back from its
command line too."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.supervisors import gateway_command, gateway_environment, working_directory
from fleet.supervisors.errors import SupervisorError
from fleet.supervisors.host import MODULE as HOST_MODULE
from fleet.supervisors.host import PROFILES_FLAG, host_command
from fleet.supervisors.supervisord.names import (
    CONFIRM_TIMER,
    HOST_PROGRAM,
    KIND,
    MULTIPLEX_PROGRAM,
    is_multiplex,
    profile_of,
    unit_name,
)
from fleet.supervisors.supervisord.paths import MeshPaths
from shared import exit_codes, homes
from shared.files import write_bytes_atomic

START_RETRIES = 3
STOP_WAIT_SECS = 30  # the gateway drains on SIGTERM; supervisord kills the group after this

# Exit codes after which a program stays down: a clean stop, and a broken config (78), which
# a restart loop would not fix. Anything else (75 = planned restart, crashes) restarts it.
EXPECTED_EXIT_CODES = (exit_codes.OK, exit_codes.CONFIG)


class ConfigUnrepresentable(SupervisorError):
    code = "supervisord_config_unrepresentable"


class MeshUsage(SupervisorError):
    """A mesh that names a profile twice: as its own program and in the multiplex set."""

    code = "mesh_usage"


SERVE_FLAG = "--serve"
# A set of one is a per-profile gateway: the multiplex program serves at least two, so a
# gateway's record (``multiplex``) always tells which program runs it.
MIN_SERVED = 2


@dataclass(frozen=True)
class MeshPrograms:
    """What a mesh runs: a program per profile, one multiplex program for ``served`` (empty:
    none), and the gateway host for ``hosted`` (empty: none). Disjoint, each normalized."""

    profiles: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    hosted: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return (
            [unit_name(p) for p in self.profiles]
            + ([MULTIPLEX_PROGRAM] if self.served else [])
            + ([HOST_PROGRAM] if self.hosted else [])
        )


def mesh_programs(profiles: Iterable[str], served: Iterable[str] = (), *, host: bool = False) -> MeshPrograms:
    """The programs for ``profiles`` (``host``: all of them gateways of the gateway host) and a
    multiplex gateway serving ``served``; a profile in both, or a set of fewer than two, raises
    MeshUsage."""
    chosen = ordered(profiles)
    names = list(served)
    if host:
        plain = mesh_programs(chosen, names)
        return MeshPrograms((), plain.served, plain.profiles)
    if not names:
        return MeshPrograms(tuple(chosen))
    serve = homes.parse_served(",".join(names))
    if len(serve) < MIN_SERVED:
        raise MeshUsage(
            f"a multiplex gateway serves at least {MIN_SERVED} profiles; run {serve[0]} with --profiles instead",
            detail={"served": list(serve)},
        )
    both = sorted(set(chosen) & set(serve))
    if both:
        raise MeshUsage(
            f"{', '.join(both)} cannot run both its own gateway and in the multiplex gateway:"
            " name each profile in --profiles or --serve, not both",
            detail={"profiles": both},
        )
    return MeshPrograms(tuple(chosen), serve)


# supervisord's tick wakes it every 5 s: the confirm's timer under the mesh (``services.updater``).
CONFIRM_TIMER_MODULE = "services.updater.confirm_timer"
TIMER_STOP_WAIT_SECS = 5


def confirm_timer_command(root: Path) -> list[str]:
    return [sys.executable, "-m", CONFIRM_TIMER_MODULE, "listen", "--root", str(root)]


def multiplex_command(served: Sequence[str]) -> list[str]:
    return [*gateway_command(), SERVE_FLAG, ",".join(served)]


# supervisord reads an ini file (" ;" and " #" start comments), expands values with ``%``
# formatting (program log file names twice), splits ``command`` with shlex and
# ``environment`` with its own KEY="value" lexer. Each value is written in the form of its
# kind, and the whole file is then read back with supervisor's own config reader: a value
# it would read differently (a quote in an environment value, a " ;", a line break) is
# refused before the file is written.


@dataclass(frozen=True)
class _Setting:
    key: str
    value: str | int | list[str] | dict[str, str]  # text, a number, an argv, or an environment
    expanded_twice: bool = False  # program log file names are %-expanded twice


def _escape(text: str) -> str:
    return text.replace("%", "%%")


def _encode(setting: _Setting) -> str:
    value = setting.value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return _escape(shlex.join(value))
    if isinstance(value, dict):
        return _escape(",".join(f'{k}="{v}"' for k, v in value.items()))
    return _escape(_escape(value)) if setting.expanded_twice else _escape(value)


def _program_settings(paths: MeshPaths, name: str, command: list[str], home: Path) -> list[_Setting]:
    return [
        _Setting("command", command),
        _Setting("directory", str(working_directory())),
        _Setting("environment", gateway_environment(home, KIND)),
        _Setting("autostart", "true"),
        _Setting("autorestart", "unexpected"),
        _Setting("exitcodes", ",".join(str(c) for c in EXPECTED_EXIT_CODES)),
        _Setting("startsecs", 1),
        _Setting("startretries", START_RETRIES),
        _Setting("stopsignal", "TERM"),
        _Setting("stopwaitsecs", STOP_WAIT_SECS),
        _Setting("stopasgroup", "true"),
        _Setting("killasgroup", "true"),
        _Setting("redirect_stderr", "true"),
        _Setting("stdout_logfile", str(paths.program_log(name)), expanded_twice=True),
        _Setting("stdout_logfile_maxbytes", "10MB"),
        _Setting("stdout_logfile_backups", 3),
    ]


def _expected(paths: MeshPaths, programs: MeshPrograms) -> dict[str, tuple[list[str], Path]]:
    """Each program's command and home: a profile's runs in its home; the multiplex one is
    launched on the root home (the default profile), as HERMES_HOME stays what it was launched with."""
    out = {unit_name(p): (gateway_command(), homes.profile_home(p, paths.root)) for p in programs.profiles}
    if programs.served:
        out[MULTIPLEX_PROGRAM] = (multiplex_command(programs.served), paths.root)
    if programs.hosted:
        out[HOST_PROGRAM] = (host_command(programs.hosted), paths.root)
    return out


def _sections(paths: MeshPaths, programs: MeshPrograms) -> list[tuple[str, list[_Setting]]]:
    sections = [
        (
            "supervisord",
            [
                _Setting("nodaemon", "false"),
                _Setting("pidfile", str(paths.pidfile)),
                _Setting("logfile", str(paths.logs / "supervisord.log")),
                _Setting("logfile_maxbytes", "5MB"),
                _Setting("logfile_backups", 3),
                _Setting("loglevel", "info"),
                _Setting("childlogdir", str(paths.logs)),
            ],
        ),
        ("unix_http_server", [_Setting("file", str(paths.socket)), _Setting("chmod", "0700")]),
        ("supervisorctl", [_Setting("serverurl", paths.server_url)]),
        (
            "rpcinterface:supervisor",
            [_Setting("supervisor.rpcinterface_factory", "supervisor.rpcinterface:make_main_rpcinterface")],
        ),
    ]
    sections += [
        (f"program:{name}", _program_settings(paths, name, command, home))
        for name, (command, home) in _expected(paths, programs).items()
    ]
    sections.append((f"eventlistener:{CONFIRM_TIMER}", _timer_settings(paths)))
    return sections


def _timer_settings(paths: MeshPaths) -> list[_Setting]:
    """The confirm's timer: its stdout is supervisord's event protocol, its stderr its log."""
    return [
        _Setting("command", confirm_timer_command(paths.root)),
        _Setting("directory", str(working_directory())),
        _Setting("environment", gateway_environment(paths.root, KIND)),
        _Setting("events", "TICK_5"),
        _Setting("autostart", "true"),
        _Setting("autorestart", "true"),
        _Setting("stopsignal", "TERM"),
        _Setting("stopwaitsecs", TIMER_STOP_WAIT_SECS),
        _Setting("stderr_logfile", str(paths.program_log(CONFIRM_TIMER)), expanded_twice=True),
        _Setting("stderr_logfile_maxbytes", "1MB"),
        _Setting("stderr_logfile_backups", 1),
    ]


def render_config(paths: MeshPaths, programs: MeshPrograms) -> str:
    """The supervisord.conf text for ``programs``."""
    lines = ["; Generated by `hermes mesh`; rewritten on every `hermes mesh up`."]
    for section, settings in _sections(paths, programs):
        lines += ["", f"[{section}]", *(f"{s.key} = {_encode(s)}" for s in settings)]
    return "\n".join(lines) + "\n"


def _check_config(paths: MeshPaths, programs: MeshPrograms, text: str) -> None:
    """Read ``text`` with supervisord's own reader (the mesh dirs must exist, as it checks them)
    and raise ConfigUnrepresentable unless it reads back exactly what ``programs`` need."""
    import io

    from supervisor.options import ServerOptions

    try:
        read = ServerOptions().read_config(io.StringIO(text))
    except ValueError as exc:
        raise ConfigUnrepresentable(
            f"supervisord would not read the mesh config: {str(exc).splitlines()[0]}",
            detail={"root": str(paths.root)},
        ) from None
    found: dict[str, Any] = {
        "pidfile": read.pidfile,
        "logfile": read.logfile,
        "socket": [c.get("file") for c in read.server_configs],
        "programs": {
            pc.name: (shlex.split(pc.command), pc.directory, pc.environment, pc.stdout_logfile)
            for group in read.process_group_configs
            for pc in group.process_configs
            if group.name != CONFIRM_TIMER
        },
        "timer": [
            (shlex.split(pc.command), pc.stderr_logfile)
            for group in read.process_group_configs
            if group.name == CONFIRM_TIMER
            for pc in group.process_configs
        ],
    }
    expected: dict[str, Any] = {
        "pidfile": str(paths.pidfile),
        "logfile": str(paths.logs / "supervisord.log"),
        "socket": [str(paths.socket)],
        "programs": {
            name: (command, str(working_directory()), gateway_environment(home, KIND), str(paths.program_log(name)))
            for name, (command, home) in _expected(paths, programs).items()
        },
        "timer": [(confirm_timer_command(paths.root), str(paths.program_log(CONFIRM_TIMER)))],
    }
    for key, value in expected.items():
        if found[key] != value:
            raise ConfigUnrepresentable(
                f"supervisord would read the mesh config's {key} differently from what was written "
                "(quotes, ' ;' or ' #', line breaks and edge spaces in a path cannot be written)",
                detail={"root": str(paths.root), "key": key},
            )


def ordered(profiles: Iterable[str]) -> list[str]:
    """Validated, deduplicated, default first: the config's order does not depend on the caller's."""
    unique = {homes.validate_profile_name(p) for p in profiles}
    return sorted(unique, key=lambda p: (p != homes.DEFAULT_PROFILE, p))


@dataclass(frozen=True)
class ConfiguredProgram:
    name: str
    profile: str | None  # None: the multiplex program or the gateway host, which run ``served``
    home: Path | None
    served: tuple[str, ...] = ()
    host: bool = False  # the gateway host's program

    @property
    def profiles(self) -> tuple[str, ...]:
        """Every profile this program runs a gateway for."""
        return self.served if self.profile is None else (self.profile,)


def configured_programs(paths: MeshPaths) -> dict[str, ConfiguredProgram]:
    """The gateway programs in the mesh config on disk, by program name ({} without a config).
    The multiplex program is there only with the set its command line serves."""
    from supervisor.datatypes import dict_of_key_value_pairs
    from supervisor.options import UnhosedConfigParser

    try:
        text = paths.config.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    parser = UnhosedConfigParser()
    parser.read_string(text)
    programs: dict[str, ConfiguredProgram] = {}
    for section in parser.sections():
        name = section.removeprefix("program:")
        command = parser.get(section, "command", fallback="")
        hosted = _hosted(command) if name == HOST_PROGRAM else ()
        profile = profile_of(name) if name != section and not hosted else None
        served = hosted or (_served(command) if is_multiplex(name) else ())
        if profile is None and not served:
            continue
        try:
            # As supervisord reads it: %-expanded once, then its KEY="value" lexer.
            env = dict_of_key_value_pairs(parser.get(section, "environment", fallback="") % {})
        except (ValueError, TypeError, KeyError):
            env = {}
        home = env.get(homes.HOME_ENV)
        programs[name] = ConfiguredProgram(name, profile, Path(home) if home else None, served, bool(hosted))
    return programs


def _served(command: str) -> tuple[str, ...]:
    """The set a multiplex program's command serves (as supervisord splits it, read by the
    canonical matcher); () if none."""
    from fleet.command_lines import gateway_served_profiles

    try:
        argv = shlex.split(command % {})
    except (ValueError, TypeError, KeyError):
        return ()
    return gateway_served_profiles(argv) or ()


def _hosted(command: str) -> tuple[str, ...]:
    """The set a gateway host's command runs (``-m services.gateway_host --profiles <set>``); ()
    when the command is not the host's (a profile called ``host`` has a program of that name)."""
    try:
        argv = shlex.split(command % {})
    except (ValueError, TypeError, KeyError):
        return ()
    if argv[1:3] != ["-m", HOST_MODULE] or argv[3:4] != [PROFILES_FLAG] or len(argv) != 5:
        return ()
    try:
        return tuple(ordered(argv[4].split(",")))
    except homes.InvalidProfileName:
        return ()


def mesh_of(paths: MeshPaths) -> MeshPrograms:
    """What the mesh config on disk runs (nothing without a config)."""
    configured = configured_programs(paths).values()
    served = next((p.served for p in configured if p.profile is None and not p.host), ())
    hosted = next((p.served for p in configured if p.host), ())
    return MeshPrograms(tuple(ordered(p.profile for p in configured if p.profile is not None)), served, hosted)


def write_config(paths: MeshPaths, programs: MeshPrograms) -> None:
    """Render the config for ``programs``, refuse it unless supervisord reads it back as
    written, then replace the file atomically."""
    text = render_config(paths, programs)
    _check_config(paths, programs, text)
    write_bytes_atomic(paths.config, text.encode("utf-8"))
