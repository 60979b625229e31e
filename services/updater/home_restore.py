"""A rollback's restore of the root home from the ``--backup`` archive of the update it undoes.

The archive is a file from disk: it is checked against the digest its receipt recorded, then
unpacked whole into a staging directory beside it through tarfile's ``data`` filter (no
absolute path, no ``..``, no device; links are not restored at all), and only then moved into
the home file by file, each with one rename, never through a symlinked directory. What the
archive does not hold is kept. Never restored: what the updater and the running processes
own now, the obligations, the gateways' runtime files and the lock files.

The restore is owed (``obligations``) from just before the tree moves until it is done, so a
kill mid-restore leaves it owed and the next update restores again from the start: the same
bytes renamed into the same places.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

from services.updater.rollback import ArchiveUnusable, check_archive
from services.updater.snapshot import BACKUPS_DIR
from shared.files import PRIVATE_DIR_MODE, make_parents_within
from shared.layout import GATEWAY_STARTS_FILE, GATEWAY_STATE_FILE

NEVER_RESTORED_DIRS = frozenset({"obligations"})
NEVER_RESTORED_NAMES = frozenset({GATEWAY_STATE_FILE, GATEWAY_STARTS_FILE})


def restore_home(root: Path, backup: dict[str, Any], work_id: str) -> dict[str, Any]:
    """Put the archive's files back into ``root``; what was restored and what was not."""
    check_archive(backup)
    root = Path(root).absolute()
    staging = root / BACKUPS_DIR / f".restore-{work_id}"
    shutil.rmtree(staging, ignore_errors=True)  # a restore a kill cut short starts over
    staging.mkdir(mode=PRIVATE_DIR_MODE)
    refused: list[str] = []
    try:
        try:
            with tarfile.open(backup["path"], "r:gz") as tar:
                tar.extractall(staging, filter=_only_data(refused))
        except (tarfile.TarError, EOFError) as exc:
            raise ArchiveUnusable(
                f"the backup archive {backup['path']} cannot be unpacked: {exc}", detail={"path": backup["path"]}
            ) from None
        restored = _move_in(staging, root, refused)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"archive": backup["path"], "restored": restored, "not_restored": sorted(refused)}


def _only_data(refused: list[str]):
    def check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if member.issym() or member.islnk():
            refused.append(member.name)
            return None
        try:
            return tarfile.data_filter(member, dest)
        except tarfile.FilterError:
            refused.append(member.name)
            return None

    return check


def kept(rel: Path) -> bool:
    """Whether ``rel`` (relative to the root home) belongs to the processes running now."""
    return rel.parts[0] in NEVER_RESTORED_DIRS or rel.name in NEVER_RESTORED_NAMES or rel.name.endswith(".lock")


def _move_in(staging: Path, root: Path, refused: list[str]) -> int:
    restored = 0
    for dirpath, dirnames, filenames in os.walk(staging):
        dirnames.sort()
        for name in sorted(filenames):
            source = Path(dirpath) / name
            rel = source.relative_to(staging)
            if kept(rel) or not source.is_file() or source.is_symlink():
                continue
            if not _real_parents(root, rel):
                refused.append(rel.as_posix())
                continue
            os.replace(source, root / rel)
            restored += 1
    return restored


def _real_parents(root: Path, rel: Path) -> bool:
    """Make ``rel``'s parent directories inside ``root``; False when one of them, or ``rel``
    itself, is in the way (a symlink, a file, a directory)."""
    if make_parents_within(root, rel) is not None:
        return False
    target = root / rel
    return not target.is_dir() or target.is_symlink()
