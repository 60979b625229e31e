"""Putting a profile's files back from its quick snapshot: file-loss recovery.

A snapshot is a directory from disk, so nothing in it is trusted: its manifest must name
only members of ``SNAPSHOT_SET`` (a file of the set, or one under a directory of it), as
relative paths that stay inside the snapshot and the home, and every file must be there,
a regular file and no symlink, with the digest the manifest recorded. One that is not makes
the whole restore refused before any file is written. Each file then replaces its original
atomically (a temp file beside it, renamed over it), never through a symlinked directory;
what the snapshot does not hold is kept. A profile whose gateway runs is refused: it owns its
state files and would write them over the restored ones.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from fleet import discovery
from services.updater.errors import UpdateError
from services.updater.snapshot import MANIFEST, SNAPSHOT_SET, SNAPSHOTS_DIR
from shared import homes
from shared.files import StateFileCorrupt, file_sha256, make_parents_within, read_json

_NAME = re.compile(r"^\d{8}_\d{6}_.+$")  # as the snapshot writer names them
_CHUNK = 1 << 20
_FILES = frozenset(m for m in SNAPSHOT_SET if not m.endswith("/"))
_DIRS = tuple(m for m in SNAPSHOT_SET if m.endswith("/"))


class SnapshotUnusable(UpdateError):
    code = "snapshot_unusable"


class GatewayRunning(UpdateError):
    code = "gateway_running"


class RestoreFailed(UpdateError):
    code = "snapshot_restore_failed"


def list_snapshots(root: Path, profile: str | None = None) -> list[dict[str, Any]]:
    """Every kept snapshot of ``profile`` (default: of every profile), newest first per profile."""
    names = [profile] if profile is not None else homes.list_profiles(root)
    found: list[dict[str, Any]] = []
    for name in names:
        home = homes.profile_home(name, root, must_exist=True)
        for path in _snapshot_dirs(home):
            entry: dict[str, Any] = {"profile": name, "name": path.name, "path": str(path)}
            try:
                manifest = _manifest(path, name)
                entry.update(update_id=manifest["update_id"], created_at=manifest["created_at"])
                entry.update(files=len(manifest["files"]), complete=True, problem=None)
            except SnapshotUnusable as exc:
                entry.update(update_id=None, created_at=None, files=None, complete=False, problem=exc.message)
            found.append(entry)
    return found


def restore_snapshot(root: Path, profile: str, update_id: str | None = None) -> dict[str, Any]:
    """Restore ``profile``'s files from its newest snapshot (or the one of ``update_id``)."""
    home = homes.profile_home(profile, root, must_exist=True).absolute()
    _refuse_if_running(root, profile)
    path = _pick(home, profile, update_id)
    manifest = _manifest(path, profile)
    members = [(PurePosixPath(f["path"]), f) for f in manifest["files"]]
    for rel, entry in members:  # every file checked before any is written
        _check_copy(path, rel, entry)
    restored: list[str] = []
    unchanged: list[str] = []
    for rel, entry in members:
        target = _target(home, rel)
        if _digest_of(target) == entry["sha256"]:
            unchanged.append(str(rel))
            continue
        try:
            _replace(path / rel, target, entry["sha256"])
        except OSError as exc:
            raise RestoreFailed(
                f"cannot restore {target}: {exc.strerror or exc}; restored before it: {', '.join(restored) or 'none'}",
                detail={"path": str(target), "restored": restored},
            ) from None
        restored.append(str(rel))
    return {
        "profile": profile,
        "home": str(home),
        "snapshot": str(path),
        "update_id": manifest["update_id"],
        "restored": restored,
        "unchanged": unchanged,
        # What the snapshot does not hold stays as it is in the home.
        "not_in_snapshot": manifest["missing"],
    }


def _refuse_if_running(root: Path, profile: str) -> None:
    for record in discovery.discover(root):
        if record.profile == profile:
            raise GatewayRunning(
                f"the gateway of profile {profile!r} runs (pid {record.pid}, {record.supervisor}, {record.state}): "
                f"it owns its files; stop it first (`hermes -p {profile} gateway stop`)",
                detail={"profile": profile, "pid": record.pid, "supervisor": record.supervisor},
            )


def _snapshot_dirs(home: Path) -> list[Path]:
    base = home / SNAPSHOTS_DIR
    try:
        entries = [e for e in os.scandir(base) if _NAME.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [base / name for name in sorted((e.name for e in entries), reverse=True)]


def _pick(home: Path, profile: str, update_id: str | None) -> Path:
    dirs = _snapshot_dirs(home)
    if update_id is not None:
        dirs = [d for d in dirs if d.name.endswith(f"_{update_id}")]
    if not dirs:
        which = f"of update {update_id} " if update_id else ""
        raise SnapshotUnusable(
            f"profile {profile!r} has no snapshot {which}in {home / SNAPSHOTS_DIR}",
            detail={"profile": profile, "update_id": update_id},
        )
    return dirs[0]


def _manifest(path: Path, profile: str) -> dict[str, Any]:
    """The snapshot's manifest, if it is one the snapshot writer could have made."""

    def bad(why: str) -> SnapshotUnusable:
        return SnapshotUnusable(f"the snapshot {path} is not usable: {why}", detail={"snapshot": str(path)})

    try:
        data = read_json(path / MANIFEST)
    except FileNotFoundError:
        raise bad("it has no manifest (incomplete)") from None
    except (StateFileCorrupt, OSError) as exc:
        raise bad(f"its manifest cannot be read ({exc})") from None
    files, missing = data.get("files"), data.get("missing")
    if data.get("profile") != profile or not isinstance(data.get("update_id"), str):
        raise bad(f"its manifest is not of profile {profile!r}")
    if not isinstance(files, list) or not isinstance(missing, list):
        raise bad("its manifest lists no files")
    for entry in files:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("path"), str)
            and isinstance(entry.get("sha256"), str)
            and _member(entry["path"])
        ):
            raise bad(f"its manifest names a file outside the snapshot set: {entry!r}"[:300])
    return data


def _member(text: str) -> bool:
    """A relative path of ``SNAPSHOT_SET``'s, staying where it is put."""
    rel = PurePosixPath(text)
    if rel.is_absolute() or not rel.parts or any(p in ("", ".", "..") for p in rel.parts) or "\\" in text:
        return False
    return text in _FILES or any(text.startswith(d) and len(rel.parts) > 1 for d in _DIRS)


def _check_copy(snapshot: Path, rel: PurePosixPath, entry: dict[str, Any]) -> None:
    here = snapshot
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            raise SnapshotUnusable(
                f"the snapshot {snapshot} is not usable: {rel} goes through a symlink", detail={"path": str(rel)}
            )
    if not here.is_file():
        raise SnapshotUnusable(
            f"the snapshot {snapshot} is incomplete: {rel} is missing", detail={"snapshot": str(snapshot)}
        )
    if _digest_of(here) != entry["sha256"]:
        raise SnapshotUnusable(
            f"the snapshot {snapshot} is corrupt: {rel} does not have the digest its manifest recorded",
            detail={"snapshot": str(snapshot), "path": str(rel)},
        )


def _target(home: Path, rel: PurePosixPath) -> Path:
    """Where ``rel`` goes in ``home``, its parent directories made; never through a symlink."""
    blocked = make_parents_within(home, rel)
    if blocked is not None:
        raise SnapshotUnusable(
            f"{blocked} is not a directory of the home (a symlink or a file): {rel} is not restored",
            detail={"path": str(blocked)},
        )
    return home / rel


def _digest_of(path: Path) -> str | None:
    try:
        return file_sha256(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _replace(source: Path, target: Path, digest: str) -> None:
    """Copy ``source`` over ``target`` atomically, with its mode, if it still has ``digest``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        sha = hashlib.sha256()
        with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), stat.S_IMODE(os.fstat(src.fileno()).st_mode))
            while chunk := src.read(_CHUNK):
                sha.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if sha.hexdigest() != digest:
            raise SnapshotUnusable(f"{source} changed while it was restored", detail={"path": str(source)})
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
