"""Where every process's files are: the root home, profile homes, the private ``run/`` dir
and the IPC endpoints inside it.

Profile operations are anchored on the root home whichever profile is active, so
``hermes -p coder profile list`` sees every profile. Which root and profile the environment
names is ``shared.home_env``'s to say; this module is the rest of home resolution.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from shared.errors import HermesError, HomeError
from shared.files import rename_noreplace
from shared.home_env import DEFAULT_PROFILE, HOME_ENV, PROFILE_NAME, is_named_profile, resolve, root_home
from shared.mesh_tcp import TcpAddress, tcp_address

__all__ = [
    "DEFAULT_PROFILE",
    "HOME_ENV",
    "IPC_PATH_MAX",
    "PROFILE_NAME_RE",
    "RUN_DIR_MODE",
    "SERVICES",
    "Endpoint",
    "EndpointPathTooLong",
    "InvalidProfileName",
    "ProfileNotFound",
    "RunDirStatus",
    "UnsafeRunDir",
    "active_home",
    "active_profile",
    "check_run_dir",
    "create_profile",
    "endpoint",
    "ensure_home",
    "ensure_run_dir",
    "list_profiles",
    "make_private_dirs",
    "parse_served",
    "profile_home",
    "profiles_dir",
    "root_home",
    "run_dir_fits",
    "service_home",
    "validate_profile_name",
]

PROFILE_NAME_RE = re.compile(rf"^{PROFILE_NAME}$")
RUN_DIR_MODE = 0o700
# Longest socket path the kernel accepts: sizeof(sockaddr_un.sun_path) minus the NUL.
IPC_PATH_MAX = 107 if sys.platform.startswith("linux") else 103

# Service name -> the home it is bound in: one per profile, or one per install (the root).
SERVICES: dict[str, str] = {
    "gateway": "profile",
    "updater": "root",
    "auth_worker": "root",
    "handoff_retry": "root",
    "hook_reporter": "root",
    "gateway_host": "root",
}


class ProfileError(HermesError, family=True):
    """A profile: its name, its home, creating, renaming or deleting it, and which one runs."""


class InvalidProfileName(ProfileError):
    code = "invalid_profile_name"


class ProfileNotFound(ProfileError):
    code = "profile_not_found"


class ProfileReserved(ProfileError):
    """The default profile is the root home: it is never created, renamed to or from, or deleted."""

    code = "profile_reserved"


class InvalidServedSet(ProfileError):
    code = "invalid_served_profiles"


class UnsafeRunDir(HomeError):
    code = "unsafe_run_dir"


class EndpointPathTooLong(HomeError):
    code = "ipc_path_too_long"


# --- profiles -----------------------------------------------------------------------------


def validate_profile_name(name: object) -> str:
    """Return ``name`` if it is a valid profile name (``"default"`` included)."""
    # fullmatch, because "$" alone would also accept a trailing newline.
    if not isinstance(name, str) or not PROFILE_NAME_RE.fullmatch(name):
        raise InvalidProfileName(
            f"invalid profile name {name!r}: use 1-64 of a-z, 0-9, '_' and '-', starting with a letter or digit",
            detail={"name": name if isinstance(name, str) else repr(name)},
        )
    return name


MAX_SERVED = 256


def parse_served(text: object) -> tuple[str, ...]:
    """The profiles ``--serve A,B,...`` names for one multiplex gateway: ``default`` first, then
    sorted, so every spelling of one set is one set. Empty entries, a repeated name or more
    than ``MAX_SERVED`` raise InvalidServedSet; a bad name raises InvalidProfileName."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidServedSet("--serve needs at least one profile name (A,B,...)", detail={"served": repr(text)})
    names = [name.strip() for name in text.split(",")]
    if len(names) > MAX_SERVED:
        raise InvalidServedSet(f"--serve names {len(names)} profiles; at most {MAX_SERVED}", detail={})
    for name in names:
        if not name:
            raise InvalidServedSet(f"--serve {text!r} has an empty entry", detail={"served": text})
        validate_profile_name(name)
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise InvalidServedSet(f"--serve names {', '.join(twice)} more than once", detail={"repeated": twice})
    return tuple(sorted(names, key=profile_order))


def profile_order(name: str) -> tuple[bool, str]:
    """The order profiles are listed and served in: ``default`` first, then by name."""
    return name != DEFAULT_PROFILE, name


def active_profile(env: Mapping[str, str] | None = None) -> str:
    """The profile ``$HERMES_HOME`` points at; ``"default"`` for the root home."""
    return resolve(env)[1]


def active_home(env: Mapping[str, str] | None = None) -> Path:
    """The home of the active profile (the root home for the default profile)."""
    root, profile = resolve(env)
    return profile_home(profile, root)


def profiles_dir(root: Path) -> Path:
    return Path(root) / "profiles"


def profile_home(name: str, root: Path | None = None, *, must_exist: bool = False) -> Path:
    """The home of profile ``name``; with ``must_exist`` a missing named profile raises ProfileNotFound."""
    validate_profile_name(name)
    root = root_home() if root is None else Path(root)
    if name == DEFAULT_PROFILE:
        return root
    home = profiles_dir(root) / name
    if must_exist and not home.is_dir():
        raise ProfileNotFound(f"no profile named {name!r} in {root}", detail={"name": name})
    return home


def create_profile(root: Path, name: str, *, fill: Callable[[Path], object] | None = None) -> Path:
    """Make the home of named profile ``name`` under ``root``, with its ``run/`` and ``logs/``
    (and, on a new machine, the root home): every directory it makes 0700, whatever the umask.
    FileExistsError when it exists: of two creators exactly one wins.

    With ``fill`` (which puts files in a home) the home appears whole or not at all: it is
    built under a hidden name in ``profiles/`` (never listed as a profile), filled, then
    renamed into place, never over a home that is there; whatever fails, the hidden one goes."""
    validate_profile_name(name)
    if name == DEFAULT_PROFILE:
        raise ValueError("the default profile is the root home itself: it is never created")
    home = profile_home(name, root)
    ensure_home(profiles_dir(root))  # on a new machine, the root home is made here too
    if fill is None:
        if not _make_private_dir(home):  # the one mkdir is atomic
            raise FileExistsError(errno.EEXIST, "the profile's home exists", str(home))
        _furnish(home)
        return home
    if os.path.lexists(home):  # before anything is copied; the rename below checks again
        raise FileExistsError(errno.EEXIST, "the profile's home exists", str(home))
    staging = profiles_dir(root) / f".creating-{name}-{os.urandom(4).hex()}"
    _make_private_dir(staging)
    try:
        _furnish(staging)
        fill(staging)
        rename_noreplace(staging, home)
    except BaseException:
        import shutil  # a creation that failed: a status command never gets here

        shutil.rmtree(staging, ignore_errors=True)
        raise
    return home


def _furnish(home: Path) -> None:
    ensure_run_dir(home)
    _make_private_dir(home / "logs")


def list_profiles(root: Path | None = None) -> list[str]:
    """``"default"`` first, then the named profiles present under ``profiles/``, sorted."""
    root = root_home() if root is None else Path(root)
    try:
        entries = list(os.scandir(profiles_dir(root)))
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    named = sorted(e.name for e in entries if is_named_profile(e.name) and e.is_dir())
    return [DEFAULT_PROFILE, *named]


def service_home(service: str, env: Mapping[str, str] | None = None) -> Path:
    """The home a service binds in: the active profile's for per-profile services, else the root."""
    scope = _service_scope(service)
    return active_home(env) if scope == "profile" else root_home(env)


def _service_scope(service: str) -> str:
    try:
        return SERVICES[service]
    except KeyError:
        raise ValueError(f"unknown service {service!r}; known: {', '.join(SERVICES)}") from None


# --- the private run directory --------------------------------------------------------------


class RunDirStatus(NamedTuple):
    path: Path
    exists: bool
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.exists and not self.problems


def _private_dir_status(path: Path) -> RunDirStatus:
    # lstat, so that a symlink is judged as itself and never followed somewhere else.
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return RunDirStatus(path, exists=False, problems=())
    if stat.S_ISLNK(st.st_mode):
        return RunDirStatus(path, exists=True, problems=("is a symlink",))
    if not stat.S_ISDIR(st.st_mode):
        return RunDirStatus(path, exists=True, problems=("is not a directory",))
    problems: list[str] = []
    euid = os.geteuid()
    if st.st_uid != euid:
        problems.append(f"is owned by uid {st.st_uid}, not {euid}")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        problems.append(f"has mode {mode:04o}: group or others have access (expected {RUN_DIR_MODE:04o})")
    return RunDirStatus(path, exists=True, problems=tuple(problems))


def _make_private_dir(path: Path) -> bool:
    """Make directory ``path`` 0700 whatever the umask; False when something is there already."""
    try:
        os.mkdir(path, RUN_DIR_MODE)
    except FileExistsError:
        return False
    # Only a directory we just made is ours to set: the umask may have removed owner bits.
    os.chmod(path, RUN_DIR_MODE)
    return True


def _ensure_private_dir(path: Path) -> Path:
    _make_private_dir(path)  # an existing directory is judged below, never repaired
    status = _private_dir_status(path)
    if not status.exists:  # removed between mkdir and lstat
        raise UnsafeRunDir(f"refusing to use {path}: it vanished", detail={"path": str(path)})
    return _refuse_unsafe(status)


def _checked_private_dir(path: Path, *, create: bool) -> Path:
    """``path`` for a service (``create``: made if missing, then checked) or a client (checked
    only if present: an absent dir means nothing listens there). Whoever could write into a dir
    that is not private could have put any socket there, so neither uses one."""
    return _ensure_private_dir(path) if create else _refuse_unsafe(_private_dir_status(path))


def _refuse_unsafe(status: RunDirStatus) -> Path:
    if status.problems:
        raise UnsafeRunDir(
            f"refusing to use {status.path}: it {'; it '.join(status.problems)}",
            detail={"path": str(status.path), "problems": list(status.problems)},
        )
    return status.path


def ensure_home(home: Path) -> Path:
    """Make ``home`` if it is missing, as every process that writes into a home does first."""
    return make_private_dirs(home)


def make_private_dirs(path: Path) -> Path:
    """Make directory ``path`` and each missing parent 0700, whatever the umask: a home and what
    is made in it are private. An existing directory is used as it is; NotADirectoryError
    naming the first entry on the way that is something else."""
    path = Path(path)
    if path.is_dir():
        return path
    if path.parent != path:
        make_private_dirs(path.parent)
    if not _make_private_dir(path) and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    return path


def ensure_run_dir(home: Path) -> Path:
    """Create ``home/run`` (0700) if needed and check it is private; raise UnsafeRunDir if not."""
    return _ensure_private_dir(ensure_home(home) / "run")


def check_run_dir(home: Path) -> RunDirStatus:
    """The state of ``home/run`` without creating or changing anything (for ``hermes doctor``)."""
    return _private_dir_status(Path(home) / "run")


# --- endpoints ----------------------------------------------------------------------------------


class Endpoint(NamedTuple):
    service: str
    directory: Path
    control: str  # ROUTER, "ipc://<directory>/<service>.ctl", or where clients connect on TCP
    events: str  # PUB, "ipc://<directory>/<service>.pub", or where subscribers connect on TCP
    lock_path: Path
    fallback: bool  # True when the home is too deep for a socket path and a short dir is used
    key_name: str = ""  # "updater", "gateway" (default profile), "gateway@coder": its TCP and CURVE name
    root: Path = Path()  # the install's root home, which holds its CURVE keys
    tcp: TcpAddress | None = None  # set when the service is on TCP (and so CURVE)
    host: str = ""  # another host's (``shared.mesh_hosts``), whose keys this home trusts apart; "" here

    @property
    def bind_control(self) -> str:
        return self.control if self.tcp is None else self.tcp.bind_control

    @property
    def bind_events(self) -> str:
        return self.events if self.tcp is None else self.tcp.bind_events


def endpoint(
    home: Path,
    service: str,
    *,
    create: bool = True,
    env: Mapping[str, str] | None = None,
) -> Endpoint:
    """Where ``service`` of ``home`` binds. With ``create`` the directory is made and checked;
    without, a directory that is there is checked all the same (UnsafeRunDir if not private).

    A service named in the TCP settings (``shared.mesh_tcp``) binds there instead of its ipc
    sockets; its lock stays in the run directory."""
    home = Path(home).absolute()
    root, profile = _root_and_profile(home)
    name = service if profile == DEFAULT_PROFILE or SERVICES.get(service) == "root" else f"{service}@{profile}"
    found = _ipc_endpoint(home, service, create=create, env=env, key_name=name, root=root)
    tcp = tcp_address(root, name, env)
    if tcp is None:
        return found
    return found._replace(control=tcp.control, events=tcp.events, tcp=tcp)


def _root_and_profile(home: Path) -> tuple[Path, str]:
    if home.parent.name == "profiles" and is_named_profile(home.name):
        return home.parent.parent, home.name
    return home, DEFAULT_PROFILE


def _ipc_endpoint(
    home: Path, service: str, *, create: bool, env: Mapping[str, str] | None, key_name: str, root: Path
) -> Endpoint:
    _service_scope(service)
    run = home / "run"
    if _sockets_fit(run, service):
        if create:
            ensure_home(home)
        directory = _checked_private_dir(run, create=create)
        return _endpoint_in(directory, service, fallback=False, key_name=key_name, root=root)

    digest = _home_digest(home)
    bases = _fallback_bases(os.environ if env is None else env)
    for base in bases:
        directory = base / digest
        if _sockets_fit(directory, service):
            _checked_private_dir(base, create=create)
            _checked_private_dir(directory, create=create)
            return _endpoint_in(directory, service, fallback=True, key_name=key_name, root=root)
    raise EndpointPathTooLong(
        f"no IPC path for {service} of {home} fits in {IPC_PATH_MAX} bytes, "
        f"not even under {' or '.join(str(b) for b in bases)}",
        detail={"home": str(home), "service": service},
    )


def _endpoint_in(directory: Path, service: str, *, fallback: bool, key_name: str, root: Path) -> Endpoint:
    # Spelled as strings: a discovery builds one endpoint per profile, and Path joins by the
    # hundred were most of its own time.
    return Endpoint(
        service=service,
        directory=directory,
        control=f"ipc://{directory}/{service}.ctl",
        events=f"ipc://{directory}/{service}.pub",
        lock_path=directory / f"{service}.lock",
        fallback=fallback,
        key_name=key_name,
        root=root,
    )


def run_dir_fits(home: Path, service: str) -> bool:
    """Whether ``service`` of ``home`` binds in the home's own ``run/`` (else in a short
    fallback dir): pure, from the path's length alone."""
    return _sockets_fit(Path(home).absolute() / "run", service)


def _sockets_fit(directory: Path, service: str) -> bool:
    return all(len(os.fsencode(f"{directory}/{service}{suffix}")) <= IPC_PATH_MAX for suffix in (".ctl", ".pub"))


def _home_digest(home: Path) -> str:
    import hashlib  # a home too deep for its sockets' paths is rare: a status command loads no more

    # Resolved, so every spelling of one home agrees on one fallback dir, as they do on home/run.
    return hashlib.sha256(os.fsencode(os.path.realpath(home))).hexdigest()[:16]


def _fallback_bases(env: Mapping[str, str]) -> list[Path]:
    bases: list[Path] = []
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        bases.append(Path(runtime) / "hermes")
    bases.append(Path("/tmp") / f"hermes-{os.geteuid()}")
    return bases
