"""The version of this install and the git commit its code was taken from.

Read straight from ``.git`` (no ``git`` subprocess) so that ``hermes --version`` stays fast.

An update that installed a release from its source archive (git itself was failing) leaves
HEAD where it was; it writes a code stamp into the git directory naming the archive's commit
and the HEAD it was laid over. The stamp speaks for the tree only while HEAD has not moved
since: any later checkout or pull makes git the authority again.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, TypeGuard

__version__ = "0.1.0"
# The Hermes Agent CLI contract this mesh implements, and that release's date: what
# ``hermes --version`` names first, so that a probe written for the real Hermes Agent reads
# this install as that release.
AGENT_RELEASE = "0.20.0"
AGENT_RELEASE_DATE = "2026.8.3"
# What may follow the release on the version line: the operator's installer accepts the
# release alone or continued by this, then anything.
METADATA_SEPARATOR = " · "

INSTALL_ROOT = Path(__file__).resolve().parent.parent
# The product's top-level packages under it: the code an update swaps and compiles.
PACKAGES = ("shared", "fleet", "runtime_package", "nous", "services", "simulators", "hermes_cli")
_SHA_RE = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def is_commit_sha(value: object) -> TypeGuard[str]:
    """A full commit id, SHA-1 or SHA-256 (safe to put on a git command line)."""
    return isinstance(value, str) and _SHA_RE.fullmatch(value) is not None


CODE_STAMP = "hermes-code-stamp.json"
IMAGE_REVISION = "hermes-code-revision"  # beside the installed packages, in an image
_VERSION_RE = re.compile(r"""^__version__\s*=\s*["']([^"'\s]+)["']""", re.MULTILINE)
_PROJECT_VERSION_RE = re.compile(r"""^version\s*=\s*["']([^"'\s]+)["']""", re.MULTILINE)


def code_sha(root: Path = INSTALL_ROOT) -> str | None:
    """The commit whose code is at ``root``: the archive update's stamp, the checkout's HEAD,
    or the revision an image build wrote beside the installed code; ``None`` when none says."""
    stamp = code_stamp(root)
    return stamp["code_sha"] if stamp else head_commit(root) or image_revision(root)


def image_revision(root: Path = INSTALL_ROOT) -> str | None:
    """The commit an image was built from (``compose/Containerfile`` writes it, as a full id)."""
    try:
        text = (root / IMAGE_REVISION).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _SHA_RE.fullmatch(text) else None


def version_line() -> str:
    """What ``hermes --version`` prints: the Hermes Agent release whose CLI contract this mesh
    implements, exactly as that release prints it, then this mesh's own version and the commit
    of the code this command runs:
    ``Hermes Agent v0.20.0 (2026.8.3) · hermes-mesh 0.1.0 · 0123456789ab``."""
    sha = code_sha()
    release = f"Hermes Agent v{AGENT_RELEASE} ({AGENT_RELEASE_DATE})"
    return METADATA_SEPARATOR.join((release, f"hermes-mesh {__version__}", sha[:12] if sha else "no git checkout"))


def version_document() -> dict[str, str | None]:
    """``hermes --version --json``: the same, one field each (the full commit, or None)."""
    return {
        "agent_release": AGENT_RELEASE,
        "agent_release_date": AGENT_RELEASE_DATE,
        "version": __version__,
        "code_sha": code_sha(),
    }


def read_version(root: Path) -> str | None:
    """The version of the code at ``root``, read from its files, never imported: an updater
    asks this of a tree it moved, whose modules its own interpreter must not load. This
    module's ``__version__`` line, else pyproject.toml's first ``version =``; None if neither."""
    for relative, pattern in (("shared/version.py", _VERSION_RE), ("pyproject.toml", _PROJECT_VERSION_RE)):
        try:
            found = pattern.search((Path(root) / relative).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if found:
            return found.group(1)
    return None


def code_stamp(root: Path = INSTALL_ROOT) -> dict[str, Any] | None:
    """The archive update's stamp, if there is one and HEAD is still the one it was laid over."""
    git_dir = git_dir_of(root)
    if git_dir is None:
        return None
    try:
        stamp = json.loads((git_dir / CODE_STAMP).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or not all(
        _SHA_RE.fullmatch(str(stamp.get(k, ""))) for k in ("code_sha", "over_head")
    ):
        return None
    return stamp if stamp["over_head"] == head_commit(root) else None


def head_commit(root: Path = INSTALL_ROOT) -> str | None:
    """The commit HEAD points at, or ``None`` when ``root`` is not a git checkout."""
    git_dir = git_dir_of(root)
    if git_dir is None:
        return None
    try:
        head = (git_dir / "HEAD").read_text().strip()
    except OSError:
        return None
    if _SHA_RE.fullmatch(head):  # detached HEAD
        return head
    if not head.startswith("ref: "):
        return None
    return _resolve_ref(git_dir, head[5:].strip())


def current_branch(root: Path = INSTALL_ROOT) -> str | None:
    """The branch checked out at ``root``; ``None`` for a detached HEAD or no checkout."""
    git_dir = git_dir_of(root)
    try:
        head = (git_dir / "HEAD").read_text().strip() if git_dir else ""
    except OSError:
        return None
    return head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") else None


def git_dir_of(root: Path) -> Path | None:
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
        if _SHA_RE.fullmatch(value):
            return value
    try:
        packed = (common / "packed-refs").read_text()
    except OSError:
        return None
    for line in packed.splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and parts[1] == ref and _SHA_RE.fullmatch(parts[0]):
            return parts[0]
    return None


def _common_dir(git_dir: Path) -> Path:
    try:
        text = (git_dir / "commondir").read_text().strip()
    except OSError:
        return git_dir
    path = Path(text)
    return path if path.is_absolute() else Path(os.path.normpath(git_dir / path))
