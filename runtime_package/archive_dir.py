"""A package directory read into archive entries, for the build script and for tests.

A package must be clean: everything under the directory goes into the archive or the read
fails, so nothing is skipped silently. Symlinks, special files, empty directories (which an
archive cannot hold), byte-code caches and files that break the archive's path rules are each
refused, naming the file: the directory is the builder's own tree, not untrusted input.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runtime_package import archive
from runtime_package.archive import ArchiveInvalid, Entry, check_path
from runtime_package.package_errors import RuntimePackageError


class PackageDirInvalid(RuntimePackageError):
    code = "package_dir_invalid"

    def __init__(self, rel: str, problem: str) -> None:
        # ascii() keeps a hostile name on one printable line.
        super().__init__(f"{ascii(rel)}: {problem}", detail={"path": rel, "problem": problem})


def entries_from_dir(path: Path) -> list[Entry]:
    """Every regular file under ``path``, as entries with ``/``-separated relative paths; any
    execute bit makes an entry executable."""
    root = Path(path)
    try:
        mode = os.stat(root).st_mode
    except OSError as exc:
        raise PackageDirInvalid(str(root), f"cannot be read: {exc.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise PackageDirInvalid(str(root), "is not a directory")
    entries: list[Entry] = []
    _walk(root, "", entries)
    return entries


def _walk(directory: Path, rel: str, entries: list[Entry]) -> None:
    try:
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise PackageDirInvalid(rel or str(directory), f"cannot be listed: {exc.strerror}") from None
    if rel and not children:
        raise PackageDirInvalid(rel, "is an empty directory, which an archive cannot hold")
    for child in children:
        child_rel = f"{rel}/{child.name}" if rel else child.name
        if child.name == "__pycache__" or child.name.endswith(".pyc"):
            raise PackageDirInvalid(child_rel, "is a byte-code cache: a package must be clean")
        if child.is_symlink():
            raise PackageDirInvalid(child_rel, "is a symlink")
        if child.is_dir(follow_symlinks=False):
            _walk(Path(child.path), child_rel, entries)
        elif child.is_file(follow_symlinks=False):
            entries.append(_read_file(Path(child.path), child_rel))
            if len(entries) > archive.MAX_FILES:
                raise PackageDirInvalid(child_rel, f"is past the limit of {archive.MAX_FILES} files")
        else:
            raise PackageDirInvalid(child_rel, "is not a regular file or a directory")


def _read_file(path: Path, rel: str) -> Entry:
    try:
        check_path(rel)
    except ArchiveInvalid:
        raise PackageDirInvalid(rel, "breaks the archive path rules") from None
    # O_NOFOLLOW, O_NONBLOCK and fstat: a file swapped for a symlink or a fifo after the scan
    # is refused, never followed or waited on.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise PackageDirInvalid(rel, "is not a regular file")
            if info.st_size > archive.MAX_FILE:
                raise PackageDirInvalid(rel, f"is larger than {archive.MAX_FILE} bytes")
            data = f.read(archive.MAX_FILE + 1)
    except OSError as exc:
        raise PackageDirInvalid(rel, f"cannot be read: {exc.strerror}") from None
    if len(data) > archive.MAX_FILE:
        raise PackageDirInvalid(rel, f"is larger than {archive.MAX_FILE} bytes")
    return Entry(rel, data, bool(info.st_mode & 0o111))
