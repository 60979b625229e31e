"""What ``hermes profile create NAME --clone-from SOURCE`` copies of the source profile, and how.

A clone starts with the source's settings and identity, as the Hermes Agent's clone does:
``config.yaml``, ``.env``, ``SOUL.md``, ``skills/`` and the memories ``memories/MEMORY.md`` and
``memories/USER.md``. Nothing of the source's life comes with it (chat sessions, state, the
``run/`` sockets and locks, logs, snapshots, ``gateway_state.json``): only these are copied.

Every entry is opened from its parent's open directory without following a link, so a link
planted in the source (at one of these names, or anywhere under ``skills/``) is skipped and
named, never followed out of the source; so is anything not a plain file or directory, and a
directory deeper than ``MAX_DEPTH``. A copy is owner-only (an executable skill stays
executable); ``.env`` is 0600. What is copied is read, never printed.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path, PurePosixPath

CLONED = ("config.yaml", ".env", "SOUL.md", "skills", "memories/MEMORY.md", "memories/USER.md")
TREES = frozenset({"skills"})  # copied whole; the others are single files
SECRET = frozenset({".env"})
MAX_DEPTH = 32
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_profile_files(source: Path, target: Path) -> tuple[list[str], list[str]]:
    """Copy into ``target``, a new home, what a clone takes of ``source``: the entries of
    ``CLONED`` that were copied, and the paths (relative to ``source``) that were skipped."""
    copied: list[str] = []
    skipped: list[str] = []
    root = os.open(source, _DIR)
    try:
        for name in CLONED:
            rel = PurePosixPath(name)
            parent = _open_parents(root, rel, skipped)
            if parent is None:
                continue
            try:
                if _copy_entry(parent, rel, target, skipped, tree=name in TREES, depth=0):
                    copied.append(name)
            finally:
                if parent != root:
                    os.close(parent)
    finally:
        os.close(root)
    return copied, skipped


def _open_parents(root: int, rel: PurePosixPath, skipped: list[str]) -> int | None:
    """The open directory ``rel`` is in (``root`` itself for a top-level name); None when a
    directory on the way is missing, or is not a real directory (then skipped)."""
    fd = root
    for depth, part in enumerate(rel.parts[:-1]):
        try:
            inner = os.open(part, _DIR, dir_fd=fd)
        except FileNotFoundError:
            inner = None
        except OSError:  # a link (ELOOP) or not a directory (ENOTDIR)
            where = str(PurePosixPath(*rel.parts[: depth + 1]))
            if where not in skipped:
                skipped.append(where)
            inner = None
        if fd != root:
            os.close(fd)
        if inner is None:
            return None
        fd = inner
    return fd


def _copy_entry(parent: int, rel: PurePosixPath, target: Path, skipped: list[str], *, tree: bool, depth: int) -> bool:
    """Copy ``rel`` (named in the open directory ``parent``) to ``target / rel``; whether
    something was copied."""
    try:
        mode = os.stat(rel.name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISREG(mode):
        return _copy_file(parent, rel, target, skipped)
    if stat.S_ISDIR(mode) and tree and depth < MAX_DEPTH:
        return _copy_tree(parent, rel, target, skipped, depth)
    skipped.append(str(rel))
    return False


def _copy_file(parent: int, rel: PurePosixPath, target: Path, skipped: list[str]) -> bool:
    try:
        # O_NONBLOCK: a FIFO put in the file's place between the stat and here must not hang us.
        fd = os.open(rel.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        skipped.append(str(rel))
        return False
    with open(fd, "rb") as reader:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            skipped.append(str(rel))
            return False
        mode = 0o600 if str(rel) in SECRET else (stat.S_IMODE(st.st_mode) & 0o700) | 0o600
        destination = target / rel
        destination.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        out = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(out, "wb") as writer:
            os.fchmod(out, mode)  # whatever the umask
            shutil.copyfileobj(reader, writer)
            writer.flush()
            os.fsync(out)
    return True


def _copy_tree(parent: int, rel: PurePosixPath, target: Path, skipped: list[str], depth: int) -> bool:
    try:
        fd = os.open(rel.name, _DIR, dir_fd=parent)
    except OSError:  # swapped for a link since the stat
        skipped.append(str(rel))
        return False
    try:
        os.makedirs(target / rel, mode=0o700, exist_ok=True)
        for name in sorted(os.listdir(fd)):
            _copy_entry(fd, rel / name, target, skipped, tree=True, depth=depth + 1)
    finally:
        os.close(fd)
    return True
