"""What ``hermes update --rollback [UPDATE_ID]`` goes back to, and why it may not.

A rollback takes the install back to a receipt's ``before`` commit through the update's own
pipeline. Its target is read from the receipts and the local ``.git`` only (never the
network): the receipt named, or by default the newest that moved the commit and is not a
rollback itself (so a second rollback repeats the first one, and retries what it left
owed, instead of undoing it). With that run's ``--backup`` archive, the root home is
restored from it as well; the archive is checked against the digest its receipt recorded.

Every reason to refuse is a ``RollbackRefused`` with a stable code, checked by the CLI
before it starts the updater and again by the updater's plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.updater.errors import UpdateError
from services.updater.git import GitFailed, run
from services.updater.receipt import Receipt
from services.updater.update_id import InvalidUpdateId, validate_update_id
from shared.files import file_sha256
from shared.version import code_stamp

GIT_TIMEOUT = 15.0


class RollbackRefused(UpdateError):
    code = "rollback_refused"


class UnknownUpdate(RollbackRefused):
    code = "rollback_unknown_update"


class CommitGone(RollbackRefused):
    code = "rollback_commit_gone"


class ArchiveUnusable(RollbackRefused):
    code = "rollback_archive_invalid"


class NotGit(RollbackRefused):
    code = "rollback_not_git"


def is_rollback(receipt: Receipt) -> bool:
    return bool((receipt["plan"] or {}).get("rollback"))


def moved_from(receipt: Receipt) -> str | None:
    """The commit the run moved the tree away from, or None when it did not move it."""
    for step in receipt["steps"]:
        if step["name"] == "moved" and step["ok"] and isinstance(step["detail"], dict):
            before = step["detail"].get("before")
            return before if isinstance(before, str) else None
    return None


def choose(receipts: Sequence[Receipt], update_id: str | None) -> Receipt:
    """The receipt to roll back (``receipts`` newest first): ``update_id``'s, or the newest
    that moved the commit and is not a rollback."""
    if update_id is not None:
        try:
            validate_update_id(update_id)
        except InvalidUpdateId as exc:
            raise UnknownUpdate(str(exc), detail={"update_id": update_id}) from None
        for receipt in receipts:
            if receipt.update_id == update_id:
                if moved_from(receipt) is None:
                    raise UnknownUpdate(
                        f"update {update_id} did not move the code: there is nothing to roll back",
                        detail={"update_id": update_id, "outcome": receipt.outcome},
                    )
                return receipt
        raise UnknownUpdate(f"no receipt of update {update_id} is kept", detail={"update_id": update_id})
    for receipt in receipts:
        if moved_from(receipt) is not None and not is_rollback(receipt):
            return receipt
    raise UnknownUpdate("no kept receipt of an update that moved the code: there is nothing to roll back")


def check_archive(backup: dict[str, Any]) -> None:
    """The ``--backup`` archive a receipt names is there and has the digest it was written with."""
    path, digest = Path(str(backup.get("path"))), backup.get("sha256")
    try:
        found = file_sha256(path)
    except OSError as exc:
        raise ArchiveUnusable(
            f"the backup archive {path} cannot be read ({exc.strerror or exc}); nothing was changed",
            detail={"path": str(path)},
        ) from None
    if found != digest:
        raise ArchiveUnusable(
            f"the backup archive {path} is corrupt (its sha256 is not the one recorded); nothing was changed",
            detail={"path": str(path), "expected": digest, "found": found},
        )


def target(install_root: Path, kind: str, receipts: Sequence[Receipt], update_id: str | None) -> dict[str, Any]:
    """The plan of a rollback: ``{of, target, backup}``, or a ``RollbackRefused``. ``kind`` is
    the install's kind as the plan detected it."""
    if kind != "git":
        raise NotGit(f"a {kind} install cannot be rolled back: a rollback moves a git checkout", detail={"kind": kind})
    if code_stamp(install_root) is not None:
        raise NotGit(
            "the tree was installed from a source archive and git does not hold its code yet: "
            "run `hermes update` before rolling back",
            detail={"kind": "archive"},
        )
    receipt = choose(receipts, update_id)
    sha = moved_from(receipt)
    assert sha is not None  # choose() takes only receipts that moved the code
    try:
        known = run(
            install_root, ["cat-file", "-e", f"{sha}^{{commit}}"], stage="plan", timeout=GIT_TIMEOUT, ok=(0, 1, 128)
        )
    except GitFailed as exc:
        raise CommitGone(f"cannot ask git for commit {sha[:12]}: {exc.message}", detail=exc.to_dict()) from None
    if known.returncode != 0:
        raise CommitGone(
            f"commit {sha[:12]}, where update {receipt.update_id} started, is no longer in the repository",
            detail={"update_id": receipt.update_id, "commit": sha},
        )
    backup = receipt["backup"]
    if backup is not None:
        check_archive(backup)
    return {"of": receipt.update_id, "target": sha, "backup": backup}


def local_target(install_root: Path, sha: str, *, timeout: float = GIT_TIMEOUT) -> dict[str, Any]:
    """Where a rollback would take the tree, in the shape of ``git_target``'s answer, read from
    the local ``.git`` alone (``remote_sha`` is the rollback's commit; no ``ls-remote``)."""

    def git(*args: str, ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
        proc = run(install_root, args, stage="plan", timeout=timeout, ok=ok, read_only=True)
        return proc.returncode, proc.stdout.strip()

    code, current = git("symbolic-ref", "--short", "-q", "HEAD", ok=(0, 1))
    _, head = git("rev-parse", "--verify", "HEAD^{commit}")
    _, status = git("status", "--porcelain", "-uno", "-z")
    dirty = [entry[3:] for entry in status.split("\0") if len(entry) > 3]
    return {
        "current_branch": current if code == 0 else None,
        "branch": current if code == 0 else "HEAD",
        "head": head,
        "origin_url": None,
        "remote_sha": sha,
        "up_to_date": head == sha,
        "ahead": None,
        "behind": None,
        "dirty": bool(dirty),
        "dirty_count": len(dirty),
        "dirty_paths": dirty,
        "untracked_count": None,
    }
