"""The install's CURVE keys, under ``<root>/mesh/curve``.

    server/<name>.key_secret    a service's secret key (``updater``, ``gateway``, ``gateway@coder``)
    client.key_secret           this install's client secret key
    authorized/<name>.key       client public keys this install's services accept
    authorized/<name>.grants    the ops such a key may call beyond the read-only ones, one a line
    servers/<name>.key          server public keys this install's clients trust
    hosts/<host>/<name>.key     server public keys trusted for another host's services
                                (``shared.mesh_hosts``): one set per host, never replaced

A key file is one line: the key as 40 characters of Z85. Public halves are derived from the
secret ones where they are needed; only public keys ever leave this module as text. Anything
looser than the rules below is refused (``curve_key_unsafe``, naming the path), never repaired,
so a key another user could have read or swapped is never used.

An ordinary store, which ``hermes mesh keys init`` makes: every directory is 0700 and every
file 0600, owned by us and not a symlink.

A kubelet volume (a Kubernetes Secret or projected volume mounted at the store), recognised by
its ``..data`` symlink, which the kubelet's writer makes in every such volume and reserves (no
key of a Secret may be named ``..data``, and ``keys init`` never makes it). Its layout is the
writer's: the real files in a timestamped dir ``..<date>.<n>/``, ``..data`` a link to it, and
each top entry (``server``, ``client.key_secret``, ...) a link ``NAME -> ..data/NAME``; all of
it root's, files of the pod's ``fsGroup`` with the volume's ``defaultMode``. So there:

- every link is followed by hand, and must be root's or ours and stay inside the mount dir:
  a link whose target leaves it (absolute elsewhere, or ``..`` past the mount) is refused;
- the mount dir is root's or ours, and writable by others only with the sticky bit (the
  kubelet's tmpfs is 1777: others could add a name, never replace root's); every dir below
  it is root's or ours and writable by no one else; ``mesh/`` above it may be root's (the
  container engine makes a mount point's missing parents) but writable by no one else;
- a key file is opened without following a link, and judged by ``fstat`` of what was opened:
  a regular file, root's or ours, writable by no one but its owner, readable by no others,
  and readable by its group only when that group is one of ours (``defaultMode: 0440`` and
  the pod's ``fsGroup``).

Anything else (a link owned by another user, a key of mode 0644 or 0660, a group we are not
in) is refused as in an ordinary store. A kubelet volume is read-only: a command that would
write a key there is refused, naming the Secret as the place to change it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable
from pathlib import Path

import zmq

from shared import homes, mesh_hosts
from shared.errors import TransportError
from shared.files import SECRET_MODE, locked, write_bytes_atomic

DIR_MODE = 0o700
KEY_LENGTH = 40
# A service's key name (``gateway@coder`` for a profile's gateway) or an authorized client's name.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}(@[a-z0-9][a-z0-9_-]{0,63})?")
_Z85 = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")
# Where other hosts' server keys are, one directory per host.
HOSTS = "hosts"
# The name init authorizes this install's own client under.
LOCAL_CLIENT = "local"
# Where the old client key stays authorized while a rotation is under way.
_PREVIOUS_CLIENT = "local-previous"
# The names this install's own client keys are authorized under: the home's owner's.
OWN_CLIENTS = frozenset({LOCAL_CLIENT, _PREVIOUS_CLIENT})
# A grant names one op of one service: ``gateway.drain``, ``operator_sim.session.new``.
GRANT_RE = re.compile(r"[a-z0-9_]{1,64}\.[a-z0-9_.]{1,64}")
# A grants file is read up to this: far more than every op of every service.
_GRANTS_MAX_BYTES = 16 * 1024
# How long a rotation keeps the old client key: a client reads its key just before it connects.
ROTATION_GRACE = 5.0
MAX_ROTATION_GRACE = 60.0
# How long a rotation waits for one in progress, which holds its lock for its grace and no more.
ROTATION_LOCK_WAIT = MAX_ROTATION_GRACE + 10.0


class CurveKeyInvalid(TransportError):
    code = "curve_key_invalid"


class CurveKeyUnsafe(TransportError):
    code = "curve_key_unsafe"


class CurveKeyMissing(TransportError):
    code = "curve_key_missing"


class CurveKeyUnknown(TransportError):
    code = "curve_key_unknown"


class CurveKeyConflict(TransportError):
    """A host's service already trusted under another key: an import adds, never replaces."""

    code = "curve_key_conflict"


def store(root: Path) -> Path:
    return Path(root) / "mesh" / "curve"


def validate_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise CurveKeyInvalid(
            f"invalid key name {name!r}: use a-z, 0-9, '_' and '-' (and one '@profile')",
            detail={"name": name if isinstance(name, str) else repr(name)},
        )
    return name


def validate_key(text: object, *, what: str = "key") -> bytes:
    """A Z85 key of exactly 40 characters, as bytes (surrounding whitespace allowed)."""
    raw = text.strip() if isinstance(text, (str, bytes)) else None
    if isinstance(raw, bytes):
        raw = raw.decode("ascii", "replace")
    if raw is None or not _Z85.fullmatch(raw):
        raise CurveKeyInvalid(f"the {what} is not a {KEY_LENGTH}-character Z85 CURVE key")
    return raw.encode("ascii")


# --- reading, with the safety checks ------------------------------------------------------------

# The link the kubelet's writer makes in every Secret, ConfigMap or projected volume.
KUBELET_DATA = "..data"
# Links followed on one path: the kubelet's layout needs two (``server``, then ``..data``).
_MAX_LINKS = 8
_ROOT_UID = 0


def _unsafe(path: Path, problem: str) -> CurveKeyUnsafe:
    return CurveKeyUnsafe(f"refusing to use {path}: it {problem}", detail={"path": str(path)})


def _owner_problem(st: os.stat_result, *, kubelet: bool) -> str | None:
    if st.st_uid == os.geteuid() or (kubelet and st.st_uid == _ROOT_UID):
        return None
    return f"is owned by uid {st.st_uid}"


def _dir_problem(st: os.stat_result, *, kubelet: bool, mount: bool = False) -> str | None:
    """What is wrong with a directory of the store (no I/O): see the module's rules."""
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if owner := _owner_problem(st, kubelet=kubelet):
        return owner
    if not kubelet and mode & 0o077:
        return f"has mode {mode:04o} (expected {DIR_MODE:04o})"
    if kubelet and mode & 0o022 and not (mount and mode & stat.S_ISVTX):
        return f"has mode {mode:04o}: others may change what is in it"
    return None


def _file_problem(st: os.stat_result, *, kubelet: bool, groups: frozenset[int]) -> str | None:
    """What is wrong with a key file, judged on what was opened (no I/O): see the module's rules."""
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if owner := _owner_problem(st, kubelet=kubelet):
        return owner
    if not kubelet and mode & 0o077:
        return f"has mode {mode:04o} (expected {SECRET_MODE:04o})"
    if mode & 0o022:
        return f"has mode {mode:04o}: others may write it"
    if mode & 0o004:
        return f"has mode {mode:04o}: anyone may read it"
    if mode & 0o040 and st.st_gid not in groups:
        return f"has mode {mode:04o}: group {st.st_gid}, not one of ours, may read it"
    return None


def _our_groups() -> frozenset[int]:
    return frozenset([os.getegid(), *os.getgroups()])


def _check(path: Path, *, directory: bool) -> os.stat_result | None:
    """lstat ``path`` of an ordinary store and refuse anything looser than private; None when
    it does not exist."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if directory:
        problem = _dir_problem(st, kubelet=False)
    else:
        problem = "is a symlink" if stat.S_ISLNK(st.st_mode) else _file_problem(st, kubelet=False, groups=frozenset())
    if problem:
        raise _unsafe(path, problem)
    return st


def _kubelet_mount(top: Path) -> Path | None:
    """``top`` when the store is a kubelet volume (its ``..data`` is a link), else None."""
    try:
        return top if stat.S_ISLNK(os.lstat(top / KUBELET_DATA).st_mode) else None
    except OSError:
        return None


def _resolve(mount: Path, path: Path) -> Path:
    """``path`` (inside the kubelet volume at ``mount``) with every link on it followed by
    hand, each one checked, and every directory passed through checked; CurveKeyUnsafe naming
    ``path`` when a link leads out of the mount. A missing entry ends the walk: the path is
    returned as it is, for the open that follows to find missing."""
    pending = list(path.relative_to(mount).parts)
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not done:
                raise _unsafe(path, f"leads out of its kubelet volume {mount}")
            done.pop()
            continue
        here = mount.joinpath(*done, part)
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            return mount.joinpath(*done, part, *pending)
        if stat.S_ISLNK(st.st_mode):
            if owner := _owner_problem(st, kubelet=True):
                raise _unsafe(path, f"passes a link {here} that {owner}")
            links += 1
            if links > _MAX_LINKS:
                raise _unsafe(path, f"passes more than {_MAX_LINKS} links")
            target = os.readlink(here)
            if os.path.isabs(target):
                inside = os.path.normpath(target)
                if inside != str(mount) and not inside.startswith(f"{mount}/"):
                    raise _unsafe(path, f"leads out of its kubelet volume {mount} (to {target})")
                done, target = [], os.path.relpath(inside, mount)
            pending = [p for p in Path(target).parts if p != "."] + pending
            continue
        if pending and (problem := _dir_problem(st, kubelet=True)):
            raise _unsafe(here, problem)
        done.append(part)
    return mount.joinpath(*done)


def _check_dirs(root: Path, sub: str | None) -> tuple[Path, Path | None]:
    """The directory to read (``sub`` of the store, or the store), checked, and the kubelet
    volume's mount dir when the store is one (else None). The path is as the store spells it,
    links and all: each file read in it is resolved and checked again when it is opened."""
    top = store(root)
    mount = _kubelet_mount(top)
    kubelet = mount is not None
    for path, is_mount in ((top.parent, False), (top, True)):
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise _missing(path) from None
        if problem := _dir_problem(st, kubelet=kubelet, mount=is_mount):
            raise _unsafe(path, problem)
    if not sub:
        return top, mount
    if mount is None:
        for path in [top / Path(*Path(sub).parts[: i + 1]) for i in range(len(Path(sub).parts))]:
            if _check(path, directory=True) is None:
                raise _missing(path)
        return top / sub, None
    directory = _resolve(mount, top / sub)
    try:
        st = os.lstat(directory)
    except (FileNotFoundError, NotADirectoryError):
        raise _missing(top / sub) from None
    if problem := _dir_problem(st, kubelet=True):
        raise _unsafe(top / sub, problem)
    return top / sub, mount


def _missing(path: Path) -> CurveKeyMissing:
    return CurveKeyMissing(f"no CURVE keys at {path}: run `hermes mesh keys init`", detail={"path": str(path)})


def _read_file(path: Path, mount: Path | None, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of key file ``path``, judged by ``fstat`` of what was opened
    without following a link (so nothing swapped in after the checks is read); None when
    there is none."""
    target = path if mount is None else _resolve(mount, path)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        why = "is a symlink" if exc.errno == errno.ELOOP else f"cannot be opened: {exc.strerror}"
        raise _unsafe(path, why) from None
    try:
        st = os.fstat(fd)
        if problem := _file_problem(st, kubelet=mount is not None, groups=_our_groups()):
            raise _unsafe(path, problem)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _read_key(path: Path, what: str, mount: Path | None) -> bytes:
    raw = _read_file(path, mount, KEY_LENGTH * 4)
    if raw is None:
        raise CurveKeyMissing(f"no {what} at {path}: run `hermes mesh keys init`", detail={"path": str(path)})
    try:
        return validate_key(raw, what=what)
    except CurveKeyInvalid:
        raise CurveKeyInvalid(f"{path} does not hold a valid {what}", detail={"path": str(path)}) from None


def server_secret(root: Path, name: str) -> bytes:
    directory, mount = _check_dirs(root, "server")
    return _read_key(directory / f"{validate_name(name)}.key_secret", f"server secret key of {name}", mount)


def client_secret(root: Path) -> bytes:
    directory, mount = _check_dirs(root, None)
    return _read_key(directory / "client.key_secret", "client secret key", mount)


def trusted_server(root: Path, name: str, *, host: str = "") -> bytes:
    """The public key this install's clients expect ``name`` (of ``host``, when given) to have."""
    if host:
        directory, mount = _host_dir(root, host)
        return _read_key(directory / f"{validate_name(name)}.key", f"public key of {name} on host {host}", mount)
    directory, mount = _check_dirs(root, "servers")
    return _read_key(directory / f"{validate_name(name)}.key", f"public key of server {name}", mount)


def _host_dir(root: Path, host: str) -> tuple[Path, Path | None]:
    sub = f"{HOSTS}/{mesh_hosts.validate_host_name(host)}"
    _check_dirs(root, HOSTS)  # no hosts/ at all: missing as any part of the store is
    try:
        return _check_dirs(root, sub)
    except CurveKeyMissing:
        directory = store(root) / sub
        raise CurveKeyMissing(
            f"no keys for host {host!r} at {directory}: run `hermes mesh keys import --host {host}`",
            detail={"path": str(directory), "host": host},
        ) from None


def host_keys(root: Path, host: str) -> dict[str, bytes]:
    """service -> public key trusted for every service of ``host``; {} when none is."""
    try:
        return public_keys(root, f"{HOSTS}/{mesh_hosts.validate_host_name(host)}")
    except CurveKeyMissing:
        return {}


def public_keys(root: Path, sub: str) -> dict[str, bytes]:
    """name -> public key of every ``<sub>/<name>.key`` (``authorized``, ``servers`` or ``hosts/<host>``).

    A file that is unsafe or invalid is left out (and so, for ``authorized``, refused)."""
    directory, mount = _check_dirs(root, sub)
    keys: dict[str, bytes] = {}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name.removesuffix(".key")
        if entry.name.endswith(".key") and NAME_RE.fullmatch(name):
            try:
                keys[name] = _read_key(Path(entry.path), "public key", mount)
            except (CurveKeyInvalid, CurveKeyUnsafe, CurveKeyMissing, OSError):
                continue
    return keys


def grants(root: Path) -> dict[str, frozenset[str]]:
    """name -> the grants of every ``authorized/<name>.grants``. A file that is unsafe, too
    large or holds a line that is not a grant is left out: that key is granted nothing."""
    directory, mount = _check_dirs(root, "authorized")
    found: dict[str, frozenset[str]] = {}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name.removesuffix(".grants")
        if not (entry.name.endswith(".grants") and NAME_RE.fullmatch(name)):
            continue
        try:
            raw = _read_file(Path(entry.path), mount, _GRANTS_MAX_BYTES + 1)
        except (CurveKeyUnsafe, OSError):
            continue
        if raw is None:
            continue
        lines = raw.decode("ascii", "replace").split()
        if len(raw) <= _GRANTS_MAX_BYTES and all(GRANT_RE.fullmatch(line) for line in lines):
            found[name] = frozenset(lines)
    return found


def server_names(root: Path) -> list[str]:
    """The names of the services whose secret key is in ``server/``, sorted; whether or not
    the service (a profile's gateway) is of this home: a keys-only install holds others'."""
    directory, _ = _check_dirs(root, "server")
    suffix = ".key_secret"
    names = (entry.name[: -len(suffix)] for entry in os.scandir(directory) if entry.name.endswith(suffix))
    return sorted(name for name in names if NAME_RE.fullmatch(name))


def public_of(secret: bytes) -> bytes:
    return zmq.curve_public(secret)


# --- writing ------------------------------------------------------------------------------------


def _ensure_dir(path: Path) -> Path:
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise CurveKeyUnsafe(f"cannot create {path}: {exc.strerror or exc}", detail={"path": str(path)}) from None
    else:
        os.chmod(path, DIR_MODE)  # the umask may have taken owner bits away
    _check(path, directory=True)
    return path


def _dirs(root: Path) -> Path:
    top = store(root)
    if _kubelet_mount(top) is not None:
        raise CurveKeyUnsafe(
            f"refusing to write in {top}: it is a kubelet volume, read-only; change its Secret instead",
            detail={"path": str(top)},
        )
    if not top.parent.parent.exists():
        homes.ensure_home(top.parent.parent)  # a new install's root home
    _ensure_dir(top.parent)
    _ensure_dir(top)
    for sub in ("server", "authorized", "servers"):
        _ensure_dir(top / sub)
    return top


def _write_key(path: Path, key: bytes) -> None:
    write_bytes_atomic(path, key + b"\n", mode=SECRET_MODE)


def _create(path: Path, key: bytes) -> bool:
    """Write ``key`` unless ``path`` exists (checked first); True when written."""
    if _check(path, directory=False) is not None:
        return False
    _write_key(path, key)
    return True


def init(root: Path, services: Iterable[str]) -> list[str]:
    """Create what is missing, never overwriting: the client keypair (authorized as
    ``local``) and a keypair per service (trusted by name). Returns what was created."""
    top = _dirs(root)
    created: list[str] = []
    if _create(top / "client.key_secret", zmq.curve_keypair()[1]):
        created.append("client")
    client_public = public_of(client_secret(root))
    if _create(top / "authorized" / f"{LOCAL_CLIENT}.key", client_public):
        created.append(f"authorized/{LOCAL_CLIENT}")
    for name in services:
        if _create(top / "server" / f"{validate_name(name)}.key_secret", zmq.curve_keypair()[1]):
            created.append(f"server/{name}")
        if _create(top / "servers" / f"{name}.key", public_of(server_secret(root, name))):
            created.append(f"servers/{name}")
    return created


def add_public(root: Path, sub: str, name: str, key: object) -> None:
    """Record a public key: a client's in ``authorized``, a (remote) server's in ``servers``."""
    public = validate_key(key, what="public key")
    _write_key(_dirs(root) / sub / f"{validate_name(name)}.key", public)


def set_grants(root: Path, name: str, granted: Iterable[str]) -> None:
    """Grant authorized client ``name`` exactly ``granted`` (each checked by the caller against
    the ops that exist); none removes its grants file."""
    path = _dirs(root) / "authorized" / f"{validate_name(name)}.grants"
    lines = sorted(set(granted))
    for grant in lines:
        if not GRANT_RE.fullmatch(grant):
            raise CurveKeyInvalid(f"invalid grant {grant!r}: use SERVICE.OP", detail={"field": "grant"})
    if lines:
        write_bytes_atomic(path, "".join(f"{grant}\n" for grant in lines).encode(), mode=SECRET_MODE)
    else:
        _check(path, directory=False)  # a symlink or loose file there is refused, not unlinked
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def remove_public(root: Path, sub: str, name: str) -> None:
    """Forget a key; an authorized client's grants go with it."""
    path = _check_dirs(root, sub)[0] / f"{validate_name(name)}.key"
    try:
        os.unlink(path)
    except FileNotFoundError:
        raise CurveKeyUnknown(f"no key named {name!r} in {sub}/", detail={"name": name}) from None
    if sub == "authorized":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.with_suffix(".grants"))


def add_host_keys(root: Path, host: str, keys: dict[str, bytes]) -> list[str]:
    """Trust ``keys`` (service -> public key) for ``host``'s services, adding and never
    replacing: a service already trusted under another key is ``CurveKeyConflict`` (forget it
    first, on purpose), checked for every key before any is written. Returns the services added."""
    directory = _ensure_dir(_ensure_dir(_dirs(root) / HOSTS) / mesh_hosts.validate_host_name(host))
    checked = {validate_name(name): validate_key(key, what=f"public key of {name}") for name, key in keys.items()}
    with locked(directory):
        held = host_keys(root, host)
        for name, key in checked.items():
            if name in held and held[name] != key:
                raise CurveKeyConflict(
                    f"host {host!r} already has another key for {name}: an import adds, never replaces "
                    f"(`hermes mesh keys forget --host {host} {name}` first, if the host's key was rotated)",
                    detail={"host": host, "service": name},
                )
        added = [name for name in checked if name not in held]
        for name in added:
            _write_key(directory / f"{name}.key", checked[name])
    return added


def forget_host_key(root: Path, host: str, name: str | None = None) -> list[str]:
    """Stop trusting ``host``'s service ``name``, or every service of ``host``; what was
    forgotten. A key already gone is forgotten already: a forget killed midway is run again."""
    try:
        directory = _host_dir(root, host)[0]
    except CurveKeyMissing:
        return []
    names = [validate_name(name)] if name is not None else sorted(host_keys(root, host))
    forgotten = []
    for service in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / f"{service}.key")
            forgotten.append(service)
    return forgotten


def rotate_client(root: Path, *, grace: float = ROTATION_GRACE) -> bytes:
    """Replace the client keypair so that no handshake is refused on the way: the old public
    key is kept authorized (as ``local-previous``) and the new one authorized (as ``local``)
    before the secret is swapped; the old one is retired ``grace`` seconds later, once the
    clients that read the old secret just before the swap have made their handshake.
    Returns the new public key."""
    authorized = _check_dirs(root, "authorized")[0]
    client_secret(root)  # refuse to rotate what was never made (or is unsafe)
    check_grace(grace)
    # One rotation at a time: a second one, waiting here, rotates the key the first made (and
    # never finds the retired key gone under it). The wait is bounded: LockTimeout after it.
    with locked(store(root) / "client.key_secret", timeout=ROTATION_LOCK_WAIT):
        old = client_secret(root)
        secret = zmq.curve_keypair()[1]
        _write_key(authorized / f"{_PREVIOUS_CLIENT}.key", public_of(old))
        _write_key(authorized / f"{LOCAL_CLIENT}.key", public_of(secret))
        _write_key(store(root) / "client.key_secret", secret)
        time.sleep(grace)
        os.unlink(authorized / f"{_PREVIOUS_CLIENT}.key")
    return public_of(secret)


def check_grace(grace: float) -> float:
    if not 0 <= grace <= MAX_ROTATION_GRACE:
        raise CurveKeyInvalid(f"the grace is 0 to {MAX_ROTATION_GRACE:g} seconds, not {grace!r}")
    return grace


def rotate_server(root: Path, name: str) -> bytes:
    """Replace a service's keypair and this install's trust in it. A running service takes the
    new key within a second (``shared.transport.server_key``), which ends the connections made
    under the old one. Returns the new public key."""
    top = _dirs(root)
    server_secret(root, name)
    secret = zmq.curve_keypair()[1]
    _write_key(top / "server" / f"{name}.key_secret", secret)
    _write_key(top / "servers" / f"{name}.key", public_of(secret))
    return public_of(secret)


# --- one service's store, and the client key a service's own checks use ------------------------

# The name a service's own public key is authorized under in its own store: its health check
# calls it as itself, with the grants ``export_service`` is given (none: read-only ops).
SELF_CLIENT = "self"
_EXPORT_STAGING = ".export"


class CurveStoreExists(TransportError):
    code = "curve_store_exists"


def export_service(root: Path, name: str, to: Path, *, self_grants: Iterable[str] = ()) -> list[str]:
    """Write into ``to`` the key store of service ``name`` alone, for a host or container that
    runs that service and nothing else: its own secret key; its own public key, authorized as
    ``SELF_CLIENT`` with ``self_grants``; every server key this store trusts (public: a
    ``hermes`` run beside the service knows who answers, and is refused where it is not
    authorized); and every client key this store authorizes but its own (``local``), with only
    its grants on this service. Never the client key, never another service's secret.

    ``to`` is an empty directory of ours (made if missing, then made private), never
    overwritten. The store is made in a staging directory inside it and its parts renamed into
    place, ``server/`` last: a half-made store has no secret key, so no service starts on it,
    and the next export clears what an export killed before that rename left and starts over.
    Returns what was written."""
    secret = server_secret(root, validate_name(name))
    service = name.partition("@")[0]
    clients = {n: k for n, k in public_keys(root, "authorized").items() if n not in OWN_CLIENTS | {SELF_CLIENT}}
    granted = grants(root)
    to = Path(to)
    _empty_private_dir(to)
    staging = _ensure_dir(to / _EXPORT_STAGING)
    for sub in ("server", "authorized", "servers"):
        _ensure_dir(staging / sub)
    servers = {**public_keys(root, "servers"), name: public_of(secret)}
    written = [f"server/{name}", f"authorized/{SELF_CLIENT}", *(f"servers/{n}" for n in sorted(servers))]
    _write_key(staging / "server" / f"{name}.key_secret", secret)
    for server, key in sorted(servers.items()):
        _write_key(staging / "servers" / f"{server}.key", key)
    clients[SELF_CLIENT] = public_of(secret)
    granted = {**granted, SELF_CLIENT: frozenset(self_grants)}
    for client, key in sorted(clients.items()):
        own = sorted(g for g in granted.get(client, ()) if g.partition(".")[0] == service)
        if own:  # the grants before the key, as ``authorize`` writes them
            write_bytes_atomic(
                staging / "authorized" / f"{client}.grants", "".join(f"{g}\n" for g in own).encode(), mode=SECRET_MODE
            )
        _write_key(staging / "authorized" / f"{client}.key", key)
        if client != SELF_CLIENT:
            written.append(f"authorized/{client}")
    for sub in ("authorized", "servers", "server"):
        os.rename(staging / sub, to / sub)
    os.rmdir(staging)
    return written


def _empty_private_dir(path: Path) -> None:
    """``path`` as an empty directory of ours, mode 0700: made, or found empty (a fresh
    volume's mount point) and made private; anything else is refused, never changed."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise CurveKeyUnsafe(
                f"refusing to write keys into {path}: it is not a directory of ours", detail={"path": str(path)}
            ) from None
        _clear_unfinished_export(path)
        if os.listdir(path):
            raise CurveStoreExists(
                f"{path} is not empty: a key store is never overwritten (remove it to export again)",
                detail={"path": str(path)},
            ) from None
    except OSError as exc:
        raise CurveKeyUnsafe(f"cannot create {path}: {exc.strerror or exc}", detail={"path": str(path)}) from None
    os.chmod(path, DIR_MODE)


def _clear_unfinished_export(path: Path) -> None:
    """Remove what an export killed before its last rename left in ``path``: its staging dir
    and the parts renamed already, never a ``server/`` (a finished store is never touched),
    and only real directories of ours (a planted link is left, and the export then refused)."""
    entries = set(os.listdir(path))
    if "server" in entries or not entries or not entries <= {_EXPORT_STAGING, "authorized", "servers"}:
        return
    for name in entries:
        st = os.lstat(path / name)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return
    for name in entries:
        shutil.rmtree(path / name)  # does not follow links inside: removes them as links


def client_secret_for(root: Path, name: str) -> bytes:
    """The client secret key to call service ``name`` with: this store's client key. A store
    without one is a service's own (``export_service``): its one secret key is its client key,
    which that service authorizes as ``SELF_CLIENT`` and no other service authorizes at all."""
    try:
        return client_secret(root)
    except CurveKeyMissing:
        try:
            held = server_names(root)
        except CurveKeyMissing:
            held = []
        own = name if name in held else held[0] if len(held) == 1 else None
        if own is None:
            raise
        return server_secret(root, own)
