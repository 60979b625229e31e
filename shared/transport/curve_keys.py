"""The install's CURVE keys, under ``<root>/mesh/curve/``.

    server/<name>.key_secret    a service's secret key (``updater``, ``gateway``, ``gateway@coder``)
    client.key_secret           this install's client secret key
    authorized/<name>.key       client public keys this install's services accept
    authorized/<name>.grants    the ops such a key may call beyond the read-only ones, one a line
    servers/<name>.key          server public keys this install's clients trust

A key file is one line: the key as 40 characters of Z85. Every directory is 0700 and every
file 0600, owned by us and not a symlink; anything looser is refused, never repaired, so a
key another user could have read or swapped is never used. Public halves are derived from
the secret ones where they are needed; only public keys ever leave this module as text.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path

import zmq

from shared import homes
from shared.errors import TransportError
from shared.files import SECRET_MODE, locked, write_bytes_atomic

DIR_MODE = 0o700
KEY_LENGTH = 40
# A service's key name (``gateway@coder`` for a profile's gateway) or an authorized client's name.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}(@[a-z0-9][a-z0-9_-]{0,63})?")
_Z85 = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")
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


def _check(path: Path, *, directory: bool) -> os.stat_result | None:
    """lstat ``path`` and refuse anything looser than private; None when it does not exist."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    problem = None
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symlink"
    elif directory != stat.S_ISDIR(st.st_mode) or not (directory or stat.S_ISREG(st.st_mode)):
        problem = "is not a directory" if directory else "is not a regular file"
    elif st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}"
    elif stat.S_IMODE(st.st_mode) & 0o077:
        problem = f"has mode {stat.S_IMODE(st.st_mode):04o} (expected {DIR_MODE if directory else SECRET_MODE:04o})"
    if problem:
        raise CurveKeyUnsafe(f"refusing to use {path}: it {problem}", detail={"path": str(path)})
    return st


def _check_dirs(root: Path, sub: str | None) -> Path:
    top = store(root)
    for path in (top.parent, top) + ((top / sub,) if sub else ()):
        if _check(path, directory=True) is None:
            raise CurveKeyMissing(f"no CURVE keys at {path}: run `hermes mesh keys init`", detail={"path": str(path)})
    return top / sub if sub else top


def _read_key(path: Path, what: str) -> bytes:
    if _check(path, directory=False) is None:
        raise CurveKeyMissing(f"no {what} at {path}: run `hermes mesh keys init`", detail={"path": str(path)})
    with open(path, "rb") as f:
        raw = f.read(KEY_LENGTH * 4)
    try:
        return validate_key(raw, what=what)
    except CurveKeyInvalid:
        raise CurveKeyInvalid(f"{path} does not hold a valid {what}", detail={"path": str(path)}) from None


def server_secret(root: Path, name: str) -> bytes:
    directory = _check_dirs(root, "server")
    return _read_key(directory / f"{validate_name(name)}.key_secret", f"server secret key of {name}")


def client_secret(root: Path) -> bytes:
    return _read_key(_check_dirs(root, None) / "client.key_secret", "client secret key")


def trusted_server(root: Path, name: str) -> bytes:
    """The public key this install's clients expect ``name`` to have."""
    directory = _check_dirs(root, "servers")
    return _read_key(directory / f"{validate_name(name)}.key", f"public key of server {name}")


def public_keys(root: Path, sub: str) -> dict[str, bytes]:
    """name -> public key of every ``<sub>/<name>.key`` (``authorized`` or ``servers``).

    A file that is unsafe or invalid is left out (and so, for ``authorized``, refused)."""
    directory = _check_dirs(root, sub)
    keys: dict[str, bytes] = {}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name.removesuffix(".key")
        if entry.name.endswith(".key") and NAME_RE.fullmatch(name):
            try:
                keys[name] = _read_key(Path(entry.path), "public key")
            except (CurveKeyInvalid, CurveKeyUnsafe, CurveKeyMissing, OSError):
                continue
    return keys


def grants(root: Path) -> dict[str, frozenset[str]]:
    """name -> the grants of every ``authorized/<name>.grants``. A file that is unsafe, too
    large or holds a line that is not a grant is left out: that key is granted nothing."""
    directory = _check_dirs(root, "authorized")
    found: dict[str, frozenset[str]] = {}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name.removesuffix(".grants")
        if not (entry.name.endswith(".grants") and NAME_RE.fullmatch(name)):
            continue
        try:
            _check(Path(entry.path), directory=False)
            with open(entry.path, "rb") as f:
                raw = f.read(_GRANTS_MAX_BYTES + 1)
        except (CurveKeyUnsafe, OSError):
            continue
        lines = raw.decode("ascii", "replace").split()
        if len(raw) <= _GRANTS_MAX_BYTES and all(GRANT_RE.fullmatch(line) for line in lines):
            found[name] = frozenset(lines)
    return found


def server_names(root: Path) -> list[str]:
    """The names of the services whose secret key is in ``server/``, sorted; whether or not
    the service (a profile's gateway) is of this home: a keys-only install holds others'."""
    directory = _check_dirs(root, "server")
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
    path = _check_dirs(root, sub) / f"{validate_name(name)}.key"
    try:
        os.unlink(path)
    except FileNotFoundError:
        raise CurveKeyUnknown(f"no key named {name!r} in {sub}/", detail={"name": name}) from None
    if sub == "authorized":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.with_suffix(".grants"))


def rotate_client(root: Path, *, grace: float = ROTATION_GRACE) -> bytes:
    """Replace the client keypair so that no handshake is refused on the way: the old public
    key is kept authorized (as ``local-previous``) and the new one authorized (as ``local``)
    before the secret is swapped; the old one is retired ``grace`` seconds later, once the
    clients that read the old secret just before the swap have made their handshake.
    Returns the new public key."""
    authorized = _check_dirs(root, "authorized")
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
    place, ``server/`` last: a half-made store has no secret key, so no service starts on it.
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
        if os.listdir(path):
            raise CurveStoreExists(
                f"{path} is not empty: a key store is never overwritten (remove it to export again)",
                detail={"path": str(path)},
            ) from None
    except OSError as exc:
        raise CurveKeyUnsafe(f"cannot create {path}: {exc.strerror or exc}", detail={"path": str(path)}) from None
    os.chmod(path, DIR_MODE)


def client_secret_for(root: Path, name: str) -> bytes:
    """The client secret key to call service ``name`` with: this store's client key. A store
    without one is a service's own (``export_service``): its one secret key is its client key,
    which that service authorizes as ``SELF_CLIENT`` and no other service authorizes at all."""
    top = _check_dirs(root, None)
    if _check(top / "client.key_secret", directory=False) is None:
        with contextlib.suppress(CurveKeyMissing):
            held = server_names(root)
            own = name if name in held else held[0] if len(held) == 1 else None
            if own is not None:
                return server_secret(root, own)
    return client_secret(root)
