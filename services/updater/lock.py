"""The update lock: one update per install, in the ROOT home.

``<root>/update.lock`` is an ``flock`` (shared.locks.FileLock): taking it is one atomic step
with no read-then-write window, and the kernel drops it when its holder dies, so a lock left
by ``kill -9`` is recovered simply by acquiring it. The flock's fd is close-on-exec; only the
completion is handed it (``fileno``), so that it shares the lock: a completion orphaned by a
killed updater still keeps a second update out until it has finished.

``<root>/update.lock.json`` says who holds it (pid, start time, update id, start) so a second
``hermes update`` can name the run it is refused by. It is written after the flock is taken
and removed before it is dropped, so a record with a free lock was left by a dead holder.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from services.updater.errors import UpdateError
from services.updater.update_id import validate_update_id
from shared.files import StateFileCorrupt, read_json, write_json_atomic
from shared.identity import ProcessIdentity, current_identity, is_alive
from shared.locks import FileLock, LockHeld, probe

LOCK_NAME = "update.lock"
RECORD_NAME = "update.lock.json"
# A refused run that finds the holder between its flock and its record waits this long for
# the record, so it can name the holder's update; past it, it names the pid alone.
RECORD_GRACE = 2.0
_RECORD_POLL = 0.01


def lock_path(root: Path) -> Path:
    """The update lock of the install whose root home is ``root``."""
    return Path(root) / LOCK_NAME


class UpdateInProgress(UpdateError):
    """Another update holds the lock: the run is refused (outcome ``refused``, exit 2)."""

    code = "update_in_progress"

    def __init__(self, path: Path, holder: dict[str, Any]) -> None:
        pid, update_id = holder.get("pid"), holder.get("update_id")
        who = f"pid {pid}" if pid else "another process"
        which = f" (update {update_id}, started {holder.get('started_at')})" if update_id else ""
        super().__init__(
            f"another update is running: {who}{which} holds {path}",
            detail={"path": str(path), **holder},
        )
        self.holder = holder


class UpdateLock:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.path = lock_path(self.root)
        self.record_path = self.root / RECORD_NAME
        self._lock: FileLock | None = None
        # The record of a dead holder this acquire took over, so the run can say so.
        self.recovered: dict[str, Any] | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self, update_id: str) -> UpdateLock:
        """Take the lock for ``update_id`` or raise UpdateInProgress naming the holder.

        Returns self, so ``with UpdateLock(root).acquire(update_id):`` holds it for a block.
        """
        validate_update_id(update_id)
        if self._lock is not None:
            raise RuntimeError(f"{self.path} is already held by this UpdateLock")
        lock = FileLock(self.path)
        try:
            lock.acquire()
        except LockHeld as exc:
            raise UpdateInProgress(self.path, _named_holder(self.root, exc.holder)) from None
        try:
            # Holding the flock, any record still here belongs to a holder that died.
            self.recovered = _read_record(self.record_path)
            me = current_identity()
            started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
            record = {"pid": me.pid, "start_time": me.start_time, "update_id": update_id, "started_at": started_at}
            write_json_atomic(self.record_path, record)
        except BaseException:
            lock.release()
            raise
        self._lock = lock
        return self

    def release(self) -> None:
        """Drop the lock; safe to call again."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            # Still holding the flock, so no new holder's record can be deleted by mistake.
            self.record_path.unlink(missing_ok=True)
        finally:
            lock.release()

    def fileno(self) -> int:
        """The lock's descriptor. A child given it (``pass_fds``) shares the lock: it stays
        held while either process lives, so a completion orphaned by a killed updater still
        keeps a second update out until it has finished."""
        if self._lock is None:
            raise RuntimeError("the update lock is not held")
        return self._lock.fileno()

    def __enter__(self) -> UpdateLock:
        if self._lock is None:
            raise RuntimeError("acquire(update_id) the UpdateLock before entering it")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"UpdateLock({str(self.root)!r}, held={self.held})"


def holder(root: Path) -> dict[str, Any] | None:
    """Who holds the update lock now: ``{pid, start_time, update_id, started_at}``, or None if free.

    A field the holder has not recorded yet (it is between taking the lock and writing its
    record) is None.
    """
    root = Path(root)
    status = probe(lock_path(root))
    if not status.held:
        return None
    return _describe(status.holder, _read_record(root / RECORD_NAME))


def stale_holder(root: Path) -> dict[str, Any] | None:
    """The record of a holder that died holding the lock, or None. The next acquire recovers it."""
    root = Path(root)
    record = _read_record(root / RECORD_NAME)
    if record is None or probe(lock_path(root)).held:
        return None
    # A live recorded process is a holder between its flock and its record, or its release.
    return None if is_alive(_identity(record)) else record


def _named_holder(root: Path, identity: ProcessIdentity | None) -> dict[str, Any]:
    deadline = time.monotonic() + RECORD_GRACE
    while True:
        named = _describe(identity, _read_record(root / RECORD_NAME))
        if named["update_id"] is not None or time.monotonic() >= deadline or not probe(lock_path(root)).held:
            return named
        time.sleep(_RECORD_POLL)


def _describe(identity: ProcessIdentity | None, record: dict[str, Any] | None) -> dict[str, Any]:
    # The flock file names the current holder; the record counts only if it is the same process.
    if record is not None and (_identity(record) == identity or (identity is None and is_alive(_identity(record)))):
        return record
    return {
        "pid": identity.pid if identity else None,
        "start_time": identity.start_time if identity else None,
        "update_id": None,
        "started_at": None,
    }


def _identity(record: dict[str, Any]) -> ProcessIdentity:
    return ProcessIdentity(record["pid"], record["start_time"])


def _read_record(path: Path) -> dict[str, Any] | None:
    """The holder record, or None when absent or unusable (it is advice, never the lock itself)."""
    try:
        data = read_json(path, default=None)
    except StateFileCorrupt:
        return None
    if data is None:
        return None
    try:
        identity = ProcessIdentity.from_dict(data)
    except ValueError:
        return None
    update_id, started_at = data.get("update_id"), data.get("started_at")
    if not isinstance(update_id, str) or not isinstance(started_at, str):
        return None
    return {"pid": identity.pid, "start_time": identity.start_time, "update_id": update_id, "started_at": started_at}
