"""What a process says it is beyond its pid and home: the install it belongs to, and this start.

A gateway in a container has its own pid namespace and may see its home at another path, so
the pid and home it reports mean nothing on the host. Two random ids do:

- the install id, made once per install and kept in the root home. The first service to start
  on the install creates it (the CLI only reads it: a status command writes nothing). Creation
  is race-free: the id is written whole to a temp file that is then hard-linked into place, and
  a link fails if the name exists, so of two concurrent starts one wins and the other reads it.
- the instance id, random per process start (a re-exec is a new start).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from shared.errors import HomeError

INSTALL_ID_FILE = "install_id"  # in the root home only
_ID_RE = re.compile(r"[0-9a-f]{32}")
_MAX_BYTES = 256

# os.urandom, as secrets does: a status command loads no more than it needs to read an id.
_INSTANCE_ID = os.urandom(16).hex()  # taken when this interpreter first imports the module


def _new_instance() -> None:
    """A process forked from this one (a gateway host's fork server forks every gateway) is
    another instance: two gateways never share an id."""
    global _INSTANCE_ID
    _INSTANCE_ID = os.urandom(16).hex()


os.register_at_fork(after_in_child=_new_instance)


class InstallIdCorrupt(HomeError):
    code = "install_id_corrupt"


def is_id(value: object) -> bool:
    """Whether ``value`` has the shape of an install or instance id (a frame's, a file's)."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def instance_id() -> str:
    return _INSTANCE_ID


def read_install_id(root: Path) -> str | None:
    """The install id kept in ``root``; None while there is none. InstallIdCorrupt for junk."""
    path = Path(root) / INSTALL_ID_FILE
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError:  # a directory in its place, no permission: as good as junk
        raw = b""
    value = raw.decode("ascii", errors="replace").strip()
    if not is_id(value):
        raise InstallIdCorrupt(
            f"{path} does not hold an install id; remove it and a service start makes a new one",
            detail={"path": str(path)},
        )
    return value


def ensure_install_id(root: Path) -> str:
    """The install id of ``root``, created if there is none yet (blocking: call it before the
    event loop, or from a thread). OSError when the root home cannot be written."""
    existing = read_install_id(root)
    if existing is not None:
        return existing
    root = Path(root)
    new = os.urandom(16).hex()
    tmp = root / f".{INSTALL_ID_FILE}.{os.urandom(8).hex()}.tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            os.write(fd, f"{new}\n".encode())  # 33 bytes: one write
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, root / INSTALL_ID_FILE)  # never replaces: the first creator's id stays
        except FileExistsError:
            won = False
        else:
            won = True
    finally:
        os.unlink(tmp)
    if not won:
        return ensure_install_id(root)  # the winner's (or, were it removed meanwhile, a new one)
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return new


def describe(root: Path) -> dict[str, str | None]:
    """``{"install_id", "instance_id"}`` for a service of ``root`` to report about itself.

    A root it cannot write or a corrupt id file is logged and reported as no install id:
    the service still serves, and is found by its home path as before the ids existed."""
    try:
        install: str | None = ensure_install_id(root)
    except (OSError, InstallIdCorrupt) as exc:
        import logging  # only a service reports its ids, and only this failure logs

        logging.getLogger(__name__).warning("no install id for %s: %s", root, getattr(exc, "message", exc))
        install = None
    return {"install_id": install, "instance_id": _INSTANCE_ID}
