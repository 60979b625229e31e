"""Where a git update of the install would go, asked of git read-only.

Nothing here writes: ``ls-remote``, never ``fetch``, and ``GIT_OPTIONAL_LOCKS=0`` so that
``git status`` does not refresh the index behind our back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.updater.git import run
from shared.version import code_sha, code_stamp

GIT_TIMEOUT = 15.0
DEFAULT_BRANCH = "main"
# A plan names the first few dirty paths; the count says how many there are in all.
DIRTY_LIST_MAX = 50


def _git(root: Path, *args: str, timeout: float, ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
    """``git -C root args``, read-only: (exit code, stdout). Other exit codes and timeouts raise GitFailed."""
    proc = run(root, args, stage="plan", timeout=timeout, ok=ok, read_only=True)
    return proc.returncode, proc.stdout


def git_target(install_root: Path, branch: str | None = None, *, timeout: float = GIT_TIMEOUT) -> dict[str, Any]:
    """Where a git update of ``install_root`` would go, asked without fetching anything.

    ``ahead``/``behind`` are known only when the remote commit is already present locally;
    without a fetch they are ``None``.
    """
    root = Path(install_root)
    # Not --short: it disambiguates a branch that shares its name with another ref (a branch
    # "stash" beside refs/stash becomes "heads/stash").
    code, out = _git(root, "symbolic-ref", "-q", "HEAD", timeout=timeout, ok=(0, 1))
    current = out.strip().removeprefix("refs/heads/") if code == 0 else None  # 1: detached HEAD
    target = branch or current or DEFAULT_BRANCH
    code, out = _git(root, "rev-parse", "--verify", "-q", "HEAD", timeout=timeout, ok=(0, 1))
    head = out.strip() if code == 0 else None  # 1: no commit yet
    _, out = _git(root, "remote", "get-url", "origin", timeout=timeout)
    origin = out.strip()
    ref = f"refs/heads/{target}"
    _, out = _git(root, "ls-remote", "origin", ref, timeout=timeout)
    remote = _ls_remote_sha(out, ref)
    ahead, behind = _ahead_behind(root, head, remote, timeout)
    dirty, untracked = _worktree(root, timeout, stamped=code_stamp(root) is not None)
    running = code_sha(root)  # an archive update's stamp, else HEAD
    return {
        "current_branch": current,
        "branch": target,
        "head": head,
        "origin_url": origin,
        "remote_sha": remote,
        "up_to_date": remote is not None and remote in (head, running),
        "ahead": ahead,
        "behind": behind,
        "dirty": bool(dirty),
        "dirty_count": len(dirty),
        "dirty_paths": dirty[:DIRTY_LIST_MAX],
        "untracked_count": untracked,
    }


def _ls_remote_sha(out: str, ref: str) -> str | None:
    # ls-remote matches patterns by suffix; only the exact ref counts.
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return None


def _ahead_behind(root: Path, head: str | None, remote: str | None, timeout: float) -> tuple[int | None, int | None]:
    if head is None or remote is None:
        return None, None
    code, _ = _git(root, "cat-file", "-e", f"{remote}^{{commit}}", timeout=timeout, ok=(0, 1, 128))
    if code != 0:
        return None, None  # not fetched yet: unknowable without a fetch
    _, out = _git(root, "rev-list", "--left-right", "--count", f"{head}...{remote}", timeout=timeout)
    left, right = out.split()
    return int(left), int(right)


def _worktree(root: Path, timeout: float, *, stamped: bool = False) -> tuple[list[str], int]:
    """(tracked paths with changes, number of untracked files), from one ``-uall`` status.

    After an archive update (``stamped``) the index holds the swapped tree: only changes of
    the work tree against it are local."""
    _, out = _git(root, "status", "--porcelain=v1", "-z", "-uall", timeout=timeout)
    dirty: list[str] = []
    untracked = 0
    entries = iter(out.split("\0"))
    for entry in entries:
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        if status == "??":
            untracked += 1
            continue
        if "R" in status or "C" in status:
            next(entries, None)  # -z puts a rename's source path in an entry of its own
        if not stamped or status[1] != " ":
            dirty.append(path)
    return dirty, untracked
