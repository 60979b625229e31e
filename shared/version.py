"""The version of this install and the git commit its code was taken from.

Read straight from ``.git`` (no ``git`` subprocess) so that ``hermes --version`` stays fast.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__version__ = "0.1.0"

INSTALL_ROOT = Path(__file__).resolve().parent.parent
_SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def code_sha(root: Path = INSTALL_ROOT) -> str | None:
    """The commit checked out at ``root``, or ``None`` when it is not a git checkout."""
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    try:
        head = (git_dir / "HEAD").read_text().strip()
    except OSError:
        return None
    if _SHA_RE.match(head):  # detached HEAD
        return head
    if not head.startswith("ref: "):
        return None
    return _resolve_ref(git_dir, head[5:].strip())


def _git_dir(root: Path) -> Path | None:
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
        try:
            text = dot_git.read_text().strip()
        except OSError:
            return None
        if text.startswith("gitdir: "):
            target = Path(text[8:])
            return target if target.is_absolute() else (root / target)
    return None


def _resolve_ref(git_dir: Path, ref: str) -> str | None:
    common = _common_dir(git_dir)
    for base in (git_dir, common):
        try:
            value = (base / ref).read_text().strip()
        except OSError:
            continue
        if _SHA_RE.match(value):
            return value
    try:
        packed = (common / "packed-refs").read_text()
    except OSError:
        return None
    for line in packed.splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and parts[1] == ref and _SHA_RE.match(parts[0]):
            return parts[0]
    return None


def _common_dir(git_dir: Path) -> Path:
    try:
        text = (git_dir / "commondir").read_text().strip()
    except OSError:
        return git_dir
    path = Path(text)
    return path if path.is_absolute() else Path(os.path.normpath(git_dir / path))
