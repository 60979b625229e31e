"""The version of this install and the git commit its code was taken from.

Read straight from ``.git`` (no ``git`` subprocess) so that ``hermes --version`` stays fast:
the commit is a few small file reads with ``os`` alone, and nothing heavier (json, re,
pathlib, typing) is imported on that path.

An update that installed a release from its source archive (git itself was failing) leaves
HEAD where it was; it writes a code stamp into the git directory naming the archive's commit
and the HEAD it was laid over. The stamp speaks for the tree only while HEAD has not moved
since: any later checkout or pull makes git the authority again.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's own flag without importing typing; mypy reads it as true
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, TypeGuard

    StrPath = str | os.PathLike[str]
    INSTALL_ROOT: Path

__version__ = "0.1.0"
# The Hermes Agent CLI contract this mesh implements, and that release's date: what
# ``hermes --version`` names first, so that a probe written for the real Hermes Agent reads
# this install as that release.
AGENT_RELEASE = "0.20.0"
AGENT_RELEASE_DATE = "2026.8.3"
# What may follow the release on the version line: the operator's installer accepts the
# release alone or continued by this, then anything.
METADATA_SEPARATOR = " · "

# The install's root as a string; ``INSTALL_ROOT`` is its Path, made on first use.
_INSTALL_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_HEX = "0123456789abcdef"
# The product's top-level packages under it: the code an update swaps and compiles.
PACKAGES = ("shared", "fleet", "runtime_package", "nous", "services", "simulators", "hermes_cli")


def __getattr__(name: str) -> Any:
    if name == "INSTALL_ROOT":
        from pathlib import Path

        return Path(_INSTALL_DIR)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_commit_sha(value: object) -> TypeGuard[str]:
    """A full commit id, SHA-1 or SHA-256 (safe to put on a git command line): 40 or 64
    lower-case hex digits."""
    return isinstance(value, str) and len(value) in (40, 64) and not value.strip(_HEX)


CODE_STAMP = "hermes-code-stamp.json"
IMAGE_REVISION = "hermes-code-revision"  # beside the installed packages, in an image
_VERSION_LINE = r"""^__version__\s*=\s*["']([^"'\s]+)["']"""
_PROJECT_VERSION_LINE = r"""^version\s*=\s*["']([^"'\s]+)["']"""


def code_sha(root: StrPath = _INSTALL_DIR) -> str | None:
    """The commit whose code is at ``root``: the archive update's stamp, the checkout's HEAD,
    or the revision an image build wrote beside the installed code; ``None`` when none says."""
    stamp = code_stamp(root)
    return stamp["code_sha"] if stamp else head_commit(root) or image_revision(root)


def image_revision(root: StrPath = _INSTALL_DIR) -> str | None:
    """The commit an image was built from (``compose/Containerfile`` writes it, as a full id)."""
    try:
        text = _read_text(os.path.join(root, IMAGE_REVISION), encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if is_commit_sha(text) else None


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


def read_version(root: StrPath) -> str | None:
    """The version of the code at ``root``, read from its files, never imported: an updater
    asks this of a tree it moved, whose modules its own interpreter must not load. This
    module's ``__version__`` line, else pyproject.toml's first ``version =``; None if neither."""
    import re

    for relative, pattern in (("shared/version.py", _VERSION_LINE), ("pyproject.toml", _PROJECT_VERSION_LINE)):
        try:
            text = _read_text(os.path.join(root, relative), encoding="utf-8", errors="replace")
        except OSError:
            continue
        if found := re.search(pattern, text, re.MULTILINE):
            return found.group(1)
    return None


def code_stamp(root: StrPath = _INSTALL_DIR) -> dict[str, Any] | None:
    """The archive update's stamp, if there is one and HEAD is still the one it was laid over."""
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    try:
        with open(os.path.join(git_dir, CODE_STAMP), "rb") as file:
            raw = file.read()
    except OSError:
        return None
    import json  # only where an archive update left a stamp

    try:
        stamp = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(stamp, dict) or not all(is_commit_sha(stamp.get(k)) for k in ("code_sha", "over_head")):
        return None
    return stamp if stamp["over_head"] == head_commit(root) else None


def head_commit(root: StrPath = _INSTALL_DIR) -> str | None:
    """The commit HEAD points at, or ``None`` when ``root`` is not a git checkout."""
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    try:
        head = _read_text(os.path.join(git_dir, "HEAD")).strip()
    except OSError:
        return None
    if is_commit_sha(head):  # detached HEAD
        return head
    if not head.startswith("ref: "):
        return None
    return _resolve_ref(git_dir, head[5:].strip())


def current_branch(root: StrPath = _INSTALL_DIR) -> str | None:
    """The branch checked out at ``root``; ``None`` for a detached HEAD or no checkout."""
    git_dir = _git_dir(root)
    try:
        head = _read_text(os.path.join(git_dir, "HEAD")).strip() if git_dir else ""
    except OSError:
        return None
    return head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") else None


def git_dir_of(root: StrPath) -> Path | None:
    from pathlib import Path

    git_dir = _git_dir(root)
    return None if git_dir is None else Path(git_dir)


def _git_dir(root: StrPath) -> str | None:
    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    if os.path.isfile(dot_git):  # a worktree or submodule: "gitdir: <path>"
        try:
            text = _read_text(dot_git).strip()
        except OSError:
            return None
        if text.startswith("gitdir: "):
            return os.path.join(root, text[8:])  # a relative gitdir is relative to root
    return None


def _resolve_ref(git_dir: str, ref: str) -> str | None:
    common = _common_dir(git_dir)
    for base in (git_dir, common):
        try:
            value = _read_text(os.path.join(base, ref)).strip()
        except OSError:
            continue
        if is_commit_sha(value):
            return value
    try:
        packed = _read_text(os.path.join(common, "packed-refs"))
    except OSError:
        return None
    for line in packed.splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and parts[1] == ref and is_commit_sha(parts[0]):
            return parts[0]
    return None


def _common_dir(git_dir: str) -> str:
    try:
        text = _read_text(os.path.join(git_dir, "commondir")).strip()
    except OSError:
        return git_dir
    return text if os.path.isabs(text) else os.path.normpath(os.path.join(git_dir, text))


def _read_text(path: str, encoding: str | None = None, errors: str | None = None) -> str:
    with open(path, encoding=encoding, errors=errors) as file:
        return file.read()
