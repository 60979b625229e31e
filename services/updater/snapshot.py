"""Pre-update snapshots: a quick one of EVERY profile, and on request a full archive of the root.

A quick snapshot is file-loss recovery (config, auth and state files), not code rollback:
the code swap and the fleet restart touch every profile, so every profile gets one, each in its
own ``state-snapshots/`` and each with the identical file set ``SNAPSHOT_SET``. There is no
partial or tiered set: mixed coverage restores torn states across schema generations. It is all
or nothing: if one profile cannot be snapshotted, every snapshot of this run is removed and the
update stops before apply. ``--backup`` adds ``full_backup``, which owns rollback.

Secret files are copied byte for byte with their modes; their contents are never parsed or logged.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from services.updater.errors import UpdateError
from services.updater.update_id import validate_update_id
from shared import homes, layout
from shared.files import fsync_dir, write_json_atomic

# The one definition of what a quick snapshot holds, relative to a profile home.
# A trailing "/" marks a directory, copied recursively.
SNAPSHOT_SET: tuple[str, ...] = (
    layout.CONFIG_FILE,
    "config.json",
    layout.SECRETS_FILE,
    layout.PROFILE_AUTH_FILE,
    layout.NOUS_STORE_FILE,  # the account store: only the root home has one
    layout.GUEST_HANDOFF_FILE,
    layout.GATEWAY_STATE_FILE,
    layout.GATEWAY_STARTS_FILE,
    "cron/jobs.json",
    f"{layout.SKINS_DIR}/",
)
MAX_FILE_BYTES = 1 << 30
KEEP = 1

SNAPSHOTS_DIR = "state-snapshots"
MANIFEST = "manifest.json"
BACKUPS_DIR = "backups"
# Left out of a full archive in every home: sockets, the supervisor's runtime files, logs, and
# the snapshots and archives themselves (an archive must not nest its predecessors).
BACKUP_EXCLUDED = frozenset({"run", "state-snapshots", "backups", "logs", "mesh"})

_PRIVATE_DIR = 0o700
_TMP_PREFIX = ".tmp-"
_SNAPSHOT_NAME = re.compile(r"^\d{8}_\d{6}_.+$")
_CHUNK = 1 << 20


class SnapshotFailed(UpdateError):
    code = "snapshot_failed"

    def __init__(self, profile: str, home: Path, cause: OSError) -> None:
        why = cause.strerror or str(cause)
        where = f" ({cause.filename})" if cause.filename else ""
        super().__init__(
            f"cannot snapshot profile {profile!r} at {home}: {why}{where}; nothing was changed",
            detail={"profile": profile, "home": str(home), "cause": type(cause).__name__, "errno": cause.errno},
        )
        self.profile = profile
        self.cause = cause


class BackupFailed(UpdateError):
    code = "backup_failed"

    def __init__(self, root: Path, cause: OSError) -> None:
        why = cause.strerror or str(cause)
        where = f" ({cause.filename})" if cause.filename else ""
        super().__init__(
            f"cannot archive {root}: {why}{where}",
            detail={"root": str(root), "cause": type(cause).__name__, "errno": cause.errno},
        )
        self.cause = cause


# --- quick snapshots --------------------------------------------------------------------------


@dataclass
class _Tally:
    files: list[dict[str, Any]] = field(default_factory=list)
    skipped_large: list[dict[str, Any]] = field(default_factory=list)
    skipped_special: list[str] = field(default_factory=list)  # fifos, sockets, a dir where a file belongs
    missing: list[str] = field(default_factory=list)


def snapshot_all(root: Path, update_id: str) -> list[dict[str, Any]]:
    """Snapshot every profile of ``root``; all or nothing. One summary per profile, default first."""
    validate_update_id(update_id)  # it names the snapshot and the archive
    root = Path(root).absolute()
    now = datetime.now(UTC)
    name = f"{now:%Y%m%d_%H%M%S}_{update_id}"
    created_at = now.isoformat(timespec="seconds")
    taken: list[dict[str, Any]] = []
    try:
        for profile in homes.list_profiles(root):
            home = homes.profile_home(profile, root)
            try:
                taken.append(_snapshot_profile(profile, home, name, update_id, created_at))
            except OSError as exc:
                raise SnapshotFailed(profile, home, exc) from exc
    except BaseException:
        for summary in taken:
            shutil.rmtree(summary["path"], ignore_errors=True)
        raise
    # Only once every profile has its new snapshot may an old one go.
    for summary in taken:
        summary["pruned"], summary["prune_errors"] = _prune(Path(summary["path"]))
    return taken


def _snapshot_profile(profile: str, home: Path, name: str, update_id: str, created_at: str) -> dict[str, Any]:
    base = home / SNAPSHOTS_DIR
    base.mkdir(mode=_PRIVATE_DIR, exist_ok=True)  # raises if something that is not a dir is there
    final = base / name
    if final.exists():
        raise FileExistsError(errno.EEXIST, "a snapshot of this name exists", str(final))
    # Built aside and renamed into place, so a snapshot dir with its final name is complete.
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{name}.", dir=base))
    try:
        tally = _Tally()
        for member in SNAPSHOT_SET:
            _copy_member(home, tmp, member, tally)
        manifest = {
            "update_id": update_id,
            "profile": profile,
            "home": str(home),
            "created_at": created_at,
            "set": list(SNAPSHOT_SET),
            "files": tally.files,
            "skipped_large": tally.skipped_large,
            "skipped_special": tally.skipped_special,
            "missing": tally.missing,
        }
        write_json_atomic(tmp / MANIFEST, manifest)
        os.rename(tmp, final)
        fsync_dir(base)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "profile": profile,
        "path": str(final),
        "files": len(tally.files),
        "bytes": sum(f["bytes"] for f in tally.files),
        "skipped_large": tally.skipped_large,
        "skipped_special": tally.skipped_special,
        "missing": tally.missing,
    }


def _copy_member(home: Path, dest: Path, member: str, tally: _Tally) -> None:
    rel = member.rstrip("/")
    if member.endswith("/"):
        _copy_tree(home / rel, dest / rel, rel, tally)
        return
    _copy_file(home / rel, dest / rel, rel, tally, parents=(home, dest))


def _copy_tree(src: Path, dst: Path, rel: str, tally: _Tally) -> None:
    try:
        entries = sorted(os.scandir(src), key=lambda e: e.name)
        mode = os.stat(src).st_mode
    except FileNotFoundError:
        tally.missing.append(rel)
        return
    except NotADirectoryError:
        tally.skipped_special.append(rel)
        return
    _mkdir_like(dst, mode)
    for entry in entries:
        child = f"{rel}/{entry.name}"
        # Sub-directories are walked only as real dirs: a symlinked dir could loop.
        if entry.is_dir(follow_symlinks=False):
            _copy_tree(Path(entry.path), dst / entry.name, child, tally)
        else:
            _copy_file(Path(entry.path), dst / entry.name, child, tally)


def _copy_file(src: Path, dst: Path, rel: str, tally: _Tally, parents: tuple[Path, Path] | None = None) -> None:
    try:
        # Follows a symlinked config to its content; O_NONBLOCK so a fifo cannot hang us.
        fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        tally.missing.append(rel)
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            tally.skipped_special.append(rel)
            return
        if st.st_size > MAX_FILE_BYTES:
            tally.skipped_large.append({"path": rel, "bytes": st.st_size})
            return
        if parents is not None:
            _make_parents(*parents, rel)
        size, digest = _copy_fd(fd, dst, st)
    finally:
        os.close(fd)
    tally.files.append({"path": rel, "bytes": size, "sha256": digest})


def _make_parents(src_root: Path, dst_root: Path, rel: str) -> None:
    for parent in reversed(Path(rel).parents[:-1]):  # "cron/jobs.json" -> "cron"
        target = dst_root / parent
        if not target.is_dir():
            _mkdir_like(target, os.stat(src_root / parent).st_mode)


def _mkdir_like(path: Path, source_mode: int) -> None:
    os.mkdir(path, _PRIVATE_DIR)
    # The owner keeps full access whatever the source says, so the snapshot can be pruned.
    os.chmod(path, stat.S_IMODE(source_mode) | _PRIVATE_DIR)


def _copy_fd(src_fd: int, dst: Path, st: os.stat_result) -> tuple[int, str]:
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(out, "wb") as f:
        # The source's mode before any byte lands: a 0600 secret is never briefly wider.
        os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
        while chunk := os.read(src_fd, _CHUNK):
            digest.update(chunk)
            f.write(chunk)
            size += len(chunk)
        f.flush()
        os.fsync(f.fileno())
        os.utime(f.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
    return size, digest.hexdigest()


def _prune(keep: Path) -> tuple[list[str], list[str]]:
    """Remove the older snapshots (and leftover temp dirs) beside ``keep``; the newest KEEP stay."""
    base = keep.parent
    others = sorted(
        (e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False) and e.name != keep.name),
        reverse=True,
    )
    snapshots = [n for n in others if _SNAPSHOT_NAME.fullmatch(n)]
    doomed = snapshots[KEEP - 1 :] + [n for n in others if n.startswith(_TMP_PREFIX)]
    pruned: list[str] = []
    errors: list[str] = []
    for name in doomed:
        try:
            shutil.rmtree(base / name)
        except OSError as exc:
            # The new snapshot is complete; a leftover old one costs space, not safety.
            errors.append(f"{name}: {exc.strerror or exc}")
        else:
            pruned.append(name)
    return pruned, errors


# --- the full archive -------------------------------------------------------------------------


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through to ``raw``."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.digest = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes, /) -> int:
        self.digest.update(data)
        self.bytes += len(data)
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()

    def tell(self) -> int:
        return self.bytes

    def read(self, size: int = -1, /) -> bytes:
        raise io.UnsupportedOperation("a hashing writer is write-only")

    def seek(self, pos: int, whence: int = 0, /) -> int:
        raise io.UnsupportedOperation("a hashing writer is write-only")

    def close(self) -> None:
        pass  # the raw file is closed by whoever opened it


def full_backup(root: Path, update_id: str) -> dict[str, Any]:
    """Archive the root home (all profiles) to ``backups/update_<id>.tar.gz`` for rollback."""
    validate_update_id(update_id)  # it names the snapshot and the archive
    root = Path(root).absolute()
    directory = root / BACKUPS_DIR
    final = directory / f"update_{update_id}.tar.gz"
    try:
        directory.mkdir(mode=_PRIVATE_DIR, exist_ok=True)
        # 0600 from creation: the archive holds every profile's secrets.
        fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise BackupFailed(root, exc) from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw:
            sink = _HashingWriter(raw)
            with tarfile.open(fileobj=sink, mode="w:gz", compresslevel=6) as tar:
                for path, arcname in _backup_members(root):
                    try:
                        tar.add(path, arcname, recursive=False)  # sockets are skipped by tarfile
                    except FileNotFoundError:
                        continue  # removed since the walk saw it
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, final)
        fsync_dir(directory)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise BackupFailed(root, exc) from exc
        raise
    return {"path": str(final), "bytes": sink.bytes, "sha256": sink.digest.hexdigest()}


def _backup_members(root: Path) -> Iterator[tuple[Path, str]]:
    """(path, archive name) of everything in the root home but the excluded dirs of each home."""

    def fail(exc: OSError) -> None:
        if not isinstance(exc, FileNotFoundError):  # a dir removed since it was listed is no loss
            raise exc  # an unreadable one would leave the archive silently incomplete

    home_dirs = {homes.profile_home(p, root).relative_to(root) for p in homes.list_profiles(root)}
    for dirpath, dirnames, filenames in os.walk(root, onerror=fail):
        rel = Path(dirpath).relative_to(root)
        if rel in home_dirs:
            dirnames[:] = [d for d in dirnames if d not in BACKUP_EXCLUDED]
        dirnames.sort()
        for name in [*dirnames, *sorted(filenames)]:
            yield Path(dirpath) / name, (rel / name).as_posix()
