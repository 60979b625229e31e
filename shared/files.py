"""Every state file write and read-modify-write goes through here.

Writes are atomic (temp file in the same directory, fsync, rename, fsync the directory), so a
reader sees the old content or the new, never a torn file. A read-modify-write holds an
exclusive ``flock`` on a sibling ``<name>.lock`` for a bounded time. These helpers block;
async code calls them through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Any

from shared.errors import HomeError

SECRET_MODE = 0o600
PUBLIC_MODE = 0o644
PRIVATE_DIR_MODE = 0o700
_CHUNK = 1 << 20
_LOCK_POLL_MIN = 0.005
_LOCK_POLL_MAX = 0.05


class StateFileCorrupt(HomeError):
    code = "state_file_corrupt"

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"state file {path} is corrupt: {reason}", detail={"path": str(path), "reason": reason})
        self.path = Path(path)
        self.reason = reason


class LockTimeout(HomeError):
    code = "lock_timeout"

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__(
            f"could not lock {path} within {timeout:g}s: it is held by someone else",
            detail={"path": str(path), "timeout": timeout},
        )
        self.path = Path(path)
        self.timeout = timeout


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


# --- atomic writes ------------------------------------------------------------------------------


def write_bytes_atomic(path: Path, data: bytes, *, mode: int = PUBLIC_MODE) -> None:
    """Replace ``path`` with ``data``; on any failure the old file is untouched and no temp is left."""
    path = Path(path)
    directory = path.parent
    fd, tmp = _create_temp(directory, path.name)
    try:
        try:
            # Set the mode before any byte is written and regardless of the umask.
            os.fchmod(fd, mode)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(directory)


def write_json_atomic(path: Path, data: Any, *, secret: bool = False) -> None:
    """Write ``data`` as JSON atomically; ``secret`` files are mode 0600, all others exactly 0644."""
    # Serialize first: a value that cannot be encoded must fail before any file is touched.
    # allow_nan=False keeps the file standard JSON that every reader accepts.
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"), mode=SECRET_MODE if secret else PUBLIC_MODE)


def _create_temp(directory: Path, name: str) -> tuple[int, Path]:
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    while True:
        tmp = directory / f".{name}.{os.urandom(8).hex()}.tmp"  # as secrets makes it, without its imports
        try:
            # 0600 until fchmod sets the final mode, so a secret is never briefly readable.
            return os.open(tmp, flags, SECRET_MODE), tmp
        except FileExistsError:
            continue


def create_in(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """A new file ``name`` in the open directory ``dir_fd`` holding ``data``, exactly ``mode``,
    synced: never through a link, never over an entry already there (FileExistsError)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, SECRET_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # whatever the umask, and 0600 until then
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some filesystems cannot fsync a directory; the rename itself has still happened.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# --- reads --------------------------------------------------------------------------------------


def read_json(path: Path, *, default: Any = _MISSING, expect: type | tuple[type, ...] | None = dict) -> Any:
    """The JSON value in ``path``. A missing file gives ``default`` (or FileNotFoundError);
    a file that exists but is unreadable as the expected JSON raises StateFileCorrupt."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if default is _MISSING:
            raise
        return default
    return _parse(path, raw, expect)


def _parse(path: Path, raw: bytes, expect: type | tuple[type, ...] | None) -> Any:
    if not raw.strip():
        raise StateFileCorrupt(path, "file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateFileCorrupt(path, f"not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise StateFileCorrupt(path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise StateFileCorrupt(path, f"invalid JSON: {exc}") from None
    if expect is not None and not isinstance(value, expect):
        raise StateFileCorrupt(path, f"top level is {_json_type(value)}, expected {_expected_name(expect)}")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


_JSON_NAMES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _expected_name(expect: type | tuple[type, ...]) -> str:
    types = expect if isinstance(expect, tuple) else (expect,)
    return " or ".join(_JSON_NAMES.get(t, t.__name__) for t in types)


# --- locking and read-modify-write ------------------------------------------------------------


def lock_path_for(path: Path) -> Path:
    path = Path(path)
    return path.with_name(f"{path.name}.lock")


@contextmanager
def locked(path: Path, *, timeout: float = 10.0) -> Iterator[None]:
    """Hold an exclusive lock for ``path`` (on ``<path>.lock``), waiting at most ``timeout`` seconds.

    The lock belongs to the open file, so two holders in one process exclude each other too
    (and a nested ``locked`` of the same path in one thread times out rather than re-entering).
    """
    lock_file = lock_path_for(path)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, SECRET_MODE)
    try:
        _flock_within(fd, lock_file, timeout)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _flock_within(fd: int, lock_file: Path, timeout: float) -> None:
    # Poll with LOCK_NB rather than block: a blocking flock cannot be bounded or cancelled.
    deadline = time.monotonic() + timeout
    pause = _LOCK_POLL_MIN
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LockTimeout(lock_file, timeout)
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, _LOCK_POLL_MAX)


def update_json(
    path: Path,
    fn: Callable[[Any], Any],
    *,
    default: Any = _MISSING,
    expect: type | tuple[type, ...] | None = dict,
    secret: bool = False,
    timeout: float = 10.0,
) -> Any:
    """Under the lock: read ``path``, ``new = fn(old)``, write ``new`` atomically, return it.

    A corrupt file raises StateFileCorrupt before ``fn`` runs; nothing is written.
    """
    import copy  # here: the readers of state files, most of this module's callers, need none

    path = Path(path)
    with locked(path, timeout=timeout):
        # A copy, because fn may mutate what it is given and the caller's default must not change.
        fresh = default if default is _MISSING else copy.deepcopy(default)
        old = read_json(path, default=fresh, expect=expect)
        new = fn(old)
        # A forgotten "return" would otherwise write null and corrupt the file for every reader.
        if expect is not None and not isinstance(new, expect):
            raise TypeError(f"update of {path} returned {_json_type(new)}, expected {_expected_name(expect)}")
        write_json_atomic(path, new, secret=secret)
    return new


def file_sha256(path: Path) -> str:
    """The sha256 of the file at ``path``, read in chunks; OSError as opening or reading raises it."""
    import hashlib  # here, as copy above

    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def make_parents_within(root: Path, rel: PurePath, mode: int = PRIVATE_DIR_MODE) -> Path | None:
    """Make the parent directories of ``rel`` below ``root`` that are missing (with ``mode``);
    the first that is a symlink or not a directory (a rename through it could land outside
    ``root``), or None when every one is a real directory."""
    here = Path(root)
    for part in rel.parts[:-1]:
        here = here / part
        try:
            os.mkdir(here, mode)
        except FileExistsError:
            if here.is_symlink() or not here.is_dir():
                return here
    return None


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` failing with FileExistsError if ``dst`` exists (even an empty
    dir, which a plain rename of a directory would silently replace)."""
    import ctypes  # here: most users of this module never rename a directory

    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        result = renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
        if result == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err))
    # No renameat2 here (or not on this filesystem): a lock the caller holds keeps the target absent.
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
    os.rename(src, dst)
