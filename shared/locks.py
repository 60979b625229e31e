"""The endpoint lock: one process per IPC endpoint.

A second bind on an ipc path silently steals it from the first process, so a service takes
this lock (an ``flock`` on ``<service>.lock`` beside its sockets) before it binds, and refuses
to start while another process holds it. The kernel drops an ``flock`` when its holder dies,
so a lock file left behind by ``kill -9`` is harmless; its content only names the last holder.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from shared.errors import HomeError
from shared.identity import ProcessIdentity, current_identity

LOCK_FILE_MODE = 0o600
_HOLDER_MAX_BYTES = 4096
# A probe holds a shared lock for microseconds; an acquire retries this long so a concurrent
# `hermes doctor` cannot make a starting service think the endpoint is taken.
_PROBE_GRACE = 0.05
_PROBE_GRACE_STEP = 0.005


class LockHeld(HomeError):
    code = "endpoint_busy"

    def __init__(self, path: Path, holder: ProcessIdentity | None) -> None:
        who = f"pid {holder.pid}" if holder else "another process"
        super().__init__(
            f"{path} is locked by {who}; is the service already running?",
            detail={"path": str(path), "holder": holder.to_dict() if holder else None},
        )
        self.path = Path(path)
        self.holder = holder


class LockNotHandedOn(HomeError):
    code = "lock_fd_invalid"

    def __init__(self, path: Path, fd: int, why: str) -> None:
        super().__init__(f"--lock-fd {fd} is not the lock on {path}: {why}", detail={"path": str(path), "fd": fd})


class FileLock:
    """An exclusive, non-blocking ``flock`` on ``path`` that records who holds it.

    The lock belongs to the open file description: a second FileLock on the same path fails
    even in the same process. The fd is close-on-exec, so children started with exec never
    inherit it (a bare ``fork`` without exec would share it). With ``dir_fd``, ``path`` is a name
    in that open directory (which must stay open until ``acquire`` returns), so no link on the
    way to it is followed.
    """

    def __init__(self, path: Path, *, dir_fd: int | None = None) -> None:
        self.path = Path(path)
        self._dir_fd = dir_fd
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise LockHeld naming the holder; never waits beyond a brief grace."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this FileLock")
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(self.path, flags, LOCK_FILE_MODE, dir_fd=self._dir_fd)
        try:
            if not _try_exclusive(fd):
                holder = _read_holder(fd)
                raise LockHeld(self.path, holder)
            _record_holder(fd)
        except BaseException:
            os.close(fd)  # closing also drops the lock if it was taken
            raise
        self._fd = fd

    @classmethod
    def adopt(cls, path: Path, fd: int) -> FileLock:
        """The lock on ``path`` this process held as ``fd`` before it exec'd itself, held on:
        ``LockNotHandedOn`` unless ``fd`` is that very file and its lock is this process's."""
        try:
            held, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
        except OSError as exc:
            raise LockNotHandedOn(path, fd, exc.strerror or "unreadable") from None
        if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
            raise LockNotHandedOn(path, fd, "another file")
        if not _try_exclusive(fd):  # taking it again on the same open file only works for its holder
            raise LockNotHandedOn(path, fd, "locked by another process")
        os.set_inheritable(fd, False)
        lock = cls(path)
        lock._fd = fd
        return lock

    def fileno(self) -> int:
        """The locked descriptor, for handing to a child that must keep the lock held."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is not held")
        return self._fd

    def release(self) -> None:
        """Unlock and close; safe to call again. The file stays: deleting it would race a new holder."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileLock({str(self.path)!r}, held={self.held})"


def take_or_report(path: Path, refusal: str) -> FileLock | None:
    """Take a service's endpoint lock; when another process holds it, print ``refusal`` with
    the holder's pid to stderr and return ``None`` (the caller exits 73)."""
    lock = FileLock(path)
    try:
        lock.acquire()
    except LockHeld as exc:
        pid = exc.holder.pid if exc.holder else "unknown"
        print(f"{refusal} (pid {pid}); not starting", file=sys.stderr)
        return None
    return lock


def _try_exclusive(fd: int) -> bool:
    deadline = time.monotonic() + _PROBE_GRACE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_PROBE_GRACE_STEP)


def _record_holder(fd: int) -> None:
    payload = (json.dumps(current_identity().to_dict()) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, payload, 0)
    os.fsync(fd)


def _read_holder(fd: int) -> ProcessIdentity | None:
    # Best effort: the holder may be between truncate and write, or the file may be junk.
    try:
        raw = os.pread(fd, _HOLDER_MAX_BYTES, 0)
        return ProcessIdentity.from_dict(json.loads(raw))
    except (OSError, ValueError, RecursionError):
        return None


class LockStatus(NamedTuple):
    path: Path
    exists: bool
    held: bool
    holder: ProcessIdentity | None  # the last recorded holder; the current one only if ``held``
    stale: bool  # the file exists but nobody holds it (released, or its holder was killed)


def probe(path: Path) -> LockStatus:
    """Whether ``path`` is locked, without waiting and without keeping any lock."""
    path = Path(path)
    try:
        # Read-only and never created: probing must not leave files behind.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return LockStatus(path, exists=False, held=False, holder=None, stale=False)
    try:
        try:
            # Shared, so that two probes never see each other as the holder.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held = True
        else:
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
        holder = _read_holder(fd)
    finally:
        os.close(fd)
    return LockStatus(path, exists=True, held=held, holder=holder, stale=not held)
