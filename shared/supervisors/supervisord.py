"""The supervisord kind: the install's embedded mesh supervisor and its gateway programs.

One supervisord per install, anchored on the ROOT home whichever profile is active:

- ``<root>/mesh/supervisord.conf``: generated from the profile list, written atomically;
  the list of programs in it is the mesh's only record of which profiles it runs.
- ``<root>/mesh/supervisord.json``: the daemon's identity (pid + start time), so a pid left
  by a dead supervisord is recognised and never trusted. Its lock serialises every
  check-and-start, so two ``hermes mesh up`` cannot start two daemons.
- ``<root>/mesh/supervisord.sock``: the XML-RPC unix socket (a short private dir under
  ``/tmp`` when that path is too long for a socket); ``<root>/logs/mesh/``: all logs.

Everything supervisord is told goes through its own XML-RPC interface; nothing parses
``supervisorctl`` text. The ``supervisor`` package is imported only when it is needed.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time
import xmlrpc.client
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared import homes
from shared.errors import HermesError
from shared.files import StateFileCorrupt, locked, read_json, write_bytes_atomic, write_json_atomic
from shared.identity import ProcessIdentity, is_alive, process_identity
from shared.locks import probe
from shared.supervisors import Unit, gateway_command, gateway_environment, working_directory

KIND = "supervisord"
PROGRAM_PREFIX = "hermes-gateway"

START_RETRIES = 3
STOP_WAIT_SECS = 30  # the gateway drains on SIGTERM; supervisord kills the group after this
# How long a program may take to reach RUNNING: startsecs plus every retry's backoff, with room.
START_TIMEOUT = 30.0
STOP_TIMEOUT = STOP_WAIT_SECS + 10.0
DAEMON_START_TIMEOUT = 15.0
DOWN_TIMEOUT = STOP_WAIT_SECS + 15.0
# A check-and-start may wait behind a `down`, which waits for every gateway to drain.
LOCK_TIMEOUT = DOWN_TIMEOUT + 15.0
RPC_TIMEOUT = 10.0
PROBE_TIMEOUT = 2.0
POLL = 0.1
LOG_TAIL_BYTES = 2000

# Exit codes after which a program stays down: a clean stop, and a broken config (78), which
# a restart loop would not fix. Anything else (75 = planned restart, crashes) restarts it.
EXPECTED_EXIT_CODES = (0, 78)


class SupervisorUnavailable(HermesError):
    code = "supervisor_unavailable"


class SupervisorFailed(HermesError):
    code = "supervisor_failed"


class GatewayStartFailed(SupervisorFailed):
    """Programs that did not reach RUNNING; ``detail["programs"]`` has each one's log tail."""


class ConfigUnrepresentable(HermesError):
    code = "supervisord_config_unrepresentable"


class UnsupportedScope(HermesError):
    code = "unsupported_scope"


def _require_supervisor() -> None:
    # An optional dependency: only installs that use the supervisord kind need it.
    try:
        import supervisor  # noqa: F401
    except ImportError:
        raise SupervisorUnavailable(
            "the supervisord kind needs the `supervisor` package: pip install supervisor",
            detail={"missing": "supervisor"},
        ) from None


# --- names ------------------------------------------------------------------------------


def unit_name(profile: str) -> str:
    """``hermes-gateway`` for the default profile, ``hermes-gateway-<profile>`` otherwise."""
    homes.validate_profile_name(profile)
    return PROGRAM_PREFIX if profile == homes.DEFAULT_PROFILE else f"{PROGRAM_PREFIX}-{profile}"


def profile_of(name: str) -> str | None:
    """The exact inverse of ``unit_name``: None for any name it would never produce."""
    if name == PROGRAM_PREFIX:
        return homes.DEFAULT_PROFILE
    rest = name.removeprefix(f"{PROGRAM_PREFIX}-")
    if rest == name or rest == homes.DEFAULT_PROFILE or not homes.PROFILE_NAME_RE.fullmatch(rest):
        return None
    return rest


# --- where the mesh's files are --------------------------------------------------------------


@dataclass(frozen=True)
class MeshPaths:
    root: Path
    directory: Path
    config: Path
    state: Path
    pidfile: Path
    socket: Path
    logs: Path

    @property
    def server_url(self) -> str:
        return f"unix://{self.socket}"

    def program_log(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def mesh_paths(root: Path) -> MeshPaths:
    root = Path(os.path.normpath(Path(root).absolute()))
    directory = root / "mesh"
    return MeshPaths(
        root=root,
        directory=directory,
        config=directory / "supervisord.conf",
        state=directory / "supervisord.json",
        pidfile=directory / "supervisord.pid",
        socket=_socket_dir(root) / "supervisord.sock",
        logs=root / "logs" / "mesh",
    )


def _socket_dir(root: Path) -> Path:
    """``<root>/mesh``, or ``/tmp/hermes-<uid>/<hash>-mesh`` when the socket path would not fit."""
    own = root / "mesh"
    if len(os.fsencode(own / "supervisord.sock")) <= homes.IPC_PATH_MAX:
        return own
    digest = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()[:16]
    return Path("/tmp") / f"hermes-{os.geteuid()}" / f"{digest}-mesh"


def _private_dir(path: Path) -> None:
    """Make ``path`` (0700) or accept it only if it is ours, private, and not a symlink."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # the umask may have removed owner bits
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise homes.UnsafeRunDir(f"refusing to use {path}: it is not a plain directory", detail={"path": str(path)})
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise homes.UnsafeRunDir(
            f"refusing to use {path}: it must be owned by uid {os.geteuid()} with mode 0700",
            detail={"path": str(path)},
        )


def _prepare(paths: MeshPaths) -> None:
    paths.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths.logs.mkdir(mode=0o755, parents=True, exist_ok=True)
    if paths.socket.parent != paths.directory:
        _private_dir(paths.socket.parent.parent)
        _private_dir(paths.socket.parent)


# --- the config file --------------------------------------------------------------------------
#
# supervisord reads an ini file (" ;" and " #" start comments), expands values with ``%``
# formatting (program log file names twice), splits ``command`` with shlex and
# ``environment`` with its own KEY="value" lexer. Each value is written in the form of its
# kind, and the whole file is then read back with supervisor's own config reader: a value
# it would read differently (a quote in an environment value, a " ;", a line break) is
# refused before the file is written.


@dataclass(frozen=True)
class _Setting:
    key: str
    value: str | int | list[str] | dict[str, str]
    kind: str = "text"  # "text", "argv", "env", or "log" (expanded twice); ints are written as is


def _escape(text: str) -> str:
    return text.replace("%", "%%")


def _encode(setting: _Setting) -> str:
    value = setting.value
    if isinstance(value, int):
        return str(value)
    if setting.kind == "argv":
        return _escape(shlex.join(value))  # type: ignore[arg-type]
    if setting.kind == "env":
        return _escape(",".join(f'{k}="{v}"' for k, v in value.items()))  # type: ignore[union-attr]
    if setting.kind == "log":
        return _escape(_escape(value))  # type: ignore[arg-type]
    return _escape(value)  # type: ignore[arg-type]


def _program_settings(paths: MeshPaths, profile: str) -> list[_Setting]:
    name = unit_name(profile)
    home = homes.profile_home(profile, paths.root)
    return [
        _Setting("command", gateway_command(), "argv"),
        _Setting("directory", str(working_directory())),
        _Setting("environment", gateway_environment(home, KIND), "env"),
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
        _Setting("stdout_logfile", str(paths.program_log(name)), "log"),
        _Setting("stdout_logfile_maxbytes", "10MB"),
        _Setting("stdout_logfile_backups", 3),
    ]


def _sections(paths: MeshPaths, profiles: Sequence[str]) -> list[tuple[str, list[_Setting]]]:
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
    sections += [(f"program:{unit_name(p)}", _program_settings(paths, p)) for p in profiles]
    return sections


def render_config(paths: MeshPaths, profiles: Sequence[str]) -> str:
    """The supervisord.conf text for ``profiles`` (validated, deduplicated, default first)."""
    lines = ["; Generated by `hermes mesh`; rewritten on every `hermes mesh up`."]
    for section, settings in _sections(paths, _ordered(profiles)):
        lines += ["", f"[{section}]", *(f"{s.key} = {_encode(s)}" for s in settings)]
    return "\n".join(lines) + "\n"


def _check_config(paths: MeshPaths, profiles: Sequence[str], text: str) -> None:
    """Read ``text`` with supervisord's own reader (the mesh dirs must exist, as it checks them)
    and raise ConfigUnrepresentable unless it reads back exactly what ``profiles`` need."""
    import io

    from supervisor.options import ServerOptions

    try:
        read = ServerOptions().read_config(io.StringIO(text))
    except ValueError as exc:
        raise ConfigUnrepresentable(
            f"supervisord would not read the mesh config: {str(exc).splitlines()[0]}",
            detail={"root": str(paths.root)},
        ) from None
    wanted = _ordered(profiles)
    found: dict[str, Any] = {
        "pidfile": read.pidfile,
        "logfile": read.logfile,
        "socket": [c.get("file") for c in read.server_configs],
        "programs": {
            pc.name: (shlex.split(pc.command), pc.directory, pc.environment, pc.stdout_logfile)
            for group in read.process_group_configs
            for pc in group.process_configs
        },
    }
    expected: dict[str, Any] = {
        "pidfile": str(paths.pidfile),
        "logfile": str(paths.logs / "supervisord.log"),
        "socket": [str(paths.socket)],
        "programs": {
            unit_name(p): (
                gateway_command(),
                str(working_directory()),
                gateway_environment(homes.profile_home(p, paths.root), KIND),
                str(paths.program_log(unit_name(p))),
            )
            for p in wanted
        },
    }
    for key, value in expected.items():
        if found[key] != value:
            raise ConfigUnrepresentable(
                f"supervisord would read the mesh config's {key} differently from what was written "
                "(quotes, ' ;' or ' #', line breaks and edge spaces in a path cannot be written)",
                detail={"root": str(paths.root), "key": key},
            )


def _ordered(profiles: Iterable[str]) -> list[str]:
    """Validated, deduplicated, default first: the config's order does not depend on the caller's."""
    unique = {homes.validate_profile_name(p) for p in profiles}
    return sorted(unique, key=lambda p: (p != homes.DEFAULT_PROFILE, p))


@dataclass(frozen=True)
class ConfiguredProgram:
    name: str
    profile: str
    home: Path | None


def configured_programs(paths: MeshPaths) -> dict[str, ConfiguredProgram]:
    """The gateway programs in the mesh config on disk, by program name ({} without a config)."""
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
        profile = profile_of(name) if name != section else None
        if profile is None:
            continue
        try:
            # As supervisord reads it: %-expanded once, then its KEY="value" lexer.
            env = dict_of_key_value_pairs(parser.get(section, "environment", fallback="") % {})
        except (ValueError, TypeError, KeyError):
            env = {}
        home = env.get(homes.HOME_ENV)
        programs[name] = ConfiguredProgram(name, profile, Path(home) if home else None)
    return programs


def _write_config(paths: MeshPaths, profiles: Sequence[str]) -> None:
    text = render_config(paths, profiles)
    _check_config(paths, profiles, text)
    write_bytes_atomic(paths.config, text.encode("utf-8"))


# --- talking to supervisord -------------------------------------------------------------------


def _proxy(paths: MeshPaths, timeout: float) -> xmlrpc.client.ServerProxy:
    from supervisor.xmlrpc import SupervisorTransport, UnixStreamHTTPConnection

    class _Connection(UnixStreamHTTPConnection):
        # supervisor's own connection ignores the timeout: connect with it, so no call can hang.
        def connect(self) -> None:
            import socket

            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.socketfile)
            except BaseException:
                sock.close()
                raise
            self.sock = sock

    def connection() -> _Connection:
        conn = _Connection("localhost", timeout=timeout)
        conn.socketfile = str(paths.socket)
        return conn

    transport = SupervisorTransport(serverurl=paths.server_url)
    transport._get_connection = connection  # the hook SupervisorTransport builds for unix:// urls
    return xmlrpc.client.ServerProxy("http://localhost", transport=transport)


def _call(paths: MeshPaths, method: str, *args: Any, timeout: float = RPC_TIMEOUT) -> Any:
    """One XML-RPC call; supervisor's Faults pass through, a dead socket is SupervisorUnavailable."""
    try:
        return getattr(_proxy(paths, timeout), method)(*args)
    except xmlrpc.client.Fault:
        raise
    except (OSError, xmlrpc.client.ProtocolError, xmlrpc.client.ResponseError) as exc:
        raise SupervisorUnavailable(
            f"the mesh supervisor does not answer on {paths.socket}: {exc}",
            detail={"socket": str(paths.socket)},
        ) from None


def _fault_code(name: str) -> int:
    from supervisor.xmlrpc import Faults

    return getattr(Faults, name)


def _failed(what: str, fault: xmlrpc.client.Fault, **detail: Any) -> SupervisorFailed:
    return SupervisorFailed(
        f"{what}: supervisord answered {fault.faultString}",
        detail={"fault": fault.faultCode, "fault_string": fault.faultString, **detail},
    )


def _process_infos(paths: MeshPaths) -> dict[str, dict[str, Any]]:
    return {info["name"]: info for info in _call(paths, "supervisor.getAllProcessInfo")}


# --- the daemon's identity --------------------------------------------------------------------


def _recorded(paths: MeshPaths) -> dict[str, Any] | None:
    try:
        record = read_json(paths.state, default=None)
        if record is None:
            return None
        ProcessIdentity.from_dict(record)
        return record
    except (StateFileCorrupt, ValueError):
        return None  # a torn or foreign record names nobody; it is replaced on the next start


def _record(paths: MeshPaths, ident: ProcessIdentity) -> None:
    write_json_atomic(
        paths.state,
        {
            **ident.to_dict(),
            "config": str(paths.config),
            "socket": str(paths.socket),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )


def _socket_pid(paths: MeshPaths) -> ProcessIdentity | None:
    """The live supervisord answering on the mesh socket, if one does."""
    if not paths.socket.exists():
        return None
    try:
        pid = _call(paths, "supervisor.getPID", timeout=PROBE_TIMEOUT)
    except (SupervisorUnavailable, xmlrpc.client.Fault):
        return None
    ident = process_identity(pid) if isinstance(pid, int) else None
    return ident if ident is not None and is_alive(ident) else None


def _live_daemon(paths: MeshPaths, *, adopt: bool) -> ProcessIdentity | None:
    """The running mesh supervisord: the recorded identity if that very process lives, else
    whoever answers on the socket (its record was lost); ``adopt`` records the latter."""
    record = _recorded(paths)
    if record is not None:
        ident = ProcessIdentity.from_dict(record)
        if is_alive(ident):
            return ident
    found = _socket_pid(paths)
    if found is not None and adopt:
        _record(paths, found)
    return found


def _supervisord_argv(config: Path) -> list[str]:
    script = Path(sys.executable).with_name("supervisord")
    if os.access(script, os.X_OK):
        return [str(script), "-c", str(config)]
    return [sys.executable, "-m", "supervisor.supervisord", "-c", str(config)]


def _start_daemon(paths: MeshPaths) -> ProcessIdentity:
    """Start supervisord (it daemonizes: the process we run exits once the socket is bound)."""
    # A file, not a pipe: the daemon inherits our stdout until it detaches, and a pipe would
    # keep this call waiting on it.
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(
                _supervisord_argv(paths.config),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=paths.directory,
                timeout=DAEMON_START_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise SupervisorFailed(
                f"supervisord did not daemonize within {DAEMON_START_TIMEOUT:g}s", detail=_log_detail(paths)
            ) from None
        out.seek(0)
        said = out.read()[-LOG_TAIL_BYTES:].decode("utf-8", "replace").strip()
    if done.returncode != 0:
        raise SupervisorFailed(
            f"supervisord did not start (exit {done.returncode}): {said or 'no output'}",
            detail={"exit_code": done.returncode, "output": said, **_log_detail(paths)},
        )
    ident = _wait_for(lambda: _socket_pid(paths), DAEMON_START_TIMEOUT)
    if ident is None:
        raise SupervisorFailed(
            f"supervisord started but does not answer on {paths.socket}", detail=_log_detail(paths)
        )
    _record(paths, ident)
    return ident


def _log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _log_detail(paths: MeshPaths) -> dict[str, str]:
    log = paths.logs / "supervisord.log"
    return {"log": str(log), "log_tail": _log_tail(log)}


def _wait_for(check: Callable[[], Any], timeout: float) -> Any:
    """Poll ``check`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL)


# --- status -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramStatus:
    name: str
    profile: str | None
    state: str  # supervisord's state name; NOT_LOADED when configured but unknown to it
    pid: int | None
    uptime: float | None  # seconds in RUNNING
    description: str
    exit_status: int | None
    log: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "profile": self.profile,
            "state": self.state,
            "pid": self.pid,
            "uptime": self.uptime,
            "description": self.description,
            "exit_status": self.exit_status,
            "log": str(self.log),
        }


@dataclass(frozen=True)
class MeshStatus:
    paths: MeshPaths
    supervisor: ProcessIdentity | None  # None: supervisord is not running
    started_at: str | None
    problem: str | None  # running but not answering, for instance
    programs: tuple[ProgramStatus, ...]

    @property
    def running(self) -> bool:
        return self.supervisor is not None

    def program(self, name: str) -> ProgramStatus | None:
        return next((p for p in self.programs if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.paths.root),
            "config": str(self.paths.config),
            "socket": str(self.paths.socket),
            "supervisord": {
                "running": self.running,
                "pid": self.supervisor.pid if self.supervisor else None,
                "start_time": self.supervisor.start_time if self.supervisor else None,
                "started_at": self.started_at,
                "problem": self.problem,
            },
            "programs": [p.to_dict() for p in self.programs],
        }


def status(root: Path) -> MeshStatus:
    """What the mesh supervisor of ``root`` runs; changes nothing."""
    _require_supervisor()
    paths = mesh_paths(root)
    return _status(paths, _live_daemon(paths, adopt=False))


def _status(paths: MeshPaths, daemon: ProcessIdentity | None) -> MeshStatus:
    configured = configured_programs(paths)
    record = _recorded(paths)
    started_at = record.get("started_at") if record and daemon and record.get("pid") == daemon.pid else None
    if daemon is None:
        programs = [_absent(paths, p, "STOPPED", "supervisord is not running") for p in configured.values()]
        return MeshStatus(paths, None, None, None, tuple(programs))
    try:
        infos = _process_infos(paths)
    except (SupervisorUnavailable, xmlrpc.client.Fault) as exc:
        problem = exc.message if isinstance(exc, HermesError) else exc.faultString
        programs = [_absent(paths, p, "UNKNOWN", "supervisord does not answer") for p in configured.values()]
        return MeshStatus(paths, daemon, started_at, problem, tuple(programs))
    programs = [_from_info(paths, info) for info in infos.values()]
    programs += [
        _absent(paths, p, "NOT_LOADED", "in the config but not loaded; run `hermes mesh up`")
        for name, p in configured.items()
        if name not in infos
    ]
    return MeshStatus(paths, daemon, started_at, None, tuple(sorted(programs, key=lambda p: p.name)))


def _absent(paths: MeshPaths, program: ConfiguredProgram, state: str, why: str) -> ProgramStatus:
    return ProgramStatus(program.name, program.profile, state, None, None, why, None, paths.program_log(program.name))


def _from_info(paths: MeshPaths, info: dict[str, Any]) -> ProgramStatus:
    name = info["name"]
    running = info["statename"] == "RUNNING"
    return ProgramStatus(
        name=name,
        profile=profile_of(name),
        state=info["statename"],
        pid=info["pid"] or None,
        uptime=float(info["now"] - info["start"]) if running and info["start"] else None,
        description=info.get("description", ""),
        exit_status=info.get("exitstatus") if info["statename"] in ("EXITED", "FATAL", "BACKOFF") else None,
        log=Path(info.get("stdout_logfile") or paths.program_log(name)),
    )


# --- up ---------------------------------------------------------------------------------------

Progress = Callable[[Mapping[str, str], float], None]


def up(root: Path, profiles: Sequence[str] | None = None, *, progress: Progress | None = None) -> MeshStatus:
    """Run a gateway for each of ``profiles`` (default: every profile) under the mesh supervisor.

    Starts supervisord if it is not running, otherwise applies the new config to it (added
    programs start, removed ones stop). Waits, bounded, until every program is RUNNING; raises
    GatewayStartFailed naming those that are not, with their log tails.
    """
    _require_supervisor()
    paths = mesh_paths(root)
    chosen = _ordered(homes.list_profiles(paths.root) if profiles is None else profiles)
    for profile in chosen:
        homes.profile_home(profile, paths.root, must_exist=True)
    _prepare(paths)
    with locked(paths.state, timeout=LOCK_TIMEOUT):
        _write_config(paths, chosen)
        daemon = _live_daemon(paths, adopt=True)
        if daemon is None:
            # Gateways a killed supervisord left behind hold their endpoints: stop them first.
            _stop_orphans(paths, _leftover_gateways(paths))
            daemon = _start_daemon(paths)
        else:
            _apply_config(paths)
            _start_stopped(paths, [unit_name(p) for p in chosen])
    _wait_running(paths, [unit_name(p) for p in chosen], START_TIMEOUT, progress)
    return _status(paths, daemon)


def _apply_config(paths: MeshPaths) -> None:
    """What ``supervisorctl update`` does, over XML-RPC: reload, then add/replace/remove groups."""
    try:
        added, changed, removed = _call(paths, "supervisor.reloadConfig")[0]
        for name in [*changed, *removed]:
            _stop_program(paths, name)
            _call(paths, "supervisor.removeProcessGroup", name)
        for name in [*changed, *added]:
            _call(paths, "supervisor.addProcessGroup", name)  # autostart starts it
    except xmlrpc.client.Fault as fault:
        raise _failed("supervisord could not apply the mesh config", fault, config=str(paths.config)) from None


def _start_stopped(paths: MeshPaths, names: Sequence[str]) -> None:
    infos = _process_infos(paths)
    for name in names:
        if infos.get(name, {}).get("statename") in ("STOPPED", "EXITED", "FATAL"):
            _start_program(paths, name)


def _start_program(paths: MeshPaths, name: str) -> None:
    try:
        _call(paths, "supervisor.startProcess", name, False)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode != _fault_code("ALREADY_STARTED"):
            raise _failed(f"supervisord could not start {name}", fault, program=name) from None


def _stop_program(paths: MeshPaths, name: str) -> None:
    """Stop ``name`` and wait (bounded) until supervisord has it stopped; not loaded is stopped."""
    try:
        _call(paths, "supervisor.stopProcess", name, False)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode == _fault_code("BAD_NAME"):
            return
        if fault.faultCode != _fault_code("NOT_RUNNING"):
            raise _failed(f"supervisord could not stop {name}", fault, program=name) from None
    done = _wait_for(
        lambda: _process_infos(paths).get(name, {}).get("statename") in (None, "STOPPED", "EXITED", "FATAL"),
        STOP_TIMEOUT,
    )
    if not done:
        raise SupervisorFailed(f"{name} did not stop within {STOP_TIMEOUT:g}s", detail={"program": name})


def _wait_running(paths: MeshPaths, names: Sequence[str], timeout: float, progress: Progress | None) -> None:
    started = time.monotonic()
    deadline = started + timeout
    while True:
        infos = _process_infos(paths)
        states = {name: infos.get(name, {}).get("statename", "NOT_LOADED") for name in names}
        if progress is not None:
            progress(states, time.monotonic() - started)
        # FATAL is final (retries used up); anything else may still become RUNNING.
        settled = all(s in ("RUNNING", "FATAL") for s in states.values())
        if all(s == "RUNNING" for s in states.values()):
            return
        if settled or time.monotonic() >= deadline:
            failed = [n for n, s in states.items() if s != "RUNNING"]
            raise _start_failure(paths, failed, states, infos, timeout)
        time.sleep(POLL)


def _start_failure(
    paths: MeshPaths, failed: list[str], states: Mapping[str, str], infos: Mapping[str, Any], timeout: float
) -> GatewayStartFailed:
    details = []
    lines = []
    for name in failed:
        log = paths.program_log(name)
        tail = _log_tail(log)
        description = infos.get(name, {}).get("description", "")
        details.append({"name": name, "profile": profile_of(name), "state": states[name], "description": description,
                        "log": str(log), "log_tail": tail})
        last = "\n".join("    " + line for line in tail.splitlines()[-10:]) or "    (log is empty)"
        lines.append(f"  {name}: {states[name]} {description}\n  last lines of {log}:\n{last}")
    return GatewayStartFailed(
        f"{len(failed)} gateway(s) did not reach RUNNING within {timeout:g}s:\n" + "\n".join(lines),
        detail={"programs": details},
    )


# --- down -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownReport:
    supervisor: ProcessIdentity | None  # the supervisord that was stopped, if one ran
    programs: tuple[str, ...]  # programs that were running under it
    orphans: tuple[int, ...]  # gateways of a dead supervisord, stopped by signal
    killed: tuple[int, ...]  # pids that did not stop in time and got SIGKILL

    def to_dict(self) -> dict[str, Any]:
        return {
            "supervisord": self.supervisor.to_dict() if self.supervisor else None,
            "programs": list(self.programs),
            "orphans": list(self.orphans),
            "killed": list(self.killed),
        }


def down(root: Path) -> DownReport:
    """Stop supervisord and every gateway it ran; return only once none of them is alive."""
    _require_supervisor()
    paths = mesh_paths(root)
    if not paths.directory.is_dir():
        return DownReport(None, (), (), ())
    with locked(paths.state, timeout=LOCK_TIMEOUT):
        daemon = _live_daemon(paths, adopt=False)
        children: dict[str, ProcessIdentity] = {}
        killed: list[int] = []
        if daemon is not None:
            children = _running_children(paths)
            try:
                _call(paths, "supervisor.shutdown")
            except (SupervisorUnavailable, xmlrpc.client.Fault):
                _signal(daemon, signal.SIGTERM, group=False)  # supervisord shuts down on SIGTERM too
            if not _wait_for(lambda: not is_alive(daemon), DOWN_TIMEOUT):
                killed += _kill(daemon, group=False)
        # supervisord kills its groups after stopwaitsecs; anything still here escaped that.
        for ident in children.values():
            if is_alive(ident):
                killed += _kill(ident, group=True)
        orphans = _leftover_gateways(paths)
        killed += _stop_orphans(paths, orphans)
        paths.state.unlink(missing_ok=True)
        if paths.socket.parent != paths.directory:
            try:
                paths.socket.parent.rmdir()  # the /tmp fallback dir, once supervisord removed its socket
            except OSError:
                pass
    return DownReport(daemon, tuple(sorted(children)), tuple(o.pid for o in orphans), tuple(killed))


def _running_children(paths: MeshPaths) -> dict[str, ProcessIdentity]:
    try:
        infos = _process_infos(paths)
    except (SupervisorUnavailable, xmlrpc.client.Fault):
        return {}
    out: dict[str, ProcessIdentity] = {}
    for name, info in infos.items():
        ident = process_identity(info["pid"]) if info.get("pid") else None
        if ident is not None:
            out[name] = ident
    return out


def _leftover_gateways(paths: MeshPaths) -> list[ProcessIdentity]:
    """Live gateways that a supervisord on this mesh's socket started, found by their endpoint
    locks in every profile home (never by a process scan): supervisord tells each child its
    server url and program name, so a gateway of any other supervisor is never picked."""
    found = []
    for profile in homes.list_profiles(paths.root):
        home = homes.profile_home(profile, paths.root)
        try:
            lock = probe(homes.endpoint(home, "gateway", create=False).lock_path)
        except (homes.EndpointPathTooLong, OSError):
            continue  # a home whose run dir is missing or broken has no gateway holding it
        holder = lock.holder if lock.held else None
        if holder is None or not is_alive(holder):
            continue
        env = _environ(holder.pid)
        if env.get("SUPERVISOR_SERVER_URL") == paths.server_url and env.get("SUPERVISOR_PROCESS_NAME") == unit_name(
            profile
        ):
            found.append(holder)
    return found


def _environ(pid: int) -> dict[str, str]:
    import psutil

    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return {}


def _stop_orphans(paths: MeshPaths, orphans: Sequence[ProcessIdentity]) -> list[int]:
    """SIGTERM (the gateway drains), wait as supervisord would, then SIGKILL; returns the killed."""
    for ident in orphans:
        _signal(ident, signal.SIGTERM, group=True)
    _wait_for(lambda: not any(is_alive(i) for i in orphans), STOP_WAIT_SECS)
    killed: list[int] = []
    for ident in orphans:
        if is_alive(ident):
            killed += _kill(ident, group=True)
    return killed


def _kill(ident: ProcessIdentity, *, group: bool) -> list[int]:
    _signal(ident, signal.SIGKILL, group=group)
    _wait_for(lambda: not is_alive(ident), 5.0)
    return [ident.pid]


def _signal(ident: ProcessIdentity, signum: int, *, group: bool) -> None:
    # Checked right before sending, so a recycled pid is never signalled.
    if not is_alive(ident):
        return
    try:
        if group and os.getpgid(ident.pid) == ident.pid:
            os.killpg(ident.pid, signum)  # supervisord made each program its group's leader
        else:
            os.kill(ident.pid, signum)
    except ProcessLookupError:
        pass


# --- the kind API: `hermes gateway install|start|stop|restart` ----------------------------------


def _root_of(profile: str, home: Path) -> Path | None:
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
    _require_supervisor()
    if scope != "user":
        raise UnsupportedScope(
            "the supervisord kind is the install's own mesh supervisor; it has no system scope",
            detail={"scope": scope},
        )
    root = _root_of(profile, home)
    if root is None:
        raise homes.ProfileNotFound(f"{home} is not the home of profile {profile!r}", detail={"name": profile})
    homes.profile_home(profile, root, must_exist=True)
    paths = mesh_paths(root)
    _prepare(paths)
    with locked(paths.state, timeout=LOCK_TIMEOUT):
        present = [p.profile for p in configured_programs(paths).values()]
        _write_config(paths, [*present, profile])
    return _unit(paths, profile)


def find(profile: str, home: Path) -> Unit | None:
    """The mesh program of ``profile`` if this install's mesh config runs it with HERMES_HOME = ``home``."""
    root = _root_of(profile, home)
    if root is None:
        return None
    paths = mesh_paths(root)
    if not paths.config.exists():
        return None  # no mesh here: asking needs no supervisor package
    _require_supervisor()
    program = configured_programs(paths).get(unit_name(profile))
    if program is None or program.home is None:
        return None
    if os.path.normpath(program.home) != os.path.normpath(Path(home).absolute()):
        return None
    return _unit(paths, profile)


def _unit(paths: MeshPaths, profile: str) -> Unit:
    return Unit(
        kind=KIND,
        name=unit_name(profile),
        profile=profile,
        home=homes.profile_home(profile, paths.root),
        path=paths.config,
    )


def _unit_paths(unit: Unit) -> MeshPaths:
    _require_supervisor()
    root = _root_of(unit.profile, unit.home)
    if root is None or unit.kind != KIND:
        raise ValueError(f"{unit} is not a unit of the mesh supervisor")
    paths = mesh_paths(root)
    if _live_daemon(paths, adopt=False) is None:
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
        _call(paths, "supervisor.getProcessInfo", unit.name)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode != _fault_code("BAD_NAME"):
            raise _failed(f"supervisord could not report {unit.name}", fault, program=unit.name) from None
        _load(paths, unit.name)
    _start_program(paths, unit.name)
    _wait_running(paths, [unit.name], START_TIMEOUT, None)


def _load(paths: MeshPaths, name: str) -> None:
    try:
        _call(paths, "supervisor.reloadConfig")
        _call(paths, "supervisor.addProcessGroup", name)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode == _fault_code("BAD_NAME"):
            raise SupervisorFailed(
                f"{name} is not in the mesh config {paths.config}; "
                "run `hermes gateway install --supervisor supervisord` first",
                detail={"program": name},
            ) from None
        if fault.faultCode != _fault_code("ALREADY_ADDED"):
            raise _failed(f"supervisord could not load {name}", fault, program=name) from None


def stop(unit: Unit) -> None:
    """Stop the unit's program (the gateway drains on SIGTERM) and wait, bounded, until it is down."""
    _stop_program(_unit_paths(unit), unit.name)


def restart(unit: Unit) -> None:
    """Stop, then start: supervisord has no restart call, and a stop waits for the drain."""
    stop(unit)
    start(unit)
